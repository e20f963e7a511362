//! Which of our attempts restore from which snapshot. A finished restore takes our
//! source-protection finalizer off its snapshot only when no other attempt of ours still
//! restores from it; upstream takes it off regardless, and the snapshot can then be deleted
//! under the other restore. The last one out takes it off: a successful one in its own
//! release, a failed one by the release the kept finalizer is owed (upstream's first success
//! would have taken it off; a retry puts it back, as upstream's would). A failed attempt with
//! nothing owed leaves it to the orphan sweep, as upstream.
//!
//! One turn per snapshot orders a release's look and write against another attempt's look and
//! add. Both look through the snapshot cache, which shows our own last write until the watch
//! brings it (`snapshot_caches`: the read-your-writes rule of every cache).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// A snapshot: namespace and name.
pub(crate) type SnapshotKey = (String, String);

/// The bookkeeping itself, without locking: pure, so it is tested on its own.
#[derive(Debug, Default)]
pub(crate) struct Restorers {
    /// Claim UIDs whose attempt is restoring from each snapshot.
    by_snapshot: HashMap<SnapshotKey, HashSet<String>>,
    /// Snapshots whose finished restore kept the finalizer for attempts still running.
    owed: HashSet<SnapshotKey>,
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

/// What the claim controller knows of snapshots: when each wanted snapshot was last seen ready, which attempts restore from which, the turns
/// on our finalizer, and the owed releases on their way to the task that makes them (an
/// attempt ends in a `Drop`, which cannot write).
pub(crate) struct Snapshots {
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
