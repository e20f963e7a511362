//! Properties of [`next_step`] over every combination the table test cannot list: whatever
//! the claim, class, record and mode, no step may lose track of a volume that may exist or
//! provision a claim that is going away.

use proptest::prelude::*;

use super::*;
use crate::names::{CLONE_SOURCE_FINALIZER, CREATING_VOLUME_FINALIZER, PVC_PROTECTION_FINALIZER};
use crate::testutil::{DRIVER, annotate, class, spec_mut};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The facts as plain choices, so proptest can shrink them.
#[derive(Debug, Clone)]
struct Choice {
    ours: bool,
    deleting: bool,
    creating_finalizer: bool,
    node_finalizer: bool,
    protection: bool,
    clone_source: bool,
    bound: bool,
    selected: Option<&'static str>,
    class: Option<(bool, bool)>, // (our driver, late binding)
    node: Option<bool>,          // Some(immediate binding) with --node-deployment
    capacity: bool,
    can_clone: bool,
    pv_exists: bool,
    volume: Option<VolumeState>,
    unsaved_pv: bool,
    clone_hold: bool,
    source_checked: bool,
    created_after_start: bool,
    recorded: bool,
}

fn state() -> impl Strategy<Value = VolumeState> {
    prop_oneof![
        Just(VolumeState::Unknown),
        Just(VolumeState::None),
        Just(VolumeState::MayExist),
        Just(VolumeState::Created("vol-1".into())),
        Just(VolumeState::Collision),
    ]
}

fn choice() -> impl Strategy<Value = Choice> {
    let flags = proptest::collection::vec(any::<bool>(), 15);
    let selected = proptest::option::of(prop_oneof![Just("n1"), Just("n2")]);
    let class = proptest::option::of((any::<bool>(), any::<bool>()));
    let node = proptest::option::of(any::<bool>());
    (flags, selected, class, node, proptest::option::of(state())).prop_map(
        |(b, selected, class, node, volume)| Choice {
            ours: b[0],
            deleting: b[1],
            creating_finalizer: b[2],
            node_finalizer: b[3],
            protection: b[4],
            clone_source: b[5],
            bound: b[6],
            selected,
            class,
            node,
            capacity: b[7],
            can_clone: b[8],
            pv_exists: b[9],
            volume,
            unsaved_pv: b[10],
            clone_hold: b[11],
            source_checked: b[12],
            created_after_start: b[13],
            recorded: b[14],
        },
    )
}

const STARTED: i64 = 1_000_000;

fn build(c: &Choice) -> (PersistentVolumeClaim, Option<StorageClass>) {
    let mut claim = crate::testutil::claim();
    let created = if c.created_after_start {
        STARTED + 3_600
    } else {
        0
    };
    claim.metadata.creation_timestamp = Some(Time(
        k8s_openapi::jiff::Timestamp::from_second(created).unwrap_or_default(),
    ));
    if !c.ours {
        claim = annotate(claim, crate::names::ANN_STORAGE_PROVISIONER, "other.csi");
        claim = annotate(
            claim,
            crate::names::ANN_BETA_STORAGE_PROVISIONER,
            "other.csi",
        );
    }
    if let Some(node) = c.selected {
        claim = annotate(claim, ANN_SELECTED_NODE, node);
    }
    let mut finalizers = Vec::new();
    if c.creating_finalizer {
        finalizers.push(CREATING_VOLUME_FINALIZER.to_string());
    }
    if c.node_finalizer {
        finalizers.push(node_finalizer("n1"));
    }
    if c.protection {
        finalizers.push(PVC_PROTECTION_FINALIZER.to_string());
    }
    if c.clone_source {
        finalizers.push(CLONE_SOURCE_FINALIZER.to_string());
    }
    claim.metadata.finalizers = Some(finalizers);
    if c.deleting {
        claim.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    }
    if c.bound {
        spec_mut(&mut claim).volume_name = Some("pvc-0f1c".into());
    }
    let class = c.class.map(|(our_driver, late)| {
        let mut k = class(if our_driver { DRIVER } else { "other.csi" });
        if late {
            k.volume_binding_mode = Some(WAIT_FOR_FIRST_CONSUMER.into());
        }
        k
    });
    (claim, class)
}

