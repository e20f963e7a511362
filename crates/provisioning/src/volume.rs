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

/// Why a deletion attempt stopped, as far as its report is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteStop {
    /// A VolumeAttachment still names the PV: expected while a workload and its claim go away
    /// together (library v13.1's `VolumeInUseError`).
    WaitingForDetach,
    /// Anything else: DeleteVolume, the deletion secret, the PV itself.
    Failed,
}

/// How a stopped deletion attempt is reported on the PV and in the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeleteReport {
    /// A Warning event (else Normal).
    pub warning: bool,
    /// The event's reason.
    pub reason: &'static str,
    /// Counted in `controller_persistentvolume_delete_failed_total`.
    pub counts_as_failure: bool,
}

/// Upstream v6.4.0 (library v13.1): waiting for detach is a postponement, not a failure:
/// a Normal `VolumeDelete` event and no failed-delete count; the attempt is retried with the
/// usual backoff either way.
pub fn delete_report(stop: DeleteStop) -> DeleteReport {
    match stop {
        DeleteStop::WaitingForDetach => DeleteReport {
            warning: false,
            reason: crate::names::EVENT_VOLUME_DELETE,
            counts_as_failure: false,
        },
        DeleteStop::Failed => DeleteReport {
            warning: true,
            reason: crate::names::EVENT_VOLUME_FAILED_DELETE,
            counts_as_failure: true,
        },
    }
}

/// Upstream's message while a VolumeAttachment names the PV.
pub fn still_attached_message(pv: &str, node: &str) -> String {
    format!("persistentvolume {pv} is still attached to node {node}, waiting for detach")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_for_detach_is_reported_as_normal_and_not_counted() {
        let cases = [
            (DeleteStop::WaitingForDetach, false, "VolumeDelete", false),
            (DeleteStop::Failed, true, "VolumeFailedDelete", true),
        ];
        for (stop, warning, reason, counts_as_failure) in cases {
            assert_eq!(
                delete_report(stop),
                DeleteReport {
                    warning,
                    reason,
                    counts_as_failure
                },
                "{stop:?}"
            );
        }
        assert_eq!(
            still_attached_message("pvc-1", "node-x"),
            "persistentvolume pvc-1 is still attached to node node-x, waiting for detach"
        );
    }
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
