//! A PersistentVolume after provisioning: our finalizer on it, whether and how it is deleted.
//!
//! The volume controller (an async shell in the `csi-provisioner` binary) asks
//! [`decide::decide`] what to do with each PV (add or remove our finalizer, delete, ignore;
//! in-tree PVs migrated to our driver are left alone), [`decide::deletion_secret`] which secret
//! DeleteVolume uses, and [`steps::remaining`] which deletion steps a sync still performs.

pub mod decide;
pub mod steps;

use k8s_openapi::api::core::v1::PersistentVolume;

/// The PV's StorageClass name like `GetPersistentVolumeClass`: the legacy
/// `volume.beta.kubernetes.io/storage-class` annotation, when present, wins over
/// `spec.storageClassName`.
pub fn class_name(pv: &PersistentVolume) -> &str {
    pv.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(crate::names::ANN_BETA_STORAGE_CLASS))
        .or_else(|| pv.spec.as_ref()?.storage_class_name.as_ref())
        .map_or("", String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PersistentVolumeSpec;
    use std::collections::BTreeMap;

    #[test]
    fn the_beta_annotation_names_the_class_first() {
        let pv = |beta: Option<&str>, spec: Option<&str>| PersistentVolume {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                annotations: beta.map(|b| {
                    BTreeMap::from([(crate::names::ANN_BETA_STORAGE_CLASS.into(), b.into())])
                }),
                ..Default::default()
            },
            spec: Some(PersistentVolumeSpec {
                storage_class_name: spec.map(Into::into),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(class_name(&pv(Some("legacy"), Some("new"))), "legacy");
        assert_eq!(
            class_name(&pv(Some(""), Some("new"))),
            "",
            "present, even empty"
        );
        assert_eq!(class_name(&pv(None, Some("new"))), "new");
        assert_eq!(class_name(&pv(None, None)), "");
    }
}
