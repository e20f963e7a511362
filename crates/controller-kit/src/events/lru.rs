//! A small string-keyed LRU cache, as `k8s.io/utils/lru` in client-go's event correlator:
//! reads and writes both count as use; the least recently used entry goes when full.
//!
//! Keys are kept as 64-bit hashes, not strings: the correlator's keys are a few hundred bytes
//! each (source, object, reason, message), and its three caches hold 4096 entries each once
//! a few thousand claims have come and gone. The hasher's keys are random per process, so
//! claim names cannot be chosen to collide; by chance two of 4096 keys collide with a
//! probability of about 10^-12 (two events would then be aggregated as one).

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;

#[derive(Debug, Clone)]
pub(crate) struct Lru<V> {
    capacity: usize,
    tick: u64,
    hasher: RandomState,
    entries: HashMap<u64, (V, u64)>,
    /// Use order: tick of last use -> key hash.
    order: BTreeMap<u64, u64>,
}

impl<V> Lru<V> {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            tick: 0,
            hasher: RandomState::new(),
            entries: HashMap::new(),
            order: BTreeMap::new(),
        }
    }

    fn touch(&mut self, key: u64) -> Option<&mut V> {
        let (value, used) = self.entries.get_mut(&key)?;
        self.order.remove(used);
        self.tick += 1;
        *used = self.tick;
        self.order.insert(self.tick, key);
        Some(value)
    }

    /// The entry for `key`, marked as just used.
    pub(crate) fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        let key = self.hasher.hash_one(key);
        self.touch(key)
    }

    /// Inserts or replaces `key`, evicting the least recently used entry if full.
    pub(crate) fn put(&mut self, key: &str, value: V) {
        let key = self.hasher.hash_one(key);
        if let Some(slot) = self.touch(key) {
            *slot = value;
            return;
        }
        if self.entries.len() >= self.capacity
            && let Some((_, oldest)) = self.order.pop_first()
        {
            self.entries.remove(&oldest);
        }
        self.tick += 1;
        self.order.insert(self.tick, key);
        self.entries.insert(key, (value, self.tick));
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used() {
        let mut lru = Lru::new(2);
        lru.put("a", 1);
        lru.put("b", 2);
        assert_eq!(lru.get_mut("a"), Some(&mut 1)); // a is now newer than b
        lru.put("c", 3);
        assert_eq!(lru.len(), 2);
        assert_eq!(lru.get_mut("b"), None);
        assert_eq!(lru.get_mut("a"), Some(&mut 1));
        assert_eq!(lru.get_mut("c"), Some(&mut 3));
    }

    #[test]
    fn put_replaces_and_refreshes() {
        let mut lru = Lru::new(2);
        lru.put("a", 1);
        lru.put("b", 2);
        lru.put("a", 10); // refresh a: b is the oldest
        lru.put("c", 3);
        assert_eq!(lru.get_mut("a"), Some(&mut 10));
        assert_eq!(lru.get_mut("b"), None);
    }

    #[test]
    fn zero_capacity_still_holds_one() {
        let mut lru = Lru::new(0);
        lru.put("a", 1);
        lru.put("b", 2);
        assert_eq!(lru.len(), 1);
        assert_eq!(lru.get_mut("b"), Some(&mut 2));
    }
}