fn step_of(c: &Choice) -> (Step, PersistentVolumeClaim) {
    let (claim, class) = build(c);
    let node = c.node.map(|immediate_binding| NodeFacts {
        name: "n1",
        immediate_binding,
    });
    let facts = ClaimFacts {
        claim: &claim,
        class: class.as_ref(),
        driver: DRIVER,
        can_clone: c.can_clone,
        node,
        capacity_tracking: c.capacity,
        started: STARTED,
        pv_exists: c.pv_exists,
        record: RecordFacts {
            volume: c.volume.clone(),
            unsaved_pv: c.unsaved_pv,
            clone_hold: c.clone_hold,
            recorded: c.recorded,
        },
        source_checked: c.source_checked,
    };
    (next_step(&facts), claim)
}

/// A call of this process may have left a volume that no PV owns.
fn recorded_may_exist(c: &Choice) -> bool {
    c.volume.as_ref().is_some_and(|v| !may_release(v))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// A claim going away is never provisioned or taken for a node.
    #[test]
    fn a_deleted_claim_is_never_provisioned(c in choice()) {
        let (step, _) = step_of(&c);
        if c.deleting {
            prop_assert!(!matches!(step, Step::Provision | Step::TakeNode), "{step:?} for {c:?}");
        }
    }

    /// A volume that may exist without a PV keeps its record: the claim is never forgotten,
    /// let go or released while this process remembers such a call.
    #[test]
    fn a_volume_that_may_exist_is_never_forgotten(c in choice()) {
        let (step, _) = step_of(&c);
        if recorded_may_exist(&c) && !c.pv_exists {
            prop_assert!(
                !matches!(step, Step::Forget | Step::LetGo | Step::Release),
                "{step:?} for {c:?}"
            );
        }
    }

    /// A created volume whose PV did not save is saved before anything else is decided.
    #[test]
    fn an_unsaved_pv_comes_first(c in choice()) {
        let (step, _) = step_of(&c);
        if c.ours && !c.deleting && c.unsaved_pv {
            prop_assert_eq!(step, Step::SaveUnsavedPv);
        }
    }

    /// Only a settled claim is forgotten: bound, without our finalizer, nothing pending.
    #[test]
    fn only_a_settled_claim_is_forgotten(c in choice()) {
        let (step, claim) = step_of(&c);
        if step == Step::Forget {
            prop_assert!(c.bound && !has_finalizer(&claim) && !c.recorded, "{c:?}");
            prop_assert!(!c.unsaved_pv && !c.clone_hold && !recorded_may_exist(&c), "{c:?}");
        }
    }

    /// Our write-ahead entry holds a claim exactly as our finalizers do: in central mode as the
    /// creating-volume finalizer; with `--node-deployment` (this instance on n1) as that one
    /// while the claim is this node's, and with this node's own finalizer too once it is not.
    #[test]
    fn an_entry_holds_as_the_finalizers_do(c in choice()) {
        let here = c.selected == Some("n1");
        let by_entry = Choice {
            recorded: true,
            creating_finalizer: false,
            node_finalizer: false,
            ..c.clone()
        };
        let by_finalizers = Choice {
            recorded: false,
            creating_finalizer: true,
            node_finalizer: c.node.is_some() && !here,
            ..c.clone()
        };
        prop_assert_eq!(step_of(&by_entry).0, step_of(&by_finalizers).0, "{:?}", c);
    }

    /// No volume is created for a claim whose PV exists, nor for a claim of another driver.
    #[test]
    fn no_second_volume(c in choice()) {
        let (step, _) = step_of(&c);
        if step == Step::Provision {
            prop_assert!(c.ours && !c.pv_exists && !c.bound, "{c:?}");
        }
    }
}
