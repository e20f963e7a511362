//! The storage capacity controller: publishes one CSIStorageCapacity per (segment, class).
//!
//! A thin shell over the pure `capacity` crate (its `resync` module decides what a cache change
//! means):
//! - a dispatcher (module `dispatch`) reads the cache change streams, keeps an index of our
//!   objects and asks for a debounced resync (queue `csitopology`) when classes or topology
//!   change;
//! - a resync recomputes the desired keys from the caches and queues new keys, missing objects
//!   and doomed objects urgently;
//! - workers (queue `csistoragecapacity`) call GetCapacity for one key and create, update or
//!   leave its object, or delete one doomed object;
//! - a poll queues every key at normal priority each `--capacity-poll-interval`.
//!
//! Pending work is at most one queue entry per key and per doomed object, whatever the poll
//! interval: the queue coalesces. Our own writes coming back through the watch never cause a
//! GetCapacity.

mod conflicts;
mod dispatch;
mod error;
mod index;
mod line;
mod metrics;
mod owner;
mod reservations;
mod rounds;
mod staleness;
mod view;
mod worker;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use capacity::class::Class;
use capacity::published::ObjectTemplate;
use capacity::{Capacity, Key, Segment};
use controller_kit::events::EventRecorder;
use controller_kit::reflect::Change;
use controller_kit::workqueue::{Outcome, RateLimiter, WorkQueue, WorkQueueMetrics, run_workers};
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::{CSINode, CSIStorageCapacity, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Api;
use kube::api::PartialObjectMeta;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::caches::Caches;

pub use error::CapacityError;
pub use line::{Refresh, RefreshHandle, Refreshed};
pub use metrics::CapacityMetrics;
pub use owner::OwnerError;
pub use reservations::{Hold, NoRoom};

/// Name of the work queue of (segment, class) keys and doomed objects (as upstream).
pub const QUEUE_NAME: &str = "csistoragecapacity";
/// Name of the queue of debounced resyncs (as upstream's topology queue).
pub const TOPOLOGY_QUEUE_NAME: &str = "csitopology";
/// How long a burst of cache changes is collected before one resync.
const DEBOUNCE: Duration = Duration::from_millis(100);
/// Floor of the poll interval, so a zero interval cannot spin.
const MIN_POLL: Duration = Duration::from_secs(1);

/// Settings from flags and environment.
#[derive(Clone, Debug)]
pub struct CapacityConfig {
    pub driver_name: String,
    /// `NAMESPACE`.
    pub namespace: String,
    /// `managed-by` label value.
    pub managed_by: String,
    /// Owner from `--capacity-ownerref-level`, already looked up.
    pub owner: Option<OwnerReference>,
    pub poll_interval: Duration,
    pub workers: usize,
    pub include_immediate: bool,
    pub retry_interval_start: Duration,
    pub retry_interval_max: Duration,
    /// `--timeout` for GetCapacity.
    pub timeout: Duration,
    /// `--capacity-stale-after` (ours): when an object counts as stale.
    pub stale_after: Option<Duration>,
    /// `--capacity-stale-action=zero` (ours): a stale object shows 0.
    pub stale_zero: bool,
    /// `--capacity-driver-grace` (ours): how long a node whose driver entry went away keeps
    /// its objects.
    pub driver_grace: Duration,
    /// `--capacity-reservations` (ours): in-flight volumes lower the published capacity.
    pub reservations: bool,
    /// `--node-deployment`: upstream has no `csitopology` queue there (its topology is the
    /// node's, fixed), so ours keeps the queue for class changes but exports no series for it.
    pub node_deployment: bool,
}

/// The change streams the capacity controller consumes (it also reads the shared caches).
pub struct CapacityChanges {
    pub classes: BoxStream<'static, Change<StorageClass>>,
    pub csi_nodes: BoxStream<'static, Change<CSINode>>,
    pub nodes: BoxStream<'static, Change<PartialObjectMeta<Node>>>,
    pub capacities: BoxStream<'static, Change<CSIStorageCapacity>>,
    /// Objects we do not manage (central mode), checked for overlaps with ours.
    pub foreign: Option<BoxStream<'static, Change<CSIStorageCapacity>>>,
}

/// One unit of work.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Item {
    /// Read the capacity of a key and publish it.
    Refresh(Key),
    /// Delete our object of this name if it is still obsolete or a duplicate.
    Delete(String),
    /// Publish the last reading of a key less its reservations (no GetCapacity).
    Publish(Key),
}

