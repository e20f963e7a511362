//! Topology segments: the distinct label sets under which our driver's storage is reachable.

use std::collections::{BTreeMap, BTreeSet};

/// One topology segment: topology key → value, sorted by key.
pub type Segment = BTreeMap<String, String>;

/// What a CSINode says about our driver on one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeDriver {
    /// Node name (CSINode and Node share it).
    pub node: String,
    /// Topology keys our driver registered on that node (may be empty).
    pub topology_keys: Vec<String>,
}

/// The segments of all nodes that run our driver.
///
/// A node contributes the values of its driver's topology keys from its Node labels. A CSINode
/// whose Node is missing, or whose Node lacks one of the keys (the CSINode is often updated
/// before the Node labels), contributes nothing yet. Empty keys give the empty segment, which
/// matches every node.
pub fn segments(
    drivers: &[NodeDriver],
    node_labels: &BTreeMap<String, BTreeMap<String, String>>,
) -> BTreeSet<Segment> {
    drivers
        .iter()
        .filter_map(|d| segment_of(d, node_labels.get(&d.node)?))
        .collect()
}

/// The segment of one node, or `None` when its labels lack a topology key.
pub fn segment_of(driver: &NodeDriver, labels: &BTreeMap<String, String>) -> Option<Segment> {
    driver
        .topology_keys
        .iter()
        .map(|k| Some((k.clone(), labels.get(k)?.clone())))
        .collect()
}

/// Renders a segment as `k=v,k2=v2` for logs and metric labels.
pub fn display(segment: &Segment) -> String {
    if segment.is_empty() {
        return "<all nodes>".to_string();
    }
    segment
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn drv(node: &str, keys: &[&str]) -> NodeDriver {
        NodeDriver {
            node: node.into(),
            topology_keys: keys.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn table() {
        let nodes: BTreeMap<String, BTreeMap<String, String>> = [
            ("n1", labels(&[("zone", "a"), ("node", "n1")])),
            ("n2", labels(&[("zone", "a"), ("node", "n2")])),
            ("n3", labels(&[("zone", "b")])),
        ]
        .into_iter()
        .map(|(n, l)| (n.to_string(), l))
        .collect();
        let cases: Vec<(&str, Vec<NodeDriver>, Vec<Segment>)> = vec![
            ("no drivers", vec![], vec![]),
            (
                "one node, node key",
                vec![drv("n1", &["node"])],
                vec![labels(&[("node", "n1")])],
            ),
            (
                "shared zone is deduplicated",
                vec![drv("n1", &["zone"]), drv("n2", &["zone"])],
                vec![labels(&[("zone", "a")])],
            ),
            (
                "deep topology",
                vec![drv("n1", &["zone", "node"])],
                vec![labels(&[("node", "n1"), ("zone", "a")])],
            ),
            (
                "missing label skips the node",
                vec![drv("n3", &["node"])],
                vec![],
            ),
            ("missing node skips", vec![drv("gone", &["zone"])], vec![]),
            (
                "no keys is the empty segment",
                vec![drv("n1", &[])],
                vec![Segment::new()],
            ),
            (
                "mixed",
                vec![drv("n1", &["node"]), drv("n3", &["zone"])],
                vec![labels(&[("node", "n1")]), labels(&[("zone", "b")])],
            ),
        ];
        for (name, drivers, want) in cases {
            let got: Vec<Segment> = segments(&drivers, &nodes).into_iter().collect();
            let mut want = want;
            want.sort();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn display_forms() {
        assert_eq!(display(&labels(&[("b", "2"), ("a", "1")])), "a=1,b=2");
        assert_eq!(display(&Segment::new()), "<all nodes>");
    }
}
