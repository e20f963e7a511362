//! What to write for one (segment, class) pair, and which objects are obsolete.

use std::collections::BTreeSet;

use crate::desired::Key;
use crate::published::Published;
use crate::value::Capacity;

/// The write needed to make the published object of one key match the latest reading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    /// No object exists yet: create one.
    Create,
    /// The object `name` shows old values or lacks our owner: replace it.
    Update {
        /// The existing object to replace.
        name: String,
    },
    /// Nothing to do.
    Nothing,
}

/// The plan for one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyPlan {
    /// What to do with the object that stays.
    pub write: Write,
    /// Further objects for the same key: the scheduler ORs them, so only one may exist.
    pub delete_duplicates: Vec<String>,
}

/// Plans one key from the latest reading and the objects that currently represent it.
///
/// - No reading yet (GetCapacity never succeeded) → no object is created; an existing object
///   keeps its last value, as upstream does (staleness is exposed in metrics instead).
/// - Several objects for one key (e.g. left by a crashed instance) → keep the one with the
///   smallest name, so every replica picks the same survivor, and delete the rest.
/// - Update only when a value or the owner differs: no-op writes cost API budget and requeue
///   nothing in the scheduler.
pub fn plan_key(
    reading: Option<Capacity>,
    objects: &[&Published],
    owner_uid: Option<&str>,
) -> KeyPlan {
    let mut live: Vec<&Published> = objects.iter().copied().filter(|o| !o.deleting).collect();
    live.sort_by(|a, b| a.name.cmp(&b.name));
    let delete_duplicates = live.iter().skip(1).map(|o| o.name.clone()).collect();
    let write = match (live.first(), reading) {
        (None, Some(_)) => Write::Create,
        (None, None) | (Some(_), None) => Write::Nothing,
        (Some(obj), Some(reading)) => {
            let values_differ = obj.capacity != Some(reading.available)
                || obj.maximum_volume_size != reading.maximum_volume_size;
            let owner_differs =
                owner_uid.is_some_and(|uid| obj.controller_uid.as_deref() != Some(uid));
            if values_differ || owner_differs {
                Write::Update {
                    name: obj.name.clone(),
                }
            } else {
                Write::Nothing
            }
        }
    };
    KeyPlan {
        write,
        delete_duplicates,
    }
}

/// Names of our objects that represent no desired key (class or segment gone, or a shape we
/// never write). Objects already being deleted are left alone.
pub fn obsolete<'a>(
    published: impl IntoIterator<Item = &'a Published>,
    desired: &BTreeSet<Key>,
) -> Vec<String> {
    published
        .into_iter()
        .filter(|o| !o.deleting)
        .filter(|o| o.key.as_ref().is_none_or(|k| !desired.contains(k)))
        .map(|o| o.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::Segment;

    fn key(node: &str, class: &str) -> Key {
        Key {
            segment: Segment::from([("node".into(), node.into())]),
            class: class.into(),
        }
    }

    fn obj(
        name: &str,
        k: Option<Key>,
        cap: Option<i64>,
        max: Option<i64>,
        owner: Option<&str>,
    ) -> Published {
        Published {
            name: name.into(),
            key: k,
            capacity: cap,
            maximum_volume_size: max,
            controller_uid: owner.map(String::from),
            deleting: false,
        }
    }

    fn cap(a: i64, m: Option<i64>) -> Option<Capacity> {
        Some(Capacity::from_response(a, m))
    }

    #[test]
    fn plan_table() {
        let k = Some(key("n1", "fast"));
        let a = obj("csisc-a", k.clone(), Some(10), None, None);
        let b = obj("csisc-b", k.clone(), Some(10), None, None);
        let owned = obj("csisc-a", k.clone(), Some(10), None, Some("uid-1"));
        let mut gone = obj("csisc-0", k.clone(), Some(1), None, None);
        gone.deleting = true;
        type Case<'a> = (
            &'a str,
            Option<Capacity>,
            Vec<&'a Published>,
            Option<&'a str>,
            KeyPlan,
        );
        let cases: Vec<Case> = vec![
            (
                "nothing yet, no reading",
                None,
                vec![],
                None,
                plan(Write::Nothing, &[]),
            ),
            (
                "first reading creates",
                cap(10, None),
                vec![],
                None,
                plan(Write::Create, &[]),
            ),
            (
                "same value: no write",
                cap(10, None),
                vec![&a],
                None,
                plan(Write::Nothing, &[]),
            ),
            (
                "changed capacity updates",
                cap(9, None),
                vec![&a],
                None,
                plan(upd("csisc-a"), &[]),
            ),
            (
                "new maximum updates",
                cap(10, Some(5)),
                vec![&a],
                None,
                plan(upd("csisc-a"), &[]),
            ),
            (
                "failed reading keeps stale",
                None,
                vec![&a],
                None,
                plan(Write::Nothing, &[]),
            ),
            (
                "missing owner updates",
                cap(10, None),
                vec![&a],
                Some("uid-1"),
                plan(upd("csisc-a"), &[]),
            ),
            (
                "right owner: no write",
                cap(10, None),
                vec![&owned],
                Some("uid-1"),
                plan(Write::Nothing, &[]),
            ),
            (
                "duplicates: keep smallest name",
                cap(10, None),
                vec![&b, &a],
                None,
                plan(Write::Nothing, &["csisc-b"]),
            ),
            (
                "object being deleted is ignored",
                cap(1, None),
                vec![&gone],
                None,
                plan(Write::Create, &[]),
            ),
        ];
        for (name, reading, objects, owner, want) in cases {
            assert_eq!(plan_key(reading, &objects, owner), want, "{name}");
        }
    }

    fn plan(write: Write, dups: &[&str]) -> KeyPlan {
        KeyPlan {
            write,
            delete_duplicates: dups.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn upd(name: &str) -> Write {
        Write::Update { name: name.into() }
    }

    #[test]
    fn obsolete_objects() {
        let desired = BTreeSet::from([key("n1", "fast")]);
        let keep = obj("keep", Some(key("n1", "fast")), Some(1), None, None);
        let old_class = obj("old-class", Some(key("n1", "slow")), Some(1), None, None);
        let old_node = obj("old-node", Some(key("n9", "fast")), Some(1), None, None);
        let odd_shape = obj("odd", None, Some(1), None, None);
        let mut deleting = obj("deleting", Some(key("n9", "fast")), Some(1), None, None);
        deleting.deleting = true;
        let got = obsolete(
            [&keep, &old_class, &old_node, &odd_shape, &deleting],
            &desired,
        );
        assert_eq!(got, ["old-class", "old-node", "odd"]);
    }
}
