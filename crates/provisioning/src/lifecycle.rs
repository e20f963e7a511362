//! The claim lifecycle that makes volume leaks impossible (beyond upstream).
//!
//! Upstream remembers an in-flight CreateVolume only in memory, so a restart or a claim deleted
//! mid-call can leave a volume nobody will ever delete (upstream issues #486 and #1469). We keep
//! that fact durably: by default in the write-ahead record (`crate::record`: the claim's entry,
//! written before the first CreateVolume, batched with others', in a Lease of ours), or with
//! `CSI_PROVISIONER_WRITE_AHEAD_RECORD=false` (and for claims an earlier version left holding
//! it) in the finalizer [`CREATING_VOLUME_FINALIZER`] on the claim. The hold goes once a PV for
//! the claim exists (from then on the PV's reclaim policy owns the volume) and the binder has
//! bound the claim, or once the volume is known not to exist. While it is there the
//! provisioner can always find and delete the volume — after a crash, a restart, or a deletion
//! racing the call (a deleted claim stays readable while the finalizer holds it; with the
//! record, its entry has what the clean-up needs).
//!
//! [`decide`] is the whole state machine; the claim controller only carries out its answer.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use crate::claim::ShouldProvision;
use crate::names::{CREATING_VOLUME_FINALIZER, PVC_PROTECTION_FINALIZER};

/// What the claim controller must do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Nothing now.
    Ignore,
    /// A PV for the claim exists: drop our finalizer; the PV now owns the volume.
    ReleaseFinalizer,
    /// Deleted, a PV owns the volume, and kube-controller-manager's pvc-protection finalizer is
    /// still there: the claim cannot go before that one does, so wait for its removal (which
    /// brings the claim back) and release then, with a copy nobody else is changing. Releasing
    /// at once races that removal: a conflict and a re-read per claim when our write waits for
    /// its API token. A background release still waiting is stale already: abort it.
    WaitForProtection,
    /// Provision (adding the finalizer right before CreateVolume).
    Provision,
    /// Late binding, no node chosen yet: wait (a kept finalizer stays until deletion or success).
    WaitForNode,
    /// The StorageClass does not exist (yet): retry with backoff, as upstream.
    ClassMissing,
    /// The claim is being deleted, or was bound to a PV that is not ours, and a volume for it
    /// may exist without a PV: make sure the volume is gone, then drop the finalizer.
    CleanUp,
}

/// Whether our finalizer is on the claim.
pub fn has_finalizer(claim: &PersistentVolumeClaim) -> bool {
    claim
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == CREATING_VOLUME_FINALIZER)
}

/// Whether kube-controller-manager's pvc-protection finalizer is on the claim.
pub fn is_protected(claim: &PersistentVolumeClaim) -> bool {
    claim
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == PVC_PROTECTION_FINALIZER)
}

/// Whether the binder has finished with the claim (`status.phase` is `Bound`).
pub fn is_bound(claim: &PersistentVolumeClaim) -> bool {
    claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
}

/// The next step for a claim.
///
/// `should` is [`crate::claim::should_provision`]'s answer; `ours` says whether the claim's
/// storage-provisioner annotation names our driver; `holding` says whether our finalizer or our
/// write-ahead entry (`crate::record`) holds the claim: a volume may exist that the claim's
/// clean-up must find; `pv_exists` says whether a PV named for this claim and bound to its UID
/// exists (or was just created by us).
///
/// The finalizer's name is the same for every driver, and clusters run one provisioner per
/// driver: a claim of another driver is never touched, whatever finalizers it carries.
pub fn decide(
    claim: &PersistentVolumeClaim,
    should: ShouldProvision,
    ours: bool,
    holding: bool,
    pv_exists: bool,
) -> Step {
    if !ours {
        return Step::Ignore;
    }
    if claim.metadata.deletion_timestamp.is_some() {
        return match (holding, pv_exists) {
            (false, _) => Step::Ignore,
            (true, true) if is_protected(claim) => Step::WaitForProtection,
            (true, true) => Step::ReleaseFinalizer,
            (true, false) => Step::CleanUp,
        };
    }
    if pv_exists || should == ShouldProvision::AlreadyBound {
        // The PV already owns the volume, so releasing now would be safe; waiting until the
        // binder has finished writing the claim (phase Bound) makes our write the last one
        // instead of a conflict with the binder's, and costs nothing: the binder's status write
        // brings the claim back to us.
        return if holding && is_bound(claim) {
            Step::ReleaseFinalizer
        } else {
            Step::Ignore
        };
    }
    match should {
        ShouldProvision::Provision => Step::Provision,
        ShouldProvision::WaitForNode => Step::WaitForNode,
        ShouldProvision::ClassMissing => Step::ClassMissing,
        ShouldProvision::AlreadyBound
        | ShouldProvision::NotOurs
        | ShouldProvision::ClassForOtherProvisioner => Step::Ignore,
    }
}

