//! Loop behaviour on paused tokio time over an in-memory Lease that enforces resourceVersion
//! like the API server. These pin down timing and call patterns; the proof against a real API
//! server is in `tests/real_apiserver.rs`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

use crate::*;

#[derive(Default)]
struct Shared {
    lease: Option<Lease>,
    version: u64,
    calls: Vec<String>,
}

/// One client's view of the shared Lease; `down` makes this client's calls fail.
#[derive(Clone)]
struct MemStore {
    shared: Arc<Mutex<Shared>>,
    down: Arc<AtomicBool>,
    /// The next GET is answered this much later (a slow API server), as it was when served.
    slow_get: Arc<Mutex<Option<Duration>>>,
    who: &'static str,
}

impl MemStore {
    fn client(shared: &Arc<Mutex<Shared>>, who: &'static str) -> Self {
        Self {
            shared: shared.clone(),
            down: Arc::default(),
            slow_get: Arc::default(),
            who,
        }
    }

    fn call(&self, verb: &str) -> Result<std::sync::MutexGuard<'_, Shared>, StoreError> {
        let mut s = self.shared.lock().expect("store lock");
        s.calls.push(format!("{} {verb}", self.who));
        if self.down.load(Ordering::SeqCst) {
            return Err(StoreError::Other {
                lease: "l".into(),
                message: "unreachable".into(),
            });
        }
        Ok(s)
    }
}

fn conflict() -> StoreError {
    StoreError::Conflict { lease: "l".into() }
}

impl LeaseStore for MemStore {
    async fn get(&self) -> Result<Option<Lease>, StoreError> {
        let delay = self.slow_get.lock().expect("delay lock").take();
        if let Some(delay) = delay {
            sleep(delay).await;
        }
        Ok(self.call("get")?.lease.clone())
    }

    async fn create(&self, lease: &Lease) -> Result<Lease, StoreError> {
        let mut s = self.call("create")?;
        if s.lease.is_some() {
            return Err(conflict());
        }
        s.version += 1;
        let mut stored = lease.clone();
        stored.metadata.resource_version = Some(s.version.to_string());
        stored.metadata.uid = Some("uid-1".into());
        s.lease = Some(stored.clone());
        Ok(stored)
    }

    async fn update(&self, lease: &Lease) -> Result<Lease, StoreError> {
        let mut s = self.call("update")?;
        let current = s
            .lease
            .as_ref()
            .and_then(|l| l.metadata.resource_version.clone());
        if current.is_none() || current != lease.metadata.resource_version {
            return Err(conflict());
        }
        s.version += 1;
        let mut stored = lease.clone();
        stored.metadata.resource_version = Some(s.version.to_string());
        s.lease = Some(stored.clone());
        Ok(stored)
    }
}

fn cfg(identity: &str) -> LeaderElectionConfig {
    LeaderElectionConfig {
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(5),
        ..LeaderElectionConfig::new("lock".into(), "ns".into(), identity.into())
    }
}

fn holder(shared: &Arc<Mutex<Shared>>) -> LeaseRecord {
    let s = shared.lock().expect("store lock");
    LeaseRecord::from_spec(s.lease.as_ref().and_then(|l| l.spec.as_ref()))
}

/// Runs an elector whose leading task reports its start and then waits for its token.
fn spawn_elector(
    store: MemStore,
    config: LeaderElectionConfig,
    cancel: CancellationToken,
) -> (
    JoinHandle<Outcome>,
    oneshot::Receiver<Instant>,
    watch::Receiver<bool>,
) {
    let elector = LeaderElector::with_store(store, config).expect("valid config");
    let leading = elector.subscribe();
    let (started_tx, started_rx) = oneshot::channel();
    let handle = tokio::spawn(elector.run(cancel, move |token| async move {
        let _ = started_tx.send(Instant::now());
        token.cancelled().await;
    }));
    (handle, started_rx, leading)
}

#[tokio::test(start_paused = true)]
async fn one_leader_and_a_standby_that_never_takes_over() {
    let shared = Arc::new(Mutex::new(Shared::default()));
    let cancel = CancellationToken::new();
    let (a, a_started, a_leading) =
        spawn_elector(MemStore::client(&shared, "a"), cfg("a"), cancel.clone());
    a_started.await.expect("a leads");
    let (b, _b_started, b_leading) =
        spawn_elector(MemStore::client(&shared, "b"), cfg("b"), cancel.clone());

    sleep(Duration::from_secs(120)).await;
    assert!(*a_leading.borrow());
    assert!(!*b_leading.borrow());
    let rec = holder(&shared);
    assert_eq!(rec.holder_identity, "a");
    assert_eq!(rec.lease_transitions, 0);
    assert_eq!(rec.lease_duration_seconds, 15);

    cancel.cancel();
    assert_eq!(
        a.await.expect("a"),
        Outcome::CancelledWhileLeading { released: false }
    );
    assert_eq!(b.await.expect("b"), Outcome::CancelledWhileStandby);
}

