//! The CreateVolumeRequest sent to the driver.
//!
//! The request carries the provisioner secret's data in `secrets`: never log it with `{:?}`;
//! log it only through `csi::sanitize`.

use std::collections::BTreeMap;

use csi::v1::{
    CapacityRange, CreateVolumeRequest, TopologyRequirement, VolumeCapability, VolumeContentSource,
};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use crate::claim;
use crate::errors::ProvisionError;
use gofmt::quote;

/// Everything a CreateVolumeRequest is made of, already decided by the other modules. Its
/// `Debug` names the secret keys only, so no log line can print their values.
#[derive(Clone)]
pub struct CreateVolumeInputs<'a> {
    /// The generated volume name (also the PV name and the idempotency key).
    pub volume_name: &'a str,
    /// The claim; its storage request becomes `capacity_range.required_bytes`.
    pub claim: &'a PersistentVolumeClaim,
    /// One capability per access mode (see [`crate::capabilities`]); they embed the fs type and
    /// the StorageClass mount options.
    pub capabilities: Vec<VolumeCapability>,
    /// StorageClass parameters without the reserved keys, plus the extra-create-metadata keys.
    pub parameters: BTreeMap<String, String>,
    /// The provisioner secret's data, fetched by the caller (empty without a secret).
    pub secrets: BTreeMap<String, String>,
    /// From [`crate::topology::accessibility_requirements`].
    pub accessibility_requirements: Option<TopologyRequirement>,
    /// The VolumeAttributesClass parameters (empty without one).
    pub mutable_parameters: BTreeMap<String, String>,
    /// The snapshot or volume to fill the new volume from (see [`crate::data_source`]).
    pub content_source: Option<VolumeContentSource>,
}

impl std::fmt::Debug for CreateVolumeInputs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreateVolumeInputs")
            .field("volume_name", &self.volume_name)
            .field("claim", &self.claim.metadata.name)
            .field("capabilities", &self.capabilities)
            .field("parameters", &self.parameters)
            .field("secrets", &self.secrets.keys().collect::<Vec<_>>())
            .field(
                "accessibility_requirements",
                &self.accessibility_requirements,
            )
            .field("mutable_parameters", &self.mutable_parameters)
            .field("content_source", &self.content_source)
            .finish()
    }
}

