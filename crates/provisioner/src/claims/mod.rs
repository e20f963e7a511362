//! The claim controller: provisions volumes for claims of our driver (work queue "claims").
//!
//! Each claim is handled by one worker at a time. [`provisioning::lifecycle::decide`] picks the
//! step; the files of this module carry it out: `provision` (CreateVolume and the PV),
//! `cleanup` (claims deleted while a volume may exist without a PV), `update` (PVC writes).

mod cleanup;
mod error;
mod facts;
mod memory;
mod provision;
mod update;

use std::sync::Arc;

use controller_kit::events::EventType;
use controller_kit::workqueue::{RateLimiter, WorkQueue, WorkQueueMetrics, run_workers};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::ObjectRef;
use provisioning::claim::{ShouldProvision, should_provision};
use provisioning::lifecycle::{Step, decide, has_finalizer};
use provisioning::prepare::ProvisionerConfig;
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use error::outcome;
pub use error::{ClaimError, SyncError};
use memory::{Lane, Memory};

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

/// Event reason when no published capacity of a waiting claim's class can hold it (ours).
pub const NOT_ENOUGH_CAPACITY: &str = capacity::explain::REASON;

/// The claim controller.
#[derive(Clone)]
pub struct ClaimsController {
    ctx: Context,
    queue: WorkQueue<ClaimKey>,
    memory: Arc<Memory>,
    /// StorageClasses whose deprecated parameters were already warned about (by UID).
    warned_classes: Arc<parking_lot::Mutex<std::collections::HashSet<String>>>,
}

impl ClaimsController {
    pub fn new(ctx: Context, metrics: &WorkQueueMetrics) -> ClaimsController {
        let limiter = RateLimiter::new(ctx.opts.retry_interval_start, ctx.opts.retry_interval_max);
        ClaimsController {
            queue: WorkQueue::new("claims", limiter, Some(metrics)),
            ctx,
            memory: Arc::default(),
            warned_classes: Arc::default(),
        }
    }

    pub fn enqueue(&self, claim: &PersistentVolumeClaim) {
        self.queue.add(ClaimKey::of(claim));
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

    /// Re-checks every cached claim (after a relist, and periodically as upstream's resync).
    pub fn enqueue_all(&self) {
        for claim in self.ctx.caches.claims.state() {
            self.enqueue(&claim);
        }
    }

    /// Re-checks claims waiting for a node: published capacity changed, so the explanation on
    /// them may have to change too.
    pub fn enqueue_waiting(&self) {
        for claim in self.ctx.caches.claims.state() {
            if claim
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.as_deref())
                .is_none_or(str::is_empty)
                && provisioning::claim::selected_node(&claim).is_none()
            {
                self.enqueue(&claim);
            }
        }
    }

    /// Runs `workers` workers until `cancel`.
    pub async fn run(self, workers: usize, cancel: CancellationToken) {
        let queue = self.queue.clone();
        run_workers(queue, workers, cancel, move |key: ClaimKey| {
            let this = self.clone();
            async move {
                let result = this.sync(&key).await;
                this.metrics_remembered();
                outcome(result)
            }
        })
        .await;
    }

    async fn sync(&self, key: &ClaimKey) -> Result<(), SyncError> {
        let reference = ObjectRef::new(&key.name).within(&key.namespace);
        let Some(claim) = self.ctx.caches.claims.get(&reference) else {
            return Ok(());
        };
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        let result = self.sync_claim(claim).await;
        // Deleted while we worked on it (before any finalizer held it): what the sync just
        // remembered would never be pruned by the deletion event, which came first.
        if self
            .ctx
            .caches
            .claims
            .get(&reference)
            .is_none_or(|c| c.metadata.uid.as_deref() != Some(uid.as_str()))
        {
            self.memory.forget(&uid);
        }
        result
    }

    async fn sync_claim(&self, claim: Arc<PersistentVolumeClaim>) -> Result<(), SyncError> {
        let key = &ClaimKey::of(&claim);
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        let ours =
            provisioning::claim::provisioner_of(&claim) == Some(self.ctx.driver.name.as_str());
        // A created volume whose PV did not save yet: save it first, whatever else changed.
        if ours
            && claim.metadata.deletion_timestamp.is_none()
            && let Some(pv) = self.memory.unsaved_pv(&uid)
        {
            return self.save_unsaved_pv(&claim, pv).await;
        }
        let class = self.class_of(&claim);
        let should = should_provision(&claim, class.as_deref(), &self.ctx.driver.name);
        let step = decide(&claim, should, ours, ours && self.pv_exists(&claim));
        if step == Step::Ignore && self.settled(&claim) {
            self.memory.forget(&uid);
        }
        klog::v!(5, claim = %format!("{}/{}", key.namespace, key.name), step = ?step, "Syncing claim");
        match step {
            Step::Ignore | Step::WaitForNode => {
                self.explain_if_nothing_fits(&claim, class.as_deref());
                if should == ShouldProvision::ClassForOtherProvisioner {
                    klog::v!(4, claim = %format!("{}/{}", key.namespace, key.name), "Class names another provisioner; ignoring claim");
                }
                Ok(())
            }
            Step::ClassMissing => Err(ClaimError::ClassMissing {
                class: provisioning::claim::class_name(&claim)
                    .unwrap_or_default()
                    .to_string(),
            }
            .into()),
            Step::ReleaseFinalizer => {
                self.release_later(&claim);
                Ok(())
            }
            Step::WaitForProtection => {
                let uid = claim.metadata.uid.as_deref().unwrap_or_default();
                self.memory.abort_background_release(uid);
                Ok(())
            }
            Step::Provision => match class {
                Some(class) => self.provision(&claim, &class).await,
                None => Ok(()),
            },
            Step::CleanUp => self.clean_up(&claim).await,
        }
    }

