//! Which published pairs a newly created or deleted volume affects.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::VolumeNodeAffinity;

use crate::desired::Key;
use crate::segment::Segment;

/// The keys whose capacity a volume of `class` with this node affinity changed.
///
/// A volume without usable node affinity may live anywhere, so every segment of its class may
/// have changed. Otherwise each affinity term is read as a segment (only `In` with exactly one
/// value, as upstream's termToSegment), and a key of *any* class is affected when its segment
/// does not contradict the term: classes of one driver usually share the pool behind a
/// segment, so the other classes' values moved too (upstream also refreshes every class of the
/// segment). Differs from upstream, which requires the segment to equal the term: with
/// node-level segments and zone-level volumes (or the reverse) upstream refreshes nothing and
/// waits for the next poll.
pub fn keys_for_volume(
    affinity: Option<&VolumeNodeAffinity>,
    class: &str,
    desired: &BTreeSet<Key>,
) -> Vec<Key> {
    let terms = match term_segments(affinity) {
        Some(terms) if !terms.is_empty() => terms,
        _ => {
            return desired
                .iter()
                .filter(|k| k.class == class)
                .cloned()
                .collect();
        }
    };
    desired
        .iter()
        .filter(|k| terms.iter().any(|t| compatible(&k.segment, t)))
        .cloned()
        .collect()
}

/// Required node-affinity terms as segments; `None` when there is no usable affinity.
fn term_segments(affinity: Option<&VolumeNodeAffinity>) -> Option<Vec<Segment>> {
    let terms = &affinity?.required.as_ref()?.node_selector_terms;
    Some(
        terms
            .iter()
            .filter(|t| t.match_fields.as_ref().is_none_or(Vec::is_empty))
            .filter_map(|t| {
                t.match_expressions
                    .as_ref()?
                    .iter()
                    .map(|e| match (e.operator.as_str(), e.values.as_deref()) {
                        ("In", Some([v])) => Some((e.key.clone(), v.clone())),
                        _ => None,
                    })
                    .collect::<Option<Segment>>()
            })
            .collect(),
    )
}

fn compatible(segment: &Segment, term: &Segment) -> bool {
    term.iter()
        .all(|(k, v)| segment.get(k).is_none_or(|sv| sv == v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};

    fn seg(pairs: &[(&str, &str)]) -> Segment {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn affinity(terms: &[&[(&str, &str, &[&str])]]) -> VolumeNodeAffinity {
        VolumeNodeAffinity {
            required: Some(NodeSelector {
                node_selector_terms: terms
                    .iter()
                    .map(|exprs| NodeSelectorTerm {
                        match_expressions: Some(
                            exprs
                                .iter()
                                .map(|(k, op, vals)| NodeSelectorRequirement {
                                    key: k.to_string(),
                                    operator: op.to_string(),
                                    values: Some(vals.iter().map(|v| v.to_string()).collect()),
                                })
                                .collect(),
                        ),
                        match_fields: None,
                    })
                    .collect(),
            }),
        }
    }

    #[test]
    fn table() {
        let desired: BTreeSet<Key> = [
            (seg(&[("node", "n1")]), "fast"),
            (seg(&[("node", "n2")]), "fast"),
            (seg(&[("node", "n1")]), "slow"),
        ]
        .into_iter()
        .map(|(segment, class)| Key {
            segment,
            class: class.into(),
        })
        .collect();
        let nodes = |keys: Vec<Key>| {
            keys.into_iter()
                .map(|k| format!("{}/{}", k.segment["node"], k.class))
                .collect::<Vec<_>>()
        };
        let on_n1 = affinity(&[&[("node", "In", &["n1"])]]);
        let on_n1_or_n2 = affinity(&[&[("node", "In", &["n1"])], &[("node", "In", &["n2"])]]);
        let zone_only = affinity(&[&[("zone", "In", &["a"])]]);
        let not_in = affinity(&[&[("node", "NotIn", &["n1"])]]);
        // Every class of the volume's node: they share its pool.
        assert_eq!(
            nodes(keys_for_volume(Some(&on_n1), "fast", &desired)),
            ["n1/fast", "n1/slow"]
        );
        assert_eq!(
            nodes(keys_for_volume(Some(&on_n1_or_n2), "fast", &desired)),
            ["n1/fast", "n1/slow", "n2/fast"]
        );
        assert_eq!(
            nodes(keys_for_volume(None, "fast", &desired)),
            ["n1/fast", "n2/fast"]
        );
        // A term on another key contradicts nothing: every node segment may have changed.
        assert_eq!(
            nodes(keys_for_volume(Some(&zone_only), "fast", &desired)),
            ["n1/fast", "n1/slow", "n2/fast"]
        );
        // Unusable terms fall back to the whole class.
        assert_eq!(
            nodes(keys_for_volume(Some(&not_in), "slow", &desired)),
            ["n1/slow"]
        );
        // A class without objects still refreshes the others of its node.
        assert_eq!(
            nodes(keys_for_volume(Some(&on_n1), "absent", &desired)),
            ["n1/fast", "n1/slow"]
        );
        assert!(keys_for_volume(None, "absent", &desired).is_empty());
    }
}
