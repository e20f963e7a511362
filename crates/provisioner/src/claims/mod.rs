//! The claim controller: provisions volumes for claims of our driver (work queue "claims").
//!
//! Each claim is handled by one worker at a time. The files are the steps of its lifecycle:
//!
//! 1. `sync`: read the claim (through our own writes), gather its facts once, and let
//!    [`provisioning::claim_step::next_step`] pick the step it then carries out;
//! 2. `prepare`: upstream's checks and the request's inputs (`facts`: topology from the caches);
//! 3. `provision`: the finalizer or the write-ahead entry, then CreateVolume (each step returns
//!    an `AttemptError`);
//! 4. `save`: the PV;
//! 5. `release`: our finalizer goes once the PV owns the volume;
//!
//! and beside them `entries` (the claims our write-ahead entries hold instead of the finalizer,
//! when the record is on), `fail` (a failed attempt: event, claim writes, the hold on the next one),
//! `cleanup` (a claim deleted while a volume may exist without a PV), `explain` (a waiting
//! claim nothing can hold), `update` (every PVC write), `record` (everything remembered
//! about each claim, one record per UID) and `error` (why a sync runs again).

mod cleanup;
mod config;
pub(crate) mod entries;
mod error;
mod explain;
mod facts;
mod fail;
mod pod;
mod prepare;
mod protection;
mod provision;
mod race;
mod record;
mod release;
mod reserve;
mod restore;
mod restorers;
mod save;
mod sources;
mod sync;
mod update;

use std::sync::Arc;

use controller_kit::workqueue::{RateLimiter, WorkQueue, WorkQueueMetrics, run_workers};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::ObjectRef;
use provisioning::prepare::ProvisionerConfig;
use tokio_util::sync::CancellationToken;

use crate::context::Context;
pub use config::ClaimsConfig;
use entries::Entries;
use error::outcome;
pub use error::{ClaimError, SyncError};
use record::Records;

/// A claim's identity in the work queue.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClaimKey {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for ClaimKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl ClaimKey {
    pub fn of(claim: &PersistentVolumeClaim) -> ClaimKey {
        ClaimKey {
            namespace: claim.metadata.namespace.clone().unwrap_or_default(),
            name: claim.metadata.name.clone().unwrap_or_default(),
        }
    }
}

/// Name of the work queue of claims (as upstream).
pub const QUEUE_NAME: &str = "claims";

/// The claim controller.
#[derive(Clone)]
pub struct ClaimsController {
    ctx: Context,
    config: Arc<ClaimsConfig>,
    queue: WorkQueue<ClaimKey>,
    /// Everything remembered about each claim, by UID.
    records: Arc<Records>,
    /// The claims our write-ahead entries hold (when the record is on).
    entries: Arc<Entries>,
    /// Distributed provisioning: one claim taken at a time (see `race.rs`).
    taking: Arc<tokio::sync::Mutex<()>>,
    /// StorageClasses whose deprecated parameters were already warned about (by UID).
    warned_classes: Arc<parking_lot::Mutex<std::collections::HashSet<String>>>,
    /// The snapshot watches' caches, readiness, and who restores from what.
    snapshots: Arc<restorers::Snapshots>,
    /// When this process began provisioning (Unix seconds): claims created since were never
    /// seen by an earlier process.
    started: i64,
}

impl ClaimsController {
    pub fn new(
        ctx: Context,
        config: ClaimsConfig,
        entries: Arc<Entries>,
        metrics: &WorkQueueMetrics,
    ) -> ClaimsController {
        let limiter = RateLimiter::new(config.retry_interval_start, config.retry_interval_max);
        ClaimsController {
            queue: WorkQueue::new(QUEUE_NAME, limiter, Some(metrics)),
            ctx,
            config: Arc::new(config),
            records: Arc::default(),
            entries,
            taking: Arc::default(),
            warned_classes: Arc::default(),
            snapshots: Arc::default(),
            started: k8s_openapi::jiff::Timestamp::now().as_second(),
        }
    }

    pub fn enqueue(&self, claim: &PersistentVolumeClaim) {
        self.queue.add(ClaimKey::of(claim));
        // A clone changed: its deleting source may be free to go now.
        if let Some(source) = protection::clone_source_key(claim) {
            self.queue.add(source);
        }
    }

