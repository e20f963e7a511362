//! Running workers over a queue: the loop every controller needs, written once.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{QueueKey, WorkQueue};

/// What a handler wants done with the key it processed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Done: forget the key's failure count.
    Done,
    /// Failed: retry with the key's exponential backoff (the reason is logged at v2).
    Retry(String),
    /// Retry no sooner than this.
    RetryAfter(Duration),
}

/// Runs `workers` concurrent workers that hand each key to `handler` until `cancel`. A key is
/// never processed by two workers at once (the queue guarantees it). On cancel the queue shuts
/// down; keys being processed finish, queued ones are dropped.
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
    let handles: Vec<_> = (0..workers.max(1))
        .map(|_| tokio::spawn(worker(queue.clone(), cancel.clone(), handler.clone())))
        .collect();
    cancel.cancelled().await;
    queue.shut_down();
    for handle in handles {
        if let Err(e) = handle.await
            && e.is_panic()
        {
            std::panic::resume_unwind(e.into_panic());
        }
    }
}

async fn worker<K, F, Fut>(queue: WorkQueue<K>, cancel: CancellationToken, handler: F)
where
    K: QueueKey,
    F: Fn(K) -> Fut,
    Fut: Future<Output = Outcome>,
{
    loop {
        let key = tokio::select! {
            _ = cancel.cancelled() => return,
            key = queue.get() => match key {
                Some(key) => key,
                None => return,
            },
        };
        match handler(key.clone()).await {
            Outcome::Done => queue.forget(&key),
            Outcome::Retry(reason) => {
                klog::v!(2, queue = queue.name(), key = ?key, err = %reason, "Will retry");
                queue.add_rate_limited(key.clone());
            }
            Outcome::RetryAfter(delay) => queue.add_after(key.clone(), delay),
        }
        queue.done(&key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workqueue::RateLimiter;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test(start_paused = true)]
    async fn retries_until_done_then_stops_on_cancel() {
        let queue = WorkQueue::new(
            "test",
            RateLimiter::new(Duration::from_millis(10), Duration::from_secs(1)),
            None,
        );
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
                        Outcome::Retry("not yet".into())
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
}
