//! Requirement tests, ported from upstream's topology_test.go scenarios.

use std::collections::BTreeMap;

use csi::v1::{Topology, TopologyRequirement};
use k8s_openapi::api::core::v1::{TopologySelectorLabelRequirement, TopologySelectorTerm};
use pretty_assertions::assert_eq;

use super::*;
use crate::testutil::{map, strings};

mod preferred;

const ZONE: &str = "com.example.csi/zone";
const RACK: &str = "com.example.csi/rack";
const DISK: &str = "com.example.csi/disk";
const REGION: &str = "com.example.csi/region";

pub(crate) fn term(pairs: &[(&str, &str)]) -> Term {
    Term::from_pairs(pairs.iter().copied())
}

/// allowedTopologies: selector terms of `(key, values)` expressions.
pub(crate) fn allowed(terms: &[&[(&str, &[&str])]]) -> Vec<TopologySelectorTerm> {
    terms
        .iter()
        .map(|expressions| TopologySelectorTerm {
            match_label_expressions: Some(
                expressions
                    .iter()
                    .map(|(key, values)| TopologySelectorLabelRequirement {
                        key: key.to_string(),
                        values: strings(values),
                    })
                    .collect(),
            ),
        })
        .collect()
}

fn terms_of(topologies: &[Topology]) -> Vec<Term> {
    topologies
        .iter()
        .map(|t| Term::from_pairs(t.segments.clone()))
        .collect()
}

/// A cluster like upstream's fixtures: node `i` has `labels[i]`; CSINode `i` (if present) has
/// `keys[i]` for our driver.
struct Cluster {
    labels: Vec<BTreeMap<String, String>>,
    keys: Vec<Vec<String>>,
    /// `node-i` for every index used.
    names: Vec<String>,
}

impl Cluster {
    fn new(labels: &[&[(&str, &str)]], keys: &[&[&str]]) -> Cluster {
        Cluster {
            labels: labels.iter().map(|l| map(l)).collect(),
            keys: keys.iter().map(|k| strings(k)).collect(),
            names: (0..labels.len().max(keys.len()))
                .map(|i| format!("node-{i}"))
                .collect(),
        }
    }

    /// (CSINode name, keys) and (Node name, labels), node `i` named `node-i`.
    #[allow(clippy::type_complexity)]
    fn facts(
        &self,
    ) -> (
        Vec<(&str, &[String])>,
        Vec<(&str, &BTreeMap<String, String>)>,
    ) {
        let names = self.names.iter().map(String::as_str);
        let keys = names
            .clone()
            .zip(self.keys.iter().map(Vec::as_slice))
            .collect();
        let labels = names.zip(&self.labels).collect();
        (keys, labels)
    }

    /// Requirements for claim `name`, with node 0 selected if `selected`.
    fn run(
        &self,
        name: &str,
        selected: bool,
        strict: bool,
        immediate: bool,
        allowed: &[TopologySelectorTerm],
    ) -> Result<Requirement, TopologyError> {
        let (keys, labels) = self.facts();
        let input = TopologyInput {
            claim_name: name,
            selected_node: selected.then_some("node-0"),
            selected_node_topology_keys: keys.first().map(|(_, k)| *k),
            selected_node_labels: labels.first().map(|(_, l)| *l),
            strict_topology: strict,
            immediate_topology: immediate,
            allowed_topologies: allowed,
            csi_node_topology_keys: &keys,
            node_labels: &labels,
            random_hash: 0,
        };
        accessibility_requirements(&input).map(|r| {
            r.map(
                |TopologyRequirement {
                     requisite,
                     preferred,
                 }| (terms_of(&requisite), terms_of(&preferred)),
            )
        })
    }
}

