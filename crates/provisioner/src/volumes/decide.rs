//! What to do with one PersistentVolume, as upstream's library decides it (pure).

use k8s_openapi::api::core::v1::PersistentVolume;
use provisioning::names::{ANN_MIGRATED_TO, ANN_PROVISIONED_BY, PV_FINALIZER};

/// The next action for a PV.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
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
/// annotation) a static CSI PV of it — upstream manages the finalizer of those too.
pub fn is_ours(pv: &PersistentVolume, driver: &str) -> bool {
    let annotations = pv.metadata.annotations.as_ref();
    let ann = |k: &str| annotations.and_then(|a| a.get(k)).map(String::as_str);
    match ann(ANN_PROVISIONED_BY) {
        Some(p) => p == driver || ann(ANN_MIGRATED_TO) == Some(driver),
        None => {
            pv.spec
                .as_ref()
                .and_then(|s| s.csi.as_ref())
                .is_some_and(|c| c.driver == driver)
                || ann(ANN_MIGRATED_TO) == Some(driver)
        }
    }
}

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

/// The PV's finalizers without ours.
pub fn finalizers_without_ours(pv: &PersistentVolume) -> Vec<String> {
    pv.metadata
        .finalizers
        .iter()
        .flatten()
        .filter(|f| *f != PV_FINALIZER)
        .cloned()
        .collect()
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
        ];
        for (i, (pv, want)) in cases.iter().enumerate() {
            assert_eq!(decide(pv, d), *want, "case {i}");
        }
    }

    #[test]
    fn finalizer_removal_keeps_others() {
        let p = pv(Some("drv"), "drv", "Delete", "Released", true, false);
        assert_eq!(finalizers_without_ours(&p), ["kubernetes.io/pv-protection"]);
    }
}

/// Where the secret for DeleteVolume comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeletionSecret {
    None,
    /// Recorded on the PV at provisioning time (read errors are logged, deletion goes on).
    Annotated(provisioning::secrets::SecretRef),
    /// Old PVs without the annotations: resolved again from the StorageClass.
    FromClass(provisioning::secrets::SecretRef),
}

/// Upstream's choice of deletion secret: the PV's annotations when both are present (empty
/// values mean "no secret"), else the current StorageClass with a claim rebuilt from claimRef
/// (which has no annotations, so annotation templates fail here as upstream).
pub fn deletion_secret(
    pv: &PersistentVolume,
    class: Option<&k8s_openapi::api::storage::v1::StorageClass>,
) -> Result<DeletionSecret, provisioning::secrets::SecretError> {
    use provisioning::names::{ANN_DELETION_SECRET_NAME, ANN_DELETION_SECRET_NAMESPACE};
    use provisioning::secrets::{SecretKind, SecretRef, TemplateClaim, secret_reference};
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
    let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    let claim = claim_ref.map(|r| TemplateClaim {
        name: r.name.as_deref().unwrap_or_default(),
        namespace: r.namespace.as_deref().unwrap_or_default(),
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
    use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeSpec};
    use k8s_openapi::api::storage::v1::StorageClass;
    use provisioning::names::{ANN_DELETION_SECRET_NAME, ANN_DELETION_SECRET_NAMESPACE};
    use provisioning::secrets::SecretRef;
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
    }
}
