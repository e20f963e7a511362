//! The objects we created or updated that the cache may not show yet, and which version of an
//! object the next write therefore builds on (resourceVersions compared for equality only).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::storage::v1::CSIStorageCapacity;

/// An object we created or updated, remembered until the cache shows our write: the next
/// write must build on it, or it would create a duplicate (after a create) or fail with a
/// conflict (after an update).
#[derive(Clone, Debug, PartialEq)]
pub struct Written {
    /// The resourceVersion our write replaced; `None` for a create.
    pub base: Option<String>,
    /// The object as our write left it.
    pub object: Arc<CSIStorageCapacity>,
}

impl Written {
    /// The object's name.
    pub fn name(&self) -> &str {
        self.object.metadata.name.as_deref().unwrap_or_default()
    }
}

/// Which version of an object the next write builds on, given what the cache shows
/// (`cached`, same name) and what we wrote. Also says whether to keep remembering the write.
///
/// resourceVersions are opaque, so only equality is used: the cache still showing the version
/// we replaced means it lags behind; showing our version means it caught up; anything else
/// means someone wrote after us, and the cache is the truth.
pub fn base_for_write(
    cached: Option<&Arc<CSIStorageCapacity>>,
    written: &Written,
) -> (Option<Arc<CSIStorageCapacity>>, bool) {
    match cached {
        None if written.base.is_none() => (Some(written.object.clone()), true),
        // We updated an object the cache no longer has: it was deleted.
        None => (None, false),
        Some(c) => {
            let rv = c.metadata.resource_version.as_deref();
            if rv.is_some() && rv == written.base.as_deref() {
                (Some(written.object.clone()), true)
            } else {
                (Some(c.clone()), false)
            }
        }
    }
}

/// The objects representing one key, as the next write should see them: the cache's,
/// with our unconfirmed write in place of (or in addition to) the cached version.
pub fn objects_for_key(
    cached: Vec<Arc<CSIStorageCapacity>>,
    written: Option<&Written>,
) -> (Vec<Arc<CSIStorageCapacity>>, bool) {
    let Some(written) = written else {
        return (cached, false);
    };
    let mut by_name: BTreeMap<String, Arc<CSIStorageCapacity>> = cached
        .into_iter()
        .map(|o| (o.metadata.name.clone().unwrap_or_default(), o))
        .collect();
    let (base, keep) = base_for_write(by_name.get(written.name()), written);
    match base {
        Some(obj) => by_name.insert(written.name().to_string(), obj),
        None => by_name.remove(written.name()),
    };
    (by_name.into_values().collect(), keep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desired::Key;
    use crate::published::{ObjectTemplate, build_object};
    use crate::value::Capacity;

    fn key(node: &str, class: &str) -> Key {
        Key {
            segment: [("node".to_string(), node.to_string())].into(),
            class: class.into(),
        }
    }

    fn obj(name: &str, k: &Key, rv: &str) -> CSIStorageCapacity {
        let template = ObjectTemplate {
            namespace: "ns".into(),
            driver: "drv".into(),
            managed_by: "external-provisioner".into(),
            owner: None,
        };
        let mut o = build_object(k, Capacity::from_response(1, None), &template);
        o.metadata.name = Some(name.into());
        o.metadata.resource_version = Some(rv.into());
        o
    }

    #[test]
    fn base_for_write_table() {
        let k = key("a", "fast");
        let created = Written {
            base: None,
            object: Arc::new(obj("csisc-1", &k, "10")),
        };
        let updated = Written {
            base: Some("10".into()),
            object: Arc::new(obj("csisc-1", &k, "11")),
        };
        let at = |rv: &str| Arc::new(obj("csisc-1", &k, rv));
        type Case<'a> = (
            &'a str,
            Option<Arc<CSIStorageCapacity>>,
            &'a Written,
            Option<&'a str>,
            bool,
        );
        let cases: Vec<Case> = vec![
            ("created, not cached yet", None, &created, Some("10"), true),
            (
                "created and cached",
                Some(at("10")),
                &created,
                Some("10"),
                false,
            ),
            (
                "updated, cache lags",
                Some(at("10")),
                &updated,
                Some("11"),
                true,
            ),
            (
                "updated, cache caught up",
                Some(at("11")),
                &updated,
                Some("11"),
                false,
            ),
            (
                "someone wrote after us",
                Some(at("12")),
                &updated,
                Some("12"),
                false,
            ),
            ("updated, then deleted", None, &updated, None, false),
        ];
        for (name, cached, written, want_rv, want_keep) in cases {
            let (base, keep) = base_for_write(cached.as_ref(), written);
            let rv = base
                .as_ref()
                .and_then(|b| b.metadata.resource_version.as_deref());
            assert_eq!((rv, keep), (want_rv, want_keep), "{name}");
        }
    }

    #[test]
    fn objects_for_key_adds_or_replaces_the_written_one() {
        let k = key("a", "fast");
        let other = Arc::new(obj("csisc-0", &k, "5"));
        let created = Written {
            base: None,
            object: Arc::new(obj("csisc-1", &k, "10")),
        };
        let names = |v: &[Arc<CSIStorageCapacity>]| {
            v.iter()
                .map(|o| o.metadata.name.clone().unwrap())
                .collect::<Vec<_>>()
        };
        let (objs, keep) = objects_for_key(vec![other.clone()], Some(&created));
        assert_eq!(
            (names(&objs), keep),
            (vec!["csisc-0".into(), "csisc-1".into()], true)
        );
        let (objs, keep) = objects_for_key(vec![other.clone()], None);
        assert_eq!((names(&objs), keep), (vec!["csisc-0".to_string()], false));
        let updated = Written {
            base: Some("5".into()),
            object: Arc::new(obj("csisc-0", &k, "6")),
        };
        let (objs, keep) = objects_for_key(vec![other], Some(&updated));
        assert_eq!(objs[0].metadata.resource_version.as_deref(), Some("6"));
        assert!(keep);
        let (objs, keep) = objects_for_key(vec![], Some(&updated));
        assert!(objs.is_empty() && !keep);
    }
}
