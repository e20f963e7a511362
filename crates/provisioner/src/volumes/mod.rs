//! The volume controller: finalizers on our PVs and deletion of released ones (work queue
//! "volumes"). The pure [`provisioning::volume::decide::decide`] picks the action and
//! [`provisioning::volume::steps::remaining`] the deletion's steps; this file carries them out.
//! PVs are read through our own writes (`caches.volumes` is a `Fresh` view), so a sync that
//! repeats before the watch catches up sees our finalizer drop and our delete.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use controller_kit::events::EventType;
use controller_kit::workqueue::{Outcome, RateLimiter, WorkQueue, WorkQueueMetrics, run_workers};
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::capacity_controller::Refresh;
use crate::context::Context;
use crate::secrets;
use provisioning::volume::decide::{self, Action, DeletionSecret};
use provisioning::volume::steps;

mod error;
pub use error::VolumeError;

/// Name of the work queue of PVs (as upstream).
pub const QUEUE_NAME: &str = "volumes";

/// The volume controller.
#[derive(Clone)]
pub struct VolumesController {
    ctx: Context,
    queue: WorkQueue<String>,
    /// PVs (by UID) whose DeleteVolume succeeded while the PV object still exists: later syncs
    /// only finish the object (no second DeleteVolume). No object records this, so we do.
    volume_deleted: Arc<Mutex<HashSet<String>>>,
    /// The claims' write-ahead entries: a PV's claim leaves the record before its volume goes.
    entries: Arc<crate::claims::entries::Entries>,
}

impl VolumesController {
    /// `retry`: `--retry-interval-start` and `--retry-interval-max`.
    pub fn new(
        ctx: Context,
        retry: (Duration, Duration),
        entries: Arc<crate::claims::entries::Entries>,
        metrics: &WorkQueueMetrics,
    ) -> VolumesController {
        let limiter = RateLimiter::new(retry.0, retry.1);
        VolumesController {
            queue: WorkQueue::new(QUEUE_NAME, limiter, Some(metrics)),
            ctx,
            volume_deleted: Arc::default(),
            entries,
        }
    }

    /// The PV object is gone: nothing left to remember about it.
    pub fn forget(&self, pv: &PersistentVolume) {
        if let Some(uid) = &pv.metadata.uid {
            self.volume_deleted.lock().remove(uid);
        }
    }

    pub fn enqueue(&self, pv: &PersistentVolume) {
        self.queue.add(pv.name_any());
    }

    pub fn enqueue_name(&self, name: &str) {
        self.queue.add(name.to_string());
    }

    /// Every PV, by name: the cache keeps PVs as JSON, and decoding them all at once here
    /// would hold every PV decoded (tens of MiB at 10,000 PVs) for a moment.
    pub fn enqueue_all(&self) {
        for reference in self.ctx.caches.volumes.references() {
            self.queue.add(reference.name);
        }
    }

    pub async fn run(self, workers: usize, cancel: CancellationToken) {
        let queue = self.queue.clone();
        run_workers(queue, workers, cancel, move |name: String| {
            let this = self.clone();
            async move { this.sync(&name).await }
        })
        .await;
    }

    async fn sync(&self, name: &str) -> Outcome {
        let Some(pv) = self.ctx.caches.volumes.get(&ObjectRef::new(name)) else {
            return Outcome::Done;
        };
        let result = match decide::decide(&pv, &self.ctx.driver.name) {
            Action::Ignore => Ok(()),
            // Distributed provisioning: another node's volume is that node's instance's, for
            // every step (upstream ignores it for deletion only; its finalizer writes race).
            _ if !self.on_this_node(&pv) => Ok(()),
            Action::AddFinalizer => self.set_finalizer(&pv, true).await,
            Action::RemoveFinalizer => self.set_finalizer(&pv, false).await,
            Action::Delete => self.delete(&pv).await,
        };
        match result {
            Ok(()) => Outcome::Done,
            Err(e) => Outcome::retry(e),
        }
    }

    /// Whether the PV is this instance's to handle: always, unless distributed provisioning
    /// says its node affinity excludes our node.
    fn on_this_node(&self, pv: &PersistentVolume) -> bool {
        self.ctx.node.as_ref().is_none_or(|node| {
            let affinity = pv.spec.as_ref().and_then(|s| s.node_affinity.as_ref());
            provisioning::distributed::volume_is_accessible(
                affinity,
                node.reported_topology(),
                &node.name,
            )
        })
    }

