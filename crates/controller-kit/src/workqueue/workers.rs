//! Running workers over a queue: the loop every controller needs, written once.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt;
use tokio::task::{JoinError, JoinSet};
use tokio_util::sync::CancellationToken;

use super::{QueueKey, WorkQueue};

/// A failed sync: its message says what failed on which object, and [`kind`](Self::kind) is a
/// stable, low-cardinality label for the log line and `csi_provisioner_sync_errors_total`.
pub trait Failure: std::fmt::Display + std::fmt::Debug + Send + Sync + 'static {
    /// E.g. `claim_write`, `create_volume`, `pv_delete`.
    fn kind(&self) -> &'static str;
}

/// What a handler wants done with the key it processed.
#[derive(Debug)]
pub enum Outcome {
    /// Done: forget the key's failure count.
    Done,
    /// Failed: retry with the key's exponential backoff (logged at v2 with its kind).
    Retry(Box<dyn Failure>),
    /// Retry no sooner than this.
    RetryAfter(Duration),
}

impl Outcome {
    /// Retry after `failure`, with the key's backoff.
    pub fn retry(failure: impl Failure) -> Outcome {
        Outcome::Retry(Box::new(failure))
    }
}

/// A handler panicked: the queue, the key it was processing and the panic's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a worker of queue {queue:?} panicked while processing key {key}: {message}")]
pub struct WorkerPanic {
    pub queue: String,
    /// The key's `Debug` form.
    pub key: String,
    pub message: String,
}

/// Runs `workers` concurrent workers that hand each key to `handler` until `cancel`. A key is
/// never processed by two workers at once (the queue guarantees it). On cancel the queue shuts
/// down; keys being processed finish, queued ones are dropped.
///
/// A panicking handler is not survivable: its key would stay "in progress" forever and the
/// process would run one worker short. So the first panic shuts the queue down and is re-raised
/// here at once, as a [`WorkerPanic`] payload (a `String`) naming the queue and the key, for the
/// task awaiting this to report (upstream's Go process crashes and is restarted).
pub async fn run_workers<K, F, Fut>(
    queue: WorkQueue<K>,
    workers: usize,
    cancel: CancellationToken,
    handler: F,
) where
    K: QueueKey,
    F: Fn(K) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let mut set = JoinSet::new();
    for _ in 0..workers.max(1) {
        set.spawn(worker(queue.clone(), cancel.clone(), handler.clone()));
    }
    loop {
        tokio::select! {
            biased;
            () = cancel.cancelled() => break,
            joined = set.join_next() => match joined {
                Some(joined) => reraise_panic(&queue, joined),
                // Every worker returned: the queue was shut down.
                None => break,
            },
        }
    }
    queue.shut_down();
    while let Some(joined) = set.join_next().await {
        reraise_panic(&queue, joined);
    }
}

fn reraise_panic<K: QueueKey>(
    queue: &WorkQueue<K>,
    joined: Result<Result<(), WorkerPanic>, JoinError>,
) {
    let panic = match joined {
        Ok(Ok(())) => return,
        Ok(Err(panic)) => panic,
        Err(e) if e.is_panic() => WorkerPanic {
            queue: queue.name().to_string(),
            key: "(none)".to_string(),
            message: panic_message(e.into_panic().as_ref()),
        },
        // Aborted: only when the runtime shuts down.
        Err(_) => return,
    };
    queue.shut_down();
    tracing::error!(queue = %panic.queue, key = %panic.key, err = %panic.message, "Worker panicked");
    // `resume_unwind` skips the panic hook: the original panic was printed already.
    std::panic::resume_unwind(Box::new(panic.to_string()));
}

/// The message of a panic payload (`panic!` gives a `&str` or a `String`).
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a panic without a message)".to_string()
    }
}

async fn worker<K, F, Fut>(
    queue: WorkQueue<K>,
    cancel: CancellationToken,
    handler: F,
) -> Result<(), WorkerPanic>
where
    K: QueueKey,
    F: Fn(K) -> Fut,
    Fut: Future<Output = Outcome>,
{
    loop {
        let key = tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            key = queue.get() => match key {
                Some(key) => key,
                None => return Ok(()),
            },
        };
        let handled = AssertUnwindSafe(async {
            #[cfg(debug_assertions)]
            fault::panic_if_asked(queue.name(), &key);
            // Boxed: awaited inline, the handler's state (a claim sync's is tens of KiB) would
            // be part of every worker's task, idle or not: 100 workers held 5 MiB at rest.
            Box::pin(handler(key.clone())).await
        })
        .catch_unwind()
        .await;
        // The key is left "in progress": the process is going down.
        let outcome = handled.map_err(|payload| WorkerPanic {
            queue: queue.name().to_string(),
            key: format!("{key:?}"),
            message: panic_message(payload.as_ref()),
        })?;
        match outcome {
            Outcome::Done => queue.forget(&key),
            Outcome::Retry(failure) => {
                queue.count_error(failure.kind());
                klog::v!(2, queue = queue.name(), key = ?key, kind = failure.kind(), err = %failure, "Will retry");
                queue.add_rate_limited(key.clone());
            }
            Outcome::RetryAfter(delay) => queue.add_after(key.clone(), delay),
        }
        queue.done(&key);
    }
}

