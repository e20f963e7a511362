//! Reservations for volumes being created (ours, `--capacity-reservations`).
//!
//! The scheduler checks each claim against the published objects alone, so pods placed before
//! an object changes all see the same room (the KEP's first listed drawback). While a claim's
//! CreateVolume is in flight its size counts against its (segment, class): the published
//! value is lowered at once, and a claim that no longer fits is sent back to the scheduler
//! without asking the driver.
//!
//! A reservation is *held* while the call runs. When the call returns it is *released* with
//! a ticket: the refresh round of its key that had begun by then. Only a GetCapacity of a
//! later round can show the new volume, so readings up to the ticket still subtract it; later
//! ones do not, and the entry is forgotten.
//!
//! An attempt that leaves no volume ends its reservation at once, whatever GetCapacity does: a
//! final error (nothing was made), no call at all, a deleted volume, a lifted block. Only a
//! volume that may be in the backend waits for a reading, so the bytes hidden by the ledger are
//! at most those of the claims calling now or whose volume may exist unseen (one entry each),
//! and a failing GetCapacity cannot pile them up.
//!
//! Two sums, for two uses. What is *published* subtracts every reservation a reading may not
//! show: a volume made while GetCapacity ran may be counted twice for a moment, which only
//! makes the scheduler careful. A claim is *refused* without asking the driver only on
//! certainty: the reservations held after the reading had come back, which it cannot show.

use std::collections::HashMap;

use crate::{Capacity, Key};

/// In-flight volumes by claim UID.
#[derive(Debug, Default, Clone)]
pub struct Ledger {
    entries: HashMap<String, Entry>,
}

#[derive(Debug, Clone)]
struct Entry {
    key: Key,
    bytes: i64,
    /// `None` while CreateVolume runs; then the last refresh round that began before it ended.
    released: Option<u64>,
    /// Refresh rounds of the key that had ended when the reservation began: their readings
    /// cannot show the volume.
    after: u64,
}

/// What the ledger says about one (segment, class) at one reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reserved {
    /// Bytes the reading does not show yet.
    pub bytes: i64,
    /// Claims whose CreateVolume is running.
    pub held: usize,
}

impl Ledger {
    /// Counts `bytes` for the claim `uid` against `key` (again, if it held one already);
    /// `finished` refresh rounds of the key had ended by now.
    pub fn hold(&mut self, uid: &str, key: Key, bytes: i64, finished: u64) {
        let entry = Entry {
            key,
            bytes: bytes.max(0),
            released: None,
            after: finished,
        };
        self.entries.insert(uid.to_string(), entry);
    }

    /// The key the claim `uid` holds or held.
    pub fn key_of(&self, uid: &str) -> Option<&Key> {
        self.entries.get(uid).map(|e| &e.key)
    }

    /// Whether `uid` holds `key` now (not released).
    pub fn holds(&self, uid: &str, key: &Key) -> bool {
        self.entries
            .get(uid)
            .is_some_and(|e| &e.key == key && e.released.is_none())
    }

    /// The claim's CreateVolume returned; `round` is the refresh round of its key begun last.
    /// Returns the key, to be refreshed.
    pub fn release(&mut self, uid: &str, round: u64) -> Option<Key> {
        let entry = self.entries.get_mut(uid)?;
        entry.released = Some(round);
        Some(entry.key.clone())
    }

    /// The claim's attempt ended and left no volume (a final error, no call made, a block
    /// lifted): no reading needs it subtracted. Returns the key, to be published again.
    pub fn end(&mut self, uid: &str) -> Option<Key> {
        self.entries.remove(uid).map(|e| e.key)
    }

    /// The claim's volume was deleted: a reservation whose call had returned ends (the
    /// reading it waited for would not show the volume either); one held by a running call
    /// stays. Returns the key, to be published again.
    pub fn deleted(&mut self, uid: &str) -> Option<Key> {
        self.entries.get(uid)?.released?;
        self.end(uid)
    }

    /// What a reading of `key` taken in refresh round `round` does not show: the held
    /// reservations and those released at or after that round.
    pub fn reserved(&self, key: &Key, round: u64, except: Option<&str>) -> Reserved {
        let mut r = Reserved::default();
        for (uid, e) in &self.entries {
            if &e.key != key || except == Some(uid.as_str()) {
                continue;
            }
            match e.released {
                None => {
                    r.bytes = r.bytes.saturating_add(e.bytes);
                    r.held += 1;
                }
                Some(t) if t >= round => r.bytes = r.bytes.saturating_add(e.bytes),
                Some(_) => {}
            }
        }
        r
    }

    /// What a reading of `key` from refresh round `round` certainly does not show: the
    /// reservations begun after that round had ended.
    pub fn certain(&self, key: &Key, round: u64, except: &[&str]) -> Reserved {
        let mut r = Reserved::default();
        for (uid, e) in &self.entries {
            let shown = e.released.is_some_and(|t| t < round);
            if &e.key != key || except.contains(&uid.as_str()) || shown || e.after < round {
                continue;
            }
            r.bytes = r.bytes.saturating_add(e.bytes);
            r.held += usize::from(e.released.is_none());
        }
        r
    }

