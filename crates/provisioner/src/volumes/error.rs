//! Why a PV's sync runs again: one variant per failing step, naming the PV, each with a stable
//! label for the log line and `csi_provisioner_sync_errors_total`. The messages of the
//! DeleteVolume steps are also the `VolumeFailedDelete` event's (the Normal `VolumeDelete`
//! event's while a VolumeAttachment holds the PV).

use controller_kit::workqueue::Failure;

/// A failed step of a PV's sync.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// A PV of our driver without `spec.csi`: nothing to delete it with.
    #[error("invalid CSI PV {pv}: it has no spec.csi")]
    NoCsiSource { pv: String },
    /// An in-tree PV (CSI migration) that cannot be put in CSI form.
    #[error("failed to translate in-tree PersistentVolume {pv} to CSI: {message}")]
    Translation { pv: String, message: String },
    /// A VolumeAttachment still names the PV (upstream's wording): deletion is postponed.
    #[error("{}", provisioning::volume::still_attached_message(pv, node))]
    StillAttached { pv: String, node: String },
    /// The deletion secret's reference cannot be resolved (upstream's wording).
    #[error("failed to get secretreference for volume {pv}: {message}")]
    SecretReference { pv: String, message: String },
    /// The driver's DeleteVolume failed (the Go-style status string, as upstream).
    #[error("{message}")]
    DeleteVolume { pv: String, message: String },
    /// Writing the PV (finalizers, delete) failed.
    #[error("cannot {what} PersistentVolume {pv}: {source}")]
    PvWrite {
        pv: String,
        /// E.g. "update finalizers of".
        what: &'static str,
        #[source]
        source: kube::Error,
    },
}

impl VolumeError {
    /// How this stop is reported ([`provisioning::volume::delete_report`]).
    pub fn delete_stop(&self) -> provisioning::volume::DeleteStop {
        match self {
            VolumeError::StillAttached { .. } => provisioning::volume::DeleteStop::WaitingForDetach,
            _ => provisioning::volume::DeleteStop::Failed,
        }
    }
}

impl Failure for VolumeError {
    fn kind(&self) -> &'static str {
        match self {
            VolumeError::NoCsiSource { .. } | VolumeError::Translation { .. } => "invalid_pv",
            VolumeError::StillAttached { .. } => "still_attached",
            VolumeError::SecretReference { .. } => "deletion_secret",
            VolumeError::DeleteVolume { .. } => "delete_volume",
            VolumeError::PvWrite { .. } => "pv_write",
        }
    }
}
