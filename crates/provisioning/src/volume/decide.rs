//! What to do with one PersistentVolume, as upstream's library decides it (pure).

use crate::names::{ANN_MIGRATED_TO, ANN_PROVISIONED_BY, PV_FINALIZER};
use k8s_openapi::api::core::v1::PersistentVolume;

/// The next action for a PV.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Not ours, or nothing to do.
    Ignore,
    /// A bound PV with reclaim policy Delete gets our finalizer, so it cannot vanish before the
    /// volume is deleted.
    AddFinalizer,
    /// Retain/Recycle PVs must not carry it (deletion would otherwise hang).
    RemoveFinalizer,
    /// Released with reclaim policy Delete: DeleteVolume, then delete the PV object.
    Delete,
}

/// Whether the PV belongs to `driver`: dynamically provisioned by it, or (no provisioned-by
/// annotation) a static CSI PV of it — upstream manages the finalizer of those too. With CSI
/// migration the in-tree plugin's name counts as the driver's, in `provisioned-by` and in
/// `pv.kubernetes.io/migrated-to` (upstream's `isProvisionerForVolume`).
pub fn is_ours(pv: &PersistentVolume, driver: &str) -> bool {
    let annotations = pv.metadata.annotations.as_ref();
    let ann = |k: &str| annotations.and_then(|a| a.get(k)).map(String::as_str);
    let in_tree = migrated_from(driver);
    let known = |p: &str| p == driver || Some(p) == in_tree;
    let migrated = ann(ANN_MIGRATED_TO).is_some_and(known);
    match ann(ANN_PROVISIONED_BY) {
        Some(p) => known(p) || migrated,
        // A static PV: its CSI source names its driver, and only an in-tree one (no CSI source)
        // is judged by `migrated-to` — a CSI PV of another driver stays that driver's whatever
        // its annotations say, as upstream.
        None => match pv.spec.as_ref().and_then(|s| s.csi.as_ref()) {
            Some(c) => known(&c.driver),
            None => migrated,
        },
    }
}

/// The in-tree plugins whose volumes CSI migration hands to a CSI driver (research doc §8,
/// csi-translation-lib), as (in-tree plugin, CSI driver).
pub const MIGRATION_TARGETS: [(&str, &str); 7] = [
    ("kubernetes.io/aws-ebs", "ebs.csi.aws.com"),
    ("kubernetes.io/gce-pd", "pd.csi.storage.gke.io"),
    ("kubernetes.io/cinder", "cinder.csi.openstack.org"),
    ("kubernetes.io/azure-disk", "disk.csi.azure.com"),
    ("kubernetes.io/azure-file", "file.csi.azure.com"),
    ("kubernetes.io/vsphere-volume", "csi.vsphere.vmware.com"),
    ("kubernetes.io/portworx-volume", "pxd.portworx.com"),
];

/// The in-tree plugin migrated to `driver`, if `driver` is a CSI migration target.
pub fn migrated_from(driver: &str) -> Option<&'static str> {
    MIGRATION_TARGETS
        .iter()
        .find(|(_, csi)| *csi == driver)
        .map(|(in_tree, _)| *in_tree)
}

/// Whether the PV carries our finalizer.
pub fn has_finalizer(pv: &PersistentVolume) -> bool {
    pv.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == PV_FINALIZER)
}

/// Upstream's `syncVolume`: finalizer handling, then `shouldDelete`.
pub fn decide(pv: &PersistentVolume, driver: &str) -> Action {
    if !is_ours(pv, driver) {
        return Action::Ignore;
    }
    let reclaim = pv
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
        .unwrap_or("Retain");
    let phase = pv
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default();
    let deleting = pv.metadata.deletion_timestamp.is_some();
    let holding = has_finalizer(pv);
    if holding && matches!(reclaim, "Retain" | "Recycle") {
        return Action::RemoveFinalizer;
    }
    if !holding && reclaim == "Delete" && !deleting && phase == "Bound" {
        return Action::AddFinalizer;
    }
    // A PV already being deleted without our finalizer is not ours to act on any more.
    if phase == "Released" && reclaim == "Delete" && (holding || !deleting) {
        return Action::Delete;
    }
    Action::Ignore
}

