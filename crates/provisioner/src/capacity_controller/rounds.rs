//! Which refreshes of one key a waiter may count as its own, and who is told when one ends.
//!
//! A caller of `RefreshHandle::refresh_then_tell` wants a GetCapacity that was *asked after*
//! its call: a refresh already in flight may have read the driver before the event the caller
//! reacts to (a refused CreateVolume) and would publish the old value. The work queue runs at
//! most one refresh of a key at a time, so counting starts and ends is enough.

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;

use capacity::Key;
use tokio::sync::oneshot;

use super::State;

/// Refreshes of one key: how many began, how many ended.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Rounds {
    started: u64,
    finished: u64,
}

impl Rounds {
    /// A worker took the key off the queue: the number of this round.
    pub(super) fn start(&mut self) -> u64 {
        self.started += 1;
        self.started
    }

    /// The refresh ended (published or failed).
    pub(super) fn finish(&mut self) {
        self.finished = self.started;
    }

    /// What a waiter remembers when it asks: refreshes up to this one do not count.
    pub(super) fn ticket(&self) -> u64 {
        self.started
    }

    /// How many refreshes have ended (their readings are in).
    pub(super) fn finished(&self) -> u64 {
        self.finished
    }

    /// A refresh that began after `ticket` was taken has ended.
    pub(super) fn served(&self, ticket: u64) -> bool {
        self.finished > ticket
    }
}

/// Callers waiting for a refresh of a key, each with the ticket it took when it asked. The
/// waiter (`T`) is whatever tells the caller; nothing here sends.
#[derive(Debug)]
pub(super) struct Waiters<K, T> {
    by_key: HashMap<K, Vec<(u64, T)>>,
}

impl<K, T> Default for Waiters<K, T> {
    fn default() -> Self {
        Waiters {
            by_key: HashMap::new(),
        }
    }
}

impl<K: Eq + Hash, T> Waiters<K, T> {
    /// `waiter` waits for a refresh of `key` begun after `ticket` ([`Rounds::ticket`]).
    pub(super) fn add(&mut self, key: K, ticket: u64, waiter: T) {
        self.by_key.entry(key).or_default().push((ticket, waiter));
    }

    /// A round of `key` ended, leaving `rounds`: the waiters it serves, taken out.
    pub(super) fn served(&mut self, key: &K, rounds: &Rounds) -> Vec<T> {
        let Some(waiting) = self.by_key.get_mut(key) else {
            return Vec::new();
        };
        let (done, left): (Vec<_>, Vec<_>) = std::mem::take(waiting)
            .into_iter()
            .partition(|(ticket, _)| rounds.served(*ticket));
        if left.is_empty() {
            self.by_key.remove(key);
        } else {
            *waiting = left;
        }
        done.into_iter().map(|(_, w)| w).collect()
    }

    /// Keeps the waiters of the keys `keep` accepts; those of the others are taken out: no
    /// refresh of a key that stopped being published will come.
    pub(super) fn retain(&mut self, keep: impl Fn(&K) -> bool) -> Vec<T> {
        let mut released = Vec::new();
        self.by_key.retain(|k, waiting| {
            let kept = keep(k);
            if !kept {
                released.extend(waiting.drain(..).map(|(_, w)| w));
            }
            kept
        });
        released
    }
}

/// The controller's rounds and waiters, kept together under the state lock.
impl State {
    /// Tells the receiver when a refresh of `key` begun from now on has ended.
    pub(super) fn tell_after_next_round(&mut self, key: &Key) -> oneshot::Receiver<()> {
        let ticket = self.refreshed.get(key).map_or(0, Rounds::ticket);
        let (tx, rx) = oneshot::channel();
        self.waiters.add(key.clone(), ticket, tx);
        rx
    }

    /// A worker took `key` off the queue: the number of this round.
    pub(super) fn begin_round(&mut self, key: &Key) -> u64 {
        self.refreshed.entry(key.clone()).or_default().start()
    }

    /// The round of `key` ended (published or failed): tells the waiters it serves.
    pub(super) fn end_round(&mut self, key: &Key) {
        let rounds = self.refreshed.entry(key.clone()).or_default();
        rounds.finish();
        for waiter in self.waiters.served(key, rounds) {
            // A caller that stopped waiting dropped its receiver: nothing to tell.
            let _ = waiter.send(());
        }
    }

