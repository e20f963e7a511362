//! The claim controller's one decision: the facts about a claim, gathered once per sync, give
//! the next step ([`next_step`]). The table test below is where a claim's lifecycle is told.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;

use crate::attempt::{VolumeState, earlier_attempt_possible, may_release};
use crate::claim::{annotation, is_ours, should_provision, waits_for_node};
use crate::data_source::clone::guards_source;
use crate::data_source::snapshot::has_finalizer as holds;
use crate::distributed::{Leftover, NodeOwner, leftover, node_finalizer, node_owner};
use crate::lifecycle::{self, bound_elsewhere, decide, has_finalizer};
use crate::names::{ANN_SELECTED_NODE, CLONE_SOURCE_FINALIZER, WAIT_FOR_FIRST_CONSUMER};

/// Everything [`next_step`] looks at.
#[derive(Debug, Clone)]
pub struct ClaimFacts<'a> {
    /// The claim, read through our own writes.
    pub claim: &'a PersistentVolumeClaim,
    /// Its StorageClass, if the cache has it.
    pub class: Option<&'a StorageClass>,
    /// Our driver's name.
    pub driver: &'a str,
    /// The driver can clone volumes (then clone sources are protected).
    pub can_clone: bool,
    /// `--node-deployment`: this instance's node.
    pub node: Option<NodeFacts<'a>>,
    /// Capacity tracking is on (a late-binding claim nothing can hold is explained).
    pub capacity_tracking: bool,
    /// When this process began provisioning (Unix seconds).
    pub started: i64,
    /// The PV named for the claim and bound to its UID exists (one we just saved counts).
    pub pv_exists: bool,
    /// What this process remembers of the claim.
    pub record: RecordFacts,
    /// A held clone source was seen to this sync already ([`Step::ProtectSource`] ran).
    pub source_checked: bool,
}

/// Distributed provisioning: this instance's node.
#[derive(Debug, Clone, Copy)]
pub struct NodeFacts<'a> {
    /// The node's name.
    pub name: &'a str,
    /// `--node-deployment-immediate-binding`: instances take unclaimed Immediate claims.
    pub immediate_binding: bool,
}

/// What the claim's record says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordFacts {
    /// What this process saw of the claim's CreateVolume calls (`None`: no record).
    pub volume: Option<VolumeState>,
    /// A PV of a created volume waits to be saved again.
    pub unsaved_pv: bool,
    /// A deleting clone source's pending clones were reported: it is not settled yet.
    pub clone_hold: bool,
    /// Our write-ahead entry for the claim is in the record (`crate::record`): it holds the
    /// claim as our finalizer does, so a deleted claim is cleaned up from it.
    pub recorded: bool,
}

/// What the claim controller does next: one variant per action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// A created volume's PV did not save: save it first, whatever else changed.
    SaveUnsavedPv,
    /// A deleting clone source: let it go once no pending clone names it (then decide again).
    ProtectSource,
    /// Distributed: this node's own leftover volume of a claim it gave back (or, when no node
    /// holds a deleted claim, a call this node remembers): clean it up, drop the finalizers.
    CleanUpLeft,
    /// Distributed: the claim is bound to its own PV here; drop this node's finalizer.
    DropNodeFinalizer,
    /// Distributed: a deleted claim no node holds; drop a finalizer an earlier version left.
    LetGo,
    /// A claim waits for a node: say so if nothing published can hold it.
    ExplainWait,
    /// Distributed: an unclaimed Immediate claim; take it for this node in our turn.
    TakeNode,
    /// The claim names a StorageClass the cache does not have: retry with backoff.
    ClassMissing,
    /// A PV owns the volume: drop our finalizer (background lane unless deleted).
    Release,
    /// Deleted with its PV: wait for pvc-protection to go, then release.
    WaitForProtection,
    /// Create the volume.
    Provision,
    /// Deleted (or bound to another PV) while a volume may exist without a PV: find it,
    /// delete it, then drop the finalizer.
    CleanUp,
    /// Settled (bound, nothing of ours pending): forget the claim's record.
    Forget,
    /// Nothing to do.
    Nothing,
}

