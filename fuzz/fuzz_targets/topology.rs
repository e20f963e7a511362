//! The CreateVolume topology requirement from CSINodes, Node labels, the selected node and the
//! class's allowedTopologies.
//!
//! Properties: every requisite and preferred segment uses only keys the driver registered or the
//! class allows (only the driver's keys when the class allows everything), and only values a
//! Node label or the class gave; requisite has no duplicates; preferred holds the same terms;
//! with a selected node, preferred starts with a term that node is in (the only term when
//! strict). Errors format without panicking.
#![no_main]

use std::collections::{BTreeMap, BTreeSet};

use arbitrary::{Arbitrary, Unstructured};
use csi_provisioner_fuzz::word;
use k8s_openapi::api::core::v1::{TopologySelectorLabelRequirement, TopologySelectorTerm};
use libfuzzer_sys::fuzz_target;
use provisioning::topology::{TopologyInput, accessibility_requirements};

const KEYS: &[&str] = &["zone", "rack", "node", "topology.kubernetes.io/zone"];
const VALUES: &[&str] = &["a", "b", "c", ""];
const NODES: &[&str] = &["n1", "n2", "n3", "n4"];

#[derive(Debug)]
struct Input {
    claim_name: String,
    selected: Option<String>,
    csi_nodes: Vec<(String, Vec<String>)>,
    nodes: Vec<(String, BTreeMap<String, String>)>,
    allowed: Vec<TopologySelectorTerm>,
    strict: bool,
    immediate: bool,
    random_hash: u32,
}

/// Distinct non-empty keys: the API server refuses CSINodes with duplicate or empty topology
/// keys.
fn keys(u: &mut Unstructured<'_>) -> arbitrary::Result<Vec<String>> {
    let mut keys: Vec<String> = Vec::new();
    for _ in 0..u.int_in_range(0..=3)? {
        let k = word(u, KEYS)?;
        if !k.is_empty() && !keys.contains(&k) {
            keys.push(k);
        }
    }
    Ok(keys)
}

/// One allowedTopologies term as the API server admits it: distinct keys, each with a
/// non-empty list of distinct values.
fn allowed_term(u: &mut Unstructured<'_>) -> arbitrary::Result<TopologySelectorTerm> {
    if u.ratio(1, 8)? {
        return Ok(TopologySelectorTerm {
            match_label_expressions: None,
        });
    }
    let mut expressions: Vec<TopologySelectorLabelRequirement> = Vec::new();
    for key in keys(u)?.into_iter().take(2) {
        let mut values: Vec<String> = Vec::new();
        for _ in 0..u.int_in_range(1..=3)? {
            let v = word(u, VALUES)?;
            if !values.contains(&v) {
                values.push(v);
            }
        }
        expressions.push(TopologySelectorLabelRequirement { key, values });
    }
    Ok(TopologySelectorTerm {
        match_label_expressions: Some(expressions),
    })
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let csi_nodes = (0..u.int_in_range(0..=4)?)
            .map(|_| Ok((word(u, NODES)?, keys(u)?)))
            .collect::<arbitrary::Result<_>>()?;
        let nodes = (0..u.int_in_range(0..=4)?)
            .map(|_| {
                let labels = (0..u.int_in_range(0..=4)?)
                    .map(|_| Ok((word(u, KEYS)?, word(u, VALUES)?)))
                    .collect::<arbitrary::Result<_>>()?;
                Ok((word(u, NODES)?, labels))
            })
            .collect::<arbitrary::Result<_>>()?;
        let allowed = (0..u.int_in_range(0..=3)?)
            .map(|_| allowed_term(u))
            .collect::<arbitrary::Result<_>>()?;
        Ok(Input {
            claim_name: word(u, &["claim", ""])?,
            selected: if u.ratio(1, 2)? {
                Some(word(u, NODES)?)
            } else {
                None
            },
            csi_nodes,
            nodes,
            allowed,
            strict: bool::arbitrary(u)?,
            immediate: bool::arbitrary(u)?,
            random_hash: u32::arbitrary(u)?,
        })
    }
}

type Pairs = BTreeSet<(String, String)>;