    /// Drops our finalizer once the PV owns the volume, on its own task. For a bound claim
    /// nothing waits for it: it spends only tokens the hot path leaves free (background lane).
    /// A deleted claim's deletion waits for it: main budget. If it fails, the claim's next sync
    /// decides to release again.
    fn release_later(&self, claim: &PersistentVolumeClaim) {
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        let (lane, client) = if claim.metadata.deletion_timestamp.is_some() {
            (Lane::Foreground, self.ctx.client.clone())
        } else {
            (Lane::Background, self.ctx.background_client.clone())
        };
        if !self.memory.start_release(&uid, lane) {
            return;
        }
        let (memory, claim, task_uid) = (self.memory.clone(), claim.clone(), uid.clone());
        let claims = self.ctx.caches.claims.clone();
        let task = tokio::spawn(async move {
            match update::remove_finalizer(&client, &claims, &claim).await {
                // The PV owns the volume now; later syncs read the claim through our write.
                Ok(_) => memory.forget(&task_uid),
                Err(e) => {
                    tracing::warn!(claim = %ClaimKey::of(&claim).to_string(), err = %e, "Cannot remove the creating-volume finalizer; will retry");
                }
            }
            memory.end_release(&task_uid, lane);
        });
        self.memory.track_release(&uid, lane, task.abort_handle());
    }

    /// A deleted claim leaves the cache: nothing about it is needed any more.
    pub fn forget(&self, claim: &PersistentVolumeClaim) {
        if let Some(uid) = claim.metadata.uid.as_deref() {
            self.memory.forget(uid);
        }
        self.metrics_remembered();
    }

    /// Nothing is pending for the claim: it is bound (or another driver's) and holds no finalizer
    /// of ours, and no PV of ours waits to be saved.
    fn settled(&self, claim: &PersistentVolumeClaim) -> bool {
        let uid = claim.metadata.uid.as_deref().unwrap_or_default();
        if has_finalizer(claim) || self.memory.unsaved_pv(uid).is_some() {
            return false;
        }
        claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .is_some_and(|v| !v.is_empty())
    }

    fn metrics_remembered(&self) {
        self.ctx.metrics.set_remembered_claims(self.memory.len());
    }

    /// Whether a PV for this claim exists: the PV named for it and bound to its UID (read
    /// through our own writes, so one we just created counts).
    fn pv_exists(&self, claim: &PersistentVolumeClaim) -> bool {
        let uid = claim.metadata.uid.as_deref().unwrap_or_default();
        let Ok(name) = self.volume_name(uid) else {
            return false;
        };
        self.ctx
            .caches
            .volumes
            .get(&ObjectRef::new(&name))
            .is_some_and(|pv| {
                pv.spec
                    .as_ref()
                    .and_then(|s| s.claim_ref.as_ref())
                    .and_then(|r| r.uid.as_deref())
                    == Some(uid)
            })
    }

    fn volume_name(&self, uid: &str) -> Result<String, provisioning::volume_name::VolumeNameError> {
        let len = self
            .ctx
            .opts
            .volume_name_uuid_length
            .map_or(-1, |l| l as i32);
        provisioning::volume_name::make_volume_name(&self.ctx.opts.volume_name_prefix, uid, len)
    }

    fn class_of(&self, claim: &PersistentVolumeClaim) -> Option<Arc<StorageClass>> {
        let name = provisioning::claim::class_name(claim)?;
        self.ctx.caches.classes.get(&ObjectRef::new(name))
    }

    /// Beyond upstream: a late-binding claim of our driver that waits for a node although no
    /// published capacity of its class can hold it gets one Warning saying so.
    fn explain_if_nothing_fits(&self, claim: &PersistentVolumeClaim, class: Option<&StorageClass>) {
        let (Some(capacity), Some(class)) = (&self.ctx.capacity, class) else {
            return;
        };
        let waiting = claim.metadata.deletion_timestamp.is_none()
            && claim
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.as_deref())
                .is_none_or(str::is_empty)
            && provisioning::claim::selected_node(claim).is_none()
            && class.provisioner == self.ctx.driver.name
            && class.volume_binding_mode.as_deref()
                == Some(provisioning::names::WAIT_FOR_FIRST_CONSUMER);
        if !waiting {
            return;
        }
        let Ok(requested) = provisioning::claim::requested_bytes(claim) else {
            return;
        };
        let class_name = class.metadata.name.as_deref().unwrap_or_default();
        if let Some(message) = capacity.explain(class_name, requested) {
            let uid = claim.metadata.uid.as_deref().unwrap_or_default();
            if self.memory.explain_once(uid, &message) {
                let reference = provisioning::pv::claim_reference(claim);
                self.ctx.recorder.event(
                    &reference,
                    EventType::Warning,
                    NOT_ENOUGH_CAPACITY,
                    message,
                );
            }
        }
    }

    fn provisioner_config(&self) -> ProvisionerConfig<'_> {
        let opts = &self.ctx.opts;
        ProvisionerConfig {
            driver_name: &self.ctx.driver.name,
            volume_name_prefix: &opts.volume_name_prefix,
            volume_name_uuid_length: opts.volume_name_uuid_length.map_or(-1, |l| l as i32),
            default_fs_type: opts.default_fstype.as_deref().unwrap_or_default(),
            extra_create_metadata: opts.extra_create_metadata,
            volume_attributes_class_enabled: self.vac_enabled(),
        }
    }

    fn vac_enabled(&self) -> bool {
        self.ctx.volume_attributes_class
    }
}