#[tokio::test(start_paused = true)]
async fn renewals_use_the_fast_path_without_reading() {
    let shared = Arc::new(Mutex::new(Shared::default()));
    let cancel = CancellationToken::new();
    let (a, started, _) = spawn_elector(MemStore::client(&shared, "a"), cfg("a"), cancel.clone());
    started.await.expect("leads");
    sleep(Duration::from_secs(21)).await; // renewals at 0, 5, 10, 15 and 20 s
    let calls = shared.lock().expect("lock").calls.clone();
    let mut want = vec!["a get", "a create"];
    want.extend(["a update"; 5]);
    assert_eq!(calls, want);
    cancel.cancel();
    a.await.expect("a");
}

#[tokio::test(start_paused = true)]
async fn leader_cut_off_loses_at_the_renew_deadline_and_standby_takes_over() {
    let shared = Arc::new(Mutex::new(Shared::default()));
    let cancel = CancellationToken::new();
    let a_store = MemStore::client(&shared, "a");
    let a_down = a_store.down.clone();
    let (a, a_started, _) = spawn_elector(a_store, cfg("a"), cancel.clone());
    a_started.await.expect("a leads");
    let (_b, b_started, _) =
        spawn_elector(MemStore::client(&shared, "b"), cfg("b"), cancel.clone());

    sleep(Duration::from_millis(5_500)).await; // just after a's renewal at 5 s
    let cut_at = Instant::now();
    a_down.store(true, Ordering::SeqCst);
    assert_eq!(a.await.expect("a"), Outcome::Lost);
    // The next round starts at 10 s and gives up 10 s later.
    assert_eq!(Instant::now() - cut_at, Duration::from_millis(14_500));

    let b_at = b_started.await.expect("b leads");
    // b first sees a's last renewal (written at 5 s) within one jittered retry (< 11 s), and
    // takes over at its first retry after that observation + 15 s: never before a gave up.
    let waited = b_at - cut_at;
    assert!(
        waited >= Duration::from_millis(14_500),
        "b took over after {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(36_500),
        "b took over after {waited:?}"
    );
    let rec = holder(&shared);
    assert_eq!(
        (rec.holder_identity.as_str(), rec.lease_transitions),
        ("b", 1)
    );
    cancel.cancel();
}

/// client-go times a newly seen record from when the read returns: a standby whose GET was
/// slow must not count the leader's time from when it sent it, or it takes over while the
/// leader (which renewed while the GET was under way) still leads.
#[tokio::test(start_paused = true)]
async fn a_record_is_timed_from_when_the_read_returns() {
    let shared = Arc::new(Mutex::new(Shared::default()));
    let mut a = LeaderElector::with_store(MemStore::client(&shared, "a"), cfg("a")).unwrap();
    assert!(a.try_acquire_or_renew().await, "a creates the Lease");
    let b_store = MemStore::client(&shared, "b");
    *b_store.slow_get.lock().unwrap() = Some(Duration::from_secs(8));
    let mut b = LeaderElector::with_store(b_store, cfg("b")).unwrap();
    let sent = Instant::now();
    assert!(!b.try_acquire_or_renew().await, "a's Lease is valid");
    assert_eq!(Instant::now() - sent, Duration::from_secs(8));
    // 15 s after b sent its read, but only 7 s after it saw the record: still a's.
    sleep(Duration::from_secs(7)).await;
    assert!(!b.try_acquire_or_renew().await, "b took over a valid Lease");
    // 15 s after the read returned, the Lease has expired.
    sleep(Duration::from_secs(8)).await;
    assert!(b.try_acquire_or_renew().await);
}

