//! The capacity controller's resync decisions: which cache changes need a resync, what a
//! resync must refresh, and how long a failing key waits.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::class::{Class, eligible};
use crate::segment::{NodeDriver, segment_of};
use crate::{Key, Segment};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The segment one node contributes for `driver`: `None` when its CSINode has no entry for the
/// driver, or its Node is unknown or lacks a topology label (as [`crate::segment::segments`]).
/// `node` is the Node's metadata. A Node without any labels still has the empty segment of a
/// driver without topology keys, as upstream.
pub fn node_segment(
    csi_node: Option<&CSINode>,
    node: Option<&ObjectMeta>,
    driver: &str,
) -> Option<Segment> {
    let entry = node_driver(csi_node?, driver)?;
    let no_labels = BTreeMap::new();
    segment_of(&entry, node?.labels.as_ref().unwrap_or(&no_labels))
}

/// What a CSINode says about `driver`, if it has an entry for it.
pub fn node_driver(csi_node: &CSINode, driver: &str) -> Option<NodeDriver> {
    let entry = csi_node.spec.drivers.iter().find(|d| d.name == driver)?;
    Some(NodeDriver {
        node: csi_node.metadata.name.clone()?,
        topology_keys: entry.topology_keys.clone().unwrap_or_default(),
    })
}

/// Whether a changed StorageClass can change the desired set: it is eligible now and was not
/// (or with other parameters), or was eligible and no longer is. Classes of other drivers
/// never matter.
pub fn class_matters(
    class: &StorageClass,
    driver: &str,
    include_immediate: bool,
    known: &BTreeMap<String, Class>,
) -> bool {
    let now = eligible([class], driver, include_immediate)
        .into_iter()
        .next();
    let name = class.metadata.name.as_deref().unwrap_or_default();
    now.as_ref() != known.get(name)
}

/// What a resync must do after the desired set changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resync {
    /// Keys to read and write at once: new ones, and those whose class parameters changed
    /// (GetCapacity gets the parameters, so the old reading says nothing).
    pub refresh: Vec<Key>,
    /// Keys that left the desired set: their objects become obsolete.
    pub removed: Vec<Key>,
}

/// Compares the old and new desired sets (and the classes they were built from).
pub fn diff(
    old: &BTreeSet<Key>,
    old_classes: &BTreeMap<String, Class>,
    new: &BTreeSet<Key>,
    new_classes: &BTreeMap<String, Class>,
) -> Resync {
    let params_changed = |class: &str| {
        old_classes.get(class).map(|c| &c.parameters)
            != new_classes.get(class).map(|c| &c.parameters)
    };
    Resync {
        refresh: new
            .iter()
            .filter(|k| !old.contains(k) || params_changed(&k.class))
            .cloned()
            .collect(),
        removed: old.difference(new).cloned().collect(),
    }
}

