//! Kubernetes objects for a kubelet-less cluster (pure builders).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus};
use k8s_openapi::api::storage::v1::{
    CSIDriver, CSIDriverSpec, CSINode, CSINodeDriver, CSINodeSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub(crate) const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// Labels of a fake node: its hostname and the driver's topology key, both set to its name.
pub(crate) fn node_labels(name: &str, topology_key: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (HOSTNAME_LABEL.to_string(), name.to_string()),
        (topology_key.to_string(), name.to_string()),
    ])
}

/// A Ready node with room for pods and no taints. Status is accepted on create; there is no
/// kubelet to report it, and no node-lifecycle controller to mark it NotReady.
pub(crate) fn fake_node(name: &str, topology_key: &str) -> Node {
    let resources = BTreeMap::from([
        ("cpu".to_string(), Quantity("8".into())),
        ("memory".to_string(), Quantity("32Gi".into())),
        ("ephemeral-storage".to_string(), Quantity("100Gi".into())),
        // Without `pods` the scheduler filters the node out.
        ("pods".to_string(), Quantity("110".into())),
    ]);
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(node_labels(name, topology_key)),
            ..Default::default()
        },
        spec: Some(NodeSpec::default()),
        status: Some(NodeStatus {
            capacity: Some(resources.clone()),
            allocatable: Some(resources),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: Some("FakeNodeReady".into()),
                message: Some("fake node created by testenv (no kubelet)".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

/// The CSINode driver entry kubelet's registrar would normally write.
pub(crate) fn csi_node_driver(node: &str, driver: &str, topology_key: &str) -> CSINodeDriver {
    CSINodeDriver {
        name: driver.to_string(),
        node_id: node.to_string(),
        topology_keys: Some(vec![topology_key.to_string()]),
        ..Default::default()
    }
}

pub(crate) fn csi_node(node: &str, driver: &str, topology_key: &str) -> CSINode {
    CSINode {
        metadata: ObjectMeta {
            name: Some(node.to_string()),
            ..Default::default()
        },
        spec: CSINodeSpec {
            drivers: vec![csi_node_driver(node, driver, topology_key)],
        },
        status: None,
    }
}

/// `existing` plus an entry for `driver`, or `None` when it already has one (entries are
/// immutable once registered, so an existing one is left as it is).
pub(crate) fn with_driver(existing: &CSINode, driver: CSINodeDriver) -> Option<CSINode> {
    if existing.spec.drivers.iter().any(|d| d.name == driver.name) {
        return None;
    }
    let mut updated = existing.clone();
    updated.spec.drivers.push(driver);
    Some(updated)
}

pub(crate) fn csi_driver(name: &str, storage_capacity: bool) -> CSIDriver {
    CSIDriver {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        spec: CSIDriverSpec {
            attach_required: Some(false),
            storage_capacity: Some(storage_capacity),
            volume_lifecycle_modes: Some(vec!["Persistent".into()]),
            ..Default::default()
        },
    }
}

/// `<prefix>-<suffix>`, lowercased and cut to the 63-character namespace limit.
pub(crate) fn namespace_name(prefix: &str, suffix: &str) -> String {
    let prefix: String = prefix
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let keep = 63usize.saturating_sub(suffix.len() + 1);
    let prefix = prefix[..prefix.len().min(keep)].trim_matches('-');
    if prefix.is_empty() {
        format!("ns-{suffix}")
    } else {
        format!("{prefix}-{suffix}")
    }
}

/// A random lowercase alphanumeric suffix.
pub(crate) fn random_suffix(len: usize) -> String {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    (0..len)
        .map(|_| CHARS[rand::random_range(0..CHARS.len())] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_names() {
        let long = "x".repeat(80);
        let cases: &[(&str, &str, String)] = &[
            ("le", "abc12", "le-abc12".into()),
            ("Leader_Election", "abc12", "leader-election-abc12".into()),
            ("", "abc12", "ns-abc12".into()),
            ("--", "abc12", "ns-abc12".into()),
            (&long, "abc12", format!("{}-abc12", "x".repeat(57))),
        ];
        for (prefix, suffix, want) in cases {
            let got = namespace_name(prefix, suffix);
            assert_eq!(&got, want, "prefix {prefix:?}");
            assert!(got.len() <= 63);
        }
    }

    #[test]
    fn random_suffixes_are_dns_safe() {
        let s = random_suffix(8);
        assert_eq!(s.len(), 8);
        assert!(
            s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        );
    }

    #[test]
    fn fake_node_is_schedulable() {
        let node = fake_node("n1", "topology.test/node");
        let labels = node.metadata.labels.as_ref().expect("labels");
        assert_eq!(labels.get(HOSTNAME_LABEL).map(String::as_str), Some("n1"));
        assert_eq!(
            labels.get("topology.test/node").map(String::as_str),
            Some("n1")
        );
        let spec = node.spec.as_ref().expect("spec");
        assert!(spec.taints.is_none());
        let status = node.status.as_ref().expect("status");
        let alloc = status.allocatable.as_ref().expect("allocatable");
        for key in ["cpu", "memory", "pods"] {
            assert!(alloc.contains_key(key), "allocatable lacks {key}");
        }
        let ready = status.conditions.as_ref().expect("conditions");
        assert!(
            ready
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        );
    }

    #[test]
    fn csi_node_entries_are_added_once() {
        let base = csi_node("n1", "a.csi", "topo/a");
        let cases = [("a.csi", false, 1), ("b.csi", true, 2)];
        for (driver, changes, entries) in cases {
            let out = with_driver(&base, csi_node_driver("n1", driver, "topo/x"));
            assert_eq!(out.is_some(), changes, "{driver}");
            let drivers = out.map_or(base.spec.drivers.len(), |n| n.spec.drivers.len());
            assert_eq!(drivers, entries, "{driver}");
        }
        let entry = &base.spec.drivers[0];
        assert_eq!(entry.node_id, "n1");
        assert_eq!(
            entry.topology_keys.as_deref(),
            Some(&["topo/a".to_string()][..])
        );
    }

    #[test]
    fn csi_driver_table() {
        for capacity in [true, false] {
            let d = csi_driver("d.csi", capacity);
            assert_eq!(d.spec.attach_required, Some(false));
            assert_eq!(d.spec.storage_capacity, Some(capacity));
        }
    }
}