#[tokio::test(start_paused = true)]
async fn release_on_cancel_hands_over_at_once() {
    let shared = Arc::new(Mutex::new(Shared::default()));
    let a_cancel = CancellationToken::new();
    let b_cancel = CancellationToken::new();
    let a_cfg = LeaderElectionConfig {
        release_on_cancel: true,
        ..cfg("a")
    };
    let (a, a_started, _) = spawn_elector(MemStore::client(&shared, "a"), a_cfg, a_cancel.clone());
    a_started.await.expect("a leads");
    let (_b, b_started, _) =
        spawn_elector(MemStore::client(&shared, "b"), cfg("b"), b_cancel.clone());
    sleep(Duration::from_secs(30)).await;

    a_cancel.cancel();
    assert_eq!(
        a.await.expect("a"),
        Outcome::CancelledWhileLeading { released: true }
    );
    let released_at = Instant::now();
    let rec = holder(&shared);
    assert_eq!(
        (rec.holder_identity.as_str(), rec.lease_duration_seconds),
        ("", 1)
    );
    assert_eq!(rec.lease_transitions, 0);

    let b_at = b_started.await.expect("b leads");
    // Within one jittered retry period, not a lease duration.
    assert!(b_at - released_at <= Duration::from_secs(11));
    let rec = holder(&shared);
    assert_eq!(
        (rec.holder_identity.as_str(), rec.lease_transitions),
        ("b", 1)
    );
    b_cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn cancel_waits_for_the_leading_task_while_renewing() {
    let shared = Arc::new(Mutex::new(Shared::default()));
    let cancel = CancellationToken::new();
    let elector = LeaderElector::with_store(MemStore::client(&shared, "a"), cfg("a")).expect("cfg");
    let (done_tx, done_rx) = oneshot::channel();
    let run = tokio::spawn(elector.run(cancel.clone(), move |token| async move {
        token.cancelled().await;
        sleep(Duration::from_secs(40)).await; // a slow drain
        let _ = done_tx.send(());
    }));
    sleep(Duration::from_secs(1)).await;
    cancel.cancel();
    sleep(Duration::from_secs(39)).await;
    assert!(
        !run.is_finished(),
        "returned before the leading task finished"
    );
    // Still renewing during the drain: the lease was written within the last retry period.
    let renews = shared
        .lock()
        .expect("lock")
        .calls
        .iter()
        .filter(|c| *c == "a update")
        .count();
    assert!(renews >= 7, "only {renews} renewals during a 40 s drain");
    assert_eq!(
        run.await.expect("run"),
        Outcome::CancelledWhileLeading { released: false }
    );
    done_rx.await.expect("task finished first");
}

#[tokio::test(start_paused = true)]
async fn labels_are_set_on_create_and_restored_on_update() {
    let shared = Arc::new(Mutex::new(Shared::default()));
    let cancel = CancellationToken::new();
    let labels = BTreeMap::from([("app".to_string(), "csi".to_string())]);
    let config = LeaderElectionConfig {
        labels: labels.clone(),
        ..cfg("a")
    };
    let (a, started, _) = spawn_elector(MemStore::client(&shared, "a"), config, cancel.clone());
    started.await.expect("leads");
    let lease_labels = |s: &Arc<Mutex<Shared>>| {
        s.lock()
            .expect("lock")
            .lease
            .as_ref()
            .and_then(|l| l.metadata.labels.clone())
    };
    assert_eq!(lease_labels(&shared), Some(labels.clone()));
    {
        // Someone rewrites the labels (bumping the version): our next write conflicts, we
        // re-read, renew, and put our label back next to theirs.
        let mut s = shared.lock().expect("lock");
        s.version += 1;
        let v = s.version.to_string();
        let lease = s.lease.as_mut().expect("lease");
        lease.metadata.labels = Some(BTreeMap::from([("other".into(), "x".into())]));
        lease.metadata.resource_version = Some(v);
    }
    sleep(Duration::from_secs(6)).await;
    let want = BTreeMap::from([("app".into(), "csi".into()), ("other".into(), "x".into())]);
    assert_eq!(lease_labels(&shared), Some(want));
    cancel.cancel();
    a.await.expect("a");
}

#[tokio::test(start_paused = true)]
async fn events_metrics_and_health_follow_leadership() {
    let shared = Arc::new(Mutex::new(Shared::default()));
    let cancel = CancellationToken::new();
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let store = MemStore::client(&shared, "a");
    let down = store.down.clone();
    let elector = LeaderElector::with_store(store, cfg("a"))
        .expect("cfg")
        .with_event_hook(Arc::new(move |e: LeaderEvent| {
            sink.lock().expect("lock").push(e)
        }));
    let health = elector.health_check();
    let mut registry = prometheus_client::registry::Registry::default();
    elector.register_metrics(&mut registry);
    let exposition = |r: &prometheus_client::registry::Registry| {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, r).expect("encode");
        out
    };
    assert!(exposition(&registry).contains("leader_election_master_status{name=\"\"} 0"));
    let run = tokio::spawn(elector.run(cancel.clone(), |t| async move { t.cancelled().await }));
    sleep(Duration::from_secs(1)).await;
    assert!(exposition(&registry).contains("leader_election_master_status{name=\"\"} 1"));
    assert_eq!(health.healthy(), Ok(()));

    down.store(true, Ordering::SeqCst);
    assert_eq!(run.await.expect("run"), Outcome::Lost);
    assert!(exposition(&registry).contains("leader_election_master_status{name=\"\"} 0"));
    let messages: Vec<_> = events
        .lock()
        .expect("lock")
        .iter()
        .map(|e| e.message.clone())
        .collect();
    assert_eq!(messages, ["a became leader", "a stopped leading"]);
    let first = events.lock().expect("lock")[0].clone();
    assert_eq!(
        (first.reason, first.event_type),
        ("LeaderElection", "Normal")
    );
    assert_eq!(first.lease.kind.as_deref(), Some("Lease"));
    assert_eq!(first.lease.uid.as_deref(), Some("uid-1"));
    // The stuck-leader watchdog: still "leader" by its last observation, 20 s past expiry.
    sleep(Duration::from_secs(30)).await;
    assert!(health.healthy().is_err());
}