/// What the controller knows; guarded by one lock, never held across an await.
#[derive(Debug, Default)]
struct State {
    /// The first resync ran: the fields below describe the cluster.
    started: bool,
    desired: BTreeSet<Key>,
    /// Eligible classes by name, as used for `desired`.
    classes: BTreeMap<String, Class>,
    /// The segment each node with our driver contributed at the last resync (including
    /// nodes in their driver grace).
    node_segments: HashMap<String, Segment>,
    /// Nodes in their driver grace ([`capacity::grace`]).
    lost: capacity::grace::Lost,
    /// Refreshes of each key begun and ended, for [`RefreshHandle::refresh_then_tell`].
    refreshed: HashMap<Key, rounds::Rounds>,
    /// Who waits to be told of a refresh ([`RefreshHandle::refresh_then_tell`]).
    waiters: rounds::Waiters<Key, tokio::sync::oneshot::Sender<()>>,
    /// The last successful GetCapacity of each key and the refresh round that asked it.
    readings: HashMap<Key, (Capacity, u64)>,
    /// Volumes being created, by claim ([`reservations`]).
    ledger: capacity::ledger::Ledger,
    index: index::Index,
    staleness: staleness::Staleness,
    /// Desired keys whose capacity was never asked for (or not since their class changed).
    unattempted: HashSet<Key>,
    /// Foreign objects overlapping our keys, by UID, as last checked ([`conflicts`]).
    conflicts: HashMap<String, Vec<Key>>,
    /// Classes whose `Unimplemented` GetCapacity was already logged as a warning.
    unimplemented_warned: HashSet<String>,
}

struct Shared {
    config: CapacityConfig,
    template: ObjectTemplate,
    api: Api<CSIStorageCapacity>,
    csi: csi::Client,
    caches: Caches,
    queue: WorkQueue<Item>,
    topology: WorkQueue<()>,
    state: Mutex<State>,
    published: watch::Sender<u64>,
    /// Events on our objects (`--capacity-stale-after`).
    recorder: EventRecorder,
    /// One turn at a time per key: with `--capacity-threads` above 1 a refresh and a
    /// reservation's publish of the same key would otherwise each compute a value and write
    /// it, and the older value could land last.
    turns: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
    /// The CSIDriver's `storageCapacity` as last read ([`RefreshHandle::allowed`]).
    scheduler_check: tokio::sync::Mutex<Option<capacity::scheduler::Remembered>>,
}

impl Shared {
    /// Something we published changed: wake whoever waits on [`RefreshHandle::subscribe`].
    fn bump(&self) {
        self.published.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Queues every desired key at normal priority (the poll). Keys already queued stay
    /// where they are.
    fn enqueue_all(&self) {
        let state = self.state.lock();
        for key in &state.desired {
            self.queue.add(Item::Refresh(key.clone()));
        }
    }

    fn enqueue_urgent(&self, keys: impl IntoIterator<Item = Key>) {
        for key in keys {
            self.queue.add_urgent(Item::Refresh(key));
        }
    }

    /// The lock whose holder alone computes and writes `key`'s value. Locks of keys no longer
    /// desired and not held are dropped on the way.
    fn turn(&self, key: &Key) -> Arc<tokio::sync::Mutex<()>> {
        let state = self.state.lock();
        let mut turns = self.turns.lock();
        if turns.len() > state.desired.len() {
            turns.retain(|k, lock| state.desired.contains(k) || Arc::strong_count(lock) > 1);
        }
        turns.entry(key.clone()).or_default().clone()
    }
}

impl metrics::Source for Shared {
    fn snapshot(&self) -> metrics::Snapshot {
        let state = self.state.lock();
        metrics::Snapshot {
            goal: state.desired.len(),
            current: state.index.current(&state.desired),
            obsolete: state.index.obsolete_count(&state.desired),
            conflicts: state.conflicts.len(),
            freshness: state.staleness.snapshot(tokio::time::Instant::now()),
        }
    }

