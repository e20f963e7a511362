//! Queue behaviour under tokio's paused clock: time only moves when the test says so (or
//! when every task is idle), so delays are checked exactly.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use tokio::time::{Instant, advance, timeout};

use super::*;

const SEC: Duration = Duration::from_secs(1);

fn queue() -> WorkQueue<&'static str> {
    WorkQueue::new("test", RateLimiter::new(SEC, 4 * SEC), None)
}

/// The next key, or `None` if none arrives within a second of (paused) time.
async fn try_get<K: QueueKey>(q: &WorkQueue<K>) -> Option<K> {
    timeout(SEC, q.get()).await.ok().flatten()
}

async fn drain(q: &WorkQueue<&'static str>) -> Vec<&'static str> {
    let mut got = Vec::new();
    while let Some(k) = try_get(q).await {
        q.done(&k);
        got.push(k);
    }
    got
}

#[tokio::test(start_paused = true)]
async fn duplicate_adds_are_coalesced_in_fifo_order() {
    let q = queue();
    for k in ["a", "b", "a", "c", "b"] {
        q.add(k);
    }
    assert_eq!(q.len(), 3);
    assert_eq!(drain(&q).await, ["a", "b", "c"]);
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn adding_a_key_in_process_requeues_it_on_done() {
    let q = queue();
    q.add("a");
    let a = q.get().await.unwrap();
    q.add("a");
    q.add("a");
    // Dirty but held by a worker: not handed out again yet.
    assert_eq!(q.len(), 0);
    assert_eq!(try_get(&q).await, None);
    q.done(&a);
    assert_eq!(q.len(), 1);
    assert_eq!(drain(&q).await, ["a"]);
}

#[tokio::test(start_paused = true)]
async fn done_without_new_add_does_not_requeue() {
    let q = queue();
    q.add("a");
    let a = q.get().await.unwrap();
    q.done(&a);
    q.done(&a); // a second done is harmless
    assert!(q.is_empty());
    assert_eq!(try_get(&q).await, None);
}

#[tokio::test(start_paused = true)]
async fn a_key_is_never_processed_by_two_workers_at_once() {
    let q: WorkQueue<u32> = WorkQueue::new("test", RateLimiter::new(SEC, SEC), None);
    let held: Arc<Mutex<HashSet<u32>>> = Arc::default();
    let processed = Arc::new(Mutex::new(0u32));
    let mut workers = Vec::new();
    for _ in 0..4 {
        let (q, held, processed) = (q.clone(), held.clone(), processed.clone());
        workers.push(tokio::spawn(async move {
            while let Some(k) = q.get().await {
                assert!(held.lock().insert(k), "key {k} handed to two workers");
                tokio::time::sleep(Duration::from_millis(10 + u64::from(k))).await;
                held.lock().remove(&k);
                *processed.lock() += 1;
                q.done(&k);
            }
        }));
    }
    // Keep re-adding the same few keys while workers hold them.
    for round in 0..50u32 {
        q.add(round % 3);
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    tokio::time::sleep(SEC).await;
    q.shut_down();
    for w in workers {
        w.await.unwrap();
    }
    // Re-adds during processing were not lost, and every key ran at least once more
    // than the three initial adds.
    assert!(*processed.lock() > 3, "processed {}", *processed.lock());
    assert!(held.lock().is_empty());
}

#[tokio::test(start_paused = true)]
async fn add_after_hands_out_the_key_at_its_deadline() {
    let q = queue();
    let start = Instant::now();
    q.add_after("a", 5 * SEC);
    assert!(q.is_empty());
    advance(Duration::from_millis(4_999)).await;
    assert!(q.is_empty());
    // A worker that is already waiting wakes exactly at the deadline.
    let got = q.get().await;
    assert_eq!(got, Some("a"));
    assert_eq!(start.elapsed(), 5 * SEC);
}

#[tokio::test(start_paused = true)]
async fn add_after_keeps_the_earliest_deadline() {
    let q = queue();
    let start = Instant::now();
    q.add_after("a", 10 * SEC);
    q.add_after("a", 2 * SEC); // earlier: wins
    q.add_after("a", 7 * SEC); // later: ignored
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(start.elapsed(), 2 * SEC);
    q.done(&"a");
    // The key is delayed once, not three times.
    advance(20 * SEC).await;
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_waiting_worker_wakes_for_an_earlier_delayed_key() {
    let q = queue();
    let start = Instant::now();
    q.add_after("late", 60 * SEC);
    let worker = tokio::spawn({
        let q = q.clone();
        async move { q.get().await }
    });
    tokio::task::yield_now().await;
    q.add_after("soon", SEC);
    assert_eq!(worker.await.unwrap(), Some("soon"));
    assert_eq!(start.elapsed(), SEC);
}

#[tokio::test(start_paused = true)]
async fn zero_delay_adds_immediately_and_delayed_key_in_queue_coalesces() {
    let q = queue();
    q.add_after("a", Duration::ZERO);
    assert_eq!(q.len(), 1);
    q.add_after("a", SEC);
    advance(2 * SEC).await;
    assert_eq!(q.len(), 1, "the due key coalesced with the queued one");
}

#[tokio::test(start_paused = true)]
async fn rate_limited_backoff_doubles_caps_and_resets_on_forget() {
    let q = queue(); // 1 s doubling, capped at 4 s
    let mut waits = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        q.add_rate_limited("a");
        let a = q.get().await.unwrap();
        waits.push(start.elapsed().as_secs());
        q.done(&a);
    }
    assert_eq!(waits, [1, 2, 4, 4, 4]);
    assert_eq!(q.num_requeues(&"a"), 5);
    assert_eq!(q.num_requeues(&"b"), 0);

    q.forget(&"a");
    assert_eq!(q.num_requeues(&"a"), 0);
    let start = Instant::now();
    q.add_rate_limited("a");
    q.get().await.unwrap();
    assert_eq!(start.elapsed(), SEC);
}

#[tokio::test(start_paused = true)]
async fn urgent_keys_go_first_and_promote_queued_ones() {
    let q = queue();
    for k in ["a", "b", "c"] {
        q.add(k);
    }
    q.add_urgent("c"); // promoted out of the normal lane
    q.add_urgent("d"); // new, urgent
    q.add_urgent("c"); // already urgent: no-op
    q.add("d"); // already queued: stays urgent
    assert_eq!(q.len(), 4);
    assert_eq!(drain(&q).await, ["c", "d", "a", "b"]);
}

#[tokio::test(start_paused = true)]
async fn urgent_add_while_processing_requeues_urgently() {
    let q = queue();
    q.add("x");
    let x = q.get().await.unwrap();
    q.add("a");
    q.add("x");
    q.add_urgent("x"); // dirty already: upgraded to urgent for its re-queue
    q.done(&x);
    assert_eq!(drain(&q).await, ["x", "a"]);
}

#[tokio::test(start_paused = true)]
async fn shutdown_drains_queued_keys_then_returns_none() {
    let q = queue();
    q.add("a");
    q.add("b");
    q.add_after("later", SEC);
    q.shut_down();
    assert!(q.is_shutting_down());
    q.add("c"); // ignored
    q.add_rate_limited("d"); // ignored
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(q.get().await, Some("b"));
    assert_eq!(q.get().await, None);
    advance(2 * SEC).await;
    assert_eq!(q.get().await, None, "delayed keys were dropped");
}

#[tokio::test(start_paused = true)]
async fn shutdown_wakes_idle_workers() {
    let q = queue();
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move { q.get().await })
        })
        .collect();
    tokio::task::yield_now().await;
    q.shut_down();
    for w in workers {
        assert_eq!(w.await.unwrap(), None);
    }
}