/// A test-only fault, compiled into debug builds only: tests of crash handling run the real
/// binary and need a worker to panic on a key of their choosing.
#[cfg(debug_assertions)]
mod fault {
    /// `<queue>:<text>`: a worker of `<queue>` panics on a key whose `Debug` form contains
    /// `"<text>"` (quoted, so `claims:data` matches the claim named `data` in any namespace).
    pub const ENV: &str = "CSI_PROVISIONER_DEBUG_PANIC_ON";

    pub(super) fn panic_if_asked<K: std::fmt::Debug>(queue: &str, key: &K) {
        if let Ok(spec) = std::env::var(ENV)
            && matches(&spec, queue, &format!("{key:?}"))
        {
            panic!("{ENV}={spec}: injected panic on key {key:?}");
        }
    }

    pub(super) fn matches(spec: &str, queue: &str, key: &str) -> bool {
        spec.split_once(':')
            .is_some_and(|(q, text)| q == queue && key.contains(&format!("{text:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workqueue::RateLimiter;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Debug)]
    struct NotYet;

    impl std::fmt::Display for NotYet {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("not yet")
        }
    }

    impl Failure for NotYet {
        fn kind(&self) -> &'static str {
            "not_yet"
        }
    }

    fn test_queue(name: &str) -> WorkQueue<&'static str> {
        WorkQueue::new(
            name,
            RateLimiter::new(Duration::from_millis(10), Duration::from_secs(1)),
            None,
        )
    }

    #[test]
    fn an_idle_worker_does_not_hold_its_handlers_state() {
        // A handler whose future carries 64 KiB, as a claim sync's carries tens of KiB: every
        // spawned worker is allocated at start, so its task must not include that state.
        let handler = |_k: &'static str| async {
            let big = [0u8; 64 * 1024];
            tokio::task::yield_now().await;
            std::hint::black_box(&big);
            Outcome::Done
        };
        let idle = worker(test_queue("size"), CancellationToken::new(), handler);
        let size = std::mem::size_of_val(&idle);
        assert!(size < 4096, "a worker's task is {size} bytes");
    }

    #[tokio::test(start_paused = true)]
    async fn retries_until_done_then_stops_on_cancel() {
        let queue = test_queue("test");
        let calls = Arc::new(AtomicUsize::new(0));
        let cancel = CancellationToken::new();
        queue.add("k");
        let (c, q) = (calls.clone(), queue.clone());
        let run = tokio::spawn(run_workers(
            queue.clone(),
            2,
            cancel.clone(),
            move |_k: &'static str| {
                let c = c.clone();
                async move {
                    if c.fetch_add(1, Ordering::SeqCst) < 2 {
                        Outcome::retry(NotYet)
                    } else {
                        Outcome::Done
                    }
                }
            },
        ));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(calls.load(Ordering::SeqCst), 3, "two retries, then done");
        assert_eq!(q.num_requeues(&"k"), 0, "done forgets the failures");
        cancel.cancel();
        run.await.unwrap();
        assert!(q.is_shutting_down());
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_handler_ends_run_workers_at_once_naming_queue_and_key() {
        let queue = test_queue("things");
        let calls = Arc::new(AtomicUsize::new(0));
        let cancel = CancellationToken::new();
        queue.add("fine");
        queue.add("bad");
        let c = calls.clone();
        let run = tokio::spawn(run_workers(
            queue.clone(),
            3,
            cancel.clone(),
            move |k: &'static str| {
                let c = c.clone();
                async move {
                    c.fetch_add(1, Ordering::SeqCst);
                    assert_ne!(k, "bad", "boom");
                    Outcome::Done
                }
            },
        ));
        // Never cancelled: the panic alone must end it.
        let err = tokio::time::timeout(Duration::from_secs(5), run)
            .await
            .expect("run_workers returned without a cancel")
            .expect_err("run_workers panicked");
        let message = panic_message(err.into_panic().as_ref());
        assert!(message.contains(r#"queue "things""#), "{message}");
        assert!(message.contains(r#"key "bad""#), "{message}");
        assert!(message.contains("boom"), "{message}");
        assert_eq!(calls.load(Ordering::SeqCst), 2, "each key once");
        assert!(queue.is_shutting_down(), "no further keys are taken");
        assert!(!cancel.is_cancelled());
    }

    #[test]
    fn panic_messages() {
        let cases: [(Box<dyn Any + Send>, &str); 3] = [
            (Box::new("static"), "static"),
            (Box::new(String::from("owned")), "owned"),
            (Box::new(42_u8), "(a panic without a message)"),
        ];
        for (payload, want) in cases {
            assert_eq!(panic_message(payload.as_ref()), want);
        }
    }

    #[cfg(debug_assertions)]
    #[test]
    fn fault_hook_matches_queue_and_quoted_key_text() {
        let claim = r#"ClaimKey { namespace: "ns", name: "data" }"#;
        let cases = [
            ("claims:data", "claims", claim, true),
            ("claims:ns", "claims", claim, true),
            ("claims:dat", "claims", claim, false),
            ("volumes:data", "claims", claim, false),
            ("claims:pv-1", "claims", "\"pv-1\"", true),
            ("claims", "claims", claim, false),
            ("", "claims", claim, false),
        ];
        for (spec, queue, key, want) in cases {
            assert_eq!(
                fault::matches(spec, queue, key),
                want,
                "{spec} {queue} {key}"
            );
        }
    }
}
