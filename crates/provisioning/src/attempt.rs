//! What the claim controller knows about the volume its CreateVolume calls may have made, and
//! what cleaning up a deleted claim therefore takes.
//!
//! The creating-volume finalizer (see [`crate::lifecycle`]) says "a volume may exist without a
//! PV". These functions decide, from what this process saw, whether one really may, which id to
//! delete, and when to ask the driver — never deleting a volume any PV references.

use k8s_openapi::api::core::v1::PersistentVolume;

/// What is known about the volume of one claim. The request sent last is kept beside it by the
/// caller, so a probe repeats exactly that request (topology included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeState {
    /// This process has no record, but the claim carries our finalizer: an earlier process may
    /// have sent a CreateVolume (it crashed or restarted). The request it sent is unknown.
    Unknown,
    /// No volume can exist: no CreateVolume was sent, or every one ended with a final error
    /// and nothing before them may have created one.
    None,
    /// A CreateVolume was sent and ended without a final answer (timeout, unavailable, ...):
    /// a volume may exist under the claim's name.
    MayExist,
    /// CreateVolume returned this volume id and no PV owns it yet.
    Created(String),
    /// The claim's volume name belongs to another claim's PV: whatever the driver holds under
    /// that name is the other claim's, never ours to delete.
    Collision,
}

impl VolumeState {
    /// The state of a claim this process has no record of, given whether an earlier process
    /// may have called CreateVolume for it ([`earlier_attempt_possible`]).
    pub fn initial(earlier_attempt: bool) -> VolumeState {
        if earlier_attempt {
            VolumeState::Unknown
        } else {
            VolumeState::None
        }
    }
}

/// How long after this process began provisioning a claim must have been created to count as
/// never seen by an earlier process: covers clock skew between this node and the API server.
pub const CREATED_SINCE_START_MARGIN_SECS: i64 = 60;

/// Whether a process before this one may have sent a CreateVolume for a claim this process has
/// no record of: the claim is held (the creating-volume finalizer, or its entry in the
/// write-ahead record) and was not created clearly after this process began provisioning
/// (`started`, Unix seconds, plus [`CREATED_SINCE_START_MARGIN_SECS`]). A claim created later
/// was only ever seen by this process, which records every call it sends; one that already held
/// the finalizer when it was created (the retired admission policy put it there before any
/// call) would otherwise be probed, creating a volume only to delete it.
///
/// A claim without a creation time is treated as old.
pub fn earlier_attempt_possible(holds_finalizer: bool, created: Option<i64>, started: i64) -> bool {
    holds_finalizer
        && created.is_none_or(|c| c <= started.saturating_add(CREATED_SINCE_START_MARGIN_SECS))
}

/// How a CreateVolume call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallResult {
    /// It returned this volume id.
    Created(String),
    /// A final error: the call is over and created nothing (upstream's `Finished` and
    /// `Reschedule` states), except `AlreadyExists`, which says a different volume holds the name.
    Final,
    /// `AlreadyExists`: a volume under this name exists with other properties.
    AlreadyExists,
    /// The call may still be running in the driver (upstream's `Background` state).
    InProgress,
}

/// How a CreateVolume that failed with gRPC `code` ended, given its provisioning `state`
/// ([`crate::errors::classify_create_volume_error`]).
pub fn failed_call(code: tonic::Code, state: crate::ProvisioningState) -> CallResult {
    match (code, state) {
        (tonic::Code::AlreadyExists, _) => CallResult::AlreadyExists,
        (_, crate::ProvisioningState::Background) => CallResult::InProgress,
        _ => CallResult::Final,
    }
}

/// The state after a CreateVolume call ended with `result`.
///
/// A final error proves nothing about earlier calls that ended without an answer, so it never
/// turns [`VolumeState::MayExist`] or [`VolumeState::Unknown`] into [`VolumeState::None`].
pub fn after_call(before: &VolumeState, result: &CallResult) -> VolumeState {
    match result {
        CallResult::Created(id) => VolumeState::Created(id.clone()),
        CallResult::InProgress | CallResult::AlreadyExists => VolumeState::MayExist,
        CallResult::Final => match before {
            VolumeState::None => VolumeState::None,
            VolumeState::Collision => VolumeState::Collision,
            // A volume we know of stays ours to clean up; an unknown one may exist.
            VolumeState::Created(id) => VolumeState::Created(id.clone()),
            VolumeState::Unknown | VolumeState::MayExist => VolumeState::MayExist,
        },
    }
}

