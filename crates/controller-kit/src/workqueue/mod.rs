//! client-go's rate-limiting work queue, for async workers.
//!
//! Semantics follow `k8s.io/client-go/util/workqueue` exactly:
//! - a key is never handed to two workers at once;
//! - adding a key that is queued is a no-op (coalesced);
//! - adding a key that is being processed marks it dirty, and [`WorkQueue::done`] queues it
//!   again;
//! - [`WorkQueue::add_after`] keeps the earliest pending deadline per key;
//! - after [`WorkQueue::shut_down`] adds are ignored, delayed keys are dropped, and
//!   [`WorkQueue::get`] hands out what is still queued, then returns `None`.
//!
//! Beyond client-go, [`WorkQueue::add_urgent`] puts a key in a priority lane that workers drain
//! before the normal lane. The capacity controller needs it: a storage class or topology change
//! must refresh the affected `CSIStorageCapacity` objects before the periodic poll backlog.
//!
//! Delayed keys need no background task: whichever worker waits sleeps until the earliest
//! deadline, and every queue operation first moves due keys into the queue.

mod metrics;
mod rate_limiter;
mod state;
#[cfg(test)]
mod tests;
mod workers;

use std::fmt::Debug;
use std::hash::Hash;
use std::pin::pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

pub use metrics::{DURATION_BUCKETS, ErrorLabels, QueueLabel, WorkQueueMetrics};
pub use rate_limiter::{RateLimiter, exponential};
pub use workers::{Failure, Outcome, WorkerPanic, panic_message, run_workers};

use metrics::InFlight;
use state::{State, Wake};

/// The bounds a queue key needs.
pub trait QueueKey: Clone + Eq + Hash + Send + Sync + Debug + 'static {}
impl<T: Clone + Eq + Hash + Send + Sync + Debug + 'static> QueueKey for T {}

/// A named, rate-limited work queue. Cheap to clone; clones share the queue.
pub struct WorkQueue<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<K> Debug for WorkQueue<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkQueue")
            .field("name", &self.inner.name)
            .finish_non_exhaustive()
    }
}

/// What a worker found when it looked at the queue.
enum Next<K> {
    Key(K),
    Closed,
    /// Nothing yet: wait for a wake-up or the earliest delayed deadline.
    Wait(Option<Instant>),
}

struct Inner<K> {
    name: String,
    state: Mutex<State<K>>,
    notify: Notify,
}

impl<K: QueueKey> Inner<K> {
    fn wake(&self, wake: Wake) {
        match wake {
            Wake::None => {}
            Wake::One => self.notify.notify_one(),
            Wake::All => self.notify.notify_waiters(),
        }
    }

    /// Runs `f` on the state after moving due delayed keys into the queue.
    fn with_state<R>(&self, f: impl FnOnce(&mut State<K>, Instant) -> (R, Wake)) -> R {
        let now = Instant::now();
        let (result, promoted, wake) = {
            let mut state = self.state.lock();
            let promoted = state.promote_ready(now);
            let (result, wake) = f(&mut state, now);
            (result, promoted, wake)
        };
        self.wake(promoted);
        self.wake(wake);
        result
    }
}

impl<K: QueueKey> InFlight for Inner<K> {
    fn queue_name(&self) -> &str {
        &self.name
    }

    fn refresh(&self) -> (f64, f64) {
        self.with_state(|state, now| (state.in_flight(now), Wake::None))
    }
}