/// [`decide`]'s `step`, except for a claim bound to some other PV (a matching static PV, say)
/// while a volume of ours may exist without a PV (`may_exist`: a call that ended without an
/// answer, a volume made but not saved, or an earlier process's call, see
/// [`crate::attempt::may_release`]): nothing will ever own it, so it is cleaned up as for a
/// deleted claim. The hold (finalizer or entry) may already be gone with the binding (the
/// retired admission policy dropped the finalizer then), so this process's memory says more
/// than the hold here. Waits for phase Bound, as the release does.
pub fn bound_elsewhere(
    step: Step,
    claim: &PersistentVolumeClaim,
    should: ShouldProvision,
    pv_exists: bool,
    may_exist: bool,
) -> Step {
    let binding_done = is_bound(claim) || claim.metadata.deletion_timestamp.is_some();
    if may_exist && !pv_exists && should == ShouldProvision::AlreadyBound && binding_done {
        Step::CleanUp
    } else {
        step
    }
}

/// The claim's finalizers with ours added (`None` if already there).
pub fn with_finalizer(claim: &PersistentVolumeClaim) -> Option<Vec<String>> {
    finalizers_with(
        claim.metadata.finalizers.as_ref(),
        CREATING_VOLUME_FINALIZER,
        true,
    )
}

/// The claim's finalizers with ours removed (`None` if it was not there).
pub fn without_finalizer(claim: &PersistentVolumeClaim) -> Option<Vec<String>> {
    finalizers_with(
        claim.metadata.finalizers.as_ref(),
        CREATING_VOLUME_FINALIZER,
        false,
    )
}