/// The strategic-merge patch that adds (`ours`) or removes our finalizer, as upstream writes
/// it. It names only our entry (`finalizers` merges as a set), so it needs no resourceVersion
/// and never conflicts with kube-controller-manager's binding and phase writes to the same PV.
pub fn finalizer_patch(ours: bool) -> serde_json::Value {
    if ours {
        serde_json::json!({"metadata": {"finalizers": [PV_FINALIZER]}})
    } else {
        serde_json::json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [PV_FINALIZER]}})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        CSIPersistentVolumeSource, PersistentVolumeSpec, PersistentVolumeStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use std::collections::BTreeMap;

    fn pv(
        provisioned_by: Option<&str>,
        csi_driver: &str,
        reclaim: &str,
        phase: &str,
        holding: bool,
        deleting: bool,
    ) -> PersistentVolume {
        let mut pv = PersistentVolume::default();
        if let Some(p) = provisioned_by {
            pv.metadata.annotations = Some(BTreeMap::from([(
                ANN_PROVISIONED_BY.to_string(),
                p.to_string(),
            )]));
        }
        if holding {
            pv.metadata.finalizers = Some(vec![
                "kubernetes.io/pv-protection".into(),
                PV_FINALIZER.into(),
            ]);
        }
        if deleting {
            pv.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        }
        pv.spec = Some(PersistentVolumeSpec {
            persistent_volume_reclaim_policy: Some(reclaim.into()),
            csi: Some(CSIPersistentVolumeSource {
                driver: csi_driver.into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        pv.status = Some(PersistentVolumeStatus {
            phase: Some(phase.into()),
            ..Default::default()
        });
        pv
    }

    #[test]
    fn table() {
        use Action::*;
        let d = "drv";
        let cases = [
            (
                pv(Some("other"), "other", "Delete", "Released", true, false),
                Ignore,
            ),
            (
                pv(Some(d), d, "Delete", "Bound", false, false),
                AddFinalizer,
            ),
            (pv(Some(d), d, "Delete", "Bound", true, false), Ignore),
            (pv(Some(d), d, "Delete", "Pending", false, false), Ignore),
            (
                pv(Some(d), d, "Retain", "Bound", true, false),
                RemoveFinalizer,
            ),
            (
                pv(Some(d), d, "Recycle", "Released", true, false),
                RemoveFinalizer,
            ),
            (pv(Some(d), d, "Retain", "Released", false, false), Ignore),
            (pv(Some(d), d, "Delete", "Released", true, false), Delete),
            (pv(Some(d), d, "Delete", "Released", false, false), Delete),
            // Crashed between deleting the PV object and dropping the finalizer: finish the job.
            (pv(Some(d), d, "Delete", "Released", true, true), Delete),
            (pv(Some(d), d, "Delete", "Released", false, true), Ignore),
            // Static CSI PVs of our driver get the finalizer too (upstream #1097 behaviour).
            (pv(None, d, "Delete", "Bound", false, false), AddFinalizer),
            (pv(None, "other", "Delete", "Bound", false, false), Ignore),
            // Another driver's static CSI PV annotated as migrated to us: its CSI source decides.
            (
                with_migrated_to(pv(None, "other", "Delete", "Released", true, false), d),
                Ignore,
            ),
            (
                with_migrated_to(pv(None, d, "Delete", "Released", true, false), "other"),
                Delete,
            ),
        ];
        for (i, (pv, want)) in cases.iter().enumerate() {
            assert_eq!(decide(pv, d), *want, "case {i}");
        }
    }

    fn with_migrated_to(mut pv: PersistentVolume, migrated_to: &str) -> PersistentVolume {
        pv.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(ANN_MIGRATED_TO.to_string(), migrated_to.to_string());
        pv
    }

    /// An in-tree PV (no spec.csi) annotated as migrated to `migrated_to`.
    fn in_tree(
        provisioned_by: Option<&str>,
        migrated_to: &str,
        phase: &str,
        holding: bool,
    ) -> PersistentVolume {
        let mut p = pv(provisioned_by, "unused", "Delete", phase, holding, false);
        p.spec.as_mut().unwrap().csi = None;
        with_migrated_to(p, migrated_to)
    }

    /// In-tree PVs of the plugin our driver replaces follow the same rules as our own (their
    /// deletion translates them to CSI first), as upstream's TestDeleteMigration.
    #[test]
    fn migrated_in_tree_volumes_are_ours() {
        use Action::*;
        const PD: &str = "pd.csi.storage.gke.io";
        const IN_TREE: &str = "kubernetes.io/gce-pd";
        let cases = [
            (in_tree(None, PD, "Bound", false), PD, AddFinalizer),
            (in_tree(Some(IN_TREE), PD, "Bound", false), PD, AddFinalizer),
            (in_tree(Some(IN_TREE), PD, "Released", true), PD, Delete),
            (in_tree(Some(IN_TREE), PD, "Released", false), PD, Delete),
            // Provisioned by the in-tree plugin, not (yet) marked as migrated: still ours.
            (in_tree(Some(IN_TREE), "", "Bound", false), PD, AddFinalizer),
            // The beta migrated-to value naming the in-tree plugin counts too.
            (in_tree(None, IN_TREE, "Bound", false), PD, AddFinalizer),
            // Migrated to another driver, or another plugin's: not ours at all.
            (in_tree(None, "other", "Bound", true), PD, Ignore),
            (
                in_tree(Some("kubernetes.io/aws-ebs"), "", "Bound", false),
                PD,
                Ignore,
            ),
            // A driver that replaces no plugin knows no in-tree name.
            (in_tree(Some(IN_TREE), "", "Bound", false), "drv", Ignore),
            (
                in_tree(Some(IN_TREE), "drv", "Released", true),
                "drv",
                Delete,
            ),
        ];
        for (i, (pv, driver, want)) in cases.iter().enumerate() {
            assert_eq!(decide(pv, driver), *want, "case {i}");
        }
    }

    #[test]
    fn migration_targets() {
        let cases = [
            ("ebs.csi.aws.com", Some("kubernetes.io/aws-ebs")),
            ("pd.csi.storage.gke.io", Some("kubernetes.io/gce-pd")),
            ("cinder.csi.openstack.org", Some("kubernetes.io/cinder")),
            ("disk.csi.azure.com", Some("kubernetes.io/azure-disk")),
            ("file.csi.azure.com", Some("kubernetes.io/azure-file")),
            (
                "csi.vsphere.vmware.com",
                Some("kubernetes.io/vsphere-volume"),
            ),
            ("pxd.portworx.com", Some("kubernetes.io/portworx-volume")),
            ("hostpath.csi.k8s.io", None),
            ("kubernetes.io/gce-pd", None),
            ("", None),
        ];
        for (driver, want) in cases {
            assert_eq!(migrated_from(driver), want, "{driver}");
        }
    }

    #[test]
    fn finalizer_patches_name_only_ours() {
        let f = "external-provisioner.volume.kubernetes.io/finalizer";
        assert_eq!(
            finalizer_patch(true),
            serde_json::json!({"metadata": {"finalizers": [f]}})
        );
        assert_eq!(
            finalizer_patch(false),
            serde_json::json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [f]}})
        );
    }
}

