//! Our published objects by name and by key, kept from the capacity change stream. The objects
//! we wrote that the cache may not show yet are in the cache's read-your-writes view
//! (`controller_kit::fresh`), not here.

use std::collections::{BTreeSet, HashMap};

use capacity::Key;
use capacity::plan::{obsolete, plan_key};
use capacity::published::Published;
use k8s_openapi::api::storage::v1::CSIStorageCapacity;

/// Our objects as the cache last showed them. Updating it twice with the same change is
/// harmless, so a rebuild from the store may overtake the change stream.
#[derive(Debug, Default)]
pub struct Index {
    objects: HashMap<String, Published>,
    by_key: HashMap<Key, BTreeSet<String>>,
}

impl Index {
    /// Records an added or updated object.
    pub fn apply(&mut self, obj: &CSIStorageCapacity) {
        let published = Published::from_object(obj);
        self.remove(&published.name);
        if let Some(key) = &published.key {
            self.by_key
                .entry(key.clone())
                .or_default()
                .insert(published.name.clone());
        }
        self.objects.insert(published.name.clone(), published);
    }

    /// Forgets a deleted object.
    pub fn remove(&mut self, name: &str) {
        let Some(old) = self.objects.remove(name) else {
            return;
        };
        if let Some(key) = old.key
            && let Some(names) = self.by_key.get_mut(&key)
        {
            names.remove(name);
            if names.is_empty() {
                self.by_key.remove(&key);
            }
        }
    }

    /// Replaces everything with the store's contents (after a relist or at a resync).
    pub fn rebuild<'a>(&mut self, objects: impl IntoIterator<Item = &'a CSIStorageCapacity>) {
        *self = Index::default();
        for obj in objects {
            self.apply(obj);
        }
    }

    /// Names of the objects representing `key`, including ones being deleted.
    pub fn names(&self, key: &Key) -> impl Iterator<Item = &str> {
        self.by_key
            .get(key)
            .into_iter()
            .flatten()
            .map(String::as_str)
    }

    /// An object not being deleted that represents `key`.
    pub fn live(&self, key: &Key) -> Option<&Published> {
        self.names(key)
            .filter_map(|n| self.objects.get(n))
            .find(|o| !o.deleting)
    }

    /// Whether some object not being deleted represents `key`.
    pub fn has_live(&self, key: &Key) -> bool {
        self.live(key).is_some()
    }

    /// Every object, as last seen.
    pub fn all(&self) -> impl Iterator<Item = &Published> {
        self.objects.values()
    }

    /// How many objects represent no desired key (upstream's `csistoragecapacities_obsolete`:
    /// duplicates of a desired key are not counted, though they go too).
    pub fn obsolete_count(&self, desired: &BTreeSet<Key>) -> usize {
        obsolete(self.objects.values(), desired).len()
    }

    /// Objects that must go: obsolete ones, and all but one per key (plan_key's survivor rule).
    pub fn doomed(&self, desired: &BTreeSet<Key>) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = obsolete(self.objects.values(), desired)
            .into_iter()
            .collect();
        for (key, names) in &self.by_key {
            if names.len() > 1 {
                out.extend(self.duplicates(key));
            }
        }
        out
    }

    /// Whether the object `name` must go (see [`doomed`](Self::doomed)).
    pub fn is_doomed(&self, name: &str, desired: &BTreeSet<Key>) -> bool {
        let Some(obj) = self.objects.get(name) else {
            return false;
        };
        match &obj.key {
            _ if obj.deleting => false,
            Some(key) if desired.contains(key) => self.duplicates(key).iter().any(|n| n == name),
            _ => true,
        }
    }

    /// The objects of `key` beyond the one that stays.
    pub fn duplicates(&self, key: &Key) -> Vec<String> {
        let group: Vec<&Published> = self
            .names(key)
            .filter_map(|n| self.objects.get(n))
            .collect();
        plan_key(None, &group, None).delete_duplicates
    }

    /// How many desired keys have an object (`csistoragecapacities_desired_current`).
    pub fn current(&self, desired: &BTreeSet<Key>) -> usize {
        desired.iter().filter(|k| self.has_live(k)).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capacity::Capacity;
    use capacity::published::{ObjectTemplate, build_object};

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
    fn index_tracks_keys_doomed_and_current() {
        let (a, b, gone) = (key("a", "fast"), key("b", "fast"), key("z", "fast"));
        let desired = BTreeSet::from([a.clone(), b.clone()]);
        let mut index = Index::default();
        index.apply(&obj("csisc-2", &a, "1"));
        index.apply(&obj("csisc-1", &a, "1"));
        index.apply(&obj("csisc-3", &gone, "1"));
        assert_eq!(
            index.doomed(&desired),
            BTreeSet::from(["csisc-2".to_string(), "csisc-3".to_string()]),
            "duplicate loser and obsolete object"
        );
        assert_eq!(index.current(&desired), 1);
        assert_eq!(
            index.obsolete_count(&desired),
            1,
            "the duplicate is not obsolete"
        );
        assert!(index.has_live(&a) && !index.has_live(&b));
        let doomed: Vec<bool> = ["csisc-1", "csisc-2", "csisc-3", "nope"]
            .iter()
            .map(|n| index.is_doomed(n, &desired))
            .collect();
        assert_eq!(doomed, [false, true, true, false]);
        assert_eq!(index.duplicates(&a), ["csisc-2"]);

        // Re-applying is idempotent; a changed key moves the name.
        index.apply(&obj("csisc-3", &gone, "2"));
        index.apply(&obj("csisc-3", &b, "3"));
        assert_eq!(index.names(&gone).count(), 0);
        assert_eq!(index.current(&desired), 2);

        index.remove("csisc-1");
        index.remove("csisc-1");
        assert_eq!(index.names(&a).collect::<Vec<_>>(), ["csisc-2"]);
        assert!(index.doomed(&desired).is_empty());

        let mut deleting = obj("csisc-4", &b, "1");
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        index.rebuild([&deleting]);
        assert!(!index.has_live(&b));
        assert_eq!(index.names(&b).count(), 1);
        assert!(index.doomed(&desired).is_empty(), "already going");
    }
}
