//! Builders shared by the unit tests.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub(crate) const DRIVER: &str = "hostpath.csi.k8s.io";
pub(crate) const UID: &str = "0f1c2d3e-4a5b-6c7d-8e9f-a0b1c2d3e4f5";

/// `default/my-pvc`, 1Gi, ReadWriteOnce, class `sc`, annotated for [`DRIVER`].
pub(crate) fn claim() -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some("my-pvc".into()),
            namespace: Some("default".into()),
            uid: Some(UID.into()),
            resource_version: Some("42".into()),
            annotations: Some(map(&[(crate::names::ANN_STORAGE_PROVISIONER, DRIVER)])),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(strings(&["ReadWriteOnce"])),
            storage_class_name: Some("sc".into()),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".into(), Quantity("1Gi".into()))])),
                limits: None,
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }
}

pub(crate) fn annotate(
    mut claim: PersistentVolumeClaim,
    key: &str,
    value: &str,
) -> PersistentVolumeClaim {
    claim
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(key.into(), value.into());
    claim
}

pub(crate) fn without_annotations(mut claim: PersistentVolumeClaim) -> PersistentVolumeClaim {
    claim.metadata.annotations = None;
    claim
}

pub(crate) fn spec_mut(claim: &mut PersistentVolumeClaim) -> &mut PersistentVolumeClaimSpec {
    claim
        .spec
        .get_or_insert_with(PersistentVolumeClaimSpec::default)
}

/// Class `sc` for `provisioner`, immediate binding, no parameters.
pub(crate) fn class(provisioner: &str) -> StorageClass {
    StorageClass {
        metadata: ObjectMeta {
            name: Some("sc".into()),
            ..ObjectMeta::default()
        },
        provisioner: provisioner.into(),
        ..StorageClass::default()
    }
}

pub(crate) fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub(crate) fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}
