//! What a failed provisioning attempt means for the claim (the library's `ProvisioningState`),
//! and how CreateVolume's gRPC errors map onto it (`checkError`).

use thiserror::Error;
use tonic::Code;

/// Whether a volume may still be created in the background after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProvisioningState {
    /// Nothing is running in the background; the attempt is over (it is still retried with
    /// backoff). A claim deleted now needs no further CreateVolume calls.
    Finished,
    /// Same as the previous attempt's state (first attempt: treated as Finished).
    NoChange,
    /// CreateVolume may still be running: keep calling it, even after the claim is deleted, until
    /// a final answer arrives.
    Background,
    /// Give up on the selected node: remove `volume.kubernetes.io/selected-node` so the scheduler
    /// picks again. Only meaningful when the claim has a selected node.
    Reschedule,
}

/// The state for a CreateVolume that failed with gRPC status `code`.
///
/// `may_reschedule` is [`may_reschedule`]: the driver has topology and the claim a selected node.
/// `ResourceExhausted` reschedules when allowed and is final otherwise; `Canceled`,
/// `DeadlineExceeded`, `Unavailable` and `Aborted` mean the operation may still be pending; every
/// other code (including `Ok`, which a failed call never carries) is final.
pub fn classify_create_volume_error(code: Code, may_reschedule: bool) -> ProvisioningState {
    match code {
        Code::ResourceExhausted if may_reschedule => ProvisioningState::Reschedule,
        Code::ResourceExhausted => ProvisioningState::Finished,
        Code::Cancelled | Code::DeadlineExceeded | Code::Unavailable | Code::Aborted => {
            ProvisioningState::Background
        }
        _ => ProvisioningState::Finished,
    }
}

/// The state for a CreateVolume that failed before reaching the driver (no gRPC status): the
/// previous call might still be running, so stay on the safe side.
pub fn classify_non_grpc_error() -> ProvisioningState {
    ProvisioningState::Background
}

/// Whether a final error may send the claim back to the scheduler.
pub fn may_reschedule(supports_topology: bool, selected_node: Option<&str>) -> bool {
    supports_topology && selected_node.is_some_and(|n| !n.is_empty())
}

/// `InvalidArgument` is "infeasible": the library delays retries (about 5 minutes, or until the
/// StorageClass is recreated) and words the `ProvisioningFailed` event differently.
pub fn is_infeasible(code: Code) -> bool {
    code == Code::InvalidArgument
}

/// The state the library acts on: `Reschedule` for a claim without the selected-node annotation
/// cannot reschedule and counts as `Finished`.
pub fn effective_state(
    state: ProvisioningState,
    has_selected_node_annotation: bool,
) -> ProvisioningState {
    match state {
        ProvisioningState::Reschedule if !has_selected_node_annotation => {
            ProvisioningState::Finished
        }
        other => other,
    }
}

/// A provisioning step that failed, with the state the claim controller must apply. The message
/// becomes the `ProvisioningFailed` event text, so it uses upstream's wording.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{message}")]
pub struct ProvisionError {
    /// What the failure means for in-flight work.
    pub state: ProvisioningState,
    /// Human-readable reason.
    pub message: String,
}

impl ProvisionError {
    /// A final failure.
    pub fn finished(message: impl Into<String>) -> Self {
        ProvisionError {
            state: ProvisioningState::Finished,
            message: message.into(),
        }
    }

    /// A failure that leaves the in-flight state as it was.
    pub fn no_change(message: impl Into<String>) -> Self {
        ProvisionError {
            state: ProvisioningState::NoChange,
            message: message.into(),
        }
    }

    /// A failure after which CreateVolume may still be running.
    pub fn background(message: impl Into<String>) -> Self {
        ProvisionError {
            state: ProvisioningState::Background,
            message: message.into(),
        }
    }

    /// A failure that should send the claim back to the scheduler.
    pub fn reschedule(message: impl Into<String>) -> Self {
        ProvisionError {
            state: ProvisioningState::Reschedule,
            message: message.into(),
        }
    }

    /// A PV of another claim already has this claim's volume name: final, and the volume
    /// under that name (the other claim's) is never asked for nor deleted.
    pub fn name_collision(volume_name: &str) -> Self {
        ProvisionError::finished(format!(
            "PersistentVolume {volume_name} already exists for another claim; volume names collide \
             (is --volume-name-uuid-length too short?). The other claim's volume is left alone; \
             delete this claim or lengthen --volume-name-uuid-length"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ProvisioningState::*;
    use pretty_assertions::assert_eq;

    const ALL_CODES: [Code; 17] = [
        Code::Ok,
        Code::Cancelled,
        Code::Unknown,
        Code::InvalidArgument,
        Code::DeadlineExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
        Code::DataLoss,
        Code::Unauthenticated,
    ];

    // TestProvisionErrorHandling: every code × {topology, none} × {node selected, none}.
    #[test]
    fn error_matrix() {
        for code in ALL_CODES {
            for topology in [false, true] {
                for node in [None, Some(""), Some("node-1")] {
                    let reschedule_ok = may_reschedule(topology, node);
                    let want = match code {
                        Code::Cancelled
                        | Code::DeadlineExceeded
                        | Code::Unavailable
                        | Code::Aborted => Background,
                        Code::ResourceExhausted if topology && node == Some("node-1") => Reschedule,
                        _ => Finished,
                    };
                    assert_eq!(
                        classify_create_volume_error(code, reschedule_ok),
                        want,
                        "{code:?} topology={topology} node={node:?}"
                    );
                }
            }
        }
        assert_eq!(classify_non_grpc_error(), Background);
    }

    #[test]
    fn may_reschedule_table() {
        let cases = [
            (false, None, false),
            (false, Some("n"), false),
            (true, None, false),
            (true, Some(""), false),
            (true, Some("n"), true),
        ];
        for (topology, node, want) in cases {
            assert_eq!(may_reschedule(topology, node), want, "{topology} {node:?}");
        }
    }

    #[test]
    fn infeasible_and_effective_state() {
        let infeasible: Vec<Code> = ALL_CODES
            .into_iter()
            .filter(|c| is_infeasible(*c))
            .collect();
        assert_eq!(infeasible, [Code::InvalidArgument]);
        let cases = [
            (Reschedule, true, Reschedule),
            (Reschedule, false, Finished),
            (Background, false, Background),
            (NoChange, true, NoChange),
            (Finished, true, Finished),
        ];
        for (state, annotated, want) in cases {
            assert_eq!(effective_state(state, annotated), want);
        }
    }

    #[test]
    fn constructors() {
        assert_eq!(ProvisionError::finished("a").state, Finished);
        assert_eq!(ProvisionError::no_change("b").state, NoChange);
        assert_eq!(ProvisionError::background("c").state, Background);
        let e = ProvisionError::reschedule("d");
        assert_eq!((e.state, e.to_string()), (Reschedule, "d".to_string()));
    }
}