/// `finalizers` with `name` present (`present`) or absent; `None` when they already are, so
/// the caller writes nothing. The order of the others is kept and `name` goes last.
pub fn finalizers_with(
    finalizers: Option<&Vec<String>>,
    name: &str,
    present: bool,
) -> Option<Vec<String>> {
    let list = finalizers.map(Vec::as_slice).unwrap_or_default();
    if list.iter().any(|f| f == name) == present {
        return None;
    }
    let others = list.iter().filter(|f| *f != name).cloned();
    Some(if present {
        others.chain([name.to_string()]).collect()
    } else {
        others.collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the claim's own finalizers say: the table's claims hold no write-ahead entry.
    fn decide(
        claim: &PersistentVolumeClaim,
        should: ShouldProvision,
        ours: bool,
        pv_exists: bool,
    ) -> Step {
        super::decide(claim, should, ours, has_finalizer(claim), pv_exists)
    }
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn bound(mut c: PersistentVolumeClaim) -> PersistentVolumeClaim {
        c.status = Some(k8s_openapi::api::core::v1::PersistentVolumeClaimStatus {
            phase: Some("Bound".into()),
            ..Default::default()
        });
        c
    }

    fn unprotected(mut c: PersistentVolumeClaim) -> PersistentVolumeClaim {
        if let Some(f) = c.metadata.finalizers.as_mut() {
            f.retain(|f| f != PVC_PROTECTION_FINALIZER);
        }
        c
    }

    fn claim(holding: bool, deleting: bool) -> PersistentVolumeClaim {
        let mut c = PersistentVolumeClaim::default();
        let mut f = vec![PVC_PROTECTION_FINALIZER.to_string()];
        if holding {
            f.push(CREATING_VOLUME_FINALIZER.to_string());
        }
        c.metadata.finalizers = Some(f);
        if deleting {
            c.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        }
        c
    }

    #[test]
    fn a_claim_bound_elsewhere_cleans_up_a_volume_that_may_exist() {
        use ShouldProvision as S;
        let held_bound = bound(claim(true, false));
        let policy_bound = bound(claim(false, false));
        let deleted = claim(false, true);
        let pending = claim(true, false);
        // (claim, should, our PV exists, a volume may exist) → step, from decide's Ignore
        let cases = [
            (&held_bound, S::AlreadyBound, false, true, Step::CleanUp),
            // The hold went with the binding (as the retired admission policy did): memory decides.
            (&policy_bound, S::AlreadyBound, false, true, Step::CleanUp),
            (&deleted, S::AlreadyBound, false, true, Step::CleanUp),
            // Our own PV owns the volume.
            (&held_bound, S::AlreadyBound, true, true, Step::Ignore),
            // No volume can exist.
            (&held_bound, S::AlreadyBound, false, false, Step::Ignore),
            // The binder has not finished writing the claim.
            (&pending, S::AlreadyBound, false, true, Step::Ignore),
            (&held_bound, S::Provision, false, true, Step::Ignore),
        ];
        for (c, should, pv, may_exist, want) in cases {
            assert_eq!(
                bound_elsewhere(Step::Ignore, c, should, pv, may_exist),
                want,
                "{should:?} pv {pv} may exist {may_exist}"
            );
        }
    }

    #[test]
    fn claims_of_other_drivers_are_never_touched() {
        for (holding, deleting) in [(true, true), (true, false), (false, true), (false, false)] {
            for should in [
                ShouldProvision::Provision,
                ShouldProvision::NotOurs,
                ShouldProvision::AlreadyBound,
            ] {
                for pv in [true, false] {
                    assert_eq!(
                        decide(&claim(holding, deleting), should, false, pv),
                        Step::Ignore
                    );
                }
            }
        }
    }

    #[test]
    fn table() {
        use ShouldProvision as S;
        use Step::*;
        // (holding, deleting, should, pv_exists) -> step
        let cases = [
            ((false, false, S::Provision, false), Provision),
            ((true, false, S::Provision, false), Provision),
            ((false, false, S::WaitForNode, false), WaitForNode),
            ((true, false, S::WaitForNode, false), WaitForNode),
            ((false, false, S::ClassMissing, false), ClassMissing),
            ((false, false, S::ClassForOtherProvisioner, false), Ignore),
            // The PV exists but the binder is not done with the claim: wait for it.
            ((true, false, S::Provision, true), Ignore),
            ((false, false, S::Provision, true), Ignore),
            ((true, false, S::AlreadyBound, false), Ignore),
            ((false, false, S::AlreadyBound, false), Ignore),
            // Deleted claims.
            ((false, true, S::Provision, false), Ignore),
            ((true, true, S::Provision, false), CleanUp),
            ((true, true, S::WaitForNode, false), CleanUp),
            // pvc-protection (on every claim of this table) goes first.
            ((true, true, S::Provision, true), WaitForProtection),
            ((false, true, S::AlreadyBound, true), Ignore),
        ];
        for ((holding, deleting, should, pv), want) in cases {
            assert_eq!(
                decide(&claim(holding, deleting), should, true, pv),
                want,
                "{holding} {deleting} {should:?} {pv}"
            );
        }
    }

    #[test]
    fn release_waits_for_the_binder_unless_the_claim_is_deleted() {
        use ShouldProvision as S;
        let held_bound = bound(claim(true, false));
        assert_eq!(
            decide(&held_bound, S::AlreadyBound, true, true),
            Step::ReleaseFinalizer
        );
        assert_eq!(
            decide(&held_bound, S::AlreadyBound, true, false),
            Step::ReleaseFinalizer
        );
        assert_eq!(
            decide(&bound(claim(false, false)), S::AlreadyBound, true, true),
            Step::Ignore
        );
        // Deleted before the binder got to it: the PV owns the volume; release once
        // pvc-protection is gone.
        assert_eq!(
            decide(&claim(true, true), S::AlreadyBound, true, true),
            Step::WaitForProtection
        );
        assert_eq!(
            decide(&unprotected(claim(true, true)), S::AlreadyBound, true, true),
            Step::ReleaseFinalizer
        );
    }

    #[test]
    fn deleted_claims_wait_only_for_pvc_protection() {
        use ShouldProvision as S;
        let mut other = unprotected(claim(true, true));
        other
            .metadata
            .finalizers
            .get_or_insert_with(Vec::new)
            .push("example.com/backup".into());
        // Another finalizer may stay for ever: it does not hold our release back.
        assert_eq!(
            decide(&other, S::Provision, true, true),
            Step::ReleaseFinalizer
        );
        // Without a PV the volume must be cleaned up at once, protected or not.
        assert_eq!(
            decide(&claim(true, true), S::Provision, true, false),
            Step::CleanUp
        );
        assert_eq!(
            decide(&unprotected(claim(true, true)), S::Provision, true, false),
            Step::CleanUp
        );
        // Not deleted: pvc-protection plays no part.
        assert_eq!(
            decide(
                &bound(unprotected(claim(true, false))),
                S::AlreadyBound,
                true,
                true
            ),
            Step::ReleaseFinalizer
        );
    }

    #[test]
    fn finalizer_edits_keep_others() {
        let c = claim(false, false);
        let added = with_finalizer(&c).unwrap();
        assert_eq!(
            added,
            ["kubernetes.io/pvc-protection", CREATING_VOLUME_FINALIZER]
        );
        assert_eq!(without_finalizer(&c), None);
        let held = claim(true, false);
        assert_eq!(with_finalizer(&held), None);
        assert_eq!(
            without_finalizer(&held).unwrap(),
            ["kubernetes.io/pvc-protection"]
        );
    }

    #[rstest::rstest]
    #[case::add_to_none(None, true, Some(vec!["x"]))]
    #[case::add_after_others(Some(vec!["a", "b"]), true, Some(vec!["a", "b", "x"]))]
    #[case::add_present(Some(vec!["x", "a"]), true, None)]
    #[case::remove_keeps_order(Some(vec!["a", "x", "b"]), false, Some(vec!["a", "b"]))]
    #[case::remove_duplicates(Some(vec!["x", "x"]), false, Some(vec![]))]
    #[case::remove_absent(Some(vec!["a"]), false, None)]
    #[case::remove_from_none(None, false, None)]
    fn finalizer_lists(
        #[case] before: Option<Vec<&str>>,
        #[case] present: bool,
        #[case] want: Option<Vec<&str>>,
    ) {
        let before: Option<Vec<String>> = before.map(|l| l.into_iter().map(String::from).collect());
        let want: Option<Vec<String>> = want.map(|l| l.into_iter().map(String::from).collect());
        assert_eq!(finalizers_with(before.as_ref(), "x", present), want);
    }
}
