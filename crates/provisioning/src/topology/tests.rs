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
}

impl Cluster {
    fn new(labels: &[&[(&str, &str)]], keys: &[&[&str]]) -> Cluster {
        Cluster {
            labels: labels.iter().map(|l| map(l)).collect(),
            keys: keys.iter().map(|k| strings(k)).collect(),
        }
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
        let keys: Vec<&[String]> = self.keys.iter().map(Vec::as_slice).collect();
        let labels: Vec<&BTreeMap<String, String>> = self.labels.iter().collect();
        let input = TopologyInput {
            claim_name: name,
            selected_node: selected.then_some("node-0"),
            selected_node_topology_keys: keys.first().copied(),
            selected_node_labels: labels.first().copied(),
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
            Err(|e| matches!(e, TopologyError::KeysNotFoundOnNodes { .. })),
            None,
        ),
        (
            "random node: missing matching node info",
            Cluster::new(&[&[("com.example.csi/foo", "bar")]], zone_keys),
            false,
            Err(|e| matches!(e, TopologyError::KeysNotFoundOnNodes { .. })),
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
        (
            "random node: node labels already exist without CSINode",
            Cluster::new(
                &[&[(ZONE, "zone1")], &[(ZONE, "zone2")], &[(ZONE, "zone3")]],
                &[&[], &[], &[ZONE]],
            ),
            false,
            Ok(vec![z("zone1"), z("zone2"), z("zone3")]),
            None,
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