type Outcome = Result<Vec<Term>, fn(&TopologyError) -> bool>;
/// (requisite, preferred) when there is a requirement.
type Requirement = Option<(Vec<Term>, Vec<Term>)>;
type AggregationCase = (&'static str, Cluster, bool, Outcome, Option<Vec<Term>>);

// TestTopologyAggregation: requisite for every strict × immediate combination.
#[test]
fn aggregation() {
    let z = |v: &'static str| term(&[(ZONE, v)]);
    let zone_keys: &[&[&str]] = &[&[ZONE], &[ZONE], &[ZONE]];
    let cases: Vec<AggregationCase> = vec![
        (
            "same keys and values",
            Cluster::new(
                &[&[(ZONE, "zone1")], &[(ZONE, "zone1")], &[(ZONE, "zone1")]],
                zone_keys,
            ),
            false,
            Ok(vec![z("zone1")]),
            None,
        ),
        (
            "selected; same keys and values",
            Cluster::new(
                &[&[(ZONE, "zone1")], &[(ZONE, "zone1")], &[(ZONE, "zone1")]],
                zone_keys,
            ),
            true,
            Ok(vec![z("zone1")]),
            None,
        ),
        (
            "different values",
            Cluster::new(
                &[&[(ZONE, "zone1")], &[(ZONE, "zone2")], &[(ZONE, "zone2")]],
                zone_keys,
            ),
            false,
            Ok(vec![z("zone1"), z("zone2")]),
            None,
        ),
        (
            "selected; different values",
            Cluster::new(
                &[&[(ZONE, "zone1")], &[(ZONE, "zone2")], &[(ZONE, "zone2")]],
                zone_keys,
            ),
            true,
            Ok(vec![z("zone1"), z("zone2")]),
            Some(vec![z("zone1")]),
        ),
        (
            "selected: different keys across cluster",
            Cluster::new(
                &[
                    &[(ZONE, "zone1")],
                    &[(ZONE, "zone1"), (RACK, "rackA")],
                    &[(ZONE, "zone1"), (RACK, "rackA")],
                ],
                &[&[ZONE], &[ZONE, RACK], &[ZONE, RACK]],
            ),
            true,
            Ok(vec![z("zone1")]),
            None,
        ),
        (
            "random node: no nodes",
            Cluster::new(&[], zone_keys),
            false,
            Err(|e| matches!(e, TopologyError::KeySetsNotFoundOnNodes { .. })),
            None,
        ),
        (
            "random node: missing matching node info",
            Cluster::new(&[&[("com.example.csi/foo", "bar")]], zone_keys),
            false,
            Err(|e| matches!(e, TopologyError::KeySetsNotFoundOnNodes { .. })),
            None,
        ),
        (
            "random node: no CSINodes",
            Cluster::new(&[&[(ZONE, "zone1")], &[(ZONE, "zone2")]], &[]),
            false,
            Err(|e| *e == TopologyError::NoAvailableTopology),
            None,
        ),
        (
            "random node: missing keys",
            Cluster::new(&[&[(ZONE, "zone1")], &[(ZONE, "zone2")]], &[&[], &[], &[]]),
            false,
            Err(|e| *e == TopologyError::NoAvailableTopology),
            None,
        ),
        (
            "random node: one node has been upgraded",
            Cluster::new(
                &[
                    &[("com.example.another/zone", "zone1")],
                    &[("com.example.another/zone", "zone2")],
                    &[(ZONE, "zone3")],
                ],
                &[&[], &[], &[ZONE]],
            ),
            false,
            Ok(vec![z("zone3")]),
            None,
        ),
        // v6.4.0 (#1582): labels alone do not make a Node part of the aggregation.
        (
            "random node: labeled nodes whose driver reported no topology keys are not included",
            Cluster::new(
                &[&[(ZONE, "zone1")], &[(ZONE, "zone2")], &[(ZONE, "zone3")]],
                &[&[], &[], &[ZONE]],
            ),
            false,
            Ok(vec![z("zone3")]),
            None,
        ),
        (
            "random node: labeled node without a CSINode is not included",
            Cluster::new(&[&[(ZONE, "zone1")], &[(ZONE, "zone2")]], &[&[ZONE]]),
            false,
            Ok(vec![z("zone1")]),
            None,
        ),
        (
            "different keys across cluster",
            Cluster::new(
                &[
                    &[(ZONE, "zone1")],
                    &[(ZONE, "zone1"), (RACK, "rackA")],
                    &[(ZONE, "zone1"), (RACK, "rackA")],
                ],
                &[&[ZONE], &[ZONE, RACK], &[ZONE, RACK]],
            ),
            false,
            Ok(vec![z("zone1"), term(&[(ZONE, "zone1"), (RACK, "rackA")])]),
            None,
        ),
        (
            "different keys across cluster: node reporting fewer keys is not dropped",
            Cluster::new(
                &[
                    &[(REGION, "us-east")],
                    &[(REGION, "us-west"), (ZONE, "zone1")],
                    &[(REGION, "us-west"), (ZONE, "zone2")],
                ],
                &[&[REGION], &[REGION, ZONE], &[ZONE, REGION]],
            ),
            false,
            Ok(vec![
                term(&[(REGION, "us-east")]),
                term(&[(REGION, "us-west")]),
                term(&[(REGION, "us-west"), (ZONE, "zone1")]),
                term(&[(REGION, "us-west"), (ZONE, "zone2")]),
            ]),
            None,
        ),
        (
            "disjoint keys, both labels on every node",
            Cluster::new(
                &[
                    &[(REGION, "us-east"), (ZONE, "zone1")],
                    &[(REGION, "us-west"), (ZONE, "zone2")],
                ],
                &[&[REGION], &[ZONE]],
            ),
            false,
            Ok(vec![term(&[(REGION, "us-east")]), z("zone2")]),
            None,
        ),
        (
            "unregistered node with labels for several key sets",
            Cluster::new(
                &[
                    &[(REGION, "us-east")],
                    &[(ZONE, "zone1")],
                    &[(REGION, "us-west"), (ZONE, "zone2")],
                ],
                &[&[REGION], &[ZONE], &[]],
            ),
            false,
            Ok(vec![term(&[(REGION, "us-east")]), z("zone1")]),
            None,
        ),
        (
            "finer registration contributes to the coarser key set",
            Cluster::new(
                &[
                    &[(REGION, "us-east"), (ZONE, "zone1")],
                    &[(REGION, "us-east"), (ZONE, "zone2")],
                ],
                &[&[REGION], &[REGION, ZONE]],
            ),
            false,
            Ok(vec![
                term(&[(REGION, "us-east")]),
                term(&[(REGION, "us-east"), (ZONE, "zone2")]),
            ]),
            None,
        ),
        (
            "selected: labeled node whose driver reported no keys is not included",
            Cluster::new(
                &[&[(ZONE, "zone1")], &[(ZONE, "zone2")], &[(ZONE, "zone3")]],
                &[&[ZONE], &[], &[ZONE]],
            ),
            true,
            Ok(vec![z("zone1"), z("zone3")]),
            Some(vec![z("zone1")]),
        ),
        (
            "selected: node that registered different keys is not included",
            Cluster::new(
                &[
                    &[(REGION, "us-east")],
                    &[(REGION, "us-west"), (ZONE, "zone1")],
                    &[(REGION, "us-central"), (ZONE, "zone2")],
                ],
                &[&[REGION], &[ZONE], &[REGION, ZONE]],
            ),
            true,
            Ok(vec![
                term(&[(REGION, "us-central")]),
                term(&[(REGION, "us-east")]),
            ]),
            Some(vec![term(&[(REGION, "us-east")])]),
        ),
        (
            "selected: missing matching node info",
            Cluster::new(&[&[("com.example.csi/foo", "bar")]], zone_keys),
            true,
            Err(|e| matches!(e, TopologyError::SelectedNodeLabelsMismatch { .. })),
            None,
        ),
        (
            "selected: no CSINode",
            Cluster::new(&[&[(ZONE, "zone1")], &[(ZONE, "zone2")]], &[]),
            true,
            Err(|e| matches!(e, TopologyError::CsiNodeNotFound { .. })),
            None,
        ),
        (
            "selected node is missing keys",
            Cluster::new(&[&[(ZONE, "zone1")], &[(ZONE, "zone2")]], &[&[], &[]]),
            true,
            Err(|e| matches!(e, TopologyError::NoTopologyKey { .. })),
            None,
        ),
    ];
    for (name, cluster, selected, want, strict_want) in cases {
        for strict in [false, true] {
            for immediate in [false, true] {
                let got = cluster.run("testpvc", selected, strict, immediate, &[]);
                let label = format!("{name} strict={strict} immediate={immediate}");
                if !immediate && !selected {
                    assert_eq!(got, Ok(None), "{label}");
                    continue;
                }
                match (&want, got) {
                    (Ok(requisite), Ok(Some((got_requisite, _)))) => {
                        let expected = if strict {
                            strict_want.as_ref().unwrap_or(requisite)
                        } else {
                            requisite
                        };
                        assert_eq!(&got_requisite, expected, "{label}");
                    }
                    (Err(check), Err(e)) => assert!(check(&e), "{label}: unexpected {e:?}"),
                    (_, got) => panic!("{label}: got {got:?}"),
                }
            }
        }
    }
}

#[test]
fn requisite_is_sorted_and_deduplicated() {
    let input = allowed(&[
        &[(ZONE, &["zone1"])],
        &[(ZONE, &["zone1", "zone2"]), (RACK, &["rackA", "rackB"])],
        &[(RACK, &["rackB"]), (ZONE, &["zone1"])],
    ]);
    let got = Cluster::new(&[], &[])
        .run("x", false, false, true, &input)
        .unwrap()
        .unwrap()
        .0;
    let zr = |z: &str, r: &str| term(&[(ZONE, z), (RACK, r)]);
    assert_eq!(
        got,
        vec![
            term(&[(ZONE, "zone1")]),
            zr("zone1", "rackA"),
            zr("zone2", "rackA"),
            zr("zone1", "rackB"),
            zr("zone2", "rackB")
        ]
    );
}

#[test]
fn error_texts_and_states() {
    let zone = term(&[(ZONE, "zone2")]);
    let cases = [
        (
            TopologyError::CsiNodeNotFound { node: "n1".into() },
            r#"failed to get selected CSINode n1: csinode.storage.k8s.io "n1" not found"#,
        ),
        (
            TopologyError::NoTopologyKey { node: "n1".into() },
            "no topology key found for node n1",
        ),
        (
            TopologyError::SelectedNodeLabelsMismatch {
                labels: BTreeMap::new(),
                keys: strings(&[ZONE, RACK]),
            },
            "topology labels from selected node map[] does not match topology keys from CSINode [com.example.csi/zone com.example.csi/rack]",
        ),
        (
            TopologyError::SelectedNodeLabelsMismatch {
                labels: BTreeMap::from([
                    (ZONE.to_string(), "zone1".to_string()),
                    ("kubernetes.io/hostname".to_string(), "n1".to_string()),
                ]),
                keys: strings(&[ZONE, RACK]),
            },
            "topology labels from selected node map[com.example.csi/zone:zone1 kubernetes.io/hostname:n1] does not match topology keys from CSINode [com.example.csi/zone com.example.csi/rack]",
        ),
        (
            TopologyError::NotInAllowedTopologies {
                node: "n1".into(),
                selected: zone.clone(),
                allowed: vec![term(&[(ZONE, "zone1")])],
            },
            r#"selected node '"n1"' topology '[{com.example.csi/zone zone2}]' is not in allowed topologies: [[{com.example.csi/zone zone1}]]"#,
        ),
        (
            TopologyError::NoAvailableTopology,
            "no available topology found",
        ),
        (
            TopologyError::KeysNotFoundOnNodes {
                keys: strings(&[ZONE]),
            },
            "topologyKeys [com.example.csi/zone] were not found on any nodes",
        ),
        (
            TopologyError::KeySetsNotFoundOnNodes {
                key_sets: vec![strings(&[REGION]), strings(&[RACK, ZONE])],
            },
            "topologyKeys [[com.example.csi/region] [com.example.csi/rack com.example.csi/zone]] were not found on any nodes",
        ),
        (
            TopologyError::NotInRequisite {
                node: "n1".into(),
                selected: zone,
                requisite: vec![term(&[(ZONE, "zone1")])],
            },
            r#"topology [{com.example.csi/zone zone2}] from selected node "n1" is not in requisite: [[{com.example.csi/zone zone1}]]"#,
        ),
    ];
    for (error, text) in cases {
        assert_eq!(error.to_string(), text);
        let want = if matches!(error, TopologyError::CsiNodeNotFound { .. }) {
            ProvisioningState::Reschedule
        } else {
            ProvisioningState::NoChange
        };
        assert_eq!(error.state(), want, "{text}");
    }
}

// TestDistinctTopologyKeySets (v6.4.0): each set sorted, duplicates and empty sets dropped.
#[test]
fn distinct_key_sets_table() {
    type KeySets<'a> = &'a [&'a [&'a str]];
    let cases: &[(&str, KeySets, KeySets)] = &[
        ("no CSINodes", &[], &[]),
        ("no keys registered", &[&[], &[]], &[]),
        (
            "same set everywhere",
            &[&[REGION, ZONE], &[REGION, ZONE]],
            &[&[REGION, ZONE]],
        ),
        (
            "same set, other order",
            &[&[REGION, ZONE], &[ZONE, REGION]],
            &[&[REGION, ZONE]],
        ),
        (
            "different sets",
            &[&[ZONE, REGION], &[REGION], &[REGION, ZONE]],
            &[&[REGION], &[REGION, ZONE]],
        ),
        ("empty skipped", &[&[], &[ZONE]], &[&[ZONE]]),
        ("disjoint", &[&[ZONE], &[REGION]], &[&[REGION], &[ZONE]]),
    ];
    for (name, registered, want) in cases {
        let keys: Vec<Vec<String>> = registered.iter().map(|k| strings(k)).collect();
        let input: Vec<(&str, &[String])> = keys.iter().map(|k| ("n", k.as_slice())).collect();
        let want: Vec<Vec<String>> = want.iter().map(|k| strings(k)).collect();
        assert_eq!(distinct_key_sets(&input), want, "{name}");
    }
}

