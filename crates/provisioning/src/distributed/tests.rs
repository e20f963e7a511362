use super::*;
use serde_json::json;

fn claim(selected: Option<&str>) -> PersistentVolumeClaim {
    let mut annotations = serde_json::Map::new();
    if let Some(n) = selected {
        annotations.insert(names::ANN_SELECTED_NODE.into(), json!(n));
    }
    serde_json::from_value(json!({"metadata": {"name": "c", "annotations": annotations}})).unwrap()
}

fn class(binding: Option<&str>) -> StorageClass {
    let mut sc = json!({"metadata": {"name": "sc"}, "provisioner": "d"});
    if let Some(b) = binding {
        sc["volumeBindingMode"] = json!(b);
    }
    serde_json::from_value(sc).unwrap()
}

#[test]
fn owner_follows_selected_node_then_binding_mode() {
    let wffc = class(Some(names::WAIT_FOR_FIRST_CONSUMER));
    let immediate = class(Some("Immediate"));
    let unset = class(None);
    let cases = [
        (Some("n1"), &wffc, true, NodeOwner::ThisNode),
        (Some("n1"), &immediate, false, NodeOwner::ThisNode),
        (Some("n2"), &immediate, true, NodeOwner::OtherNode),
        (Some("n2"), &wffc, true, NodeOwner::OtherNode),
        (Some(""), &immediate, true, NodeOwner::Unclaimed),
        (None, &immediate, true, NodeOwner::Unclaimed),
        (None, &unset, true, NodeOwner::Unclaimed),
        (None, &immediate, false, NodeOwner::NotYet),
        (None, &wffc, true, NodeOwner::NotYet),
    ];
    for (selected, sc, immediate_binding, want) in cases {
        assert_eq!(
            node_owner(&claim(selected), sc, "n1", immediate_binding),
            want,
            "{selected:?} {:?} {immediate_binding}",
            sc.volume_binding_mode
        );
    }
}

#[test]
fn the_alpha_selected_node_annotation_does_not_count() {
    let c: PersistentVolumeClaim = serde_json::from_value(json!({"metadata": {"name": "c",
        "annotations": {names::ANN_ALPHA_SELECTED_NODE: "n2"}}}))
    .unwrap();
    assert_eq!(
        node_owner(&c, &class(None), "n1", true),
        NodeOwner::Unclaimed
    );
}

fn affinity(terms: serde_json::Value) -> VolumeNodeAffinity {
    serde_json::from_value(json!({"required": {"nodeSelectorTerms": terms}})).unwrap()
}

