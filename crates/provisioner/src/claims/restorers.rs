//! Which of our attempts restore from which snapshot. A finished restore takes our
//! source-protection finalizer off its snapshot only when no other attempt of ours still
//! restores from it; upstream takes it off regardless, and the snapshot can then be deleted
//! under the other restore. The last one out takes it off: a successful one in its own
//! release, a failed one by the release the kept finalizer is owed (upstream's first success
//! would have taken it off; a retry puts it back, as upstream's would). A failed attempt with
//! nothing owed leaves it to the orphan sweep, as upstream.
//!
//! One turn per snapshot orders a release's look and write against another attempt's look and
//! add. Our last write to each snapshot is remembered against a watch that lags behind it: a
//! cached copy without the finalizer we just added is older than our add (no second write),
//! and one that still shows the finalizer we just took off is read again instead of believed.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::DynamicObject;
use kube::runtime::reflector::{ObjectRef, Store};
use parking_lot::Mutex;

use crate::data_source_api::{content_resource, snapshot_resource};

/// A snapshot: namespace and name.
pub(crate) type SnapshotKey = (String, String);

/// How long our last write is remembered against a lagging cache (far longer than a watch
/// lags).
const WRITE_MEMORY: Duration = Duration::from_secs(600);

/// Which snapshot, at which resourceVersion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Version {
    pub(crate) uid: String,
    pub(crate) resource_version: String,
}

impl Version {
    pub(crate) fn of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Self {
        Self {
            uid: meta.uid.clone().unwrap_or_default(),
            resource_version: meta.resource_version.clone().unwrap_or_default(),
        }
    }
}

/// What to take as the state of our finalizer on a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Belief {
    On,
    Off,
    /// The cache may predate our own removal: ask the API server.
    Read,
}

/// Our last write of the finalizer to one snapshot.
#[derive(Debug)]
struct Written {
    on: bool,
    /// The snapshot written (one of the same name made later is another).
    uid: String,
    version: String,
    at: Instant,
}

/// The bookkeeping itself, without locking: pure, so it is tested on its own.
#[derive(Debug, Default)]
pub(crate) struct Restorers {
    /// Claim UIDs whose attempt is restoring from each snapshot.
    by_snapshot: HashMap<SnapshotKey, HashSet<String>>,
    /// Snapshots whose finished restore kept the finalizer for attempts still running.
    owed: HashSet<SnapshotKey>,
    written: HashMap<SnapshotKey, Written>,
}

impl Restorers {
    pub(crate) fn begin(&mut self, key: SnapshotKey, uid: &str) {
        self.by_snapshot
            .entry(key)
            .or_default()
            .insert(uid.to_string());
    }

    /// The attempt of `uid` ended. Returns the snapshots it was the last restorer of whose
    /// release is owed, unless it succeeded: then its own release comes (and pays it).
    pub(crate) fn end(&mut self, uid: &str, succeeded: bool) -> Vec<SnapshotKey> {
        let mut last = Vec::new();
        self.by_snapshot.retain(|key, uids| {
            if uids.remove(uid) && uids.is_empty() {
                last.push(key.clone());
            }
            !uids.is_empty()
        });
        if succeeded {
            return Vec::new();
        }
        last.retain(|key| self.owed.remove(key));
        last
    }

    /// A finished restore kept the finalizer for the others (`true`), or is taking it off.
    pub(crate) fn owe(&mut self, key: &SnapshotKey, kept: bool) {
        if kept {
            self.owed.insert(key.clone());
        } else {
            self.owed.remove(key);
        }
    }

    /// How many attempts other than `uid`'s restore from the snapshot.
    pub(crate) fn others(&self, key: &SnapshotKey, uid: &str) -> usize {
        self.by_snapshot
            .get(key)
            .map_or(0, |uids| uids.iter().filter(|u| *u != uid).count())
    }

