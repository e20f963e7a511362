//! The PV's node affinity from the volume's accessible topology, and CSINode topology keys.

use csi::v1::Topology;
use k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::CSINode;

/// One node selector term per topology (ORed), one `key In [value]` expression per segment.
///
/// Differs from upstream: expressions are sorted by key (upstream follows Go's random map order,
/// so identical volumes get differently ordered PV specs), and when every topology is empty the
/// result is `None` (upstream returns an affinity without terms, which the API server rejects).
pub fn volume_node_affinity(accessible_topology: &[Topology]) -> Option<VolumeNodeAffinity> {
    let terms: Vec<NodeSelectorTerm> = accessible_topology
        .iter()
        .filter(|t| !t.segments.is_empty())
        .map(|t| {
            let mut segments: Vec<(&String, &String)> = t.segments.iter().collect();
            segments.sort();
            NodeSelectorTerm {
                match_expressions: Some(
                    segments
                        .into_iter()
                        .map(|(key, value)| NodeSelectorRequirement {
                            key: key.clone(),
                            operator: "In".to_string(),
                            values: Some(vec![value.clone()]),
                        })
                        .collect(),
                ),
                match_fields: None,
            }
        })
        .collect();
    if terms.is_empty() {
        return None;
    }
    Some(VolumeNodeAffinity {
        required: Some(NodeSelector {
            node_selector_terms: terms,
        }),
    })
}

/// The topology keys `driver_name` registered on a CSINode (empty if it is not registered there).
pub fn csi_node_topology_keys<'a>(csi_node: &'a CSINode, driver_name: &str) -> &'a [String] {
    csi_node
        .spec
        .drivers
        .iter()
        .find(|d| d.name == driver_name)
        .and_then(|d| d.topology_keys.as_deref())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::strings;
    use k8s_openapi::api::storage::v1::{CSINodeDriver, CSINodeSpec};
    use pretty_assertions::assert_eq;

    fn topology(pairs: &[(&str, &str)]) -> Topology {
        Topology {
            segments: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn node_term(pairs: &[(&str, &str)]) -> NodeSelectorTerm {
        NodeSelectorTerm {
            match_expressions: Some(
                pairs
                    .iter()
                    .map(|(k, v)| NodeSelectorRequirement {
                        key: k.to_string(),
                        operator: "In".into(),
                        values: Some(vec![v.to_string()]),
                    })
                    .collect(),
            ),
            match_fields: None,
        }
    }

    fn affinity(terms: Vec<NodeSelectorTerm>) -> Option<VolumeNodeAffinity> {
        Some(VolumeNodeAffinity {
            required: Some(NodeSelector {
                node_selector_terms: terms,
            }),
        })
    }

    // TestGenerateVolumeNodeAffinity.
    #[test]
    fn affinity_table() {
        let zone = "com.example.csi/zone";
        let rack = "com.example.csi/rack";
        let cases = [
            ("nil topology", vec![], None),
            (
                "only empty segments",
                vec![topology(&[]), topology(&[])],
                None,
            ),
            (
                "single segment",
                vec![topology(&[(zone, "zone1")])],
                affinity(vec![node_term(&[(zone, "zone1")])]),
            ),
            (
                "multiple segments, sorted by key",
                vec![topology(&[(zone, "zone1"), (rack, "rack2")])],
                affinity(vec![node_term(&[(rack, "rack2"), (zone, "zone1")])]),
            ),
            (
                "multiple topologies keep their order",
                vec![
                    topology(&[(zone, "zone2")]),
                    topology(&[]),
                    topology(&[(zone, "zone1")]),
                ],
                affinity(vec![
                    node_term(&[(zone, "zone2")]),
                    node_term(&[(zone, "zone1")]),
                ]),
            ),
        ];
        for (name, input, want) in cases {
            assert_eq!(volume_node_affinity(&input), want, "{name}");
        }
    }

    #[test]
    fn keys_from_csi_node() {
        let csi_node = CSINode {
            spec: CSINodeSpec {
                drivers: vec![
                    CSINodeDriver {
                        name: "other".into(),
                        topology_keys: Some(strings(&["x"])),
                        ..Default::default()
                    },
                    CSINodeDriver {
                        name: "ours".into(),
                        topology_keys: Some(strings(&["zone", "rack"])),
                        ..Default::default()
                    },
                    CSINodeDriver {
                        name: "bare".into(),
                        topology_keys: None,
                        ..Default::default()
                    },
                ],
            },
            ..Default::default()
        };
        assert_eq!(
            csi_node_topology_keys(&csi_node, "ours"),
            strings(&["zone", "rack"]).as_slice()
        );
        assert!(csi_node_topology_keys(&csi_node, "bare").is_empty());
        assert!(csi_node_topology_keys(&csi_node, "missing").is_empty());
    }
}
