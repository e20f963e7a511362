//! Beyond upstream: CSIStorageCapacity objects of a node that no longer exists. In distributed
//! provisioning each node's instance manages only its own objects, so when a node is deleted
//! nobody would remove its objects (upstream leaves them until the owner goes, which with
//! `--capacity-ownerref-level=1` is the whole DaemonSet). The surviving instances agree on one
//! of them to clean up.

use std::collections::BTreeSet;

use crate::{MANAGED_BY_CENTRAL, managed_by_node};

/// The node whose instance uses `managed_by`, when the value can be read back (it cannot when
/// a long node name was shortened with a hash).
pub fn node_of(managed_by: &str) -> Option<&str> {
    let node = managed_by
        .strip_prefix(MANAGED_BY_CENTRAL)?
        .strip_prefix('-')?;
    (!node.is_empty() && managed_by_node(node) == managed_by).then_some(node)
}

/// The instances to ask, in order, whether they are alive before `own` may clean up: every
/// node instance named before it. The first one alive does it; `own` does it if none is.
pub fn ahead_of<'a>(own: &str, instances: &BTreeSet<&'a str>) -> Vec<&'a str> {
    instances
        .iter()
        .copied()
        .filter(|i| *i < own && i.starts_with(MANAGED_BY_CENTRAL) && *i != MANAGED_BY_CENTRAL)
        .collect()
}

/// Objects (`(name, managed-by)`) of node instances whose node is not in `nodes`. The central
/// provisioner's objects are never orphans.
pub fn orphans<'a>(objects: &[(&'a str, &'a str)], nodes: &BTreeSet<String>) -> Vec<&'a str> {
    let live: BTreeSet<String> = nodes.iter().map(|n| managed_by_node(n)).collect();
    objects
        .iter()
        .filter(|(_, managed_by)| {
            *managed_by != MANAGED_BY_CENTRAL
                && managed_by.starts_with(MANAGED_BY_CENTRAL)
                && !live.contains(*managed_by)
        })
        .map(|(name, _)| *name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_are_read_back_only_when_unambiguous() {
        assert_eq!(node_of("external-provisioner-node-1"), Some("node-1"));
        assert_eq!(node_of("external-provisioner"), None);
        assert_eq!(node_of("someone-else"), None);
        let long = managed_by_node(&"n".repeat(50));
        assert_eq!(node_of(&long), None, "{long}");
    }

    #[test]
    fn the_first_live_instance_cleans_up() {
        let instances: BTreeSet<&str> = [
            "external-provisioner-a",
            "external-provisioner-b",
            "external-provisioner-c",
            "external-provisioner",
        ]
        .into_iter()
        .collect();
        assert!(ahead_of("external-provisioner-a", &instances).is_empty());
        assert_eq!(
            ahead_of("external-provisioner-c", &instances),
            ["external-provisioner-a", "external-provisioner-b"]
        );
    }

    #[test]
    fn objects_of_missing_nodes_are_orphans() {
        let objects = [
            ("csisc-1", "external-provisioner-a"),
            ("csisc-2", "external-provisioner-b"),
            ("csisc-3", "external-provisioner-b"),
            ("csisc-4", "external-provisioner"),
            ("csisc-5", "other-producer"),
        ];
        let nodes: BTreeSet<String> = ["a".to_string(), "c".to_string()].into();
        assert_eq!(orphans(&objects, &nodes), ["csisc-2", "csisc-3"]);
        let all: BTreeSet<String> = ["a".to_string(), "b".to_string()].into();
        assert!(orphans(&objects, &all).is_empty());
    }
}