/// The next step for a claim.
pub fn next_step(f: &ClaimFacts<'_>) -> Step {
    let claim = f.claim;
    let ours = is_ours(claim, f.driver);
    let deleting = claim.metadata.deletion_timestamp.is_some();
    let bound = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .is_some_and(|v| !v.is_empty());
    // A call of this process may have left a volume that no PV owns.
    let recorded_may_exist = f.record.volume.as_ref().is_some_and(|v| !may_release(v));
    if ours && !deleting && f.record.unsaved_pv {
        return Step::SaveUnsavedPv;
    }
    if !f.source_checked
        && f.can_clone
        && deleting
        && holds(&claim.metadata, CLONE_SOURCE_FINALIZER)
        && guards_source(claim, f.driver)
    {
        return Step::ProtectSource;
    }
    if ours && let Some(node) = &f.node {
        let here = annotation(claim, ANN_SELECTED_NODE) == Some(node.name);
        // This node's entry in its own record holds the claim both ways: as the creating-volume
        // finalizer while the claim is this node's, and as this node's finalizer once it was
        // given back.
        let held = holds(&claim.metadata, &node_finalizer(node.name)) || f.record.recorded;
        let creating = has_finalizer(claim) || f.record.recorded;
        match leftover(held, here, creating, deleting, bound, f.pv_exists) {
            Leftover::CleanUp => return Step::CleanUpLeft,
            Leftover::Drop => return Step::DropNodeFinalizer,
            Leftover::AsUsual | Leftover::Hold => {}
        }
        if let Some(class) = f.class {
            match node_owner(claim, class, node.name, node.immediate_binding) {
                NodeOwner::ThisNode => {}
                NodeOwner::OtherNode => return Step::Nothing,
                // No node will ever take a deleted one: let it go, after cleaning up what a
                // call of this node may have made.
                NodeOwner::NotYet | NodeOwner::Unclaimed if deleting => {
                    return match recorded_may_exist {
                        true => Step::CleanUpLeft,
                        false => Step::LetGo,
                    };
                }
                NodeOwner::NotYet => return explain_wait(f),
                NodeOwner::Unclaimed if bound => return Step::Nothing,
                NodeOwner::Unclaimed => return Step::TakeNode,
            }
        }
    }
    let should = should_provision(claim, f.class, f.driver);
    let pv_exists = ours && f.pv_exists;
    let holding = has_finalizer(claim) || f.record.recorded;
    // After a restart the record's entry or the finalizer says
    // a call may have been made.
    let created = claim.metadata.creation_timestamp.as_ref();
    let earlier = earlier_attempt_possible(holding, created.map(|t| t.0.as_second()), f.started);
    let state = f.record.volume.clone();
    let may_exist = ours && !may_release(&state.unwrap_or_else(|| VolumeState::initial(earlier)));
    let decided = decide(claim, should, ours, holding, pv_exists);
    match bound_elsewhere(decided, claim, should, pv_exists, may_exist) {
        // Bound, and no finalizer or entry, PV to save or volume without a PV of ours is left.
        lifecycle::Step::Ignore
            if bound
                && !holding
                && !f.record.unsaved_pv
                && !recorded_may_exist
                && !f.record.clone_hold =>
        {
            Step::Forget
        }
        lifecycle::Step::Ignore | lifecycle::Step::WaitForNode => explain_wait(f),
        lifecycle::Step::ClassMissing => Step::ClassMissing,
        lifecycle::Step::ReleaseFinalizer => Step::Release,
        lifecycle::Step::WaitForProtection => Step::WaitForProtection,
        lifecycle::Step::Provision => Step::Provision,
        lifecycle::Step::CleanUp => Step::CleanUp,
    }
}

