//! Distributed provisioning (`--node-deployment`): the node this instance runs on, as the
//! driver's NodeGetInfo describes it once at start-up, and the fixed Node and CSINode that stand
//! in for the cluster's (upstream's static fake listers): topology requirements and capacity
//! segments then see only this node, and no Node or CSINode is ever watched.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::{CSINode, CSINodeDriver, CSINodeSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{PartialObjectMeta, TypeMeta};

use crate::driver::{self, Driver};
use crate::stopped::AppError;

/// This instance's node and how it takes part in immediate binding.
#[derive(Debug, Clone)]
pub struct NodeDeployment {
    /// `NODE_NAME`: the value `selected-node` carries for claims of this node.
    pub name: String,
    /// The driver's node id (NodeGetInfo).
    pub node_id: String,
    /// The driver's accessible topology on this node (NodeGetInfo); may be empty.
    pub topology: BTreeMap<String, String>,
    /// Whether NodeGetInfo named an accessible topology at all, even an empty one. Without
    /// one, every volume counts as reachable from this node; with an empty one, this is a node
    /// without labels (as upstream's nil and empty topologies).
    pub reports_topology: bool,
    /// `managed-by` of this instance's CSIStorageCapacity objects.
    pub managed_by: String,
    /// `--node-deployment-immediate-binding`.
    pub immediate_binding: bool,
    /// `--node-deployment-base-delay` / `--node-deployment-max-delay`.
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl NodeDeployment {
    /// Asks the driver about this node (NodeGetInfo, once, as upstream).
    pub async fn discover(
        opts: &cli::Options,
        driver: &Driver,
    ) -> Result<NodeDeployment, AppError> {
        let name = opts.env.node_name.clone().unwrap_or_default();
        let info = driver::node_info(&driver.client).await?;
        let reports_topology = info.accessible_topology.is_some();
        let topology: BTreeMap<String, String> = info
            .accessible_topology
            .map(|t| t.segments.into_iter().collect())
            .unwrap_or_default();
        tracing::info!(node = %name, node_id = %info.node_id, topology = ?topology,
            "Distributed provisioning: handling claims of this node only");
        Ok(NodeDeployment {
            managed_by: capacity::managed_by_node(&name),
            name,
            node_id: info.node_id,
            topology,
            reports_topology,
            immediate_binding: opts.node_deployment_immediate_binding,
            base_delay: opts.node_deployment_base_delay,
            max_delay: opts.node_deployment_max_delay,
        })
    }

    /// The CSINode the driver's registration would create on this node.
    pub fn csi_node(&self, driver: &str) -> CSINode {
        CSINode {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                ..Default::default()
            },
            spec: CSINodeSpec {
                drivers: vec![CSINodeDriver {
                    name: driver.to_string(),
                    node_id: self.node_id.clone(),
                    // BTreeMap keys: already sorted, as topology code expects.
                    topology_keys: Some(self.topology.keys().cloned().collect()),
                    allocatable: None,
                }],
            },
            status: None,
        }
    }

    /// The topology volumes are matched against (`None`: the driver reported none).
    pub fn reported_topology(&self) -> Option<&BTreeMap<String, String>> {
        self.reports_topology.then_some(&self.topology)
    }

    /// The node's labels as far as topology goes: the driver's segments (none at all when the
    /// driver reported no topology).
    pub fn node(&self) -> PartialObjectMeta<Node> {
        PartialObjectMeta {
            types: Some(TypeMeta {
                api_version: "meta.k8s.io/v1".into(),
                kind: "PartialObjectMetadata".into(),
            }),
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                labels: self.reported_topology().cloned(),
                ..Default::default()
            },
            _phantom: Default::default(),
        }
    }
}

/// The identity stored in our PVs: upstream appends the node in distributed provisioning.
pub fn identity(base: String, node: Option<&NodeDeployment>) -> String {
    match node {
        Some(n) => format!("{base}-{}", n.name),
        None => base,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> NodeDeployment {
        NodeDeployment {
            name: "worker-1".into(),
            node_id: "id-1".into(),
            topology: [("zone", "a"), ("node", "worker-1")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            reports_topology: true,
            managed_by: capacity::managed_by_node("worker-1"),
            immediate_binding: true,
            base_delay: Duration::from_secs(20),
            max_delay: Duration::from_secs(60),
        }
    }

    #[test]
    fn the_fixed_objects_describe_this_node_only() {
        let n = node();
        let csi = n.csi_node("d.csi");
        assert_eq!(csi.metadata.name.as_deref(), Some("worker-1"));
        let keys = provisioning::topology::csi_node_topology_keys(&csi, "d.csi");
        assert_eq!(keys, ["node", "zone"]);
        assert!(provisioning::topology::csi_node_topology_keys(&csi, "other").is_empty());
        assert_eq!(n.node().metadata.labels.as_ref(), Some(&n.topology));
        let silent = NodeDeployment {
            reports_topology: false,
            topology: BTreeMap::new(),
            ..node()
        };
        assert_eq!(silent.node().metadata.labels, None);
        assert_eq!(silent.reported_topology(), None);
        assert_eq!(n.managed_by, "external-provisioner-worker-1");
    }

    #[test]
    fn identity_names_the_node() {
        assert_eq!(identity("1-2-d".into(), Some(&node())), "1-2-d-worker-1");
        assert_eq!(identity("1-2-d".into(), None), "1-2-d");
    }
}