    /// A reading of `key` from `round` was taken: released entries it shows are done.
    pub fn settle(&mut self, key: &Key, round: u64) {
        self.entries
            .retain(|_, e| &e.key != key || e.released.is_none_or(|t| t >= round));
    }

    /// Drops whatever is reserved for keys `keep` rejects (a class or segment went away).
    pub fn retain_keys(&mut self, keep: impl Fn(&Key) -> bool) {
        self.entries.retain(|_, e| keep(&e.key));
    }

    /// Whether the claim `uid` has a reservation (held, or waiting for a reading).
    pub fn contains(&self, uid: &str) -> bool {
        self.entries.contains_key(uid)
    }

    /// Number of entries (held or waiting for a reading), for tests and the capacity view.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is reserved.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The reading as the scheduler should see it with `reserved` bytes on their way.
///
/// `capacity` is lowered (never below 0). `maximumVolumeSize` is the filter's limit when set:
/// a driver's maximum at or below its free capacity (a thick pool) is kept at or below the
/// lowered capacity; a maximum above it (an over-committed thin pool, allowed on purpose)
/// is left alone, as thin volumes do not take their size from the pool at creation.
pub fn apply(reading: Capacity, reserved: i64) -> Capacity {
    if reserved <= 0 {
        return reading;
    }
    let available = reading.available.saturating_sub(reserved).max(0);
    let maximum_volume_size = reading.maximum_volume_size.map(|m| {
        if m <= reading.available {
            m.min(available)
        } else {
            m
        }
    });
    Capacity {
        available,
        maximum_volume_size,
    }
}

/// Whether a volume of `requested` bytes passes the scheduler's filter against `reading`
/// with `reserved` bytes on their way.
pub fn fits(reading: Capacity, reserved: i64, requested: i64) -> bool {
    apply(reading, reserved).limit() >= requested
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Segment;

    const GI: i64 = 1 << 30;

    fn key(node: &str) -> Key {
        Key {
            segment: Segment::from([("topology/node".to_string(), node.to_string())]),
            class: "fast".into(),
        }
    }

    #[test]
    fn apply_table() {
        let c = |a, m| Capacity::from_response(a, m);
        let cases = [
            // (reading, reserved) -> published
            (c(100, None), 0, c(100, None)),
            (c(100, None), 45, c(55, None)),
            (c(100, None), 145, c(0, None)),
            // Thick pool: the maximum follows the lowered capacity.
            (c(100, Some(80)), 45, c(55, Some(55))),
            (c(100, Some(40)), 45, c(55, Some(40))),
            (c(100, Some(100)), 100, c(0, Some(0))),
            // Thin pool over-committed on purpose: its maximum stays.
            (c(10, Some(50)), 5, c(5, Some(50))),
        ];
        for (reading, reserved, want) in cases {
            assert_eq!(apply(reading, reserved), want, "{reading:?} - {reserved}");
        }
    }

    #[test]
    fn fits_is_the_schedulers_filter_after_reservations() {
        let hundred = Capacity::from_response(100 * GI, None);
        assert!(fits(hundred, 45 * GI, 45 * GI));
        assert!(!fits(hundred, 90 * GI, 45 * GI));
        assert!(fits(hundred, 55 * GI, 45 * GI), "exactly full fits");
        let thin = Capacity::from_response(10 * GI, Some(50 * GI));
        assert!(fits(thin, 45 * GI, 50 * GI));
    }

    #[test]
    fn a_reservation_counts_until_a_later_reading() {
        let mut l = Ledger::default();
        let (a, b) = (key("a"), key("b"));
        l.hold("c1", a.clone(), 45 * GI, 6);
        l.hold("c2", a.clone(), 45 * GI, 6);
        l.hold("c3", b.clone(), 10 * GI, 6);
        let r = l.reserved(&a, 7, None);
        assert_eq!((r.bytes, r.held), (90 * GI, 2));
        assert_eq!(l.reserved(&a, 7, Some("c1")).bytes, 45 * GI, "not itself");
        assert_eq!(l.reserved(&b, 7, None).bytes, 10 * GI);

        // c1's call returned while round 7 ran: round 7's reading may not show it.
        assert_eq!(l.release("c1", 7), Some(a.clone()));
        assert_eq!(
            l.reserved(&a, 7, None),
            Reserved {
                bytes: 90 * GI,
                held: 1
            }
        );
        l.settle(&a, 7);
        assert_eq!(l.len(), 3);
        // Round 8 began after the release: it shows the volume.
        assert_eq!(
            l.reserved(&a, 8, None),
            Reserved {
                bytes: 45 * GI,
                held: 1
            }
        );
        l.settle(&a, 8);
        assert_eq!(l.len(), 2);
        // Held reservations outlive any reading.
        l.settle(&a, 100);
        assert_eq!(l.reserved(&a, 100, None).held, 1);
    }

    #[test]
    fn a_refusal_counts_only_what_the_reading_cannot_show() {
        let mut l = Ledger::default();
        let a = key("a");
        // c1 began before round 5 ended: reading 5 may already show its volume.
        l.hold("c1", a.clone(), 45 * GI, 4);
        // c2 began after round 5 had ended.
        l.hold("c2", a.clone(), 45 * GI, 5);
        assert_eq!(l.reserved(&a, 5, None).bytes, 90 * GI, "published: both");
        assert_eq!(
            l.certain(&a, 5, &[]),
            Reserved {
                bytes: 45 * GI,
                held: 1
            }
        );
        assert_eq!(l.certain(&a, 5, &["c2"]).bytes, 0);
        // Reading 6 began before c2 ended: it may show c2 too.
        assert_eq!(l.certain(&a, 6, &[]).bytes, 0);
        // Released before reading 7 began: shown, whatever it was.
        l.release("c2", 6);
        assert_eq!(
            l.certain(&a, 4, &[]),
            Reserved {
                bytes: 90 * GI,
                held: 1
            }
        );
        assert_eq!(l.certain(&a, 7, &[]).bytes, 0);
    }

    /// One step of a claim's attempt, or of the driver's readings.
    #[derive(Debug, Clone, Copy)]
    enum Step {
        /// The claim holds its size and calls CreateVolume.
        Hold(&'static str, i64),
        /// The call ended with a final error (or was never made): nothing exists.
        Failed(&'static str),
        /// The call returned a volume (or may have made one) during round `round`.
        Made(&'static str, u64),
        /// The claim's volume was deleted.
        Deleted(&'static str),
        /// A successful GetCapacity of round `round`.
        Reading(u64),
    }

    /// What stays subtracted from the last good reading (round 1) while GetCapacity fails:
    /// only the claims calling now and the volumes made since, never failed attempts or
    /// deleted volumes, however many there were.
    #[test]
    fn reservations_end_with_their_attempts_whatever_getcapacity_does() {
        use Step::*;
        let cases: &[(&str, &[Step], i64, usize)] = &[
            ("calling", &[Hold("c1", 10)], 10, 1),
            ("failed at once", &[Hold("c1", 10), Failed("c1")], 0, 0),
            (
                "many failures pile nothing up",
                &[
                    Hold("c1", 45),
                    Failed("c1"),
                    Hold("c2", 45),
                    Failed("c2"),
                    Hold("c3", 45),
                    Failed("c3"),
                    Hold("c1", 45),
                    Failed("c1"),
                ],
                0,
                0,
            ),
            (
                "a made volume waits for a reading",
                &[Hold("c1", 45), Made("c1", 1)],
                45,
                1,
            ),
            (
                "a retried claim counts once",
                &[Hold("c1", 45), Made("c1", 1), Hold("c1", 45), Made("c1", 1)],
                45,
                1,
            ),
            (
                "a deleted volume ends it",
                &[Hold("c1", 45), Made("c1", 1), Deleted("c1")],
                0,
                0,
            ),
            (
                "a deletion does not end a running call",
                &[Hold("c1", 45), Deleted("c1")],
                45,
                1,
            ),
            (
                "a later reading shows the volume",
                &[Hold("c1", 45), Made("c1", 1), Reading(2)],
                0,
                0,
            ),
            (
                "mixed",
                &[
                    Hold("c1", 10),
                    Hold("c2", 20),
                    Hold("c3", 40),
                    Failed("c1"),
                    Made("c2", 1),
                ],
                60,
                2,
            ),
        ];
        let a = key("a");
        for (what, steps, bytes, entries) in cases {
            let mut l = Ledger::default();
            for step in *steps {
                match *step {
                    Hold(uid, b) => l.hold(uid, a.clone(), b, 1),
                    Failed(uid) => assert_eq!(l.end(uid), Some(a.clone()), "{what}"),
                    Made(uid, round) => assert_eq!(l.release(uid, round), Some(a.clone())),
                    Deleted(uid) => drop(l.deleted(uid)),
                    Reading(round) => l.settle(&a, round),
                }
            }
            assert_eq!(l.reserved(&a, 1, None).bytes, *bytes, "{what}: published");
            assert!(l.certain(&a, 1, &[]).bytes <= *bytes, "{what}: refusal");
            assert_eq!(l.len(), *entries, "{what}: entries");
        }
    }

    #[test]
    fn end_and_deleted_name_the_key_to_publish() {
        let mut l = Ledger::default();
        l.hold("c1", key("a"), 10, 0);
        assert_eq!(l.deleted("c1"), None, "still calling");
        l.release("c1", 0);
        assert_eq!(l.deleted("c1"), Some(key("a")));
        assert_eq!(l.deleted("c1"), None);
        assert_eq!(l.end("nobody"), None);
    }

    #[test]
    fn hold_again_replaces_and_unknown_release_is_nothing() {
        let mut l = Ledger::default();
        l.hold("c1", key("a"), 10, 0);
        l.release("c1", 3);
        l.hold("c1", key("b"), 20, 0);
        assert_eq!(l.reserved(&key("a"), 0, None).bytes, 0);
        assert_eq!(l.reserved(&key("b"), 0, None).bytes, 20);
        assert_eq!(l.release("nobody", 1), None);
        l.retain_keys(|k| k != &key("b"));
        assert!(l.is_empty());
    }
}
