//! Why a capacity work item runs again: one variant per failing write, naming the object or
//! key, each with a stable label for the log line and `csi_provisioner_sync_errors_total`.
//! (A failed GetCapacity is not here: it keeps the published value and retries with backoff.)

use controller_kit::workqueue::Failure;

/// A failed write of a CSIStorageCapacity object.
#[derive(Debug, thiserror::Error)]
pub enum CapacityError {
    /// Creating the object of `key` (`<class>/<segment>`) failed.
    #[error("cannot create CSIStorageCapacity for {key}: {source}")]
    Create {
        key: String,
        #[source]
        source: kube::Error,
    },
    /// The object to update is gone from what we know.
    #[error("CSIStorageCapacity {name} vanished before its update")]
    Vanished { name: String },
    /// Updating (or re-reading after a conflict) failed.
    #[error("cannot update CSIStorageCapacity {name}: {source}")]
    Update {
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Someone else kept writing the object.
    #[error("cannot update CSIStorageCapacity {name}: conflict after re-reading")]
    Conflict { name: String },
    /// Deleting an obsolete or duplicate object failed.
    #[error("cannot delete CSIStorageCapacity {name}: {source}")]
    Delete {
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl Failure for CapacityError {
    fn kind(&self) -> &'static str {
        match self {
            CapacityError::Create { .. } => "capacity_create",
            CapacityError::Vanished { .. }
            | CapacityError::Update { .. }
            | CapacityError::Conflict { .. } => "capacity_update",
            CapacityError::Delete { .. } => "capacity_delete",
        }
    }
}
