//! Topology terms: sorted ANDs of `key=value` segments, and `flatten` of allowedTopologies.

use std::cmp::Ordering;
use std::fmt;

use csi::v1::Topology;
use k8s_openapi::api::core::v1::TopologySelectorTerm;

/// One `key=value` pair of a term.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Segment {
    /// Topology key, for example `topology.kubernetes.io/zone`.
    pub key: String,
    /// Its value.
    pub value: String,
}

/// An AND of segments, always sorted by key, then value.
///
/// Terms order like upstream's `compare`: shorter terms first, then segment by segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term(Vec<Segment>);

impl Term {
    /// A term from segments in any order.
    pub fn new(mut segments: Vec<Segment>) -> Term {
        segments.sort();
        Term(segments)
    }

    /// A term from `(key, value)` pairs in any order.
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Term {
        Term::new(
            pairs
                .into_iter()
                .map(|(key, value)| Segment {
                    key: key.into(),
                    value: value.into(),
                })
                .collect(),
        )
    }

    /// The sorted segments.
    pub fn segments(&self) -> &[Segment] {
        &self.0
    }

    /// Upstream's `subset`: every segment of `self` appears in `other`. Walks `other` once,
    /// skipping segments whose key differs from the next wanted one; a wanted key with another
    /// value fails at once.
    pub fn is_subset_of(&self, other: &Term) -> bool {
        if self.0.is_empty() {
            return true;
        }
        let mut wanted = 0;
        for have in &other.0 {
            let want = &self.0[wanted];
            if want.key != have.key {
                continue;
            }
            if want.value != have.value {
                return false;
            }
            wanted += 1;
            if wanted == self.0.len() {
                return true;
            }
        }
        false
    }

    /// The CSI form (a later duplicate key overwrites an earlier one, as in Go).
    pub fn to_csi(&self) -> Topology {
        Topology {
            segments: self
                .0
                .iter()
                .map(|s| (s.key.clone(), s.value.clone()))
                .collect(),
        }
    }
}

impl Ord for Term {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0
            .len()
            .cmp(&other.0.len())
            .then_with(|| self.0.cmp(&other.0))
    }
}

impl PartialOrd for Term {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Go's `%v`: `[{key value} {key value}]`.
impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|s| format!("{{{} {}}}", s.key, s.value))
            .collect();
        write!(f, "[{}]", parts.join(" "))
    }
}

/// Go's `%v` of a list of terms: `[[{k v}] [{k v}]]`.
pub(crate) fn display_terms(terms: &[Term]) -> String {
    let parts: Vec<String> = terms.iter().map(Term::to_string).collect();
    format!("[{}]", parts.join(" "))
}