// Immediate binding no longer depends on which CSINode comes first (v6.3.0 shuffled them and
// took the first one's keys).
#[test]
fn mixed_key_sets_do_not_depend_on_csinode_order() {
    let cluster = Cluster::new(
        &[
            &[(REGION, "us-east")],
            &[(REGION, "us-west"), (ZONE, "zone1")],
            &[(REGION, "us-west"), (ZONE, "zone2")],
        ],
        &[&[REGION], &[REGION, ZONE], &[REGION, ZONE]],
    );
    let mut reversed = Cluster::new(&[], &[]);
    reversed.labels = cluster.labels.iter().rev().cloned().collect();
    reversed.keys = cluster.keys.iter().rev().cloned().collect();
    reversed.names = cluster.names.iter().rev().cloned().collect();
    let got = cluster
        .run("pvc", false, false, true, &[])
        .unwrap()
        .unwrap()
        .0;
    assert_eq!(got.len(), 4, "{got:?}");
    assert_eq!(
        reversed
            .run("pvc", false, false, true, &[])
            .unwrap()
            .unwrap()
            .0,
        got
    );
}

// allowedTopologies still win over aggregation, whatever key sets the CSINodes registered and
// whether or not a Node is registered at all.
#[test]
fn allowed_topologies_ignore_registered_key_sets() {
    let cluster = Cluster::new(
        &[
            &[(REGION, "us-east")],
            &[(REGION, "us-west"), (ZONE, "zone1")],
            &[(ZONE, "zone9")],
        ],
        &[&[REGION], &[REGION, ZONE], &[]],
    );
    let only_zone9 = allowed(&[&[(ZONE, &["zone9"])]]);
    let want = Some((
        vec![term(&[(ZONE, "zone9")])],
        vec![term(&[(ZONE, "zone9")])],
    ));
    for immediate in [false, true] {
        assert_eq!(
            cluster.run("pvc", false, false, immediate, &only_zone9),
            Ok(want.clone()),
            "immediate={immediate}"
        );
    }
    // Late binding, not strict: the requisite is the allowed list; the selected node (node 0,
    // region only) must match one allowed term for the preferred rotation.
    let regions = allowed(&[&[(REGION, &["us-east", "us-west"])]]);
    let (requisite, preferred) = cluster
        .run("pvc", true, false, false, &regions)
        .unwrap()
        .unwrap();
    assert_eq!(
        requisite,
        vec![term(&[(REGION, "us-east")]), term(&[(REGION, "us-west")])]
    );
    assert_eq!(preferred[0], term(&[(REGION, "us-east")]));
    // Strict: the selected node's term must be allowed.
    assert!(matches!(
        cluster.run("pvc", true, true, false, &only_zone9),
        Err(TopologyError::NotInAllowedTopologies { .. })
    ));
}
