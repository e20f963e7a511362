//! Why a claim's sync runs again: one variant per failing step, naming the claim, each with a
//! stable label for the log line and `csi_provisioner_sync_errors_total`.

use std::time::Duration;

use controller_kit::workqueue::{Failure, Outcome};

/// A failed step of a claim's sync. The messages are what users see in logs (and, for
/// clean-up, in a `ProvisioningCleanupFailed` event).
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// The claim's StorageClass is not in the cache: it may not exist yet.
    #[error("storageclass.storage.k8s.io {class:?} not found")]
    ClassMissing {
        /// The class the claim names.
        class: String,
    },
    /// Writing the claim (finalizer, selected-node annotation) failed.
    #[error("cannot {what} claim {claim}: {source}")]
    ClaimWrite {
        claim: String,
        /// What the write was for, e.g. "add the finalizer to".
        what: &'static str,
        #[source]
        source: kube::Error,
    },
    /// The claim's write-ahead entry was not written (shutdown, or let go meanwhile): its
    /// CreateVolume is not sent.
    #[error("cannot record claim {claim} in the write-ahead record: {source}")]
    Record {
        claim: String,
        #[source]
        source: crate::write_ahead::RecordWriteError,
    },
    /// Reading claims from the API server failed.
    #[error("cannot {what} claim {claim}: {source}")]
    ClaimRead {
        claim: String,
        /// What the read was for, e.g. "list the claims in the namespace of".
        what: &'static str,
        #[source]
        source: kube::Error,
    },
    /// The PV of a created volume was not saved; it is kept and saved again first.
    #[error("cannot save PV {pv} for claim {claim}: {message}")]
    SavePv {
        claim: String,
        pv: String,
        message: String,
    },
    /// The clean-up of a deleted claim is stuck; the message says what to do.
    #[error("{message}")]
    CleanUp { claim: String, message: String },
    /// The clean-up's CreateVolume probe failed for a reason worth retrying.
    #[error("cannot check for a volume of deleted claim {claim}: {message}")]
    Probe { claim: String, message: String },
}

impl Failure for ClaimError {
    fn kind(&self) -> &'static str {
        match self {
            ClaimError::ClassMissing { .. } => "class_missing",
            ClaimError::ClaimWrite { .. } => "claim_write",
            ClaimError::Record { .. } => "record_write",
            ClaimError::ClaimRead { .. } => "claim_read",
            ClaimError::SavePv { .. } => "pv_save",
            ClaimError::CleanUp { .. } => "cleanup",
            ClaimError::Probe { .. } => "cleanup_probe",
        }
    }
}

/// Why a sync must run again.
#[derive(Debug)]
pub enum SyncError {
    /// A step failed: retry with the claim's exponential backoff.
    Failed(ClaimError),
    /// A failed attempt holds the next one for this long (already reported as an event).
    Hold(Duration),
    /// Distributed provisioning: another instance may take the claim first; look again after
    /// this long.
    Turn(Duration),
}

impl From<ClaimError> for SyncError {
    fn from(e: ClaimError) -> SyncError {
        SyncError::Failed(e)
    }
}

/// What the work queue does with a sync's result.
pub fn outcome(result: Result<(), SyncError>) -> Outcome {
    match result {
        Ok(()) => Outcome::Done,
        Err(SyncError::Failed(e)) => Outcome::retry(e),
        Err(SyncError::Hold(delay) | SyncError::Turn(delay)) => Outcome::RetryAfter(delay),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_stable_labels() {
        let claim = || "ns/c".to_string();
        let cases: [(ClaimError, &str, &str); 4] = [
            (
                ClaimError::ClassMissing {
                    class: "fast".into(),
                },
                "class_missing",
                "storageclass.storage.k8s.io \"fast\" not found",
            ),
            (
                ClaimError::SavePv {
                    claim: claim(),
                    pv: "pvc-1".into(),
                    message: "boom".into(),
                },
                "pv_save",
                "cannot save PV pvc-1 for claim ns/c: boom",
            ),
            (
                ClaimError::CleanUp {
                    claim: claim(),
                    message: "delete it by hand".into(),
                },
                "cleanup",
                "delete it by hand",
            ),
            (
                ClaimError::Probe {
                    claim: claim(),
                    message: "Unavailable".into(),
                },
                "cleanup_probe",
                "cannot check for a volume of deleted claim ns/c: Unavailable",
            ),
        ];
        for (err, kind, message) in cases {
            assert_eq!((err.kind(), err.to_string().as_str()), (kind, message));
        }
    }
}