/// Distributes each selector term's ORed values over its ANDed expressions (a cartesian
/// product), then concatenates the results of all selector terms.
///
/// `{zone: [z1, z2], rack: [A, B]}` gives `{z1,A} {z2,A} {z1,B} {z2,B}`. As upstream, an
/// expression without values drops what came before it in the same selector term.
pub fn flatten(allowed_topologies: &[TopologySelectorTerm]) -> Vec<Term> {
    let mut all = Vec::new();
    for selector in allowed_topologies {
        let mut partial: Vec<Vec<Segment>> = Vec::new();
        for expression in selector.match_label_expressions.iter().flatten() {
            let mut next = Vec::new();
            for value in &expression.values {
                let segment = Segment {
                    key: expression.key.clone(),
                    value: value.clone(),
                };
                if partial.is_empty() {
                    next.push(vec![segment]);
                } else {
                    for old in &partial {
                        let mut term = old.clone();
                        term.push(segment.clone());
                        next.push(term);
                    }
                }
            }
            partial = next;
        }
        all.extend(partial);
    }
    all.into_iter().map(Term::new).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::tests::{allowed, term};
    use pretty_assertions::assert_eq;

    // TestTopologyTermSort / Compare / Subset.
    #[test]
    fn ordering() {
        let mut terms = vec![
            term(&[("zone", "z2"), ("rack", "r1")]),
            term(&[("zone", "z1")]),
            term(&[("rack", "r2"), ("zone", "z1")]),
            term(&[]),
            term(&[("rack", "r1"), ("zone", "z1")]),
            term(&[("a", "z1")]),
        ];
        terms.sort();
        assert_eq!(
            terms,
            vec![
                term(&[]),
                term(&[("a", "z1")]),
                term(&[("zone", "z1")]),
                term(&[("rack", "r1"), ("zone", "z1")]),
                term(&[("rack", "r1"), ("zone", "z2")]),
                term(&[("rack", "r2"), ("zone", "z1")]),
            ]
        );
        assert_eq!(term(&[("b", "2"), ("a", "1")]).segments()[0].key, "a");
        assert_eq!(
            term(&[("k", "v")]).cmp(&term(&[("k", "v")])),
            Ordering::Equal
        );
    }

    #[test]
    fn subset() {
        let node = term(&[("disk", "ssd"), ("rack", "r1"), ("zone", "z1")]);
        let cases = [
            (term(&[]), true),
            (term(&[("zone", "z1")]), true),
            (term(&[("disk", "ssd"), ("zone", "z1")]), true),
            (node.clone(), true),
            (term(&[("zone", "z2")]), false),
            (term(&[("disk", "ssd"), ("zone", "z2")]), false),
            (term(&[("other", "x")]), false),
            (
                term(&[
                    ("disk", "ssd"),
                    ("rack", "r1"),
                    ("row", "1"),
                    ("zone", "z1"),
                ]),
                false,
            ),
        ];
        for (candidate, want) in cases {
            assert_eq!(candidate.is_subset_of(&node), want, "{candidate}");
        }
        assert!(!term(&[("zone", "z1")]).is_subset_of(&term(&[])));
    }

    #[test]
    fn display_like_go() {
        assert_eq!(
            term(&[("zone", "z1"), ("rack", "A")]).to_string(),
            "[{rack A} {zone z1}]"
        );
        assert_eq!(term(&[]).to_string(), "[]");
        assert_eq!(
            display_terms(&[term(&[("k", "v")]), term(&[("k", "w")])]),
            "[[{k v}] [{k w}]]"
        );
        assert_eq!(display_terms(&[]), "[]");
    }

    // TestAllowedTopologies (flattening part; ordering and dedup happen in the requirements).
    #[test]
    fn flatten_table() {
        let cases = [
            (
                "single expression, single value",
                allowed(&[&[("zone", &["z1"])]]),
                vec![term(&[("zone", "z1")])],
            ),
            (
                "single expression, multiple values",
                allowed(&[&[("zone", &["z1", "z2"])]]),
                vec![term(&[("zone", "z1")]), term(&[("zone", "z2")])],
            ),
            (
                "multiple expressions, both multiple values",
                allowed(&[&[("zone", &["z1", "z2"]), ("rack", &["A", "B"])]]),
                vec![
                    term(&[("zone", "z1"), ("rack", "A")]),
                    term(&[("zone", "z2"), ("rack", "A")]),
                    term(&[("zone", "z1"), ("rack", "B")]),
                    term(&[("zone", "z2"), ("rack", "B")]),
                ],
            ),
            (
                "multiple terms concatenate",
                allowed(&[&[("zone", &["z1"])], &[("rack", &["A"])]]),
                vec![term(&[("zone", "z1")]), term(&[("rack", "A")])],
            ),
            (
                "overlapping keys in one term",
                allowed(&[&[("zone", &["z1"]), ("zone", &["z2"])]]),
                vec![term(&[("zone", "z1"), ("zone", "z2")])],
            ),
            (
                "empty values reset the term",
                allowed(&[&[("zone", &[]), ("rack", &["A"])]]),
                vec![term(&[("rack", "A")])],
            ),
            (
                "empty values at the end drop the term",
                allowed(&[&[("rack", &["A"]), ("zone", &[])]]),
                vec![],
            ),
            ("selector term without expressions", allowed(&[&[]]), vec![]),
            ("nothing", vec![], vec![]),
        ];
        for (name, input, want) in cases {
            assert_eq!(flatten(&input), want, "{name}");
        }
    }

    #[test]
    fn to_csi_keeps_the_last_duplicate() {
        let t = term(&[("zone", "z1"), ("zone", "z2")]);
        let csi = t.to_csi();
        assert_eq!(csi.segments.len(), 1);
        assert_eq!(csi.segments["zone"], "z2");
    }
}