    /// A PV changed: its claim may now be able to drop our finalizer.
    pub fn enqueue_for_volume(&self, pv: &PersistentVolume) {
        if let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref())
            && let (Some(namespace), Some(name)) = (&r.namespace, &r.name)
        {
            self.queue.add(ClaimKey {
                namespace: namespace.clone(),
                name: name.clone(),
            });
        }
    }

    /// Re-checks every cached claim (after a relist, and periodically as upstream's resync),
    /// by key: the cache keeps claims as JSON, and decoding them all here would hold every
    /// claim decoded for a moment. (Clone sources are among the keys.)
    pub fn enqueue_all(&self) {
        for reference in self.ctx.caches.claims.references() {
            self.queue.add(ClaimKey {
                namespace: reference.namespace.unwrap_or_default(),
                name: reference.name,
            });
        }
    }

    /// Re-checks claims waiting for a node: published capacity changed, so the explanation on
    /// them (or, in distributed provisioning, who takes them) may have to change too
    /// ([`provisioning::claim::rechecked_on_capacity`]). Not a waiting clone's source, as
    /// [`Self::enqueue`] would queue it: the clone did not change, and with
    /// `--node-deployment` a held source's check lists its namespace.
    pub fn enqueue_waiting(&self) {
        let distributed = self.ctx.node.is_some();
        for claim in self.ctx.caches.unsettled_claims() {
            let class = self.class_of(&claim);
            if provisioning::claim::rechecked_on_capacity(&claim, class.as_deref(), distributed) {
                self.queue.add(ClaimKey::of(&claim));
            }
        }
    }

    /// Runs `workers` workers, and the releases owed to snapshots, until `cancel`.
    pub async fn run(self, workers: usize, cancel: CancellationToken) {
        let queue = self.queue.clone();
        let releases = self.clone();
        let releases_cancel = cancel.clone();
        let workers = run_workers(queue, workers, cancel, move |key: ClaimKey| {
            let this = self.clone();
            async move {
                // This attempt's API requests wait behind older attempts' only, so a burst of
                // claims reaches the driver in the order the attempts began.
                let began = tokio::time::Instant::now();
                let result = controller_kit::client::with_priority(began, this.sync(&key)).await;
                this.metrics_remembered();
                outcome(result)
            }
        });
        tokio::join!(workers, releases.release_owed_snapshots(releases_cancel));
    }

    /// A deleted claim leaves the cache: nothing about it is needed any more, unless our
    /// write-ahead entry holds it; then its sync cleans up from the entry.
    pub fn forget(&self, claim: &PersistentVolumeClaim) {
        if let Some(uid) = claim.metadata.uid.as_deref() {
            if self.entries.holds(uid) {
                self.queue.add(ClaimKey::of(claim));
            } else {
                self.records.forget(uid);
            }
        }
        self.metrics_remembered();
    }

    /// The entries a starting instance found in the record: each claim's sync goes on from
    /// its entry (provisions it, lets it go once its PV exists, or cleans up after it).
    pub fn found_entries(&self, found: Vec<provisioning::record::Entry>) {
        let keys: Vec<ClaimKey> = found
            .iter()
            .map(|e| ClaimKey {
                namespace: e.namespace.clone(),
                name: e.name.clone(),
            })
            .collect();
        if !found.is_empty() {
            tracing::info!(
                entries = found.len(),
                "Found claims in the write-ahead record; checking each"
            );
        }
        self.entries.found(found);
        for key in keys {
            self.queue.add(key);
        }
    }

    fn metrics_remembered(&self) {
        self.ctx.metrics.set_remembered_claims(self.records.len());
        self.ctx.metrics.set_record_entries(self.entries.len());
    }

    /// Whether a process before this one may have called CreateVolume for the claim, which
    /// `holds` a finalizer of ours ([`provisioning::attempt::earlier_attempt_possible`]).
    fn earlier_attempt_possible(&self, claim: &PersistentVolumeClaim, holds: bool) -> bool {
        let created = claim.metadata.creation_timestamp.as_ref();
        let created = created.map(|t| t.0.as_second());
        provisioning::attempt::earlier_attempt_possible(holds, created, self.started)
    }

    /// The PV with the claim's volume name, read through our own writes; bound to this claim
    /// or (names collide) to another.
    fn named_pv(&self, claim: &PersistentVolumeClaim) -> Option<Arc<PersistentVolume>> {
        let name = self
            .volume_name(claim.metadata.uid.as_deref().unwrap_or_default())
            .ok()?;
        self.ctx.caches.volumes.get(&ObjectRef::new(&name))
    }

    fn volume_name(&self, uid: &str) -> Result<String, provisioning::volume_name::VolumeNameError> {
        let c = &self.config;
        provisioning::volume_name::make_volume_name(
            &c.volume_name_prefix,
            uid,
            c.volume_name_uuid_length,
        )
    }

    /// Whether provisioning computes topology requirements: the driver must ask for it and the
    /// `Topology` gate (GA) must be on.
    fn supports_topology(&self) -> bool {
        self.ctx
            .driver
            .capabilities
            .volume_accessibility_constraints
            && self.config.topology
    }

    /// Distributed provisioning: this node's own finalizer
    /// ([`provisioning::distributed::node_finalizer`]).
    fn node_finalizer(&self) -> Option<String> {
        self.ctx
            .node
            .as_ref()
            .map(|n| provisioning::distributed::node_finalizer(&n.name))
    }

    fn class_of(&self, claim: &PersistentVolumeClaim) -> Option<Arc<StorageClass>> {
        let name = provisioning::claim::class_name(claim)?;
        self.ctx.caches.classes.get(&ObjectRef::new(name))
    }

    fn provisioner_config(&self) -> ProvisionerConfig<'_> {
        self.config
            .provisioner(&self.ctx.driver.name, self.vac_enabled())
    }

    fn vac_enabled(&self) -> bool {
        self.ctx.volume_attributes_class
    }
}

/// `namespace/name`, for messages and logs.
fn claim_name(claim: &PersistentVolumeClaim) -> String {
    format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The class's name, for metrics and messages.
fn class_name(class: &StorageClass) -> String {
    class.metadata.name.clone().unwrap_or_default()
}

/// The UID of the claim a PV is bound to.
fn bound_uid(pv: &PersistentVolume) -> Option<&str> {
    pv.spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .and_then(|r| r.uid.as_deref())
}