fn topo(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn accessibility_matches_one_required_term() {
    let node1 = topo(&[("zone", "a"), ("node", "n1")]);
    let empty = BTreeMap::new();
    let in_n1 =
        json!([{"matchExpressions": [{"key": "node", "operator": "In", "values": ["n1"]}]}]);
    let in_n2 =
        json!([{"matchExpressions": [{"key": "node", "operator": "In", "values": ["n2"]}]}]);
    let either = json!([
        {"matchExpressions": [{"key": "node", "operator": "In", "values": ["n2"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]},
                              {"key": "node", "operator": "In", "values": ["n1", "n3"]}]}
    ]);
    let both_needed = json!([{"matchExpressions": [
        {"key": "zone", "operator": "In", "values": ["b"]},
        {"key": "node", "operator": "In", "values": ["n1"]}]}]);
    let other_ops = json!([{"matchExpressions": [
        {"key": "zone", "operator": "Exists"},
        {"key": "rack", "operator": "DoesNotExist"},
        {"key": "node", "operator": "NotIn", "values": ["n2"]}]}]);
    let cases = [
        (Some(affinity(in_n1)), Some(&node1), true),
        (Some(affinity(in_n2.clone())), Some(&node1), false),
        (Some(affinity(either)), Some(&node1), true),
        (Some(affinity(both_needed)), Some(&node1), false),
        (Some(affinity(other_ops.clone())), Some(&node1), true),
        (None, Some(&node1), true),
        // A driver that reports no topology: every volume is reachable, as upstream.
        (Some(affinity(in_n2.clone())), None, true),
        // One that reports an empty one: a node without labels, as upstream.
        (Some(affinity(in_n2)), Some(&empty), false),
        (Some(affinity(other_ops)), Some(&empty), false),
        (None, Some(&empty), true),
        // An empty term selects no node.
        (Some(affinity(json!([{}]))), Some(&node1), false),
        // Fields: the node's name only, as the scheduler (this node is "n1").
        (
            Some(affinity(
                json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]),
            )),
            Some(&node1),
            true,
        ),
        (
            Some(affinity(
                json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]),
            )),
            Some(&node1),
            false,
        ),
        (
            Some(affinity(
                json!([{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n2"]}]}]),
            )),
            Some(&node1),
            true,
        ),
        (
            Some(affinity(
                json!([{"matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["n1"]}]}]),
            )),
            Some(&node1),
            false,
        ),
        (
            Some(affinity(
                json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}],
                              "matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]),
            )),
            Some(&node1),
            false,
        ),
    ];
    for (i, (a, t, want)) in cases.into_iter().enumerate() {
        assert_eq!(volume_is_accessible(a.as_ref(), t, "n1"), want, "case {i}");
    }
    let numeric = affinity(json!([{"matchExpressions": [
        {"key": "gen", "operator": "Gt", "values": ["3"]}]}]));
    assert!(volume_is_accessible(
        Some(&numeric),
        Some(&topo(&[("gen", "4")])),
        "n1"
    ));
    assert!(!volume_is_accessible(
        Some(&numeric),
        Some(&topo(&[("gen", "3")])),
        "n1"
    ));
    assert!(!volume_is_accessible(
        Some(&numeric),
        Some(&topo(&[("gen", "x")])),
        "n1"
    ));
}

const GI: i64 = 1 << 30;
const STEP: Duration = Duration::from_secs(5);
const MAX: Duration = Duration::from_secs(60);

fn published<'a>(instance: &'a str, class: &'a str, capacity: i64) -> Published<'a> {
    Published {
        instance,
        class,
        capacity: Some(capacity),
        maximum_volume_size: None,
    }
}

#[test]
fn exactly_one_instance_goes_first_and_the_others_wait_by_rank() {
    let all = [
        published("ep-n1", "fast", 100 * GI),
        published("ep-n2", "fast", 100 * GI),
        published("ep-n3", "fast", 100 * GI),
    ];
    for uid in ["u1", "u2", "u3", "u4", "u5", "u6"] {
        let mut turns: Vec<Turn> = ["ep-n1", "ep-n2", "ep-n3"]
            .iter()
            .map(|own| claim_turn(uid, own, "fast", GI, &all, STEP, MAX))
            .collect();
        turns.sort_by_key(|t| match t {
            Turn::Now => Duration::ZERO,
            Turn::After(d) => *d,
            other => panic!("{other:?}"),
        });
        assert_eq!(
            turns,
            [Turn::Now, Turn::After(STEP), Turn::After(STEP * 2)],
            "{uid}"
        );
    }
}

#[test]
fn claims_spread_over_instances() {
    let all = [
        published("ep-n1", "fast", 100 * GI),
        published("ep-n2", "fast", 100 * GI),
        published("ep-n3", "fast", 100 * GI),
    ];
    let firsts: BTreeSet<&str> = (0..30)
        .map(|i| format!("uid-{i}"))
        .filter_map(|uid| {
            ["ep-n1", "ep-n2", "ep-n3"]
                .into_iter()
                .find(|own| claim_turn(&uid, own, "fast", GI, &all, STEP, MAX) == Turn::Now)
        })
        .collect();
    assert_eq!(firsts.len(), 3, "{firsts:?}");
}

/// Real instance names differ only in their last characters; every instance must still be
/// first for about its share of the claims (one taking most of them serialises a burst on
/// one node's API budget).
#[test]
fn names_differing_at_the_end_share_the_claims_evenly() {
    let names: Vec<String> = (1..=20)
        .map(|k| format!("external-provisioner-node-{k}"))
        .collect();
    let all: Vec<Published<'_>> = names
        .iter()
        .map(|n| published(n, "fast", 100 * GI))
        .collect();
    let mut firsts: BTreeMap<&str, usize> = BTreeMap::new();
    let claims = 2000_u64;
    for i in 0..claims {
        let uid = format!(
            "{:08x}-4e2b-4c1d-9a7b-{:012x}",
            i.wrapping_mul(2_654_435_761) as u32,
            i * 7919
        );
        let first = names
            .iter()
            .find(|own| claim_turn(&uid, own, "fast", GI, &all, STEP, MAX) == Turn::Now)
            .expect("one instance goes first");
        *firsts.entry(first.as_str()).or_default() += 1;
    }
    let share = claims as usize / names.len();
    assert_eq!(firsts.len(), names.len(), "{firsts:?}");
    for (name, n) in &firsts {
        assert!(
            (share * 6 / 10..=share * 14 / 10).contains(n),
            "{name} is first for {n} of {claims} claims (fair share {share}): {firsts:?}"
        );
    }
}

#[test]
fn only_instances_with_room_are_candidates() {
    let all = [
        published("ep-n1", "fast", 10 * GI),
        published("ep-n2", "fast", 100 * GI),
        published("ep-n3", "fast", 10 * GI),
        published("ep-n1", "slow", 500 * GI),
    ];
    let want = 50 * GI;
    assert_eq!(
        claim_turn("u", "ep-n2", "fast", want, &all, STEP, MAX),
        Turn::Now
    );
    for own in ["ep-n1", "ep-n3"] {
        assert_eq!(
            claim_turn("u", own, "fast", want, &all, STEP, MAX),
            Turn::NoRoom { report: false }
        );
    }
}

#[test]
fn a_too_small_maximum_volume_size_means_no_room() {
    let mut small = published("ep-n1", "fast", 100 * GI);
    small.maximum_volume_size = Some(GI);
    let all = [small, published("ep-n2", "fast", 100 * GI)];
    assert_eq!(
        claim_turn("u", "ep-n1", "fast", 2 * GI, &all, STEP, MAX),
        Turn::NoRoom { report: false }
    );
    assert_eq!(
        claim_turn("u", "ep-n2", "fast", 2 * GI, &all, STEP, MAX),
        Turn::Now
    );
}

#[test]
fn when_nobody_has_room_exactly_one_instance_reports_it() {
    let all = [
        published("ep-n1", "fast", GI),
        published("ep-n2", "fast", GI),
        published("ep-n3", "fast", GI),
    ];
    for uid in ["a", "b", "c", "d"] {
        let reports = ["ep-n1", "ep-n2", "ep-n3"]
            .iter()
            .filter(|own| {
                claim_turn(uid, own, "fast", 5 * GI, &all, STEP, MAX)
                    == Turn::NoRoom { report: true }
            })
            .count();
        assert_eq!(reports, 1, "{uid}");
    }
}

#[test]
fn without_objects_for_the_class_every_publishing_instance_is_ranked() {
    // Capacity is published for late-binding classes only; the Immediate class has none.
    let all = [
        published("ep-n1", "wffc", GI),
        published("ep-n2", "wffc", GI),
    ];
    let turns: Vec<Turn> = ["ep-n1", "ep-n2", "ep-n3"]
        .iter()
        .map(|own| claim_turn("u", own, "immediate", 50 * GI, &all, STEP, MAX))
        .collect();
    assert_eq!(
        turns.iter().filter(|t| **t == Turn::Now).count(),
        1,
        "{turns:?}"
    );
    assert!(
        turns
            .iter()
            .all(|t| matches!(t, Turn::Now | Turn::After(_)))
    );
    assert_eq!(
        claim_turn("u", "ep-n1", "immediate", GI, &[], STEP, MAX),
        Turn::Unranked
    );
}

#[test]
fn the_wait_is_capped() {
    let names: Vec<String> = (0..40).map(|i| format!("ep-n{i}")).collect();
    let all: Vec<Published<'_>> = names.iter().map(|n| published(n, "c", GI)).collect();
    let longest = names
        .iter()
        .map(|own| match claim_turn("u", own, "c", 1, &all, STEP, MAX) {
            Turn::Now => Duration::ZERO,
            Turn::After(d) => d,
            other => panic!("{other:?}"),
        })
        .max()
        .unwrap();
    assert_eq!(longest, MAX);
}

fn plan(requisite: &[&str]) -> ProvisionPlan {
    let topology = |node: &&str| Topology {
        segments: [("node".to_string(), node.to_string())]
            .into_iter()
            .collect(),
    };
    ProvisionPlan {
        volume_name: "pvc-1".into(),
        selected_node: Some("n1".into()),
        fs_type: String::new(),
        requested_bytes: GI,
        capabilities: vec![csi::v1::VolumeCapability::default()],
        parameters: [("kind".to_string(), "fast".to_string())]
            .into_iter()
            .collect(),
        accessibility_requirements: (!requisite.is_empty()).then(|| csi::v1::TopologyRequirement {
            requisite: requisite.iter().map(topology).collect(),
            preferred: vec![],
        }),
        secrets: Default::default(),
        volume_attributes_class: None,
        migrated_from: None,
        data_source: None,
    }
}

#[test]
fn the_capacity_check_asks_once_per_requisite_term() {
    let per_term = capacity_requests(&plan(&["n1", "n2"]));
    assert_eq!(per_term.len(), 2);
    let nodes: Vec<&str> = per_term
        .iter()
        .map(|r| r.accessible_topology.as_ref().unwrap().segments["node"].as_str())
        .collect();
    assert_eq!(nodes, ["n1", "n2"]);
    assert!(per_term.iter().all(|r| r.parameters["kind"] == "fast"));
    assert!(per_term.iter().all(|r| r.volume_capabilities.len() == 1));
    let plain = capacity_requests(&plan(&[]));
    assert_eq!(plain.len(), 1);
    assert!(plain[0].accessible_topology.is_none());
}

#[test]
fn exactly_one_instance_reports_a_claim_whatever_it_asks_for() {
    let all = [
        published("ep-n1", "wffc", GI),
        published("ep-n2", "wffc", GI),
        published("ep-n3", "other", GI),
    ];
    for uid in ["a", "b", "c", "d", "e"] {
        let reporters: Vec<&str> = ["ep-n1", "ep-n2"]
            .into_iter()
            .filter(|own| reports(uid, own, "wffc", &all))
            .collect();
        assert_eq!(reporters.len(), 1, "{uid}: {reporters:?}");
    }
}

#[test]
fn an_instance_keeps_its_own_and_waiting_claims_only() {
    let protected = |mut c: PersistentVolumeClaim| {
        c.metadata.finalizers = Some(vec![names::CLONE_SOURCE_FINALIZER.into()]);
        c
    };
    let provisioned_by = |mut c: PersistentVolumeClaim, driver: &str| {
        c.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(names::ANN_STORAGE_PROVISIONER.into(), driver.into());
        c
    };
    let bound = |selected: Option<&str>| {
        let mut c = claim(selected);
        c.spec = Some(k8s_openapi::api::core::v1::PersistentVolumeClaimSpec {
            volume_name: Some("pv-1".into()),
            ..Default::default()
        });
        c
    };
    let held_by = |mut c: PersistentVolumeClaim, node: &str| {
        c.metadata
            .finalizers
            .get_or_insert_with(Vec::new)
            .push(node_finalizer(node));
        c
    };
    let cases = [
        (
            held_by(claim(Some("n2")), "n1"),
            true,
            "another node's, but a volume of ours may exist",
        ),
        (
            held_by(bound(Some("n2")), "n1"),
            true,
            "bound on another node while a volume of ours may exist",
        ),
        (
            held_by(bound(Some("n2")), "n2"),
            false,
            "another node's own finalizer",
        ),
        (claim(None), true, "waiting for a node"),
        (claim(Some("")), true, "empty selected-node is none"),
        (claim(Some("n1")), true, "ours"),
        (claim(Some("n2")), false, "another node's"),
        (
            bound(Some("n1")),
            true,
            "ours, bound (its finalizer may still go)",
        ),
        (bound(Some("n2")), false, "another node's, bound"),
        (
            bound(None),
            false,
            "bound without a node: nothing to do here",
        ),
        (
            protected(bound(None)),
            true,
            "a clone source without a node: someone must release it",
        ),
        (
            protected(bound(Some("n2"))),
            true,
            "another node's clone source: any node may have to release it (a lost node)",
        ),
        (
            provisioned_by(protected(bound(Some("n2"))), "d"),
            true,
            "our driver's clone source on another node",
        ),
        (
            provisioned_by(protected(bound(Some("n2"))), "other"),
            false,
            "another driver's clone source: that driver releases it",
        ),
        (
            provisioned_by(protected(bound(Some("n1"))), "other"),
            true,
            "another driver's claim on our node is still kept as one of ours",
        ),
    ];
    for (c, want, what) in cases {
        assert_eq!(concerns_node(&c, "n1", "d"), want, "{what}");
    }
}

#[test]
fn a_node_that_failed_a_claim_steps_behind_every_candidate() {
    let (step, max) = (Duration::from_secs(5), Duration::from_secs(60));
    let after = |s| Turn::After(Duration::from_secs(s));
    let no_room = Turn::NoRoom { report: true };
    let cases = [
        (Turn::Now, 0, Turn::Now),
        (after(10), 0, after(10)),
        (Turn::Unranked, 0, Turn::Unranked),
        // The first choice that failed once now waits longer than the last candidate (60 s).
        (Turn::Now, 1, after(65)),
        (after(10), 2, after(70)),
        (Turn::Unranked, 1, after(65)),
        (no_room.clone(), 3, no_room),
    ];
    for (turn, failures, want) in cases {
        assert_eq!(
            after_own_failures(turn.clone(), failures, step, max),
            want,
            "{turn:?} after {failures}"
        );
    }
}

#[test]
fn only_a_held_sources_own_node_speaks_for_it() {
    let cases = [
        (None, None, true),
        (Some("n2"), None, true),
        (Some("n1"), Some("n1"), true),
        (Some("n2"), Some("n1"), false),
        // No node selected (or an empty value): every instance may be the one left.
        (None, Some("n1"), true),
        (Some(""), Some("n1"), true),
    ];
    for (selected, node, want) in cases {
        assert_eq!(
            speaks_for_clone_source(&claim(selected), node),
            want,
            "{selected:?} on {node:?}"
        );
    }
}

#[test]
fn a_node_finalizer_names_its_node_within_a_finalizers_limits() {
    assert_eq!(
        node_finalizer("node-1"),
        "external-provisioner.volume.kubernetes.io/creating-volume-on-node-1"
    );
    let long = "ip-10-0-1-23.eu-west-1.compute.internal.example.com";
    let a = node_finalizer(long);
    let b = node_finalizer(&format!("{long}x"));
    for f in [&a, &b] {
        let (domain, name) = f.split_once('/').unwrap();
        assert_eq!(domain, "external-provisioner.volume.kubernetes.io");
        assert!(name.len() <= 63, "{name}");
        assert!(
            name.starts_with("creating-volume-on-ip-10-0-1-23"),
            "{name}"
        );
        assert!(
            name.chars().last().unwrap().is_ascii_alphanumeric(),
            "{name}"
        );
    }
    assert_ne!(a, b, "a shared prefix still gives distinct finalizers");
    let longest_kept = "n".repeat(63 - "creating-volume-on-".len());
    assert!(node_finalizer(&longest_kept).ends_with(&longest_kept));
}

#[test]
fn a_node_holding_a_claim_it_gave_back_cleans_up_once_the_claim_settles() {
    use Leftover::*;
    // (holds, here, creating, deleted, bound, own_pv) → what the node does
    let cases = [
        (
            (false, false, true, true, false, false),
            AsUsual,
            "not held",
        ),
        (
            (false, true, false, false, true, true),
            AsUsual,
            "not held, ours",
        ),
        (
            (true, false, true, false, false, false),
            Hold,
            "waiting for a node or provisioned elsewhere",
        ),
        (
            (true, false, false, false, false, false),
            Hold,
            "elsewhere, the creating-volume finalizer gone",
        ),
        ((true, false, true, true, false, false), CleanUp, "deleted"),
        (
            (true, false, false, false, true, false),
            CleanUp,
            "bound to another node's PV",
        ),
        (
            (true, false, false, true, true, false),
            CleanUp,
            "bound elsewhere, then deleted",
        ),
        (
            (true, true, true, false, false, false),
            AsUsual,
            "back on this node: provisioned here",
        ),
        (
            (true, true, true, true, false, false),
            AsUsual,
            "back here and deleted: the usual clean-up drops both",
        ),
        (
            (true, true, true, false, true, true),
            AsUsual,
            "back here and bound: the release drops both",
        ),
        (
            (true, true, false, false, true, true),
            Drop,
            "bound to its PV here, creating-volume gone: that PV holds the volume",
        ),
        (
            (true, true, false, false, true, false),
            CleanUp,
            "here but bound to a PV not ours",
        ),
        (
            (true, true, false, true, false, false),
            CleanUp,
            "here, deleted, no creating-volume finalizer left",
        ),
        (
            (true, true, false, false, false, false),
            AsUsual,
            "here, waiting: provisioning adds the creating-volume finalizer",
        ),
    ];
    for ((holds, here, creating, deleted, bound, own_pv), want, what) in cases {
        assert_eq!(
            leftover(holds, here, creating, deleted, bound, own_pv),
            want,
            "{what}"
        );
    }
}
