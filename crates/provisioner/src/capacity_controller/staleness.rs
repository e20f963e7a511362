//! How fresh each published key is: the bookkeeping behind
//! `csistoragecapacity_seconds_since_last_success` and `csistoragecapacity_consecutive_failures`.
//! Upstream keeps a stale value after GetCapacity fails and says nothing; we keep it too but
//! show its age.

use std::collections::{BTreeSet, HashMap};

use capacity::Key;
use tokio::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    /// When the key entered the desired set: the age of "no value yet".
    since: Instant,
    last_success: Option<Instant>,
    failures: u32,
    /// This stale spell was already reported (`--capacity-stale-after`).
    reported: bool,
}

impl Entry {
    /// Since the last success, or since the key is desired if none succeeded.
    fn age(&self, now: Instant) -> std::time::Duration {
        now.saturating_duration_since(self.last_success.unwrap_or(self.since))
    }
}

/// One key's freshness at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct Freshness {
    pub key: Key,
    /// Since the last successful GetCapacity, or since the key is desired if none succeeded.
    pub seconds_since_success: f64,
    pub consecutive_failures: u32,
}

/// Freshness per desired key; keys that leave the desired set are forgotten.
#[derive(Debug, Default)]
pub struct Staleness {
    entries: HashMap<Key, Entry>,
}

impl Staleness {
    /// Keeps exactly the desired keys: new ones start now, gone ones are dropped.
    pub fn retain(&mut self, desired: &BTreeSet<Key>, now: Instant) {
        self.entries.retain(|k, _| desired.contains(k));
        for key in desired {
            self.entries.entry(key.clone()).or_insert(Entry {
                since: now,
                last_success: None,
                failures: 0,
                reported: false,
            });
        }
    }

    /// GetCapacity answered for `key`. Ignored for keys not desired.
    pub fn success(&mut self, key: &Key, now: Instant) {
        if let Some(e) = self.entries.get_mut(key) {
            e.last_success = Some(now);
            e.failures = 0;
            e.reported = false;
        }
    }

    /// Whether `key` has had no successful GetCapacity for `after` or longer (since it became
    /// desired, if it never had one).
    pub fn is_stale(&self, key: &Key, now: Instant, after: std::time::Duration) -> bool {
        self.entries.get(key).is_some_and(|e| e.age(now) >= after)
    }

    /// How long until `key` turns stale (`None`: it is already, or not desired). A failing key
    /// is retried no later than that, so that it is reported (and zeroed) on time rather than
    /// at its next backoff or poll.
    pub fn stale_in(
        &self,
        key: &Key,
        now: Instant,
        after: std::time::Duration,
    ) -> Option<std::time::Duration> {
        let age = self.entries.get(key)?.age(now);
        after.checked_sub(age).filter(|left| !left.is_zero())
    }

    /// [`Staleness::is_stale`], true only the first time in each stale spell (a success ends
    /// the spell): when to say so once.
    pub fn newly_stale(&mut self, key: &Key, now: Instant, after: std::time::Duration) -> bool {
        if !self.is_stale(key, now, after) {
            return false;
        }
        match self.entries.get_mut(key) {
            Some(e) if !e.reported => {
                e.reported = true;
                true
            }
            _ => false,
        }
    }

    /// GetCapacity failed for `key`; returns the consecutive failures so far (0 when the key is
    /// not desired).
    pub fn failure(&mut self, key: &Key) -> u32 {
        match self.entries.get_mut(key) {
            Some(e) => {
                e.failures = e.failures.saturating_add(1);
                e.failures
            }
            None => 0,
        }
    }

    /// Every key's freshness at `now`, sorted by key.
    pub fn snapshot(&self, now: Instant) -> Vec<Freshness> {
        let mut out: Vec<Freshness> = self
            .entries
            .iter()
            .map(|(key, e)| Freshness {
                key: key.clone(),
                seconds_since_success: e.age(now).as_secs_f64(),
                consecutive_failures: e.failures,
            })
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(node: &str) -> Key {
        Key {
            segment: [("node".to_string(), node.to_string())].into(),
            class: "fast".into(),
        }
    }

    enum Step {
        Desire(&'static [&'static str]),
        Ok(&'static str),
        Fail(&'static str, u32),
        Wait(u64),
        Expect(&'static [(&'static str, u64, u32)]),
    }