    /// Forgets the rounds of keys no longer desired; their waiters are told now, as no
    /// refresh of those keys will come.
    pub(super) fn forget_rounds(&mut self, desired: &BTreeSet<Key>) {
        self.refreshed.retain(|k, _| desired.contains(k));
        for waiter in self.waiters.retain(|k| desired.contains(k)) {
            let _ = waiter.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One row: the tickets of the waiters, the rounds when one ends, the waiters released,
    /// the waiters left.
    type Case = (&'static [u64], Rounds, &'static [u64], &'static [u64]);

    /// Which waiters the end of a round releases.
    #[test]
    fn a_finished_round_releases_the_waiters_it_serves() {
        let rounds = |started: u64, finished: u64| Rounds { started, finished };
        let cases: &[Case] = &[
            (&[], rounds(1, 1), &[], &[]),
            // Asked while idle (ticket 0), the first round serves it.
            (&[0], rounds(1, 1), &[0], &[]),
            // Asked while round 1 was in flight: round 1 ending does not serve it.
            (&[1], rounds(1, 1), &[], &[1]),
            (&[1], rounds(2, 2), &[1], &[]),
            // One round serves every waiter that asked before it began, none after.
            (&[0, 1, 2], rounds(2, 2), &[0, 1], &[2]),
            (&[3, 0, 3], rounds(4, 4), &[3, 0, 3], &[]),
        ];
        for (tickets, rounds, released, left) in cases {
            let mut w = Waiters::default();
            for &t in *tickets {
                w.add("k", t, t);
            }
            w.add("other", 0, 100);
            assert_eq!(&w.served(&"k", rounds), released, "{tickets:?} {rounds:?}");
            let mut rest = w.retain(|k| *k != "k");
            rest.sort_unstable();
            assert_eq!(&rest, left, "{tickets:?} {rounds:?}");
            assert_eq!(
                w.served(&"other", rounds),
                vec![100],
                "another key's waiter"
            );
        }
    }

    #[test]
    fn a_key_that_stops_being_published_releases_its_waiters() {
        let mut w = Waiters::default();
        w.add("gone", 0, 'a');
        w.add("gone", 5, 'b');
        w.add("kept", 0, 'c');
        let mut released = w.retain(|k| *k == "kept");
        released.sort_unstable();
        assert_eq!(released, vec!['a', 'b']);
        assert!(w.retain(|k| *k == "kept").is_empty());
        assert!(
            w.served(
                &"gone",
                &Rounds {
                    started: 9,
                    finished: 9
                }
            )
            .is_empty()
        );
        assert_eq!(
            w.served(
                &"kept",
                &Rounds {
                    started: 1,
                    finished: 1
                }
            ),
            vec!['c']
        );
    }

    #[test]
    fn a_served_key_keeps_no_entry() {
        let mut w = Waiters::default();
        w.add("k", 0, ());
        assert_eq!(
            w.served(
                &"k",
                &Rounds {
                    started: 1,
                    finished: 1
                }
            )
            .len(),
            1
        );
        assert!(w.by_key.is_empty());
    }

    #[test]
    fn an_idle_key_is_served_by_the_next_refresh() {
        let mut r = Rounds::default();
        let t = r.ticket();
        assert!(!r.served(t));
        r.start();
        assert!(!r.served(t), "in flight, not ended");
        r.finish();
        assert!(r.served(t));
    }

    #[test]
    fn a_refresh_in_flight_when_asked_does_not_count() {
        let mut r = Rounds::default();
        r.start(); // began before the caller asked
        let t = r.ticket();
        r.finish();
        assert!(!r.served(t), "that refresh may have read the old value");
        r.start(); // the queued again (dirty) key
        r.finish();
        assert!(r.served(t));
    }

    #[test]
    fn earlier_finished_refreshes_do_not_count() {
        let mut r = Rounds::default();
        for _ in 0..3 {
            r.start();
            r.finish();
        }
        let t = r.ticket();
        assert!(!r.served(t));
        r.start();
        r.finish();
        assert!(r.served(t));
    }

    fn told(rx: &mut oneshot::Receiver<()>) -> bool {
        rx.try_recv().is_ok()
    }

    fn key(class: &str) -> Key {
        Key {
            segment: Default::default(),
            class: class.into(),
        }
    }

    #[test]
    fn the_controller_tells_a_waiter_when_a_later_round_ends() {
        let (a, b) = (key("a"), key("b"));
        let mut state = State::default();
        state.begin_round(&a); // in flight when the caller asks
        let mut rx = state.tell_after_next_round(&a);
        let mut other = state.tell_after_next_round(&b);
        state.end_round(&a);
        assert!(
            !told(&mut rx),
            "the round in flight may have read the old value"
        );
        state.begin_round(&a);
        assert!(!told(&mut rx), "begun, not ended");
        state.end_round(&a);
        assert!(told(&mut rx));
        assert!(!told(&mut other), "another key's round");
        state.forget_rounds(&BTreeSet::from([a.clone()]));
        assert!(
            told(&mut other),
            "b stopped being published: no round will come"
        );
        assert!(state.waiters.by_key.is_empty());
    }
}