/// Builds the request. `limit_bytes` is never set: claim limits are ignored, as upstream.
/// A claim without a storage request asks for 0 bytes.
pub fn build_create_volume_request(
    inputs: CreateVolumeInputs<'_>,
) -> Result<CreateVolumeRequest, ProvisionError> {
    let required_bytes = claim::requested_bytes(inputs.claim).map_err(|e| {
        ProvisionError::finished(format!(
            "invalid storage request {} in claim {}/{}: {e}",
            quote(claim::storage_request(inputs.claim).unwrap_or_default()),
            inputs
                .claim
                .metadata
                .namespace
                .as_deref()
                .unwrap_or_default(),
            inputs.claim.metadata.name.as_deref().unwrap_or_default(),
        ))
    })?;
    Ok(CreateVolumeRequest {
        name: inputs.volume_name.to_string(),
        capacity_range: Some(CapacityRange {
            required_bytes,
            limit_bytes: 0,
        }),
        volume_capabilities: inputs.capabilities,
        parameters: inputs.parameters.into_iter().collect(),
        secrets: inputs.secrets.into_iter().collect(),
        volume_content_source: inputs.content_source,
        accessibility_requirements: inputs.accessibility_requirements,
        mutable_parameters: inputs.mutable_parameters.into_iter().collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::ProvisioningState;
    use crate::testutil::{claim, map, spec_mut};
    use csi::v1::Topology;
    use csi::v1::volume_capability::access_mode::Mode;
    use csi::v1::volume_capability::{AccessMode, AccessType, MountVolume};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use pretty_assertions::assert_eq;

    fn rwo() -> VolumeCapability {
        VolumeCapability {
            access_mode: Some(AccessMode {
                mode: Mode::SingleNodeWriter as i32,
            }),
            access_type: Some(AccessType::Mount(MountVolume::default())),
        }
    }

    fn inputs(claim: &PersistentVolumeClaim) -> CreateVolumeInputs<'_> {
        CreateVolumeInputs {
            volume_name: "pvc-1",
            claim,
            capabilities: vec![rwo()],
            parameters: map(&[("type", "ssd")]),
            secrets: map(&[("password", "hunter2")]),
            accessibility_requirements: None,
            mutable_parameters: BTreeMap::new(),
            content_source: None,
        }
    }

    fn with_request(size: Option<&str>) -> PersistentVolumeClaim {
        let mut c = claim();
        let requests = spec_mut(&mut c)
            .resources
            .as_mut()
            .and_then(|r| r.requests.as_mut())
            .unwrap();
        requests.clear();
        if let Some(size) = size {
            requests.insert("storage".into(), Quantity(size.into()));
        }
        // Limits never reach the request.
        spec_mut(&mut c).resources.as_mut().unwrap().limits = Some(BTreeMap::from([(
            "storage".into(),
            Quantity("100Gi".into()),
        )]));
        c
    }

    #[test]
    fn normal_request() {
        let c = claim();
        let requirement = TopologyRequirement {
            requisite: vec![Topology {
                segments: [("zone".to_string(), "z1".to_string())].into(),
            }],
            preferred: vec![],
        };
        let mut input = inputs(&c);
        input.accessibility_requirements = Some(requirement.clone());
        input.mutable_parameters = map(&[("iops", "3000")]);
        let source = VolumeContentSource {
            r#type: Some(csi::v1::volume_content_source::Type::Snapshot(
                csi::v1::volume_content_source::SnapshotSource {
                    snapshot_id: "snap-1".into(),
                },
            )),
        };
        input.content_source = Some(source.clone());
        let want = CreateVolumeRequest {
            name: "pvc-1".into(),
            capacity_range: Some(CapacityRange {
                required_bytes: 1 << 30,
                limit_bytes: 0,
            }),
            volume_capabilities: vec![rwo()],
            parameters: [("type".to_string(), "ssd".to_string())].into(),
            secrets: [("password".to_string(), "hunter2".to_string())].into(),
            volume_content_source: Some(source),
            accessibility_requirements: Some(requirement),
            mutable_parameters: [("iops".to_string(), "3000".to_string())].into(),
        };
        assert_eq!(build_create_volume_request(input), Ok(want));
    }

    #[test]
    fn debug_names_secret_keys_not_values() {
        let c = claim();
        let printed = format!("{:?}", inputs(&c));
        assert!(printed.contains("password"), "{printed}");
        assert!(!printed.contains("hunter2"), "{printed}");
    }

    #[test]
    fn sizes() {
        let cases = [
            (Some("5Gi"), 5 << 30),
            (Some("1.5Gi"), 3 << 29),
            (Some("1k"), 1000),
            (Some("0"), 0),
            // "provision with size 0": no storage request at all.
            (None, 0),
        ];
        for (size, want) in cases {
            let c = with_request(size);
            let req = build_create_volume_request(inputs(&c)).unwrap();
            assert_eq!(
                req.capacity_range,
                Some(CapacityRange {
                    required_bytes: want,
                    limit_bytes: 0
                }),
                "{size:?}"
            );
        }
    }

    #[test]
    fn garbage_size_is_final() {
        let c = with_request(Some("1K"));
        let err = build_create_volume_request(inputs(&c)).unwrap_err();
        assert_eq!(err.state, ProvisioningState::Finished);
        assert_eq!(
            err.message,
            r#"invalid storage request "1K" in claim default/my-pvc: unable to parse quantity's suffix"#
        );
    }
}