    /// Our write put the finalizer on (`on`) or took it off, leaving the snapshot `version`.
    pub(crate) fn wrote(&mut self, key: SnapshotKey, on: bool, version: Version, now: Instant) {
        self.written
            .retain(|_, w| now.duration_since(w.at) < WRITE_MEMORY);
        self.written.insert(
            key,
            Written {
                on,
                uid: version.uid,
                version: version.resource_version,
                at: now,
            },
        );
    }

    /// The API server was asked: what it said is fresher than our last write.
    pub(crate) fn settled(&mut self, key: &SnapshotKey) {
        self.written.remove(key);
    }

    /// The finalizer's state, from a cached copy (at `cached`) that shows it (`cached_on`)
    /// or not, and our last write.
    pub(crate) fn belief(
        &self,
        key: &SnapshotKey,
        cached_on: bool,
        cached: &Version,
        now: Instant,
    ) -> Belief {
        let belief = if cached_on { Belief::On } else { Belief::Off };
        match self.written.get(key) {
            None => belief,
            Some(w) if now.duration_since(w.at) >= WRITE_MEMORY || w.uid != cached.uid => belief,
            Some(w) if cached.resource_version == w.version || w.on == cached_on => belief,
            // Only our writes add it: a copy without it is older than our add.
            Some(w) if w.on => Belief::On,
            // A copy with it may predate our removal, or someone may have added it since.
            Some(_) => Belief::Read,
        }
    }
}

impl Snapshots {
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
            succeeded: false,
            owed: self.owed_tx.clone(),
        }
    }

    /// The owed releases, for the one task that makes them (`None` once taken).
    pub(crate) fn take_owed(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<SnapshotKey>> {
        self.owed_rx.lock().take()
    }

    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut Restorers) -> T) -> T {
        f(&mut self.restorers.lock())
    }
}

/// What the claim controller knows of snapshots: the two watches' caches (while they run),
/// when each wanted snapshot was last seen ready, which attempts restore from which, the turns
/// on our finalizer, and the owed releases on their way to the task that makes them (an
/// attempt ends in a `Drop`, which cannot write).
pub(crate) struct Snapshots {
    snapshot_cache: Mutex<Option<Store<DynamicObject>>>,
    content_cache: Mutex<Option<Store<DynamicObject>>>,
    /// Snapshots a waiting claim wants, by when they were seen ready.
    ready: Mutex<HashMap<SnapshotKey, Instant>>,
    restorers: Arc<Mutex<Restorers>>,
    turns: Mutex<HashMap<SnapshotKey, Arc<tokio::sync::Mutex<()>>>>,
    owed_tx: tokio::sync::mpsc::UnboundedSender<SnapshotKey>,
    owed_rx: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<SnapshotKey>>>,
}

impl Default for Snapshots {
    fn default() -> Self {
        let (owed_tx, owed_rx) = tokio::sync::mpsc::unbounded_channel();
        Self {
            snapshot_cache: Mutex::default(),
            content_cache: Mutex::default(),
            ready: Mutex::default(),
            restorers: Arc::default(),
            turns: Mutex::default(),
            owed_tx,
            owed_rx: Mutex::new(Some(owed_rx)),
        }
    }
}

/// How long a snapshot's readiness is remembered for attempts that were reading it meanwhile
/// (far longer than any attempt runs).
const READY_MEMORY: Duration = Duration::from_secs(600);

impl Snapshots {
    /// The VolumeSnapshot watch started (its cache, after the first list) or cannot run.
    pub(crate) fn set_snapshot_cache(&self, cache: Option<Store<DynamicObject>>) {
        *self.snapshot_cache.lock() = cache;
    }

    /// The VolumeSnapshotContent watch started (its cache, after the first list) or cannot run.
    pub(crate) fn set_content_cache(&self, cache: Option<Store<DynamicObject>>) {
        *self.content_cache.lock() = cache;
    }

    /// Whether the VolumeSnapshot watch runs (a ready snapshot then wakes its claims).
    pub(crate) fn watch_running(&self) -> bool {
        self.snapshot_cache.lock().is_some()
    }

