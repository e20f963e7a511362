//! The PersistentVolume created for a provisioned volume, and the size check on CreateVolume's
//! answer.

use std::collections::BTreeMap;

use csi::v1::volume_capability::access_mode::Mode;
use csi::v1::{Volume, VolumeCapability};
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeSpec, SecretReference,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::claim;
use crate::names;
use crate::quantity::format_binary_si;
use crate::secrets::{SecretRef, SecretRefs};
use crate::topology::volume_node_affinity;

/// What to do with the size the driver reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapacityDecision {
    /// The driver reported 0 ("unknown", e.g. NFS): the PV gets the requested size.
    UseRequested,
    /// The PV gets the reported size, unrounded.
    Use(i64),
    /// Smaller than requested: delete the volume and retry (Background).
    TooSmall {
        /// Reported bytes.
        got: i64,
        /// Requested bytes.
        want: i64,
    },
}

impl CapacityDecision {
    /// The PV capacity in bytes, if the volume is kept.
    pub fn bytes(self, requested: i64) -> Option<i64> {
        match self {
            CapacityDecision::UseRequested => Some(requested),
            CapacityDecision::Use(bytes) => Some(bytes),
            CapacityDecision::TooSmall { .. } => None,
        }
    }
}

/// Upstream's size rule: 0 means unknown, anything below the request is refused.
pub fn capacity_decision(requested: i64, response_bytes: i64) -> CapacityDecision {
    if response_bytes == 0 {
        CapacityDecision::UseRequested
    } else if response_bytes < requested {
        CapacityDecision::TooSmall {
            got: response_bytes,
            want: requested,
        }
    } else {
        CapacityDecision::Use(response_bytes)
    }
}

/// The error text for [`CapacityDecision::TooSmall`] (upstream's).
pub fn too_small_message(got: i64, want: i64) -> String {
    format!("created volume capacity {got} less than requested capacity {want}")
}

/// Whether the driver's answer lacks the content source a data-source claim needs (upstream then
/// deletes the volume and retries with "volume content source missing"). A source in another
/// namespace is only in `dataSourceRef`, so with `cross_namespace` (the
/// `CrossNamespaceVolumeDataSource` gate) that counts too, as upstream.
pub fn missing_content_source(
    claim: &PersistentVolumeClaim,
    volume: &Volume,
    cross_namespace: bool,
) -> bool {
    let Some(spec) = claim.spec.as_ref() else {
        return false;
    };
    let other_namespace = || {
        spec.data_source_ref
            .as_ref()
            .and_then(|r| r.namespace.as_deref())
            .is_some_and(|ns| !ns.is_empty())
    };
    let wants_content = spec.data_source.is_some() || (cross_namespace && other_namespace());
    wants_content && volume.content_source.is_none()
}

/// The claim reference the PV is pre-bound to (client-go's `ref.GetReference` of the claim).
pub fn claim_reference(claim: &PersistentVolumeClaim) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some(names::PVC_KIND.into()),
        name: claim.metadata.name.clone(),
        namespace: claim.metadata.namespace.clone(),
        uid: claim.metadata.uid.clone(),
        resource_version: claim.metadata.resource_version.clone(),
        field_path: None,
    }
}

/// Everything the PV is built from.
#[derive(Debug, Clone, Copy)]
pub struct PersistentVolumeInputs<'a> {
    /// The generated volume name.
    pub volume_name: &'a str,
    /// The claim being provisioned.
    pub claim: &'a PersistentVolumeClaim,
    /// Its StorageClass.
    pub class: &'a StorageClass,
    /// The CSI driver name.
    pub driver_name: &'a str,
    /// This provisioner's identity (`storage.kubernetes.io/csiProvisionerIdentity`).
    pub provisioner_identity: &'a str,
    /// CreateVolume's answer.
    pub volume: &'a Volume,
    /// The capacity from [`capacity_decision`].
    pub capacity_bytes: i64,
    /// The resolved file system type (recorded for non-Block volumes).
    pub fs_type: &'a str,
    /// The capabilities that were requested.
    pub capabilities: &'a [VolumeCapability],
    /// `--controller-publish-readonly`.
    pub controller_publish_read_only: bool,
    /// The resolved secret references.
    pub secrets: &'a SecretRefs,
    /// Whether the driver advertises `VOLUME_ACCESSIBILITY_CONSTRAINTS`.
    pub supports_topology: bool,
    /// Whether the VolumeAttributesClass feature is on.
    pub volume_attributes_class_enabled: bool,
}