    /// DeleteVolume, then drop our finalizer and delete the PV object. Counted in the metrics
    /// as upstream's deleteVolumeOperation: a success once every step is done, a failure for
    /// any step that fails.
    async fn delete(&self, pv: &PersistentVolume) -> Result<(), VolumeError> {
        let started = Instant::now();
        let class = pv
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.clone())
            .unwrap_or_default();
        let result = self.delete_steps(pv, &class).await;
        match &result {
            Ok(()) => self
                .ctx
                .metrics
                .delete_succeeded(&class, started.elapsed().as_secs_f64()),
            // Waiting for detach is postponed, not failed: nothing recorded (as upstream).
            Err(e) if !provisioning::volume::delete_report(e.delete_stop()).counts_as_failure => {}
            Err(_) => self.ctx.metrics.delete_failed(&class),
        }
        result
    }

    async fn delete_steps(&self, pv: &PersistentVolume, class: &str) -> Result<(), VolumeError> {
        let name = pv.name_any();
        let uid = pv.metadata.uid.clone().unwrap_or_default();
        let volume_deleted = self.volume_deleted.lock().contains(&uid);
        let steps = steps::remaining(
            volume_deleted,
            decide::has_finalizer(pv),
            pv.metadata.deletion_timestamp.is_some(),
        );
        if steps.delete_volume {
            if let Err(e) = self.delete_volume(pv).await {
                let reference = object_reference(pv);
                let report = provisioning::volume::delete_report(e.delete_stop());
                let kind = if report.warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                };
                self.ctx
                    .recorder
                    .event(&reference, kind, report.reason, e.to_string());
                return Err(e);
            }
            self.volume_deleted.lock().insert(uid.clone());
            if let Some(capacity) = &self.ctx.capacity {
                // A reservation still waiting for a reading to show this volume ends now.
                let claim = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
                if let Some(claim) = claim.and_then(|c| c.uid.as_deref()) {
                    capacity.volume_gone(claim);
                }
                capacity.refresh(Refresh::Volume {
                    class,
                    affinity: pv.spec.as_ref().and_then(|s| s.node_affinity.as_ref()),
                });
            }
            klog::v!(2, pv = %name, "Deleted volume");
        }
        // A crash from here on leaves a Released PV whose volume is gone; the next sync repeats
        // DeleteVolume (idempotent in CSI) and finishes.
        if steps.drop_finalizer {
            self.set_finalizer(pv, false).await?;
        }
        if steps.delete_object {
            let api: Api<PersistentVolume> = Api::all(self.ctx.client.clone());
            // Read through our finalizer drop: the version the delete replaces.
            let base = self
                .ctx
                .caches
                .volumes
                .get(&ObjectRef::new(&name))
                .and_then(|pv| pv.metadata.resource_version.clone())
                .unwrap_or_default();
            let remains = match api.delete(&name, &DeleteParams::default()).await {
                Ok(deleted) => deleted.left(),
                Err(kube::Error::Api(e)) if e.code == 404 => None,
                Err(source) => {
                    return Err(VolumeError::PvWrite {
                        pv: name,
                        what: "delete",
                        source,
                    });
                }
            };
            self.ctx.caches.volumes.deleted(None, &name, &base, remains);
        }
        Ok(())
    }

    async fn delete_volume(&self, pv: &PersistentVolume) -> Result<(), VolumeError> {
        let name = pv.name_any();
        // CSI migration: an in-tree PV is deleted through the driver in its CSI form.
        let translated;
        let (pv, migrated) = match provisioning::migration::in_tree_plugin_of(pv) {
            Some(_) => {
                translated = provisioning::migration::in_tree_pv_to_csi(pv).map_err(|e| {
                    VolumeError::Translation {
                        pv: name.clone(),
                        message: e.to_string(),
                    }
                })?;
                (&translated, true)
            }
            None => (pv, false),
        };
        let Some(csi) = pv.spec.as_ref().and_then(|s| s.csi.as_ref()) else {
            return Err(VolumeError::NoCsiSource { pv: name });
        };
        // Upstream's order of checks (so the same problem is reported first): capabilities,
        // the secret's reference, attachments; the secret is read last, once nothing stops
        // the call, so a PV waiting for its detach costs no read per retry.
        if let Err(message) =
            provisioning::prepare::can_delete_volumes(self.ctx.driver.capabilities)
        {
            return Err(VolumeError::DeleteVolume { pv: name, message });
        }
        // Not the metrics' `class` (spec.storageClassName): as upstream, the legacy
        // annotation first.
        let class_obj = self
            .ctx
            .caches
            .classes
            .get(&ObjectRef::new(provisioning::volume::class_name(pv)));
        let class_obj = class_obj
            .as_deref()
            .map(|c| provisioning::migration::deletion_class(c, migrated));
        let secret = decide::deletion_secret(pv, class_obj.as_deref()).map_err(|e| {
            VolumeError::SecretReference {
                pv: name.clone(),
                message: e.to_string(),
            }
        })?;
        if let Some(node) = self.attached_node(&name) {
            return Err(VolumeError::StillAttached { pv: name, node });
        }
        let secret_data = match secret {
            DeletionSecret::None => BTreeMap::new(),
            // As upstream, a secret that cannot be read (it may be gone with its namespace)
            // does not block the deletion: the driver decides whether it needs it. One that is
            // not text does ([`secrets::SecretError::blocks_deletion`]).
            DeletionSecret::Annotated(r) | DeletionSecret::FromClass(r) => {
                match secrets::fetch(&self.ctx.client, &r).await {
                    Ok(data) => data,
                    Err(e) if e.blocks_deletion() => {
                        return Err(VolumeError::SecretReference {
                            pv: name,
                            message: provisioning::prepare::secret_fetch_message(&r, &e),
                        });
                    }
                    Err(e) => {
                        tracing::error!(pv = %name, secret = %format!("{}/{}", r.namespace, r.name), err = %e, "Failed to get deletion secret; deleting without it");
                        BTreeMap::new()
                    }
                }
            }
        };
        // The claim's entry leaves the record first: an entry that outlived the volume would,
        // after a crash, have the next instance probe for it, making the volume again.
        let claim_uid = pv
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref()?.uid.clone());
        if let Some(uid) = claim_uid {
            self.entries.settle(&uid).await;
        }
        let request = csi::v1::DeleteVolumeRequest {
            volume_id: csi.volume_handle.clone(),
            secrets: secret_data.into_iter().collect(),
        };
        self.ctx
            .driver
            .client
            .migrated(migrated)
            .delete_volume(request)
            .await
            .map(|_| ())
            .map_err(|s| VolumeError::DeleteVolume {
                pv: name,
                message: csi::status::go_error_string(&s),
            })
    }

    /// A VolumeAttachment still referencing the PV (only watched for drivers that attach).
    fn attached_node(&self, pv_name: &str) -> Option<String> {
        self.ctx
            .caches
            .attachments
            .as_ref()?
            .state()
            .iter()
            .find_map(|va| {
                (va.spec.source.persistent_volume_name.as_deref() == Some(pv_name))
                    .then(|| va.spec.node_name.clone())
            })
    }

    /// Adds (`ours`) or removes our finalizer with a strategic-merge patch naming only it
    /// ([`decide::finalizer_patch`]), as upstream does. A resourceVersion-guarded write
    /// conflicted with kube-controller-manager's binding writes to a new PV, and each retry
    /// cost a read and a write at the client's QPS: a Retain PV could be Released before its
    /// finalizer was gone.
    async fn set_finalizer(&self, pv: &PersistentVolume, ours: bool) -> Result<(), VolumeError> {
        let name = pv.name_any();
        let api: Api<PersistentVolume> = Api::all(self.ctx.client.clone());
        let patch = decide::finalizer_patch(ours);
        match api
            .patch(&name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
        {
            Ok(patched) => {
                // The cache may still show the version we read.
                let read = pv.resource_version();
                self.ctx.caches.volumes.updated(read.as_deref(), patched);
                Ok(())
            }
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(source) => Err(VolumeError::PvWrite {
                pv: name,
                what: "update finalizers of",
                source,
            }),
        }
    }
}

fn object_reference(pv: &PersistentVolume) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("PersistentVolume".into()),
        name: pv.metadata.name.clone(),
        uid: pv.metadata.uid.clone(),
        resource_version: pv.metadata.resource_version.clone(),
        ..Default::default()
    }
}