    /// The snapshot as the watch last saw it (`None`: not seen, or no watch).
    pub(crate) fn cached_snapshot(&self, namespace: &str, name: &str) -> Option<DynamicObject> {
        let key = ObjectRef::new_with(name, snapshot_resource()).within(namespace);
        cached(&self.snapshot_cache, &key)
    }

    /// The content as its watch last saw it (`None`: not seen, or no watch).
    pub(crate) fn cached_content(&self, name: &str) -> Option<DynamicObject> {
        cached(
            &self.content_cache,
            &ObjectRef::new_with(name, content_resource()),
        )
    }

    /// A snapshot some waiting claim wants was seen ready `now`.
    pub(crate) fn seen_ready(&self, key: SnapshotKey, now: Instant) {
        let mut ready = self.ready.lock();
        // Only attempts still running can need an entry: forget old ones.
        ready.retain(|_, at| now.duration_since(*at) < READY_MEMORY);
        ready.insert(key, now);
    }

    /// Whether the snapshot was seen ready after `since`.
    pub(crate) fn ready_since(&self, key: &SnapshotKey, since: Instant) -> bool {
        self.ready.lock().get(key).is_some_and(|at| *at >= since)
    }
}

/// `key` from a watch's cache, while that watch runs.
fn cached(
    cache: &Mutex<Option<Store<DynamicObject>>>,
    key: &ObjectRef<DynamicObject>,
) -> Option<DynamicObject> {
    let store = cache.lock().clone()?;
    store.get(key).map(|o| (*o).clone())
}

/// See [`Snapshots::attempt`].
#[derive(Debug)]
pub(crate) struct Attempt {
    restorers: Arc<Mutex<Restorers>>,
    uid: String,
    succeeded: bool,
    owed: tokio::sync::mpsc::UnboundedSender<SnapshotKey>,
}

impl Attempt {
    /// The volume was restored: the attempt's own release follows.
    pub(crate) fn succeeded(&mut self) {
        self.succeeded = true;
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        let owed = self.restorers.lock().end(&self.uid, self.succeeded);
        for key in owed {
            // Closed only at shutdown; the sweep catches what is left then.
            let _ = self.owed.send(key);
        }
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
        r.end("b", true);
        assert_eq!(r.others(&key("s"), "a"), 0);
        assert_eq!(r.others(&key("t"), "a"), 1);
        r.end("c", true);
        r.end("a", true);
        assert!(
            r.by_snapshot.is_empty(),
            "nothing is kept for ended attempts"
        );
    }

    fn at(uid: &str, version: &str) -> Version {
        Version {
            uid: uid.into(),
            resource_version: version.into(),
        }
    }

    #[test]
    fn our_last_write_outweighs_a_cache_that_lags_behind_it() {
        use Belief::*;
        let now = Instant::now();
        let mut r = Restorers::default();
        let s = key("s");
        // Nothing written: the cache is all there is.
        assert_eq!(r.belief(&s, true, &at("u", "1"), now), On);
        assert_eq!(r.belief(&s, false, &at("u", "1"), now), Off);
        r.wrote(s.clone(), true, at("u", "7"), now);
        assert_eq!(
            r.belief(&s, false, &at("u", "5"), now),
            On,
            "older than our add"
        );
        assert_eq!(r.belief(&s, true, &at("u", "5"), now), On);
        assert_eq!(r.belief(&s, false, &at("u", "7"), now), Off, "caught up");
        assert_eq!(
            r.belief(&s, false, &at("v", "8"), now),
            Off,
            "a new snapshot of the same name"
        );
        r.wrote(s.clone(), false, at("u", "9"), now);
        assert_eq!(
            r.belief(&s, true, &at("u", "7"), now),
            Read,
            "may predate our removal"
        );
        assert_eq!(r.belief(&s, false, &at("u", "7"), now), Off);
        assert_eq!(r.belief(&s, true, &at("u", "9"), now), On);
        assert_eq!(r.belief(&s, true, &at("v", "8"), now), On);
        assert_eq!(
            r.belief(&key("t"), true, &at("u", "7"), now),
            On,
            "another snapshot"
        );
        // Long after, the cache has long caught up.
        assert_eq!(r.belief(&s, true, &at("u", "7"), now + WRITE_MEMORY), On);
        r.settled(&s);
        assert_eq!(r.belief(&s, true, &at("u", "7"), now), On);
    }