/// Whether the request of a call that ended with `result` becomes the one a clean-up probe
/// repeats (and whose secrets delete the volume). A final error shows that request made
/// nothing, so after an earlier call that may have made a volume (`before`), that call's request
/// is still the one to ask with: a changed class may be refused where the first was not.
pub fn replaces_probe_request(before: &VolumeState, result: &CallResult) -> bool {
    !(matches!(result, CallResult::Final)
        && matches!(before, VolumeState::MayExist | VolumeState::Created(_)))
}

/// Whether the finalizer may go now that an attempt ended: nothing can exist.
pub fn may_release(state: &VolumeState) -> bool {
    matches!(state, VolumeState::None | VolumeState::Collision)
}

/// The claim writes a failed attempt needs, made together in one update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureWrites {
    /// Remove `volume.kubernetes.io/selected-node` so the scheduler picks again.
    pub reschedule: bool,
    /// Remove our finalizer: nothing of ours can exist.
    pub release: bool,
    /// Distributed provisioning: add this node's finalizer
    /// ([`crate::distributed::node_finalizer`]). The claim leaves this node while a volume
    /// its driver may have made exists; whichever node provisions the claim next releases the
    /// shared finalizer knowing nothing of it, so this node holds the claim on its own until
    /// it has cleaned that volume up.
    pub hold_here: bool,
}

/// The writes after an attempt that failed with `failed` (upstream's state), given the claim's
/// volume `state` after it, whether it holds our finalizer and whether it has a selected node.
/// A `Reschedule` without a selected node cannot reschedule (upstream treats it as `Finished`).
///
/// `distributed`: `--node-deployment`, where a rescheduled claim leaves this node's hands.
pub fn after_failure(
    failed: crate::ProvisioningState,
    state: &VolumeState,
    holds_finalizer: bool,
    has_selected_node: bool,
    distributed: bool,
) -> FailureWrites {
    let reschedule = crate::errors::effective_state(failed, has_selected_node)
        == crate::ProvisioningState::Reschedule;
    FailureWrites {
        reschedule,
        release: holds_finalizer && may_release(state),
        hold_here: distributed && reschedule && !may_release(state),
    }
}

/// What cleaning up a deleted claim (finalizer, no PV) takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cleanup {
    /// No volume of this claim can exist: drop the finalizer.
    Release,
    /// Delete this volume, then drop the finalizer.
    Delete(String),
    /// Repeat the CreateVolume sent last (same request, so a compliant driver answers with the
    /// volume it made, or a final error when it made none), then delete what it returns.
    ProbeLastRequest,
    /// After a restart: rebuild the request as the first attempt built it and probe with it.
    ProbeRebuilt,
}

/// The clean-up for a deleted claim in `state`. `name_taken` says a PV of another claim has
/// the claim's volume name: the driver's volume under that name is that claim's.
pub fn cleanup(state: &VolumeState, name_taken: bool) -> Cleanup {
    if name_taken {
        return Cleanup::Release;
    }
    match state {
        VolumeState::None | VolumeState::Collision => Cleanup::Release,
        VolumeState::Created(id) => Cleanup::Delete(id.clone()),
        VolumeState::MayExist => Cleanup::ProbeLastRequest,
        VolumeState::Unknown => Cleanup::ProbeRebuilt,
    }
}

/// The clean-up's step once the API server was asked whether the claim's own PV exists
/// (`pv_saved`): a saved PV owns the volume, and its reclaim policy decides what happens to it
/// (a `Retain` volume must survive its claim), so the clean-up only lets the claim go.
pub fn unless_saved(step: Cleanup, pv_saved: bool) -> Cleanup {
    match step {
        Cleanup::Delete(_) if pv_saved => Cleanup::Release,
        other => other,
    }
}