/// Where the secret for DeleteVolume comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeletionSecret {
    /// DeleteVolume is called without a secret.
    None,
    /// Recorded on the PV at provisioning time (read errors are logged, deletion goes on).
    Annotated(crate::secrets::SecretRef),
    /// Old PVs without the annotations: resolved again from the StorageClass.
    FromClass(crate::secrets::SecretRef),
}

/// Upstream's choice of deletion secret: the PV's annotations when both are present (empty
/// values mean "no secret"), else the current StorageClass with a claim rebuilt from claimRef
/// (which has no annotations, so annotation templates fail here as upstream).
pub fn deletion_secret(
    pv: &PersistentVolume,
    class: Option<&k8s_openapi::api::storage::v1::StorageClass>,
) -> Result<DeletionSecret, crate::secrets::SecretError> {
    use crate::names::{ANN_DELETION_SECRET_NAME, ANN_DELETION_SECRET_NAMESPACE};
    use crate::secrets::{SecretKind, SecretRef, TemplateClaim, secret_reference};
    let annotations = pv.metadata.annotations.as_ref();
    let ann = |k: &str| annotations.and_then(|a| a.get(k));
    if let (Some(name), Some(namespace)) = (
        ann(ANN_DELETION_SECRET_NAME),
        ann(ANN_DELETION_SECRET_NAMESPACE),
    ) {
        if name.is_empty() || namespace.is_empty() {
            return Ok(DeletionSecret::None);
        }
        return Ok(DeletionSecret::Annotated(SecretRef {
            name: name.clone(),
            namespace: namespace.clone(),
        }));
    }
    let Some(class) = class else {
        return Ok(DeletionSecret::None);
    };
    // As upstream: without a claim reference the volume is deleted without secrets.
    let Some(claim_ref) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return Ok(DeletionSecret::None);
    };
    let claim = Some(TemplateClaim {
        name: claim_ref.name.as_deref().unwrap_or_default(),
        namespace: claim_ref.namespace.as_deref().unwrap_or_default(),
        annotations: None,
    });
    let params = class.parameters.clone().unwrap_or_default();
    let pv_name = pv.metadata.name.as_deref().unwrap_or_default();
    Ok(
        match secret_reference(SecretKind::Provisioner, &params, pv_name, claim.as_ref())? {
            Some(r) => DeletionSecret::FromClass(r),
            None => DeletionSecret::None,
        },
    )
}

