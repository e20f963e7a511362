//! Objects someone else publishes for our keys (ours, not in upstream).
//!
//! kube-scheduler accepts a node for a claim when *any* CSIStorageCapacity of the claim's class
//! whose `nodeTopology` selects the node says there is room. An object we do not manage (another
//! producer, a hand-made one, a left-over of an old deployment) that selects one of our segments
//! for one of our classes is therefore OR-ed with ours: it can send volumes where we say there
//! is no room. We cannot know which one is right, so we say so and leave it.

use std::collections::BTreeSet;

use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use crate::{Key, MANAGED_BY_LABEL, Segment};

/// The desired keys a foreign object overlaps: same class, and its `nodeTopology` selects the
/// nodes of the key's segment. Empty for objects we manage (`managed_by`), objects without a
/// topology (the scheduler matches them to no node) and objects of other classes.
pub fn overlaps(
    object: &CSIStorageCapacity,
    managed_by: &str,
    desired: &BTreeSet<Key>,
) -> Vec<Key> {
    let ours = object
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(MANAGED_BY_LABEL))
        .is_some_and(|m| m == managed_by);
    let Some(selector) = object.node_topology.as_ref().filter(|_| !ours) else {
        return Vec::new();
    };
    desired
        .iter()
        .filter(|k| k.class == object.storage_class_name && selects(selector, &k.segment))
        .cloned()
        .collect()
}

/// Whether `selector` matches a node carrying the labels of `segment` (and no others that the
/// selector asks about: a selector naming a label the segment lacks is judged on its absence).
pub fn selects(selector: &LabelSelector, segment: &Segment) -> bool {
    let labels_ok = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| segment.get(k) == Some(v));
    labels_ok
        && selector
            .match_expressions
            .iter()
            .flatten()
            .all(|r| requirement(r, segment))
}

fn requirement(r: &LabelSelectorRequirement, segment: &Segment) -> bool {
    let value = segment.get(&r.key);
    let values = r.values.as_deref().unwrap_or_default();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        // The API server rejects other operators; an unknown one selects nothing.
        _ => false,
    }
}

/// One line for the Warning event on a foreign object and the log.
pub fn message(object_name: &str, keys: &[Key], managed_by: &str) -> String {
    let what: Vec<String> = keys
        .iter()
        .map(|k| format!("{} ({})", crate::segment::display(&k.segment), k.class))
        .collect();
    format!(
        "CSIStorageCapacity {object_name} is not managed by this provisioner \
         ({MANAGED_BY_LABEL}={managed_by}) but covers the same storage class and topology as \
         its objects for {}; kube-scheduler accepts a node if any of them has room, so this \
         one can send volumes where the driver has none. Delete it, or give it a storage \
         class or topology of its own",
        what.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(node: &str, class: &str) -> Key {
        Key {
            segment: Segment::from([("topology/node".to_string(), node.to_string())]),
            class: class.into(),
        }
    }

    fn object(
        class: &str,
        managed_by: Option<&str>,
        topology: serde_json::Value,
    ) -> CSIStorageCapacity {
        let labels = managed_by.map(|m| json!({MANAGED_BY_LABEL: m}));
        serde_json::from_value(json!({
            "metadata": {"name": "x", "labels": labels},
            "storageClassName": class,
            "nodeTopology": topology,
        }))
        .unwrap()
    }

    #[test]
    fn which_objects_overlap() {
        let desired: BTreeSet<Key> = [key("a", "fast"), key("b", "fast"), key("a", "slow")].into();
        let on_a = json!({"matchLabels": {"topology/node": "a"}});
        let cases = [
            // (object, overlapped keys)
            (object("fast", None, on_a.clone()), vec![key("a", "fast")]),
            (
                object("fast", Some("someone-else"), on_a.clone()),
                vec![key("a", "fast")],
            ),
            (
                object("fast", Some("external-provisioner"), on_a.clone()),
                vec![],
            ),
            (object("other", None, on_a.clone()), vec![]),
            (
                object("fast", None, json!({"matchLabels": {"topology/node": "c"}})),
                vec![],
            ),
            // An empty selector selects every node.
            (
                object("fast", None, json!({})),
                vec![key("a", "fast"), key("b", "fast")],
            ),
            (object("fast", None, serde_json::Value::Null), vec![]),
            (
                object(
                    "fast",
                    None,
                    json!({"matchExpressions": [
                    {"key": "topology/node", "operator": "In", "values": ["b", "z"]}]}),
                ),
                vec![key("b", "fast")],
            ),
            (
                object(
                    "fast",
                    None,
                    json!({"matchExpressions": [
                    {"key": "topology/node", "operator": "NotIn", "values": ["b"]}]}),
                ),
                vec![key("a", "fast")],
            ),
            (
                object(
                    "slow",
                    None,
                    json!({"matchExpressions": [
                    {"key": "topology/node", "operator": "Exists"}]}),
                ),
                vec![key("a", "slow")],
            ),
            (
                object(
                    "fast",
                    None,
                    json!({"matchExpressions": [
                    {"key": "topology/zone", "operator": "DoesNotExist"}]}),
                ),
                vec![key("a", "fast"), key("b", "fast")],
            ),
            (
                object(
                    "fast",
                    None,
                    json!({"matchExpressions": [
                    {"key": "topology/zone", "operator": "Exists"}]}),
                ),
                vec![],
            ),
        ];
        for (o, want) in cases {
            assert_eq!(
                overlaps(&o, "external-provisioner", &desired),
                want,
                "{:?}",
                o.node_topology
            );
        }
    }

    #[test]
    fn message_names_object_keys_and_the_fix() {
        let m = message("ns/hand-made", &[key("a", "fast")], "external-provisioner");
        assert!(
            m.contains("ns/hand-made") && m.contains("topology/node=a (fast)"),
            "{m}"
        );
        assert!(m.contains("Delete it"), "{m}");
    }
}