/// [`Step::ExplainWait`] for a claim of our driver's class that waits for a node: a
/// late-binding one when capacity is tracked centrally; any with `--node-deployment`, where
/// who takes it follows what every instance publishes.
fn explain_wait(f: &ClaimFacts<'_>) -> Step {
    let Some(class) = f.class.filter(|c| c.provisioner == f.driver) else {
        return Step::Nothing;
    };
    let late = class.volume_binding_mode.as_deref() == Some(WAIT_FOR_FIRST_CONSUMER);
    if waits_for_node(f.claim) && (f.node.is_some() || (f.capacity_tracking && late)) {
        Step::ExplainWait
    } else {
        Step::Nothing
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::{CREATING_VOLUME_FINALIZER, PVC_PROTECTION_FINALIZER};
    use crate::testutil::{DRIVER, annotate, class, spec_mut};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use std::collections::HashSet;

    type Claim = PersistentVolumeClaim;

    const STARTED: i64 = 1_000_000;

    fn claim() -> Claim {
        let mut c = crate::testutil::claim();
        // Created long before this process started.
        c.metadata.creation_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        c
    }
    fn finalizers(mut c: Claim, names: &[&str]) -> Claim {
        c.metadata.finalizers = Some(names.iter().map(|n| n.to_string()).collect());
        c
    }
    fn deleted(mut c: Claim) -> Claim {
        c.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        c
    }
    fn bound_to(mut c: Claim, pv: &str) -> Claim {
        spec_mut(&mut c).volume_name = Some(pv.into());
        c.status = Some(k8s_openapi::api::core::v1::PersistentVolumeClaimStatus {
            phase: Some("Bound".into()),
            ..Default::default()
        });
        c
    }
    fn on(c: Claim, node: &str) -> Claim {
        annotate(c, ANN_SELECTED_NODE, node)
    }
    fn late(mut c: StorageClass) -> StorageClass {
        c.volume_binding_mode = Some(WAIT_FOR_FIRST_CONSUMER.into());
        c
    }

    /// One row: what differs from a fresh claim of our driver, Immediate class, central mode.
    struct Row {
        what: &'static str,
        claim: Claim,
        class: Option<StorageClass>,
        node: bool,
        capacity: bool,
        pv: bool,
        record: RecordFacts,
        checked: bool,
        want: Step,
    }

    fn row(what: &'static str, claim: Claim, want: Step) -> Row {
        Row {
            what,
            claim,
            class: Some(class(DRIVER)),
            node: false,
            capacity: false,
            pv: false,
            record: RecordFacts::default(),
            checked: false,
            want,
        }
    }

    /// Held by a write-ahead entry; `state`: what this process saw of its calls.
    fn recorded(state: Option<VolumeState>) -> RecordFacts {
        RecordFacts {
            volume: state,
            recorded: true,
            ..RecordFacts::default()
        }
    }

    fn volume(state: VolumeState) -> RecordFacts {
        RecordFacts {
            volume: Some(state),
            ..RecordFacts::default()
        }
    }

    #[test]
    fn a_claims_lifecycle() {
        use Step::*;
        let creating = CREATING_VOLUME_FINALIZER;
        let protection = PVC_PROTECTION_FINALIZER;
        let node_fin = node_finalizer("n1");
        let rows = [
            // Central mode: provisioned, saved, released.
            row("a new claim", claim(), Provision),
            Row {
                record: RecordFacts {
                    unsaved_pv: true,
                    ..RecordFacts::default()
                },
                ..row("its PV did not save", claim(), SaveUnsavedPv)
            },
            Row {
                pv: true,
                ..row(
                    "PV saved, binder not done",
                    finalizers(claim(), &[creating]),
                    Nothing,
                )
            },
            Row {
                pv: true,
                ..row(
                    "bound to its PV",
                    bound_to(finalizers(claim(), &[creating]), "pv"),
                    Release,
                )
            },
            Row {
                pv: true,
                ..row("bound and released", bound_to(claim(), "pv"), Forget)
            },
            Row {
                class: None,
                ..row("its class is missing", claim(), ClassMissing)
            },
            row(
                "another driver's",
                crate::testutil::without_annotations(claim()),
                Nothing,
            ),
            // Late binding: explained while it waits, when capacity is tracked.
            Row {
                class: Some(late(class(DRIVER))),
                capacity: true,
                ..row("waits for a node", claim(), ExplainWait)
            },
            Row {
                class: Some(late(class(DRIVER))),
                ..row("waits, capacity untracked", claim(), Nothing)
            },
            Row {
                class: Some(late(class(DRIVER))),
                ..row("its node is chosen", on(claim(), "n1"), Provision)
            },
            // Deleted.
            Row {
                pv: true,
                ..row(
                    "deleted, PV owns the volume",
                    deleted(finalizers(claim(), &[protection, creating])),
                    WaitForProtection,
                )
            },
            Row {
                pv: true,
                ..row(
                    "deleted, pvc-protection gone",
                    deleted(finalizers(claim(), &[creating])),
                    Release,
                )
            },
            row(
                "deleted before its PV",
                deleted(finalizers(claim(), &[creating])),
                CleanUp,
            ),
            row("deleted, never attempted", deleted(claim()), Nothing),
            Row {
                record: volume(VolumeState::MayExist),
                ..row(
                    "bound to a PV made by hand while a call may have made a volume",
                    bound_to(claim(), "by-hand"),
                    CleanUp,
                )
            },
            row(
                "the same after a restart (the finalizer says a call may have been made)",
                bound_to(finalizers(claim(), &[creating]), "by-hand"),
                CleanUp,
            ),
            Row {
                record: volume(VolumeState::None),
                ..row(
                    "bound to a PV made by hand, nothing made",
                    bound_to(finalizers(claim(), &[creating]), "by-hand"),
                    Release,
                )
            },
            // Held by a write-ahead entry instead of the finalizer: the same steps.
            Row {
                record: recorded(None),
                ..row("recorded, not yet provisioned", claim(), Provision)
            },
            Row {
                record: recorded(None),
                ..row("recorded, deleted before its PV", deleted(claim()), CleanUp)
            },
            Row {
                record: recorded(Some(VolumeState::None)),
                ..row(
                    "recorded, deleted, nothing made (the clean-up lets it go without a call)",
                    deleted(claim()),
                    CleanUp,
                )
            },
            Row {
                pv: true,
                record: recorded(None),
                ..row(
                    "recorded after a restart, bound to its PV",
                    bound_to(claim(), "pv"),
                    Release,
                )
            },
            Row {
                record: recorded(None),
                ..row(
                    "recorded after a restart, bound to a PV made by hand",
                    bound_to(claim(), "by-hand"),
                    CleanUp,
                )
            },
            // A clone source being deleted.
            Row {
                pv: true,
                ..row(
                    "a deleting clone source",
                    deleted(bound_to(
                        finalizers(claim(), &[CLONE_SOURCE_FINALIZER]),
                        "pv",
                    )),
                    ProtectSource,
                )
            },
            Row {
                pv: true,
                checked: true,
                ..row(
                    "the same, once checked",
                    deleted(bound_to(
                        finalizers(claim(), &[CLONE_SOURCE_FINALIZER]),
                        "pv",
                    )),
                    Forget,
                )
            },
            Row {
                pv: true,
                record: RecordFacts {
                    clone_hold: true,
                    ..RecordFacts::default()
                },
                ..row(
                    "a source holding for clones stays remembered",
                    bound_to(claim(), "pv"),
                    Nothing,
                )
            },
            // Distributed provisioning, this instance on n1.
            Row {
                node: true,
                ..row("unclaimed Immediate claim", claim(), TakeNode)
            },
            Row {
                node: true,
                ..row("taken by this node", on(claim(), "n1"), Provision)
            },
            Row {
                node: true,
                ..row("taken by another", on(claim(), "n2"), Nothing)
            },
            Row {
                node: true,
                ..row("unclaimed but bound", bound_to(claim(), "pv"), Nothing)
            },
            Row {
                node: true,
                class: Some(late(class(DRIVER))),
                ..row("late binding, no node yet", claim(), ExplainWait)
            },
            Row {
                node: true,
                ..row(
                    "deleted, no node holds it",
                    deleted(finalizers(claim(), &[creating])),
                    LetGo,
                )
            },
            Row {
                node: true,
                record: volume(VolumeState::MayExist),
                ..row(
                    "deleted, no node holds it, a call here may have made a volume",
                    deleted(claim()),
                    CleanUpLeft,
                )
            },
            Row {
                node: true,
                ..row(
                    "given back by this node, then deleted",
                    deleted(finalizers(claim(), &[&node_fin])),
                    CleanUpLeft,
                )
            },
            Row {
                node: true,
                ..row(
                    "given back by this node, now provisioned elsewhere",
                    on(finalizers(claim(), &[&node_fin, creating]), "n2"),
                    Nothing,
                )
            },
            Row {
                node: true,
                pv: true,
                ..row(
                    "given back, back here and bound to its PV",
                    on(bound_to(finalizers(claim(), &[&node_fin]), "pv"), "n1"),
                    DropNodeFinalizer,
                )
            },
        ];
        let mut seen = HashSet::new();
        for r in &rows {
            let facts = ClaimFacts {
                claim: &r.claim,
                class: r.class.as_ref(),
                driver: DRIVER,
                can_clone: true,
                node: r.node.then_some(NodeFacts {
                    name: "n1",
                    immediate_binding: true,
                }),
                capacity_tracking: r.capacity,
                started: STARTED,
                pv_exists: r.pv,
                record: r.record.clone(),
                source_checked: r.checked,
            };
            assert_eq!(next_step(&facts), r.want, "{}", r.what);
            seen.insert(r.want);
        }
        for step in EVERY_STEP {
            assert!(seen.contains(&step), "no row shows {step:?}");
        }
    }

    const EVERY_STEP: [Step; 14] = {
        use Step::*;
        [
            SaveUnsavedPv,
            ProtectSource,
            CleanUpLeft,
            DropNodeFinalizer,
            LetGo,
            ExplainWait,
            TakeNode,
            ClassMissing,
            Release,
            WaitForProtection,
            Provision,
            CleanUp,
            Forget,
            Nothing,
        ]
    };

    /// Fails to compile when a step is added without a place in [`EVERY_STEP`].
    #[test]
    fn every_step_is_listed() {
        for step in EVERY_STEP {
            match step {
                Step::SaveUnsavedPv
                | Step::ProtectSource
                | Step::CleanUpLeft
                | Step::DropNodeFinalizer
                | Step::LetGo
                | Step::ExplainWait
                | Step::TakeNode
                | Step::ClassMissing
                | Step::Release
                | Step::WaitForProtection
                | Step::Provision
                | Step::CleanUp
                | Step::Forget
                | Step::Nothing => {}
            }
        }
        assert_eq!(
            EVERY_STEP.iter().collect::<HashSet<_>>().len(),
            EVERY_STEP.len()
        );
    }
}

#[cfg(test)]
mod proptests;