#[cfg(test)]
mod secret_tests {
    use super::*;
    use crate::names::{ANN_DELETION_SECRET_NAME, ANN_DELETION_SECRET_NAMESPACE};
    use crate::secrets::SecretRef;
    use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeSpec};
    use k8s_openapi::api::storage::v1::StorageClass;
    use std::collections::BTreeMap;

    fn pv(annotations: Option<(&str, &str)>) -> PersistentVolume {
        let mut pv = PersistentVolume::default();
        pv.metadata.name = Some("pvc-1".into());
        if let Some((n, ns)) = annotations {
            pv.metadata.annotations = Some(BTreeMap::from([
                (ANN_DELETION_SECRET_NAME.to_string(), n.to_string()),
                (ANN_DELETION_SECRET_NAMESPACE.to_string(), ns.to_string()),
            ]));
        }
        pv.spec = Some(PersistentVolumeSpec {
            claim_ref: Some(ObjectReference {
                name: Some("data".into()),
                namespace: Some("app".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        pv
    }

    fn class(params: &[(&str, &str)]) -> StorageClass {
        StorageClass {
            parameters: Some(
                params
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn sref(name: &str, ns: &str) -> SecretRef {
        SecretRef {
            name: name.into(),
            namespace: ns.into(),
        }
    }

    #[test]
    fn table() {
        let templated = class(&[
            (
                "csi.storage.k8s.io/provisioner-secret-name",
                "${pvc.name}-key",
            ),
            (
                "csi.storage.k8s.io/provisioner-secret-namespace",
                "${pvc.namespace}",
            ),
        ]);
        let by_annotation = class(&[
            (
                "csi.storage.k8s.io/provisioner-secret-name",
                "${pvc.annotations['key']}",
            ),
            ("csi.storage.k8s.io/provisioner-secret-namespace", "ns"),
        ]);
        assert_eq!(
            deletion_secret(&pv(Some(("s", "ns"))), None).unwrap(),
            DeletionSecret::Annotated(sref("s", "ns"))
        );
        assert_eq!(
            deletion_secret(&pv(Some(("", ""))), Some(&templated)).unwrap(),
            DeletionSecret::None
        );
        assert_eq!(
            deletion_secret(&pv(None), None).unwrap(),
            DeletionSecret::None
        );
        assert_eq!(
            deletion_secret(&pv(None), Some(&templated)).unwrap(),
            DeletionSecret::FromClass(sref("data-key", "app"))
        );
        assert_eq!(
            deletion_secret(&pv(None), Some(&class(&[]))).unwrap(),
            DeletionSecret::None
        );
        assert!(
            deletion_secret(&pv(None), Some(&by_annotation)).is_err(),
            "annotation templates cannot be resolved at deletion"
        );
        // No claim reference: no secrets, whatever the class says (even a fixed name).
        let mut unclaimed = pv(None);
        unclaimed.spec.as_mut().unwrap().claim_ref = None;
        let fixed = class(&[
            ("csi.storage.k8s.io/provisioner-secret-name", "s"),
            ("csi.storage.k8s.io/provisioner-secret-namespace", "ns"),
        ]);
        for c in [&templated, &fixed] {
            assert_eq!(
                deletion_secret(&unclaimed, Some(c)).unwrap(),
                DeletionSecret::None
            );
        }
    }
}
