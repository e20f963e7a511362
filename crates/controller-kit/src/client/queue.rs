//! Who gets the next token of a client's budget.
//!
//! client-go serves waiting requests in the order they were issued. Requests of one piece of
//! work come one after another, so with many workers every piece of work waits behind every
//! other one and they all finish late together. Here a request may carry the instant its
//! piece of work began ([`with_priority`]): waiting requests are served oldest work first,
//! so work finishes in the order it began, and the total rate is the same token bucket's.
//! Requests without one rank by the instant they were issued (client-go's order); the
//! background lane comes after every waiting normal request.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::bucket::TokenBucket;

tokio::task_local! {
    static WORK_BEGAN: Instant;
}

/// Runs `work` with its API requests ranked by `began` (see the module docs): the claims
/// controller wraps each attempt, so a claim that began first reaches its driver call first.
/// Not an `async fn`: that would hold `work` twice (as its argument and inside the scope),
/// doubling every claim attempt's state.
pub fn with_priority<F: Future>(began: Instant, work: F) -> impl Future<Output = F::Output> {
    WORK_BEGAN.scope(began, work)
}

/// The instant the current task's work began, if it set one.
pub(super) fn work_began() -> Option<Instant> {
    WORK_BEGAN.try_with(|b| *b).ok()
}

/// Normal requests come before background ones whatever their instants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Lane {
    Normal,
    Background,
}

/// A waiting request's place: lane, then instant, then arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Place {
    lane: Lane,
    at: Duration,
    seq: u64,
}

#[derive(Debug)]
struct State {
    bucket: TokenBucket,
    /// Each waiter's wake-up: only the first is ever woken, when the one before it leaves.
    waiting: BTreeMap<Place, Arc<Notify>>,
    seq: u64,
}

impl State {
    fn wake_first(&self) {
        if let Some(next) = self.waiting.values().next() {
            next.notify_one();
        }
    }
}

/// A token bucket on tokio's clock (so paused-time tests drive it) with its waiting line.
#[derive(Debug)]
pub(super) struct Limiter {
    origin: Instant,
    state: Mutex<State>,
}

impl Limiter {
    pub(super) fn new(qps: f64, burst: u32) -> Self {
        Self {
            origin: Instant::now(),
            state: Mutex::new(State {
                bucket: TokenBucket::new(qps, burst, Duration::ZERO),
                waiting: BTreeMap::new(),
                seq: 0,
            }),
        }
    }

    fn offset(&self, t: Instant) -> Duration {
        t.saturating_duration_since(self.origin)
    }

    /// Waits for this request's turn and a token; returns how long that took.
    pub(super) async fn acquire(&self, lane: Lane, at: Instant) -> Duration {
        let started = Instant::now();
        let (place, wake) = {
            let mut s = self.state.lock();
            if s.waiting.is_empty() && s.bucket.try_take(self.offset(started)) {
                return Duration::ZERO;
            }
            let place = Place {
                lane,
                at: self.offset(at),
                seq: s.seq,
            };
            s.seq += 1;
            let wake = Arc::new(Notify::new());
            s.waiting.insert(place, wake.clone());
            (place, wake)
        };
        let mut line = InLine {
            limiter: self,
            place: Some(place),
        };
        loop {
            let wait = {
                let mut s = self.state.lock();
                if s.waiting.keys().next() == Some(&place) {
                    let now = self.offset(Instant::now());
                    if s.bucket.try_take(now) {
                        s.waiting.remove(&place);
                        line.place = None;
                        s.wake_first();
                        return started.elapsed();
                    }
                    Some(s.bucket.until_available(now))
                } else {
                    None
                }
            };
            match wait {
                // First in line: sleep until the token, or until someone else is first.
                Some(wait) => {
                    tokio::select! {
                        () = tokio::time::sleep(wait.max(Duration::from_millis(1))) => {}
                        () = wake.notified() => {}
                    }
                }
                None => wake.notified().await,
            }
        }
    }
}

/// Leaves the line when a waiting request is dropped (its caller gave up).
struct InLine<'a> {
    limiter: &'a Limiter,
    place: Option<Place>,
}

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        if let Some(place) = self.place.take() {
            let mut s = self.limiter.state.lock();
            s.waiting.remove(&place);
            s.wake_first();
        }
    }
}
