//! Which of our attempts restore from which snapshot. A finished restore takes our
//! source-protection finalizer off its snapshot only when no other attempt of ours still
//! restores from it; upstream takes it off regardless, and the snapshot can then be deleted
//! under the other restore. The last one out takes it off; a failed attempt leaves it to the
//! orphan sweep, as upstream.
//!
//! One turn per snapshot orders a release's look and write against another attempt's look and
//! add. And once we took the finalizer off, a cached copy still showing it is older than our
//! write: the next restore reads the snapshot instead of believing it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// A snapshot: namespace and name.
pub(crate) type SnapshotKey = (String, String);

/// How long our removal is remembered against a lagging cache (far longer than a watch lags).
const RELEASE_MEMORY: Duration = Duration::from_secs(600);

/// The bookkeeping itself, without locking: pure, so it is tested on its own.
#[derive(Debug, Default)]
pub(crate) struct Restorers {
    /// Claim UIDs whose attempt is restoring from each snapshot.
    by_snapshot: HashMap<SnapshotKey, HashSet<String>>,
    /// Snapshots we took the finalizer off: the resourceVersion our write left, and when.
    released: HashMap<SnapshotKey, (String, Instant)>,
}

impl Restorers {
    pub(crate) fn begin(&mut self, key: SnapshotKey, uid: &str) {
        self.by_snapshot
            .entry(key)
            .or_default()
            .insert(uid.to_string());
    }

    pub(crate) fn end(&mut self, uid: &str) {
        self.by_snapshot.retain(|_, uids| {
            uids.remove(uid);
            !uids.is_empty()
        });
    }

    /// How many attempts other than `uid`'s restore from the snapshot.
    pub(crate) fn others(&self, key: &SnapshotKey, uid: &str) -> usize {
        self.by_snapshot
            .get(key)
            .map_or(0, |uids| uids.iter().filter(|u| *u != uid).count())
    }

    /// Our write took the finalizer off, leaving `resource_version`.
    pub(crate) fn released(&mut self, key: SnapshotKey, resource_version: String, now: Instant) {
        self.released
            .retain(|_, (_, at)| now.duration_since(*at) < RELEASE_MEMORY);
        self.released.insert(key, (resource_version, now));
    }

    /// What we know of the finalizer is fresh again (our add, or a read from the API server).
    pub(crate) fn settled(&mut self, key: &SnapshotKey) {
        self.released.remove(key);
    }

    /// Whether a cached copy (at `cached_version`) that shows our finalizer can be believed:
    /// not while it may predate our taking it off.
    pub(crate) fn cached_finalizer_believed(
        &self,
        key: &SnapshotKey,
        cached_version: Option<&str>,
        now: Instant,
    ) -> bool {
        match self.released.get(key) {
            None => true,
            Some((_, at)) if now.duration_since(*at) >= RELEASE_MEMORY => true,
            // Our own write's version has no finalizer; any other may be older than it.
            Some((ours, _)) => cached_version == Some(ours.as_str()),
        }
    }
}

/// The shared state: the bookkeeping and the turns.
#[derive(Debug, Default)]
pub(crate) struct SnapshotUse {
    restorers: Arc<Mutex<Restorers>>,
    turns: Mutex<HashMap<SnapshotKey, Arc<tokio::sync::Mutex<()>>>>,
}

impl SnapshotUse {
    /// The turn whose holder alone looks at and writes our finalizer on the snapshot. Turns
    /// no one holds or waits for are dropped on the way.
    pub(crate) fn turn(&self, key: &SnapshotKey) -> Arc<tokio::sync::Mutex<()>> {
        let mut turns = self.turns.lock();
        turns.retain(|_, turn| Arc::strong_count(turn) > 1);
        turns.entry(key.clone()).or_default().clone()
    }

    /// An attempt of `uid` that may restore: whatever it registers with [`Restorers::begin`]
    /// ends when the guard drops, however the attempt ends.
    pub(crate) fn attempt(&self, uid: &str) -> Attempt {
        Attempt {
            restorers: self.restorers.clone(),
            uid: uid.to_string(),
        }
    }

    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut Restorers) -> T) -> T {
        f(&mut self.restorers.lock())
    }
}

/// See [`SnapshotUse::attempt`].
#[derive(Debug)]
pub(crate) struct Attempt {
    restorers: Arc<Mutex<Restorers>>,
    uid: String,
}

impl Drop for Attempt {
    fn drop(&mut self) {
        self.restorers.lock().end(&self.uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> SnapshotKey {
        ("ns".to_string(), name.to_string())
    }

    #[test]
    fn others_count_every_attempt_but_the_asking_one() {
        let mut r = Restorers::default();
        r.begin(key("s"), "a");
        r.begin(key("s"), "b");
        r.begin(key("t"), "c");
        assert_eq!(r.others(&key("s"), "a"), 1);
        assert_eq!(r.others(&key("s"), "x"), 2);
        r.end("b");
        assert_eq!(r.others(&key("s"), "a"), 0);
        assert_eq!(r.others(&key("t"), "a"), 1);
        r.end("c");
        r.end("a");
        assert!(
            r.by_snapshot.is_empty(),
            "nothing is kept for ended attempts"
        );
    }

    #[test]
    fn a_cached_finalizer_is_not_believed_after_our_removal_until_the_cache_shows_it() {
        let now = Instant::now();
        let mut r = Restorers::default();
        assert!(r.cached_finalizer_believed(&key("s"), Some("1"), now));
        r.released(key("s"), "7".into(), now);
        // Older than our write (or anyone's later one, which we cannot tell apart): read.
        assert!(!r.cached_finalizer_believed(&key("s"), Some("5"), now));
        assert!(!r.cached_finalizer_believed(&key("s"), None, now));
        assert!(r.cached_finalizer_believed(&key("s"), Some("7"), now));
        assert!(r.cached_finalizer_believed(&key("t"), Some("5"), now));
        // Long after, the cache has long caught up.
        assert!(r.cached_finalizer_believed(&key("s"), Some("5"), now + RELEASE_MEMORY));
        r.settled(&key("s"));
        assert!(r.cached_finalizer_believed(&key("s"), Some("5"), now));
    }

    #[test]
    fn old_removals_are_forgotten_when_new_ones_come() {
        let now = Instant::now();
        let mut r = Restorers::default();
        r.released(key("s"), "1".into(), now);
        r.released(key("t"), "2".into(), now + RELEASE_MEMORY);
        assert_eq!(r.released.len(), 1);
    }

    #[test]
    fn an_attempt_ends_its_registrations_when_dropped() {
        let uses = SnapshotUse::default();
        let attempt = uses.attempt("a");
        uses.with(|r| r.begin(key("s"), "a"));
        assert_eq!(uses.with(|r| r.others(&key("s"), "b")), 1);
        drop(attempt);
        assert_eq!(uses.with(|r| r.others(&key("s"), "b")), 0);
    }

    #[test]
    fn turns_are_shared_while_held_and_dropped_after() {
        let uses = SnapshotUse::default();
        let first = uses.turn(&key("s"));
        let again = uses.turn(&key("s"));
        assert!(Arc::ptr_eq(&first, &again));
        drop((first, again));
        let _other = uses.turn(&key("t"));
        assert_eq!(uses.turns.lock().len(), 1, "the unheld turn of s is gone");
    }
}