    #[test]
    fn old_writes_are_forgotten_when_new_ones_come() {
        let now = Instant::now();
        let mut r = Restorers::default();
        r.wrote(key("s"), false, at("u", "1"), now);
        r.wrote(key("t"), true, at("u", "2"), now + WRITE_MEMORY);
        assert_eq!(r.written.len(), 1);
    }

    #[test]
    fn the_last_failed_restorer_is_owed_the_release_a_finished_one_kept() {
        let mut r = Restorers::default();
        r.begin(key("s"), "a");
        r.begin(key("s"), "b");
        r.begin(key("t"), "b");
        // a finished first and kept the finalizer of s for b.
        r.owe(&key("s"), true);
        assert_eq!(r.end("a", true), Vec::<SnapshotKey>::new());
        // b fails: it was the last on s (owed) and on t (nothing owed).
        assert_eq!(r.end("b", false), vec![key("s")]);
        assert!(r.owed.is_empty(), "paid once");

        // A failure that leaves another restorer owes nothing yet; the last one pays.
        r.begin(key("s"), "c");
        r.begin(key("s"), "d");
        r.owe(&key("s"), true);
        assert_eq!(r.end("c", false), Vec::<SnapshotKey>::new());
        assert_eq!(r.end("d", false), vec![key("s")]);

        // The last one succeeding releases it itself, and its release pays what was owed.
        r.begin(key("s"), "e");
        r.owe(&key("s"), true);
        assert_eq!(r.end("e", true), Vec::<SnapshotKey>::new());
        r.owe(&key("s"), false);
        assert!(r.owed.is_empty());

        // Nothing owed: a failed attempt leaves the finalizer to the sweep, as upstream.
        r.begin(key("s"), "f");
        assert_eq!(r.end("f", false), Vec::<SnapshotKey>::new());
        // An attempt that never restored from it ends without effect on it.
        r.begin(key("s"), "g");
        r.owe(&key("s"), true);
        assert_eq!(r.end("h", false), Vec::<SnapshotKey>::new());
        assert_eq!(r.others(&key("s"), "x"), 1);
    }

    #[test]
    fn a_failed_attempt_sends_what_it_owes_when_dropped() {
        let uses = Snapshots::default();
        let mut owed = uses.take_owed().expect("the receiver");
        assert!(uses.take_owed().is_none(), "one task makes the releases");
        let first = uses.attempt("a");
        let mut second = uses.attempt("b");
        uses.with(|r| {
            r.begin(key("s"), "a");
            r.begin(key("s"), "b");
            r.owe(&key("s"), true);
        });
        second.succeeded();
        drop(second);
        assert!(
            owed.try_recv().is_err(),
            "a succeeded attempt releases itself"
        );
        drop(first);
        assert_eq!(owed.try_recv().ok(), Some(key("s")));
    }

    #[test]
    fn an_attempt_ends_its_registrations_when_dropped() {
        let uses = Snapshots::default();
        let attempt = uses.attempt("a");
        uses.with(|r| r.begin(key("s"), "a"));
        assert_eq!(uses.with(|r| r.others(&key("s"), "b")), 1);
        drop(attempt);
        assert_eq!(uses.with(|r| r.others(&key("s"), "b")), 0);
    }

    #[test]
    fn turns_are_shared_while_held_and_dropped_after() {
        let uses = Snapshots::default();
        let first = uses.turn(&key("s"));
        let again = uses.turn(&key("s"));
        assert!(Arc::ptr_eq(&first, &again));
        drop((first, again));
        let _other = uses.turn(&key("t"));
        assert_eq!(uses.turns.lock().len(), 1, "the unheld turn of s is gone");
    }
}