/// The wait before retrying a key after its `failures`-th consecutive GetCapacity failure:
/// `start * 2^(failures-1)`, capped at `max` (`--retry-interval-start` / `-max`, as the
/// queue's own backoff).
pub fn backoff(start: Duration, max: Duration, failures: u32) -> Duration {
    let exp = failures.saturating_sub(1);
    if exp >= 32 {
        return max;
    }
    start.checked_mul(1u32 << exp).map_or(max, |d| d.min(max))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::storage::v1::{CSINodeDriver, CSINodeSpec};

    fn csi_node(name: &str, drivers: &[(&str, Option<&[&str]>)]) -> CSINode {
        CSINode {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: CSINodeSpec {
                drivers: drivers
                    .iter()
                    .map(|(d, keys)| CSINodeDriver {
                        name: d.to_string(),
                        node_id: name.into(),
                        topology_keys: keys.map(|k| k.iter().map(|s| s.to_string()).collect()),
                        allocatable: None,
                    })
                    .collect(),
            },
            status: None,
        }
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn node_segment_table() {
        let node = |labels: Option<BTreeMap<String, String>>| ObjectMeta {
            name: Some("n1".into()),
            labels,
            ..Default::default()
        };
        let labels = node(Some(map(&[("zone", "a"), ("node", "n1")])));
        let unlabelled = node(None);
        let ours = csi_node("n1", &[("drv", Some(&["node"]))]);
        let deep = csi_node("n1", &[("other", None), ("drv", Some(&["zone", "node"]))]);
        let no_keys = csi_node("n1", &[("drv", None)]);
        let missing_key = csi_node("n1", &[("drv", Some(&["rack"]))]);
        let foreign = csi_node("n1", &[("other", Some(&["node"]))]);
        type Case<'a> = (
            &'a str,
            Option<&'a CSINode>,
            Option<&'a ObjectMeta>,
            Option<Segment>,
        );
        let cases: Vec<Case> = vec![
            (
                "our entry",
                Some(&ours),
                Some(&labels),
                Some(map(&[("node", "n1")])),
            ),
            (
                "two keys",
                Some(&deep),
                Some(&labels),
                Some(map(&[("zone", "a"), ("node", "n1")])),
            ),
            (
                "no keys: empty segment",
                Some(&no_keys),
                Some(&labels),
                Some(map(&[])),
            ),
            ("label missing", Some(&missing_key), Some(&labels), None),
            ("other driver only", Some(&foreign), Some(&labels), None),
            ("no CSINode", None, Some(&labels), None),
            ("no Node", Some(&ours), None, None),
            (
                "Node without labels, no keys: empty segment",
                Some(&no_keys),
                Some(&unlabelled),
                Some(map(&[])),
            ),
            (
                "Node without labels, a key",
                Some(&ours),
                Some(&unlabelled),
                None,
            ),
        ];
        for (name, cn, l, want) in cases {
            assert_eq!(node_segment(cn, l, "drv"), want, "{name}");
        }
    }

    fn sc(name: &str, provisioner: &str, mode: &str, params: &[(&str, &str)]) -> StorageClass {
        StorageClass {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            provisioner: provisioner.into(),
            volume_binding_mode: Some(mode.into()),
            parameters: Some(map(params)).filter(|p| !p.is_empty()),
            ..Default::default()
        }
    }

    fn class(name: &str, params: &[(&str, &str)]) -> Class {
        Class {
            name: name.into(),
            parameters: map(params),
        }
    }

    #[test]
    fn class_matters_table() {
        let known = BTreeMap::from([("fast".to_string(), class("fast", &[("kind", "ssd")]))]);
        let wffc = "WaitForFirstConsumer";
        let cases = [
            (
                "unchanged",
                sc("fast", "drv", wffc, &[("kind", "ssd")]),
                false,
                false,
            ),
            (
                "new parameters",
                sc("fast", "drv", wffc, &[("kind", "hdd")]),
                false,
                true,
            ),
            (
                "became Immediate",
                sc("fast", "drv", "Immediate", &[("kind", "ssd")]),
                false,
                true,
            ),
            (
                "Immediate with the flag",
                sc("fast", "drv", "Immediate", &[("kind", "ssd")]),
                true,
                false,
            ),
            ("new class", sc("slow", "drv", wffc, &[]), false, true),
            (
                "new Immediate class",
                sc("slow", "drv", "Immediate", &[]),
                false,
                false,
            ),
            ("other driver", sc("other", "x", wffc, &[]), false, false),
            (
                "moved to other driver",
                sc("fast", "x", wffc, &[("kind", "ssd")]),
                false,
                true,
            ),
        ];
        for (name, class, include_immediate, want) in cases {
            assert_eq!(
                class_matters(&class, "drv", include_immediate, &known),
                want,
                "{name}"
            );
        }
    }

    fn key(node: &str, class: &str) -> Key {
        Key {
            segment: map(&[("node", node)]),
            class: class.into(),
        }
    }

    #[test]
    fn diff_table() {
        let classes = |p: &str| {
            BTreeMap::from([
                ("fast".to_string(), class("fast", &[("kind", p)])),
                ("slow".to_string(), class("slow", &[])),
            ])
        };
        let set = |keys: &[Key]| keys.iter().cloned().collect::<BTreeSet<_>>();
        let (a, b) = (key("a", "fast"), key("b", "fast"));
        let (sa, sb) = (key("a", "slow"), key("b", "slow"));
        type Case = (
            &'static str,
            BTreeSet<Key>,
            BTreeSet<Key>,
            &'static str,
            Resync,
        );
        let cases: Vec<Case> = vec![
            (
                "start: everything is new",
                set(&[]),
                set(&[a.clone(), sa.clone()]),
                "ssd",
                Resync {
                    refresh: vec![a.clone(), sa.clone()],
                    removed: vec![],
                },
            ),
            (
                "nothing changed",
                set(&[a.clone(), sa.clone()]),
                set(&[a.clone(), sa.clone()]),
                "ssd",
                Resync::default(),
            ),
            (
                "node joins, node leaves",
                set(&[a.clone(), sa.clone()]),
                set(&[b.clone(), sb.clone()]),
                "ssd",
                Resync {
                    refresh: vec![b.clone(), sb.clone()],
                    removed: vec![a.clone(), sa.clone()],
                },
            ),
            (
                "parameters changed: that class is re-read",
                set(&[a.clone(), sa.clone()]),
                set(&[a.clone(), sa.clone()]),
                "hdd",
                Resync {
                    refresh: vec![a.clone()],
                    removed: vec![],
                },
            ),
        ];
        for (name, old, new, params, want) in cases {
            let got = diff(&old, &classes("ssd"), &new, &classes(params));
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn backoff_table() {
        let s = Duration::from_secs(1);
        let m = Duration::from_secs(300);
        let cases = [
            (0, 1),
            (1, 1),
            (2, 2),
            (3, 4),
            (9, 256),
            (10, 300),
            (40, 300),
            (u32::MAX, 300),
        ];
        for (failures, secs) in cases {
            assert_eq!(
                backoff(s, m, failures),
                Duration::from_secs(secs),
                "{failures}"
            );
        }
    }
}