    fn view(&self) -> capacity::view::View {
        Shared::view(self)
    }
}

/// The controller.
pub struct CapacityController {
    shared: Arc<Shared>,
}

impl CapacityController {
    pub fn new(
        config: CapacityConfig,
        client: kube::Client,
        csi: csi::Client,
        caches: Caches,
        metrics: CapacityMetrics,
        queue_metrics: &WorkQueueMetrics,
        recorder: EventRecorder,
    ) -> (CapacityController, RefreshHandle) {
        let (start, max) = (config.retry_interval_start, config.retry_interval_max);
        let shared = Arc::new(Shared {
            template: ObjectTemplate {
                namespace: config.namespace.clone(),
                driver: config.driver_name.clone(),
                managed_by: config.managed_by.clone(),
                owner: config.owner.clone(),
            },
            api: Api::namespaced(client, &config.namespace),
            csi,
            caches,
            turns: Mutex::default(),
            scheduler_check: tokio::sync::Mutex::default(),
            queue: WorkQueue::new(
                QUEUE_NAME,
                RateLimiter::new(start, max),
                Some(queue_metrics),
            ),
            topology: WorkQueue::new(
                TOPOLOGY_QUEUE_NAME,
                RateLimiter::new(start, max),
                (!config.node_deployment).then_some(queue_metrics),
            ),
            state: Mutex::new(State::default()),
            published: watch::channel(0).0,
            recorder,
            config,
        });
        let source: Arc<dyn metrics::Source> = shared.clone();
        metrics.set_source(Arc::downgrade(&source));
        let handle = RefreshHandle {
            shared: shared.clone(),
        };
        (CapacityController { shared }, handle)
    }

    /// Runs until `cancel`. Drives the change streams (they fill the caches), waits for the
    /// caches' first lists, publishes, and keeps publishing.
    pub async fn run(self, changes: CapacityChanges, cancel: CancellationToken) {
        let shared = self.shared;
        if shared.caches.capacities.is_none() {
            tracing::error!(
                "Capacity controller not started: the CSIStorageCapacity cache is missing (the provisioner was started without --enable-capacity)"
            );
            return;
        }
        let mut tasks = JoinSet::new();
        let (synced_tx, synced) = tokio::sync::oneshot::channel();
        tasks.spawn(dispatch::run(
            shared.clone(),
            changes,
            cancel.clone(),
            synced_tx,
        ));
        tokio::select! {
            _ = cancel.cancelled() => return,
            synced = synced => if synced.is_err() {
                tracing::error!("Capacity controller not started: a cache stopped before its first list");
                cancel.cancelled().await;
                return;
            },
        }
        shared.resync();
        let s = shared.clone();
        tasks.spawn(run_workers(
            shared.topology.clone(),
            1,
            cancel.clone(),
            move |()| {
                let s = s.clone();
                async move {
                    s.resync();
                    Outcome::Done
                }
            },
        ));
        let s = shared.clone();
        tasks.spawn(run_workers(
            shared.queue.clone(),
            shared.config.workers,
            cancel.clone(),
            move |item: Item| {
                let s = s.clone();
                async move { s.process(item).await }
            },
        ));
        tasks.spawn(poll(shared.clone(), cancel.clone()));
        while let Some(joined) = tasks.join_next().await {
            // A worker panic ends the whole controller, so that the process exits.
            if let Err(e) = joined
                && e.is_panic()
            {
                std::panic::resume_unwind(e.into_panic());
            }
            // Any part ending before cancel leaves capacity silently unpublished: end the whole
            // controller, which the supervisor reports.
            if !cancel.is_cancelled() {
                tracing::error!("A capacity controller task ended before shutdown");
                return;
            }
        }
    }
}

/// Every poll interval, queue every key (upstream's `--capacity-poll-interval`).
async fn poll(shared: Arc<Shared>, cancel: CancellationToken) {
    let period = shared.config.poll_interval.max(MIN_POLL);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => shared.enqueue_all(),
        }
    }
}

/// Resolves `--capacity-ownerref-level` from `POD_NAME` in `NAMESPACE` (-1 none, 0 the pod,
/// 1 its controller, 2 that one's controller, ...). Errors name what is missing; the message
/// is carried in a `kube::Error::Api` status (use [`find_owner`] for the typed error).
pub async fn lookup_owner(
    client: &kube::Client,
    namespace: &str,
    pod: &str,
    level: Option<u32>,
) -> Result<Option<OwnerReference>, kube::Error> {
    find_owner(client, namespace, pod, level)
        .await
        .map_err(OwnerError::into_kube)
}

/// [`lookup_owner`] with an error whose message reads well on its own.
pub async fn find_owner(
    client: &kube::Client,
    namespace: &str,
    pod: &str,
    level: Option<u32>,
) -> Result<Option<OwnerReference>, OwnerError> {
    match level {
        None => Ok(None),
        Some(level) => owner::lookup(client, namespace, pod, level).await.map(Some),
    }
}