    #[test]
    fn a_stale_spell_is_reported_once_and_ends_with_a_success() {
        let after = std::time::Duration::from_secs(10);
        let mut s = Staleness::default();
        let t0 = Instant::now();
        let a = key("a");
        s.retain(&[a.clone()].into(), t0);
        let at = |secs: u64| t0 + std::time::Duration::from_secs(secs);
        // Never answered: stale once desired for `after`.
        assert!(!s.newly_stale(&a, at(9), after));
        assert!(s.newly_stale(&a, at(10), after));
        assert!(!s.newly_stale(&a, at(30), after), "once per spell");
        assert!(s.is_stale(&a, at(30), after));
        s.success(&a, at(31));
        assert!(!s.is_stale(&a, at(40), after));
        assert!(s.newly_stale(&a, at(41), after), "a new spell");
        assert!(!s.newly_stale(&key("unknown"), at(99), after));
    }

    #[test]
    fn time_left_until_stale() {
        let after = std::time::Duration::from_secs(10);
        let mut s = Staleness::default();
        let t0 = Instant::now();
        let a = key("a");
        s.retain(&[a.clone()].into(), t0);
        let at = |secs: u64| t0 + std::time::Duration::from_secs(secs);
        let secs = std::time::Duration::from_secs;
        assert_eq!(s.stale_in(&a, at(3), after), Some(secs(7)), "since desired");
        s.success(&a, at(5));
        assert_eq!(
            s.stale_in(&a, at(6), after),
            Some(secs(9)),
            "since the success"
        );
        assert_eq!(s.stale_in(&a, at(15), after), None, "stale now");
        assert_eq!(s.stale_in(&a, at(20), after), None);
        assert_eq!(s.stale_in(&key("unknown"), at(1), after), None);
    }

    #[test]
    fn sequences() {
        use Step::*;
        let cases: Vec<(&str, Vec<Step>)> = vec![
            (
                "never answered: age since desired",
                vec![Desire(&["a"]), Wait(5), Expect(&[("a", 5, 0)])],
            ),
            (
                "success resets age and failures",
                vec![
                    Desire(&["a"]),
                    Fail("a", 1),
                    Fail("a", 2),
                    Wait(3),
                    Expect(&[("a", 3, 2)]),
                    Ok("a"),
                    Wait(1),
                    Expect(&[("a", 1, 0)]),
                ],
            ),
            (
                "failures after success: value kept, age grows",
                vec![
                    Desire(&["a", "b"]),
                    Ok("a"),
                    Ok("b"),
                    Wait(10),
                    Fail("a", 1),
                    Wait(10),
                    Expect(&[("a", 20, 1), ("b", 20, 0)]),
                ],
            ),
            (
                "gone keys are forgotten; unknown keys ignored",
                vec![
                    Desire(&["a", "b"]),
                    Fail("b", 1),
                    Desire(&["a"]),
                    Fail("b", 0),
                    Ok("b"),
                    Wait(2),
                    Expect(&[("a", 2, 0)]),
                    Desire(&["a", "b"]),
                    Wait(1),
                    Expect(&[("a", 3, 0), ("b", 1, 0)]),
                ],
            ),
        ];
        for (name, steps) in cases {
            let mut s = Staleness::default();
            let mut now = Instant::now();
            for step in steps {
                match step {
                    Desire(nodes) => s.retain(&nodes.iter().map(|n| key(n)).collect(), now),
                    Ok(n) => s.success(&key(n), now),
                    Fail(n, want) => assert_eq!(s.failure(&key(n)), want, "{name}"),
                    Wait(d) => now += std::time::Duration::from_secs(d),
                    Expect(want) => {
                        let got: Vec<(Key, u64, u32)> = s
                            .snapshot(now)
                            .into_iter()
                            .map(|f| {
                                (
                                    f.key,
                                    f.seconds_since_success as u64,
                                    f.consecutive_failures,
                                )
                            })
                            .collect();
                        let want: Vec<(Key, u64, u32)> =
                            want.iter().map(|(n, a, f)| (key(n), *a, *f)).collect();
                        assert_eq!(got, want, "{name}");
                        assert_eq!(s.len(), want.len(), "{name}");
                    }
                }
            }
        }
    }
}
