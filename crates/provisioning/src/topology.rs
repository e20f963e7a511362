//! Topology (`GenerateAccessibilityRequirements`): where the driver may and should create the
//! volume, and the PV's node affinity from where it did.
//!
//! | Late binding | Strict | allowedTopologies | `--immediate-topology` | Requisite | Preferred |
//! |---|---|---|---|---|---|
//! | yes | yes | any | any | `[selected node's term]` (must match an allowed term) | same |
//! | yes | no | none | any | aggregated over registered Nodes with the selected node's keys | rotated to the selected node's term |
//! | yes | no | set | any | `flatten(allowed)` | rotated to the first subset of the selected node's term |
//! | no | any | set | any | `flatten(allowed)` | rotated by the claim-name hash |
//! | no | any | none | true | aggregated per registered key set, combined | rotated by the claim-name hash |
//! | no | any | none | false | none | none |
//!
//! Aggregation (upstream v6.4.0, #1582) takes a Node's term for a key set only when our driver
//! registered all of those keys on that Node's CSINode: topology labels alone do not count, as
//! the driver may not serve them there. With immediate binding every distinct key set the driver
//! registered on some CSINode is aggregated on its own and the terms are combined, so a cluster
//! whose nodes report different granularities is described at each of them.

mod affinity;
pub mod hash;
mod term;

use std::collections::{BTreeMap, BTreeSet};

use csi::v1::TopologyRequirement;
use k8s_openapi::api::core::v1::TopologySelectorTerm;
use thiserror::Error;

use crate::errors::ProvisioningState;
use gofmt::{list, quote};

pub use affinity::{csi_node_topology_keys, volume_node_affinity};
pub use hash::{fnv32, pvc_name_hash_and_index};
pub use term::{Segment, Term, flatten};

use term::display_terms;

/// Plain facts for [`accessibility_requirements`], gathered by the caller from its caches.
///
/// The caller should remember the facts it used per claim UID (upstream keeps keys, labels and
/// aggregated terms) and feed them back on retries, so that a retried CreateVolume asks for the
/// same topology even if a Node or CSINode disappeared meanwhile.
#[derive(Debug, Clone, Copy)]
pub struct TopologyInput<'a> {
    /// The claim's name, hashed to spread immediate-binding volumes.
    pub claim_name: &'a str,
    /// `volume.kubernetes.io/selected-node` (empty counts as none).
    pub selected_node: Option<&'a str>,
    /// Our driver's topology keys on the selected node's CSINode; `None` if that CSINode does not
    /// exist, an empty list if the driver is not registered there.
    pub selected_node_topology_keys: Option<&'a [String]>,
    /// The selected Node's labels; `None` if the Node does not exist.
    pub selected_node_labels: Option<&'a BTreeMap<String, String>>,
    /// `--strict-topology`.
    pub strict_topology: bool,
    /// `--immediate-topology`.
    pub immediate_topology: bool,
    /// The StorageClass's `allowedTopologies`.
    pub allowed_topologies: &'a [TopologySelectorTerm],
    /// Our driver's topology keys on every CSINode, by CSINode (= Node) name, in any order;
    /// an empty list where the driver registered no keys.
    pub csi_node_topology_keys: &'a [(&'a str, &'a [String])],
    /// The labels of every Node, by name (Nodes without the driver count for nothing).
    pub node_labels: &'a [(&'a str, &'a BTreeMap<String, String>)],
    /// Used instead of the claim-name hash when the claim name is empty.
    pub random_hash: u32,
}