/// What to do with the volume a probe returned: delete it unless a PV names it
/// (`named_by_pv`, see [`pv_names_volume`]), in which case that PV owns it.
pub fn after_probe(volume_id: Option<&str>, named_by_pv: bool) -> Cleanup {
    match volume_id {
        Some(id) if !id.is_empty() && !named_by_pv => Cleanup::Delete(id.to_string()),
        _ => Cleanup::Release,
    }
}

/// Whether `pv` names volume `volume_id` of `driver`. Any such PV keeps the volume from the
/// clean-up, whichever claim it is bound to: a static PV bound to the very claim being cleaned
/// up may hold the volume the probe returned (a driver that answers a name with an existing
/// volume), and deleting it would destroy the claim's data. A PV's reclaim policy is what
/// decides about a volume it names.
pub fn pv_names_volume(pv: &PersistentVolume, driver: &str, volume_id: &str) -> bool {
    pv.spec
        .as_ref()
        .and_then(|s| s.csi.as_ref())
        .is_some_and(|csi| csi.driver == driver && csi.volume_handle == volume_id)
}

/// What a clean-up probe that failed with `code` tells about the volume under the claim's name.
pub fn after_probe_error(code: tonic::Code) -> ProbeFailure {
    use tonic::Code as C;
    match code {
        C::Cancelled | C::DeadlineExceeded | C::Unavailable | C::Aborted => ProbeFailure::Retry,
        // The driver judged the request: CSI has it answer OK for a volume that exists under
        // the name, so a refusal shows none does (a pool full by now included).
        C::InvalidArgument
        | C::OutOfRange
        | C::Unimplemented
        | C::ResourceExhausted
        | C::NotFound
        | C::FailedPrecondition => ProbeFailure::NothingMade,
        // It could not look (a backend error, refused credentials).
        _ => ProbeFailure::Unknown,
    }
}

/// The verdicts of [`after_probe_error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeFailure {
    /// No answer (or a call on the name still runs in the driver): ask again later.
    Retry,
    /// The request is refused, so no volume exists under the name.
    NothingMade,
    /// An answer that does not say whether a volume exists (a backend error, refused
    /// credentials). The claim stays and says so; the probe is tried again.
    Unknown,
}

#[cfg(test)]
mod tests {
    use super::*;
    use VolumeState as S;

    #[test]
    fn a_saved_pv_keeps_its_volume_from_the_clean_up() {
        let delete = || Cleanup::Delete("v".into());
        assert_eq!(unless_saved(delete(), true), Cleanup::Release);
        assert_eq!(unless_saved(delete(), false), delete());
        assert_eq!(unless_saved(Cleanup::Release, true), Cleanup::Release);
        assert_eq!(
            unless_saved(Cleanup::ProbeRebuilt, false),
            Cleanup::ProbeRebuilt
        );
    }

    #[test]
    fn a_call_moves_the_state() {
        let created = CallResult::Created("v".into());
        let cases = [
            (S::None, CallResult::Final, S::None),
            (S::None, CallResult::InProgress, S::MayExist),
            (S::None, CallResult::AlreadyExists, S::MayExist),
            (S::None, created.clone(), S::Created("v".into())),
            // A final error does not prove an earlier unanswered call created nothing.
            (S::MayExist, CallResult::Final, S::MayExist),
            (S::Unknown, CallResult::Final, S::MayExist),
            (S::Unknown, CallResult::InProgress, S::MayExist),
            (S::MayExist, created.clone(), S::Created("v".into())),
            (S::Collision, CallResult::Final, S::Collision),
            (
                S::Created("a".into()),
                CallResult::Final,
                S::Created("a".into()),
            ),
        ];
        for (before, result, want) in cases {
            assert_eq!(after_call(&before, &result), want, "{before:?} {result:?}");
        }
    }