#[tokio::test(start_paused = true)]
async fn every_queued_key_reaches_some_idle_worker() {
    let q = queue();
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move { q.get().await })
        })
        .collect();
    tokio::task::yield_now().await;
    // Three due keys at once: each must wake a worker, none may be stranded.
    for k in ["a", "b", "c"] {
        q.add_after(k, SEC);
    }
    let mut got = Vec::new();
    for w in workers {
        got.push(timeout(5 * SEC, w).await.unwrap().unwrap().unwrap());
    }
    got.sort();
    assert_eq!(got, ["a", "b", "c"]);
}

fn scrape(registry: &Registry) -> String {
    let mut out = String::new();
    encode(&mut out, registry).unwrap();
    out
}

/// The value of the sample line starting with `prefix`.
fn sample(text: &str, prefix: &str) -> f64 {
    let line = text
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no sample {prefix} in\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[tokio::test(start_paused = true)]
async fn metrics_have_component_base_names_and_the_name_label() {
    let metrics = WorkQueueMetrics::new();
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let claims: WorkQueue<&str> =
        WorkQueue::new("claims", RateLimiter::new(SEC, SEC), Some(&metrics));
    let volumes: WorkQueue<String> =
        WorkQueue::new("volumes", RateLimiter::new(SEC, SEC), Some(&metrics));

    claims.add("a");
    claims.add("a"); // coalesced: one add
    claims.add("b");
    claims.add_rate_limited("c");
    volumes.add("pv".to_string());
    advance(2 * SEC).await; // c becomes due and counts at scrape time

    let a = claims.get().await.unwrap();
    advance(3 * SEC).await;
    let text = scrape(&registry);

    assert_eq!(sample(&text, r#"workqueue_depth{name="claims"}"#), 2.0);
    assert_eq!(sample(&text, r#"workqueue_depth{name="volumes"}"#), 1.0);
    assert_eq!(sample(&text, r#"workqueue_adds_total{name="claims"}"#), 3.0);
    assert_eq!(
        sample(&text, r#"workqueue_retries_total{name="claims"}"#),
        1.0
    );
    assert_eq!(
        sample(&text, r#"workqueue_retries_total{name="volumes"}"#),
        0.0
    );
    assert_eq!(
        sample(&text, r#"workqueue_unfinished_work_seconds{name="claims"}"#),
        3.0
    );
    assert_eq!(
        sample(
            &text,
            r#"workqueue_longest_running_processor_seconds{name="claims"}"#
        ),
        3.0
    );
    assert_eq!(
        sample(
            &text,
            r#"workqueue_unfinished_work_seconds{name="volumes"}"#
        ),
        0.0
    );
    // "a" waited 2 s in the queue: it lands in the 10 s bucket, not the 1 s one.
    assert_eq!(
        sample(
            &text,
            r#"workqueue_queue_duration_seconds_bucket{le="1.0",name="claims"}"#
        ),
        0.0
    );
    assert_eq!(
        sample(
            &text,
            r#"workqueue_queue_duration_seconds_bucket{le="10.0",name="claims"}"#
        ),
        1.0
    );
    assert_eq!(
        sample(
            &text,
            r#"workqueue_queue_duration_seconds_count{name="claims"}"#
        ),
        1.0
    );

    claims.done(&a);
    let text = scrape(&registry);
    assert_eq!(
        sample(
            &text,
            r#"workqueue_work_duration_seconds_sum{name="claims"}"#
        ),
        3.0
    );
    assert_eq!(
        sample(&text, r#"workqueue_unfinished_work_seconds{name="claims"}"#),
        0.0
    );
    for name in [
        "# TYPE workqueue_depth gauge",
        "# TYPE workqueue_adds counter",
        "# TYPE workqueue_queue_duration_seconds histogram",
        "# TYPE workqueue_work_duration_seconds histogram",
        "# TYPE workqueue_unfinished_work_seconds gauge",
        "# TYPE workqueue_longest_running_processor_seconds gauge",
        "# TYPE workqueue_retries counter",
    ] {
        assert!(text.contains(name), "missing {name:?} in\n{text}");
    }
    // component-base's ten buckets from 10 ns to 10 s, plus +Inf.
    let buckets = text
        .lines()
        .filter(|l| {
            l.starts_with(r#"workqueue_work_duration_seconds_bucket{"#) && l.contains("claims")
        })
        .count();
    assert_eq!(buckets, 11);
}

#[tokio::test(start_paused = true)]
async fn dropped_queues_leave_the_in_flight_gauges() {
    let metrics = WorkQueueMetrics::new();
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let q: WorkQueue<u8> =
        WorkQueue::new("csitopology", RateLimiter::new(SEC, SEC), Some(&metrics));
    assert!(scrape(&registry).contains(r#"workqueue_unfinished_work_seconds{name="csitopology"}"#));
    drop(q);
    assert!(
        !scrape(&registry).contains(r#"workqueue_unfinished_work_seconds{name="csitopology"}"#)
    );
}

/// A standby (no queue yet) exports every announced queue's series at zero, as upstream's
/// replicas do from start-up.
#[test]
fn announced_queues_have_zero_series_before_they_exist() {
    let metrics = WorkQueueMetrics::new();
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    metrics.announce("claims");
    let text = scrape(&registry);
    for series in [
        r#"workqueue_depth{name="claims"} 0"#,
        r#"workqueue_adds_total{name="claims"} 0"#,
        r#"workqueue_retries_total{name="claims"} 0"#,
        r#"workqueue_queue_duration_seconds_count{name="claims"} 0"#,
        r#"workqueue_work_duration_seconds_count{name="claims"} 0"#,
        r#"workqueue_unfinished_work_seconds{name="claims"} 0"#,
        r#"workqueue_longest_running_processor_seconds{name="claims"} 0"#,
    ] {
        assert!(text.contains(series), "no {series} in:\n{text}");
    }
    assert!(!text.contains(r#"name="volumes""#), "{text}");
}
