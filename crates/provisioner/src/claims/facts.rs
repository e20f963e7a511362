//! Gathering the topology facts `provisioning::prepare` needs from the caches.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::CSINode;
use kube::api::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef;

use crate::caches::Caches;

/// Owned snapshots the borrowed `TopologyFacts` point into.
pub struct TopologySnapshot {
    pub selected_keys: Option<Vec<String>>,
    pub selected_labels: Option<BTreeMap<String, String>>,
    pub csi_nodes: Vec<Arc<CSINode>>,
    pub nodes: Vec<Arc<PartialObjectMeta<Node>>>,
}

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

impl TopologySnapshot {
    pub fn take(caches: &Caches, driver: &str, selected_node: Option<&str>) -> TopologySnapshot {
        let selected_keys = selected_node.and_then(|n| {
            caches
                .csi_nodes
                .get(&ObjectRef::new(n))
                .map(|c| provisioning::topology::csi_node_topology_keys(&c, driver).to_vec())
        });
        let selected_labels = selected_node.and_then(|n| {
            caches
                .nodes
                .get(&ObjectRef::new(n))
                .map(|node| node.metadata.labels.clone().unwrap_or_default())
        });
        TopologySnapshot {
            selected_keys,
            selected_labels,
            csi_nodes: caches.csi_nodes.state(),
            nodes: caches.nodes.state(),
        }
    }

    /// Our keys per CSINode, by name: aggregation counts a Node only where the driver
    /// registered the keys on it.
    pub fn csi_node_keys<'a>(&'a self, driver: &str) -> Vec<(&'a str, &'a [String])> {
        self.csi_nodes
            .iter()
            .map(|c| {
                (
                    c.metadata.name.as_deref().unwrap_or_default(),
                    provisioning::topology::csi_node_topology_keys(c, driver),
                )
            })
            .collect()
    }

    pub fn node_labels(&self) -> Vec<(&str, &BTreeMap<String, String>)> {
        self.nodes
            .iter()
            .map(|n| {
                (
                    n.metadata.name.as_deref().unwrap_or_default(),
                    n.metadata.labels.as_ref().unwrap_or(&NO_LABELS),
                )
            })
            .collect()
    }
}