    #[test]
    fn a_final_error_keeps_the_request_of_a_call_that_may_have_made_the_volume() {
        let created = CallResult::Created("v".into());
        // (state before, how the call ended) → its request is the one the probe repeats
        let cases = [
            (S::MayExist, CallResult::Final, false),
            (S::Created("a".into()), CallResult::Final, false),
            (S::Unknown, CallResult::Final, true),
            (S::None, CallResult::Final, true),
            (S::MayExist, CallResult::InProgress, true),
            (S::MayExist, CallResult::AlreadyExists, true),
            (S::MayExist, created, true),
        ];
        for (before, result, want) in cases {
            assert_eq!(
                replaces_probe_request(&before, &result),
                want,
                "{before:?} {result:?}"
            );
        }
    }

    #[test]
    fn failed_calls_by_code() {
        use crate::ProvisioningState as P;
        use tonic::Code;
        assert_eq!(
            failed_call(Code::DeadlineExceeded, P::Background),
            CallResult::InProgress
        );
        assert_eq!(
            failed_call(Code::InvalidArgument, P::Finished),
            CallResult::Final
        );
        assert_eq!(
            failed_call(Code::ResourceExhausted, P::Reschedule),
            CallResult::Final
        );
        assert_eq!(
            failed_call(Code::AlreadyExists, P::Finished),
            CallResult::AlreadyExists
        );
    }

    #[test]
    fn the_finalizer_goes_only_when_nothing_can_exist() {
        assert!(may_release(&S::None));
        assert!(may_release(&S::Collision));
        for s in [S::Unknown, S::MayExist, S::Created("v".into())] {
            assert!(!may_release(&s), "{s:?}");
        }
        assert_eq!(S::initial(true), S::Unknown);
        assert_eq!(S::initial(false), S::None);
    }

    #[test]
    fn writes_after_a_failure() {
        use crate::ProvisioningState as P;
        let w = |reschedule, release| FailureWrites {
            reschedule,
            release,
            hold_here: false,
        };
        // (failed, state, holds finalizer, has selected node) → writes
        let cases = [
            ((P::Reschedule, S::None, true, true), w(true, true)),
            ((P::Reschedule, S::None, true, false), w(false, true)),
            ((P::Reschedule, S::MayExist, true, true), w(true, false)),
            ((P::Finished, S::None, false, true), w(false, false)),
            ((P::Finished, S::Collision, true, false), w(false, true)),
            ((P::Background, S::MayExist, true, true), w(false, false)),
            ((P::Finished, S::Unknown, true, false), w(false, false)),
        ];
        for ((failed, state, holds, selected), want) in cases {
            assert_eq!(
                after_failure(failed, &state, holds, selected, false),
                want,
                "{failed:?} {state:?} {holds} {selected}"
            );
        }
    }

    #[test]
    fn a_node_giving_a_claim_back_holds_it_while_its_volume_may_exist() {
        use crate::ProvisioningState as P;
        // (failed, state, has selected node) → this node holds the claim
        let cases = [
            // Timed out, then ResourceExhausted: the first call's volume may exist.
            ((P::Reschedule, S::MayExist, true), true),
            ((P::Reschedule, S::Created("v".into()), true), true),
            ((P::Reschedule, S::Unknown, true), true),
            ((P::Reschedule, S::None, true), false),
            ((P::Reschedule, S::Collision, true), false),
            // Not given back: it stays this node's claim.
            ((P::Reschedule, S::MayExist, false), false),
            ((P::Finished, S::MayExist, true), false),
            ((P::Background, S::MayExist, true), false),
        ];
        for ((failed, state, selected), want) in cases {
            let writes = after_failure(failed, &state, true, selected, true);
            assert_eq!(writes.hold_here, want, "{failed:?} {state:?} {selected}");
            // Central mode never holds a claim per node.
            let central = after_failure(failed, &state, true, selected, false);
            assert!(!central.hold_here);
        }
    }

