//! The set of (segment, class) pairs that should each have exactly one object.

use std::collections::BTreeSet;

use crate::class::Class;
use crate::segment::Segment;

/// One published pair: the unit of work of the capacity controller.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// The topology segment: the object's `nodeTopology` label selector.
    pub segment: Segment,
    /// The StorageClass name.
    pub class: String,
}

/// Every segment × every eligible class.
pub fn desired_keys(segments: &BTreeSet<Segment>, classes: &[Class]) -> BTreeSet<Key> {
    segments
        .iter()
        .flat_map(|s| {
            classes.iter().map(move |c| Key {
                segment: s.clone(),
                class: c.name.clone(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cross_product() {
        let seg = |v: &str| Segment::from([("node".to_string(), v.to_string())]);
        let segments = BTreeSet::from([seg("a"), seg("b")]);
        let classes = vec![
            Class {
                name: "x".into(),
                parameters: Default::default(),
            },
            Class {
                name: "y".into(),
                parameters: Default::default(),
            },
        ];
        let keys = desired_keys(&segments, &classes);
        assert_eq!(keys.len(), 4);
        assert!(keys.contains(&Key {
            segment: seg("b"),
            class: "x".into()
        }));
        assert!(desired_keys(&segments, &[]).is_empty());
        assert!(desired_keys(&BTreeSet::new(), &classes).is_empty());
    }
}
