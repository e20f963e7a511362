//! The queue's bookkeeping, free of locking and waiting: every method takes `now` and says
//! whether waiting workers need a wake-up. [`super::WorkQueue`] wraps it in a mutex.
//!
//! Sets as in client-go's `workqueue.Typed`: `dirty` holds keys that need processing,
//! `processing` keys a worker holds. A key is in a lane (`urgent`/`normal`) only while it is
//! dirty and not being processed, so it is never handed to two workers at once.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

use super::metrics::QueueMetrics;
use super::rate_limiter::RateLimiter;

/// What an operation asks of the waiting workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// Nothing changed for them.
    None,
    /// A key became available: wake one worker.
    One,
    /// The earliest delayed deadline moved earlier, or the queue shuts down: wake all, so
    /// each recomputes what it waits for.
    All,
}

pub(crate) struct State<K> {
    urgent: VecDeque<K>,
    normal: VecDeque<K>,
    dirty: HashSet<K>,
    /// Dirty keys that go to the urgent lane when they are (re)queued.
    urgent_dirty: HashSet<K>,
    processing: HashSet<K>,
    /// Delayed keys by deadline; `seq` keeps equal deadlines in insertion order.
    waiting: BTreeMap<(Instant, u64), K>,
    waiting_index: HashMap<K, (Instant, u64)>,
    seq: u64,
    shutting_down: bool,
    pub(crate) limiter: RateLimiter<K>,
    pub(super) metrics: QueueMetrics,
    add_times: HashMap<K, Instant>,
    processing_start: HashMap<K, Instant>,
}

impl<K: Clone + Eq + Hash> State<K> {
    pub(crate) fn new(limiter: RateLimiter<K>, metrics: QueueMetrics) -> Self {
        Self {
            urgent: VecDeque::new(),
            normal: VecDeque::new(),
            dirty: HashSet::new(),
            urgent_dirty: HashSet::new(),
            processing: HashSet::new(),
            waiting: BTreeMap::new(),
            waiting_index: HashMap::new(),
            seq: 0,
            shutting_down: false,
            limiter,
            metrics,
            add_times: HashMap::new(),
            processing_start: HashMap::new(),
        }
    }

    pub(crate) fn shutting_down(&self) -> bool {
        self.shutting_down
    }

    /// Keys ready to be handed out (client-go's `Len`: neither processing nor delayed keys).
    pub(crate) fn len(&self) -> usize {
        self.urgent.len() + self.normal.len()
    }

    /// client-go's `Add`, plus the urgent lane.
    pub(crate) fn add(&mut self, key: K, urgent: bool, now: Instant) -> Wake {
        if self.shutting_down {
            return Wake::None;
        }
        if self.dirty.contains(&key) {
            // Coalesced with the pending add; an urgent add may still promote it.
            if urgent && self.urgent_dirty.insert(key.clone()) && !self.processing.contains(&key) {
                if let Some(pos) = self.normal.iter().position(|k| k == &key) {
                    self.normal.remove(pos);
                }
                self.urgent.push_back(key);
            }
            return Wake::None;
        }
        self.metrics.adds.inc();
        self.metrics.depth.inc();
        self.add_times.entry(key.clone()).or_insert(now);
        self.dirty.insert(key.clone());
        if urgent {
            self.urgent_dirty.insert(key.clone());
        }
        if self.processing.contains(&key) {
            // Re-queued by `done`.
            return Wake::None;
        }
        self.push_lane(key);
        Wake::One
    }

    fn push_lane(&mut self, key: K) {
        if self.urgent_dirty.contains(&key) {
            self.urgent.push_back(key);
        } else {
            self.normal.push_back(key);
        }
    }

    /// client-go's `AddAfter`: a zero delay adds at once; otherwise the key waits, keeping
    /// the earliest deadline if it is already waiting.
    pub(crate) fn add_after(&mut self, key: K, delay: Duration, now: Instant) -> Wake {
        if self.shutting_down {
            return Wake::None;
        }
        self.metrics.retries.inc();
        if delay.is_zero() {
            return self.add(key, false, now);
        }
        let deadline = now + delay;
        if let Some(&(existing, seq)) = self.waiting_index.get(&key) {
            if existing <= deadline {
                return Wake::None;
            }
            self.waiting.remove(&(existing, seq));
        }
        let earliest_before = self.next_deadline();
        self.seq += 1;
        let slot = (deadline, self.seq);
        self.waiting.insert(slot, key.clone());
        self.waiting_index.insert(key, slot);
        match earliest_before {
            Some(earliest) if earliest <= deadline => Wake::None,
            _ => Wake::All,
        }
    }

    /// Adds every delayed key whose deadline has passed.
    pub(crate) fn promote_ready(&mut self, now: Instant) -> Wake {
        let mut wake = Wake::None;
        while let Some(entry) = self.waiting.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let key = entry.remove();
            self.waiting_index.remove(&key);
            if self.add(key, false, now) == Wake::One {
                wake = Wake::One;
            }
        }
        wake
    }

    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.waiting.first_key_value().map(|((at, _), _)| *at)
    }

    /// client-go's `Get` once a key is available: urgent keys first.
    pub(crate) fn pop(&mut self, now: Instant) -> Option<K> {
        let key = self
            .urgent
            .pop_front()
            .or_else(|| self.normal.pop_front())?;
        self.processing.insert(key.clone());
        self.dirty.remove(&key);
        self.urgent_dirty.remove(&key);
        self.metrics.depth.dec();
        if let Some(added) = self.add_times.remove(&key) {
            self.metrics
                .queue_duration
                .observe(now.saturating_duration_since(added).as_secs_f64());
        }
        self.processing_start.insert(key.clone(), now);
        Some(key)
    }

    /// client-go's `Done`: a key added while it was processed goes back into its lane.
    pub(crate) fn done(&mut self, key: &K, now: Instant) -> Wake {
        if !self.processing.remove(key) {
            return Wake::None;
        }
        if let Some(started) = self.processing_start.remove(key) {
            self.metrics
                .work_duration
                .observe(now.saturating_duration_since(started).as_secs_f64());
        }
        if self.dirty.contains(key) {
            self.push_lane(key.clone());
            return Wake::One;
        }
        Wake::None
    }

    /// Stops accepting keys and drops delayed ones; queued keys are still handed out.
    pub(crate) fn shut_down(&mut self) -> Wake {
        self.shutting_down = true;
        self.waiting.clear();
        self.waiting_index.clear();
        Wake::All
    }

    /// Seconds of work in progress, summed and the longest.
    pub(crate) fn in_flight(&self, now: Instant) -> (f64, f64) {
        self.processing_start
            .values()
            .map(|started| now.saturating_duration_since(*started).as_secs_f64())
            .fold((0.0, 0.0), |(sum, longest), d| {
                (sum + d, f64::max(longest, d))
            })
    }
}