impl<K: QueueKey> WorkQueue<K> {
    /// Creates a queue named `name` (the `name` label of its metrics) that backs off failed
    /// keys with `limiter`. Without `metrics` the queue is not exported.
    pub fn new(name: &str, limiter: RateLimiter<K>, metrics: Option<&WorkQueueMetrics>) -> Self {
        let handles = metrics.map(|m| m.for_queue(name)).unwrap_or_default();
        let inner = Arc::new(Inner {
            name: name.to_string(),
            state: Mutex::new(State::new(limiter, handles)),
            notify: Notify::new(),
        });
        if let Some(m) = metrics {
            let weak: Weak<Inner<K>> = Arc::downgrade(&inner);
            m.track(weak);
        }
        Self { inner }
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Queues `key` unless it is already queued.
    pub fn add(&self, key: K) {
        self.inner
            .with_state(|state, now| ((), state.add(key, false, now)));
    }

    /// Queues `key` ahead of all normally queued keys. If `key` is already queued normally it
    /// is moved to the urgent lane; if it is being processed it re-enters urgently on
    /// [`done`](Self::done). Urgent keys are served first-in first-out among themselves.
    pub fn add_urgent(&self, key: K) {
        self.inner
            .with_state(|state, now| ((), state.add(key, true, now)));
    }

    /// Queues `key` after `delay`. If it is already waiting, the earlier deadline wins.
    /// Counts towards `workqueue_retries_total`, as upstream.
    pub fn add_after(&self, key: K, delay: Duration) {
        self.inner
            .with_state(|state, now| ((), state.add_after(key, delay, now)));
    }

    /// Queues `key` after its rate limiter's backoff, counting one more failure for it.
    pub fn add_rate_limited(&self, key: K) {
        self.inner.with_state(|state, now| {
            let delay = state.limiter.when(&key);
            ((), state.add_after(key, delay, now))
        });
    }

    /// Counts one more failure for `key` and returns its backoff, for a caller that queues the
    /// key itself (with [`add_after`](Self::add_after)) and must know when it will come back.
    pub fn next_backoff(&self, key: &K) -> Duration {
        self.inner.state.lock().limiter.when(key)
    }

    /// Resets `key`'s failure count. Call it when processing succeeded (or gave up), or
    /// the next failure waits longer than it should.
    pub fn forget(&self, key: &K) {
        self.inner.state.lock().limiter.forget(key);
    }

    /// Counts a failed sync of `kind` in `csi_provisioner_sync_errors_total`.
    pub fn count_error(&self, kind: &str) {
        self.inner.state.lock().metrics.error(kind);
    }

    /// How many times `key` was re-queued with backoff since it was last forgotten.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.inner.state.lock().limiter.num_requeues(key)
    }

    /// Waits for a key to process. Every key returned must be passed to
    /// [`done`](Self::done) when its processing ends. Returns `None` once the queue is shut
    /// down and nothing is queued.
    pub async fn get(&self) -> Option<K> {
        loop {
            // Register for wake-ups before looking, so none is lost in between.
            let mut notified = pin!(self.inner.notify.notified());
            notified.as_mut().enable();
            let next = self.inner.with_state(|state, now| {
                if let Some(key) = state.pop(now) {
                    // Keys left behind: pass the baton so they do not wait for the next add.
                    let wake = if state.len() > 0 {
                        Wake::One
                    } else {
                        Wake::None
                    };
                    return (Next::Key(key), wake);
                }
                if state.shutting_down() {
                    return (Next::Closed, Wake::None);
                }
                (Next::Wait(state.next_deadline()), Wake::None)
            });
            match next {
                Next::Key(key) => return Some(key),
                Next::Closed => return None,
                Next::Wait(None) => notified.await,
                Next::Wait(Some(deadline)) => {
                    tokio::select! {
                        () = notified => {}
                        () = tokio::time::sleep_until(deadline) => {}
                    }
                }
            }
        }
    }

    /// Marks the processing of `key` finished. If it was added meanwhile, it is queued again.
    pub fn done(&self, key: &K) {
        self.inner
            .with_state(|state, now| ((), state.done(key, now)));
    }

    /// Keys waiting to be handed out (not counting delayed or in-process keys).
    pub fn len(&self) -> usize {
        self.inner.with_state(|state, _| (state.len(), Wake::None))
    }

    /// Whether no key waits to be handed out.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops the queue: new adds are ignored, delayed keys dropped; workers drain what is
    /// queued and then get `None`.
    pub fn shut_down(&self) {
        self.inner.with_state(|state, _| ((), state.shut_down()));
    }

    /// Whether [`shut_down`](Self::shut_down) was called.
    pub fn is_shutting_down(&self) -> bool {
        self.inner.state.lock().shutting_down()
    }
}