/// Why no topology requirement could be computed (upstream's texts).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TopologyError {
    /// The selected node's CSINode does not exist: reschedule. (The text is upstream's wrap of a
    /// lister NotFound error.)
    #[error(
        "failed to get selected CSINode {node}: csinode.storage.k8s.io {} not found",
        quote(node)
    )]
    CsiNodeNotFound {
        /// The selected node.
        node: String,
    },
    /// Our driver reports no topology keys on the selected node.
    #[error("no topology key found for node {node}")]
    NoTopologyKey {
        /// The selected node.
        node: String,
    },
    /// The selected Node is missing (its labels print as `map[]`) or lacks one of the keys.
    #[error(
        "topology labels from selected node {} does not match topology keys from CSINode {}",
        gofmt::map(labels),
        list(keys)
    )]
    SelectedNodeLabelsMismatch {
        /// The selected Node's labels (empty when the Node is missing).
        labels: BTreeMap<String, String>,
        /// The CSINode's topology keys.
        keys: Vec<String>,
    },
    /// With `--strict-topology`, the selected node is outside the allowed topologies.
    #[error(
        "selected node '{}' topology '{selected}' is not in allowed topologies: {}",
        quote(node),
        display_terms(allowed)
    )]
    NotInAllowedTopologies {
        /// The selected node.
        node: String,
        /// Its term.
        selected: Term,
        /// The flattened allowed terms.
        allowed: Vec<Term>,
    },
    /// No CSINode reports topology keys for our driver yet.
    #[error("no available topology found")]
    NoAvailableTopology,
    /// No registered Node carries all of the selected node's topology keys.
    #[error("topologyKeys {} were not found on any nodes", list(keys))]
    KeysNotFoundOnNodes {
        /// The keys searched for.
        keys: Vec<String>,
    },
    /// Immediate binding: no registered Node carries any of the registered key sets.
    #[error("topologyKeys [{}] were not found on any nodes", key_sets.iter().map(|k| list(k)).collect::<Vec<_>>().join(" "))]
    KeySetsNotFoundOnNodes {
        /// Every distinct key set the driver registered, each sorted.
        key_sets: Vec<Vec<String>>,
    },
    /// The selected node's term matches no requisite term.
    #[error(
        "topology {selected} from selected node {} is not in requisite: {}",
        quote(node),
        display_terms(requisite)
    )]
    NotInRequisite {
        /// The selected node.
        node: String,
        /// Its term.
        selected: Term,
        /// The requisite terms.
        requisite: Vec<Term>,
    },
}

impl TopologyError {
    /// `Reschedule` when the selected node's CSINode is gone, `NoChange` (retry) otherwise.
    pub fn state(&self) -> ProvisioningState {
        match self {
            TopologyError::CsiNodeNotFound { .. } => ProvisioningState::Reschedule,
            _ => ProvisioningState::NoChange,
        }
    }
}

/// The `accessibility_requirements` of CreateVolume, or `None` when there are none. Call it only
/// when the driver advertises `VOLUME_ACCESSIBILITY_CONSTRAINTS`.
pub fn accessibility_requirements(
    input: &TopologyInput<'_>,
) -> Result<Option<TopologyRequirement>, TopologyError> {
    let selected = input.selected_node.filter(|n| !n.is_empty());
    let mut requisite: Vec<Term> = Vec::new();
    let mut selected_facts: Option<(&str, &[String], Term)> = None;

    if let Some(node) = selected {
        let keys = input
            .selected_node_topology_keys
            .ok_or_else(|| TopologyError::CsiNodeNotFound { node: node.into() })?;
        if keys.is_empty() {
            return Err(TopologyError::NoTopologyKey { node: node.into() });
        }
        let term = input
            .selected_node_labels
            .and_then(|labels| term_from_labels(labels, keys))
            .ok_or_else(|| TopologyError::SelectedNodeLabelsMismatch {
                labels: input.selected_node_labels.cloned().unwrap_or_default(),
                keys: keys.to_vec(),
            })?;
        if input.strict_topology {
            if !input.allowed_topologies.is_empty() {
                let allowed = flatten(input.allowed_topologies);
                if !allowed.iter().any(|t| t.is_subset_of(&term)) {
                    return Err(TopologyError::NotInAllowedTopologies {
                        node: node.into(),
                        selected: term,
                        allowed,
                    });
                }
            }
            requisite.push(term.clone());
        }
        selected_facts = Some((node, keys, term));
    }

    if requisite.is_empty() {
        if !input.allowed_topologies.is_empty() {
            requisite = flatten(input.allowed_topologies);
        } else if selected.is_none() && !input.immediate_topology {
            return Ok(None);
        } else {
            let registered = registered_keys(input.csi_node_topology_keys);
            requisite = match &selected_facts {
                Some((_, keys, _)) => {
                    let terms = aggregate(keys, input.node_labels, &registered);
                    if terms.is_empty() {
                        return Err(TopologyError::KeysNotFoundOnNodes {
                            keys: keys.to_vec(),
                        });
                    }
                    terms
                }
                None => {
                    let key_sets = distinct_key_sets(input.csi_node_topology_keys);
                    if key_sets.is_empty() {
                        return Err(TopologyError::NoAvailableTopology);
                    }
                    let terms: Vec<Term> = key_sets
                        .iter()
                        .flat_map(|keys| aggregate(keys, input.node_labels, &registered))
                        .collect();
                    if terms.is_empty() {
                        return Err(TopologyError::KeySetsNotFoundOnNodes { key_sets });
                    }
                    terms
                }
            };
        }
    }
    // Allowed topologies made only of empty terms: behave as if topology were off.
    if requisite.is_empty() {
        return Ok(None);
    }
    requisite.sort();
    requisite.dedup();

    let preferred = match &selected_facts {
        None => {
            let (hash, index) = pvc_name_hash_and_index(input.claim_name, input.random_hash);
            let len = u32::try_from(requisite.len()).unwrap_or(u32::MAX);
            rotated(&requisite, hash.wrapping_add(index) % len)
        }
        Some(_) if input.strict_topology => requisite.clone(),
        Some((node, _, term)) => match requisite.iter().position(|t| t.is_subset_of(term)) {
            Some(first) => rotated(&requisite, first),
            None => {
                return Err(TopologyError::NotInRequisite {
                    node: (*node).into(),
                    selected: term.clone(),
                    requisite,
                });
            }
        },
    };
    Ok(Some(TopologyRequirement {
        requisite: to_csi(&requisite),
        preferred: to_csi(&preferred),
    }))
}