fn pairs(t: &csi::v1::Topology) -> Pairs {
    t.segments
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fuzz_target!(|input: Input| {
    // The informers hold one object per name: the first one of each name stands.
    let mut csi_nodes: Vec<(&str, &[String])> = Vec::new();
    for (name, keys) in &input.csi_nodes {
        if !csi_nodes.iter().any(|(n, _)| n == name) {
            csi_nodes.push((name, keys));
        }
    }
    let mut nodes: Vec<(&str, &BTreeMap<String, String>)> = Vec::new();
    for (name, labels) in &input.nodes {
        if !nodes.iter().any(|(n, _)| n == name) {
            nodes.push((name, labels));
        }
    }
    let selected = input.selected.as_deref();
    let selected_keys = selected
        .and_then(|s| csi_nodes.iter().find(|(n, _)| *n == s))
        .map(|(_, k)| *k);
    let selected_labels = selected
        .and_then(|s| nodes.iter().find(|(n, _)| *n == s))
        .map(|(_, l)| *l);
    let topology_input = TopologyInput {
        claim_name: &input.claim_name,
        selected_node: selected,
        selected_node_topology_keys: selected_keys,
        selected_node_labels: selected_labels,
        strict_topology: input.strict,
        immediate_topology: input.immediate,
        allowed_topologies: &input.allowed,
        csi_node_topology_keys: &csi_nodes,
        node_labels: &nodes,
        random_hash: input.random_hash,
    };
    let requirement = match accessibility_requirements(&topology_input) {
        Ok(Some(r)) => r,
        Ok(None) => return,
        Err(e) => {
            let _ = (e.to_string(), e.state());
            return;
        }
    };

    let driver_keys: BTreeSet<&str> = csi_nodes
        .iter()
        .flat_map(|(_, keys)| keys.iter().map(String::as_str))
        .collect();
    let allowed_pairs: BTreeSet<(&str, &str)> = input
        .allowed
        .iter()
        .flat_map(|t| t.match_label_expressions.iter().flatten())
        .flat_map(|r| r.values.iter().map(|v| (r.key.as_str(), v.as_str())))
        .collect();
    let label_pairs: BTreeSet<(&str, &str)> = nodes
        .iter()
        .flat_map(|(_, l)| l.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .collect();
    let allows_everything = allowed_pairs.is_empty();
    for t in requirement.requisite.iter().chain(&requirement.preferred) {
        assert!(!t.segments.is_empty(), "empty term in {requirement:?}");
        for (k, v) in &t.segments {
            let pair = (k.as_str(), v.as_str());
            if allows_everything {
                assert!(
                    driver_keys.contains(k.as_str()),
                    "key {k:?} not the driver's"
                );
                assert!(label_pairs.contains(&pair), "{pair:?} is on no Node");
            } else {
                assert!(
                    driver_keys.contains(k.as_str()) || allowed_pairs.contains(&pair),
                    "key {k:?} neither the driver's nor allowed"
                );
                assert!(
                    label_pairs.contains(&pair) || allowed_pairs.contains(&pair),
                    "{pair:?} from nowhere"
                );
            }
        }
    }
    let requisite: Vec<Pairs> = requirement.requisite.iter().map(pairs).collect();
    let mut preferred: Vec<Pairs> = requirement.preferred.iter().map(pairs).collect();
    let unique: BTreeSet<&Pairs> = requisite.iter().collect();
    assert_eq!(unique.len(), requisite.len(), "duplicate requisite terms");
    if let Some(node) = selected.filter(|n| !n.is_empty()) {
        let labels = selected_labels.expect("a selected node's term needs its labels");
        let first = preferred.first().expect("preferred is never empty");
        assert!(
            first.iter().all(|(k, v)| labels.get(k) == Some(v)),
            "first preferred term {first:?} is not node {node}'s"
        );
        if input.strict {
            assert_eq!(requisite.len(), 1, "strict topology asks for one term");
        }
    }
    let mut sorted_requisite = requisite.clone();
    sorted_requisite.sort();
    preferred.sort();
    assert_eq!(
        preferred, sorted_requisite,
        "preferred is not a reordering of requisite"
    );
});