/// The PV to create, with everything upstream sets (including what the library adds: claimRef,
/// finalizer, `pv.kubernetes.io/provisioned-by` and the storage class name).
///
/// Fields upstream leaves at their zero value, which Go's JSON omits, are `None` here.
pub fn build_persistent_volume(inputs: &PersistentVolumeInputs<'_>) -> PersistentVolume {
    let claim = inputs.claim;
    let claim_spec = claim.spec.clone().unwrap_or_default();
    let secret_ref = |r: &Option<SecretRef>| r.as_ref().map(SecretReference::from);

    let mut annotations = BTreeMap::new();
    let (deletion_name, deletion_namespace) = inputs
        .secrets
        .provisioner
        .as_ref()
        .map_or((String::new(), String::new()), |r| {
            (r.name.clone(), r.namespace.clone())
        });
    annotations.insert(names::ANN_DELETION_SECRET_NAME.to_string(), deletion_name);
    annotations.insert(
        names::ANN_DELETION_SECRET_NAMESPACE.to_string(),
        deletion_namespace,
    );
    if let Some(modify) = &inputs.secrets.controller_modify {
        annotations.insert(
            names::ANN_CONTROLLER_MODIFY_SECRET_NAME.to_string(),
            modify.name.clone(),
        );
        annotations.insert(
            names::ANN_CONTROLLER_MODIFY_SECRET_NAMESPACE.to_string(),
            modify.namespace.clone(),
        );
    }
    annotations.insert(
        names::ANN_PROVISIONED_BY.to_string(),
        inputs.class.provisioner.clone(),
    );

    let mut volume_attributes = BTreeMap::from([(
        names::PROVISIONER_IDENTITY_KEY.to_string(),
        inputs.provisioner_identity.to_string(),
    )]);
    // The driver's volume context wins on a key collision.
    volume_attributes.extend(
        inputs
            .volume
            .volume_context
            .iter()
            .map(|(k, v)| (k.clone(), v.clone())),
    );

    let read_only = match inputs.capabilities {
        [only] => {
            inputs.controller_publish_read_only
                && only.access_mode.map(|m| m.mode) == Some(Mode::MultiNodeReaderOnly as i32)
        }
        _ => false,
    };
    let block = claim::is_block(claim);

    // Upstream puts our finalizer on every PV and removes it again from Retain/Recycle ones at
    // their first sync: a write per such volume that can lag behind the claim's deletion (it
    // races kube-controller-manager's binding). Only a Delete PV needs it. The API server
    // defaults a class's policy to Delete and a PV's to Retain, so `None` here means Retain.
    let finalizers = (inputs.class.reclaim_policy.as_deref() == Some("Delete"))
        .then(|| vec![names::PV_FINALIZER.to_string()]);

    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(inputs.volume_name.to_string()),
            annotations: Some(annotations),
            finalizers,
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeSpec {
            access_modes: claim_spec.access_modes,
            mount_options: inputs.class.mount_options.clone(),
            capacity: Some(BTreeMap::from([(
                names::RESOURCE_STORAGE.to_string(),
                Quantity(format_binary_si(inputs.capacity_bytes)),
            )])),
            csi: Some(CSIPersistentVolumeSource {
                driver: inputs.driver_name.to_string(),
                volume_handle: inputs.volume.volume_id.clone(),
                volume_attributes: Some(volume_attributes),
                fs_type: (!block && !inputs.fs_type.is_empty()).then(|| inputs.fs_type.to_string()),
                read_only: read_only.then_some(true),
                controller_publish_secret_ref: secret_ref(&inputs.secrets.controller_publish),
                node_stage_secret_ref: secret_ref(&inputs.secrets.node_stage),
                node_publish_secret_ref: secret_ref(&inputs.secrets.node_publish),
                controller_expand_secret_ref: secret_ref(&inputs.secrets.controller_expand),
                node_expand_secret_ref: secret_ref(&inputs.secrets.node_expand),
            }),
            persistent_volume_reclaim_policy: inputs.class.reclaim_policy.clone(),
            node_affinity: if inputs.supports_topology {
                volume_node_affinity(&inputs.volume.accessible_topology)
            } else {
                None
            },
            volume_mode: claim_spec.volume_mode,
            volume_attributes_class_name: if inputs.volume_attributes_class_enabled {
                claim::volume_attributes_class(claim).map(str::to_string)
            } else {
                None
            },
            claim_ref: Some(claim_reference(claim)),
            storage_class_name: claim::class_name(claim)
                .filter(|c| !c.is_empty())
                .map(str::to_string),
            ..PersistentVolumeSpec::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests;