    #[test]
    fn cleanup_table() {
        let cases = [
            ((S::None, false), Cleanup::Release),
            ((S::Collision, false), Cleanup::Release),
            ((S::Created("v".into()), false), Cleanup::Delete("v".into())),
            ((S::MayExist, false), Cleanup::ProbeLastRequest),
            ((S::Unknown, false), Cleanup::ProbeRebuilt),
            // Another claim's PV has our name: never probe, never delete.
            ((S::Created("v".into()), true), Cleanup::Release),
            ((S::MayExist, true), Cleanup::Release),
            ((S::Unknown, true), Cleanup::Release),
        ];
        for ((state, taken), want) in cases {
            assert_eq!(cleanup(&state, taken), want, "{state:?} {taken}");
        }
    }

    #[test]
    fn only_a_judged_request_proves_the_probe_found_nothing() {
        use tonic::Code as C;
        let cases = [
            (C::DeadlineExceeded, ProbeFailure::Retry),
            (C::Unavailable, ProbeFailure::Retry),
            (C::Aborted, ProbeFailure::Retry),
            (C::Cancelled, ProbeFailure::Retry),
            (C::InvalidArgument, ProbeFailure::NothingMade),
            (C::OutOfRange, ProbeFailure::NothingMade),
            (C::Unimplemented, ProbeFailure::NothingMade),
            (C::ResourceExhausted, ProbeFailure::NothingMade),
            (C::NotFound, ProbeFailure::NothingMade),
            (C::FailedPrecondition, ProbeFailure::NothingMade),
            (C::Internal, ProbeFailure::Unknown),
            (C::Unknown, ProbeFailure::Unknown),
            (C::PermissionDenied, ProbeFailure::Unknown),
            (C::Unauthenticated, ProbeFailure::Unknown),
            (C::DataLoss, ProbeFailure::Unknown),
        ];
        for (code, want) in cases {
            assert_eq!(after_probe_error(code), want, "{code:?}");
        }
    }

    #[test]
    fn any_pv_naming_the_volume_keeps_it_whatever_claim_it_is_bound_to() {
        let pv = |driver: &str, handle: &str, claim_uid: Option<&str>| -> PersistentVolume {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "static"},
                "spec": {"csi": {"driver": driver, "volumeHandle": handle},
                         "claimRef": claim_uid.map(|u| serde_json::json!({"uid": u}))},
            }))
            .unwrap()
        };
        // (pv, names the volume "v" of driver "d")
        let cases = [
            // Bound to the claim being cleaned up: its volume, kept (the live-volume case).
            (pv("d", "v", Some("this-claim")), true),
            (pv("d", "v", Some("other-claim")), true),
            (pv("d", "v", None), true),
            (pv("d", "w", Some("this-claim")), false),
            // Another driver's volume of the same id is not this one.
            (pv("other", "v", Some("this-claim")), false),
        ];
        for (pv, want) in cases {
            assert_eq!(pv_names_volume(&pv, "d", "v"), want, "{pv:?}");
        }
        let no_csi: PersistentVolume =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "nfs"}, "spec": {}}))
                .unwrap();
        assert!(!pv_names_volume(&no_csi, "d", "v"));
    }

    #[test]
    fn a_probed_volume_in_use_elsewhere_is_kept() {
        assert_eq!(after_probe(Some("v"), false), Cleanup::Delete("v".into()));
        assert_eq!(after_probe(Some("v"), true), Cleanup::Release);
        assert_eq!(after_probe(Some(""), false), Cleanup::Release);
        assert_eq!(after_probe(None, false), Cleanup::Release);
    }

    #[test]
    fn earlier_attempts_are_possible_only_for_old_claims_holding_the_finalizer() {
        let started = 10_000;
        let m = CREATED_SINCE_START_MARGIN_SECS;
        // (holds finalizer, created) → possible
        let cases = [
            (false, Some(0), false),
            (true, Some(0), true),
            // Created just before a restart: the crashed process may have called.
            (true, Some(started - 5), true),
            // Within the skew margin after the start: still treated as old.
            (true, Some(started + m), true),
            (true, Some(started + m + 1), false),
            (true, None, true),
        ];
        for (fin, created, want) in cases {
            assert_eq!(
                earlier_attempt_possible(fin, created, started),
                want,
                "finalizer {fin}, created {created:?}"
            );
        }
    }
}