/// Upstream's `distinctTopologyKeySets`: the key sets the driver registered, each sorted,
/// without duplicates, in order; CSINodes without keys are skipped.
pub fn distinct_key_sets(csi_nodes: &[(&str, &[String])]) -> Vec<Vec<String>> {
    let sets: BTreeSet<Vec<String>> = csi_nodes
        .iter()
        .filter(|(_, keys)| !keys.is_empty())
        .map(|(_, keys)| {
            let mut keys = keys.to_vec();
            keys.sort();
            keys
        })
        .collect();
    sets.into_iter().collect()
}

/// Upstream's `registeredTopologyKeys`: node name to the keys the driver registered there;
/// nodes without keys are left out.
fn registered_keys<'a>(
    csi_nodes: &[(&'a str, &'a [String])],
) -> BTreeMap<&'a str, BTreeSet<&'a str>> {
    csi_nodes
        .iter()
        .filter(|(_, keys)| !keys.is_empty())
        .map(|(name, keys)| (*name, keys.iter().map(String::as_str).collect()))
        .collect()
}

/// One term per Node that carries all `keys` as labels and whose own registration covers them.
fn aggregate(
    keys: &[String],
    nodes: &[(&str, &BTreeMap<String, String>)],
    registered: &BTreeMap<&str, BTreeSet<&str>>,
) -> Vec<Term> {
    nodes
        .iter()
        .filter(|(name, _)| {
            registered
                .get(name)
                .is_some_and(|have| keys.iter().all(|k| have.contains(k.as_str())))
        })
        .filter_map(|(_, labels)| term_from_labels(labels, keys))
        .collect()
}

/// The term of a Node for `keys`, or `None` if a key is not among its labels.
fn term_from_labels(labels: &BTreeMap<String, String>, keys: &[String]) -> Option<Term> {
    let pairs: Option<Vec<(&str, &str)>> = keys
        .iter()
        .map(|k| labels.get(k).map(|v| (k.as_str(), v.as_str())))
        .collect();
    pairs.map(Term::from_pairs)
}

/// `terms` rotated left so that `first` comes first.
fn rotated(terms: &[Term], first: impl TryInto<usize>) -> Vec<Term> {
    let first = first.try_into().unwrap_or(0).min(terms.len());
    terms[first..]
        .iter()
        .chain(&terms[..first])
        .cloned()
        .collect()
}

fn to_csi(terms: &[Term]) -> Vec<csi::v1::Topology> {
    terms
        .iter()
        .filter(|t| !t.segments().is_empty())
        .map(Term::to_csi)
        .collect()
}

#[cfg(test)]
pub(crate) mod tests;
