//! A small string-keyed LRU cache, as `k8s.io/utils/lru` in client-go's event correlator:
//! reads and writes both count as use; the least recently used entry goes when full.

use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Clone)]
pub(crate) struct Lru<V> {
    capacity: usize,
    tick: u64,
    entries: HashMap<String, (V, u64)>,
    /// Use order: tick of last use -> key.
    order: BTreeMap<u64, String>,
}

impl<V> Lru<V> {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            tick: 0,
            entries: HashMap::new(),
            order: BTreeMap::new(),
        }
    }

    fn touch(&mut self, key: &str) -> Option<&mut V> {
        let (value, used) = self.entries.get_mut(key)?;
        self.order.remove(used);
        self.tick += 1;
        *used = self.tick;
        self.order.insert(self.tick, key.to_string());
        Some(value)
    }

    /// The entry for `key`, marked as just used.
    pub(crate) fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        self.touch(key)
    }

    /// Inserts or replaces `key`, evicting the least recently used entry if full.
    pub(crate) fn put(&mut self, key: String, value: V) {
        if let Some(slot) = self.touch(&key) {
            *slot = value;
            return;
        }
        if self.entries.len() >= self.capacity
            && let Some((_, oldest)) = self.order.pop_first()
        {
            self.entries.remove(&oldest);
        }
        self.tick += 1;
        self.order.insert(self.tick, key.clone());
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
        lru.put("a".into(), 1);
        lru.put("b".into(), 2);
        assert_eq!(lru.get_mut("a"), Some(&mut 1)); // a is now newer than b
        lru.put("c".into(), 3);
        assert_eq!(lru.len(), 2);
        assert_eq!(lru.get_mut("b"), None);
        assert_eq!(lru.get_mut("a"), Some(&mut 1));
        assert_eq!(lru.get_mut("c"), Some(&mut 3));
    }

    #[test]
    fn put_replaces_and_refreshes() {
        let mut lru = Lru::new(2);
        lru.put("a".into(), 1);
        lru.put("b".into(), 2);
        lru.put("a".into(), 10); // refresh a: b is the oldest
        lru.put("c".into(), 3);
        assert_eq!(lru.get_mut("a"), Some(&mut 10));
        assert_eq!(lru.get_mut("b"), None);
    }

    #[test]
    fn zero_capacity_still_holds_one() {
        let mut lru = Lru::new(0);
        lru.put("a".into(), 1);
        lru.put("b".into(), 2);
        assert_eq!(lru.len(), 1);
        assert_eq!(lru.get_mut("b"), Some(&mut 2));
    }
}
