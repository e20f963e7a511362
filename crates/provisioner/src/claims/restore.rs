//! Restoring from a VolumeSnapshot: read the snapshot and its content, let
//! [`provisioning::data_source::snapshot::restore_source`] check them, protect the snapshot
//! while the driver restores it, and retry waiting claims the moment a snapshot is ready.

use csi::v1::VolumeContentSource;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::DynamicObject;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use provisioning::data_source::snapshot::{
    RestoreInputs, VolumeSnapshot, VolumeSnapshotContent, has_finalizer, restore_source,
};
use provisioning::data_source::{DataSource, SourceKind};
use provisioning::errors::ProvisionError;
use provisioning::names;
use provisioning::retry;

use super::{ClaimsController, claim_name};
use crate::data_source_api::{contents, set_snapshot_finalizer, snapshots, typed};

impl ClaimsController {
    /// The snapshot's content source; with `protect`, our finalizer goes on the snapshot once
    /// the checks pass.
    pub(super) async fn restore_source(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
        source: &DataSource,
        protect: bool,
    ) -> Result<VolumeContentSource, ProvisionError> {
        let client = &self.ctx.client;
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        let api = snapshots(client, &source.namespace);
        let cached = self
            .ctx
            .caches
            .snapshots
            .snapshot(&source.namespace, &source.name);
        let from_cache = cached.is_some();
        let object = match cached {
            Some(object) => object,
            None => api.get(&source.name).await.map_err(|e| {
                if matches!(&e, kube::Error::Api(s) if s.code == 404) {
                    self.records.with(&uid, |r| r.awaiting_snapshot = true);
                }
                source.error(format!(
                    "error getting snapshot {} from api server: {}",
                    source.name,
                    crate::api_error::message(&e)
                ))
            })?,
        };
        let snapshot: VolumeSnapshot = typed(&object).map_err(|e| source.error(e))?;
        // Only a snapshot that is missing or not ready yet is worth waiting for; any other
        // refusal keeps the usual backoff.
        if snapshot.status.as_ref().and_then(|s| s.ready_to_use) != Some(true) {
            self.records.with(&uid, |r| r.awaiting_snapshot = true);
        }
        let content_name = snapshot
            .status
            .as_ref()
            .and_then(|s| s.bound_volume_snapshot_content_name.clone());
        let content = match content_name {
            Some(name) => match self.content(&name).await {
                Ok(object) => {
                    Some(typed::<VolumeSnapshotContent>(&object).map_err(|e| source.error(e))?)
                }
                Err(e) => {
                    tracing::warn!(claim = %claim_name(claim), content = %name, err = %e, "Cannot read the snapshot's content");
                    None
                }
            },
            None => None,
        };
        let restore = restore_source(&RestoreInputs {
            claim,
            name: &source.name,
            snapshot: &snapshot,
            content: content.as_ref(),
            provisioner: provisioning::migration::source_provisioner(class),
            class: class.metadata.name.as_deref().unwrap_or_default(),
            prevent_volume_mode_conversion: self.config.prevent_volume_mode_conversion,
        })
        .map_err(|e| source.error(e))?;
        if let Some(warning) = &restore.warning {
            tracing::warn!(claim = %claim_name(claim), "{warning}");
        }
        if protect {
            self.protect_snapshot(&uid, source, object, from_cache)
                .await?;
        }
        Ok(restore.content_source)
    }

    /// Puts our finalizer on the snapshot unless it is there, in the snapshot's turn, and
    /// counts the attempt of `uid` as restoring from it (see `restorers.rs`). `object` was
    /// read before the turn: from the cache, it is looked up again in the turn, which shows
    /// any write of another attempt of ours made meanwhile.
    async fn protect_snapshot(
        &self,
        uid: &str,
        source: &DataSource,
        object: DynamicObject,
        from_cache: bool,
    ) -> Result<(), ProvisionError> {
        let api = snapshots(&self.ctx.client, &source.namespace);
        let key = (source.namespace.clone(), source.name.clone());
        let turn = self.snapshots.turn(&key);
        let _turn = turn.lock().await;
        self.snapshots.with(|r| r.begin(key.clone(), uid));
        let cache = &self.ctx.caches.snapshots;
        let object = if from_cache {
            cache.snapshot(&key.0, &key.1).unwrap_or(object)
        } else {
            object
        };
        if has_finalizer(&object.metadata, names::SNAPSHOT_SOURCE_FINALIZER) {
            return Ok(());
        }
        let replaced = object.metadata.resource_version.clone().unwrap_or_default();
        let stored = set_snapshot_finalizer(&api, object, true, true)
            .await
            .map_err(|e| ProvisionError::no_change(crate::api_error::message(&e)))?;
        if let Some(stored) = stored {
            cache.snapshot_written(&replaced, stored.clone());
            self.records
                .with(uid, |r| r.protected_snapshot = Some(stored));
        }
        Ok(())
    }

    /// The content from the content watch's cache once it carries its snapshot handle (a ready
    /// snapshot's content has it before the snapshot says ready); otherwise by GET.
    async fn content(&self, name: &str) -> Result<DynamicObject, kube::Error> {
        match self.ctx.caches.snapshots.content(name) {
            Some(object) if object.data["status"]["snapshotHandle"].is_string() => Ok(object),
            _ => contents(&self.ctx.client).get(name).await,
        }
    }

    /// After a successful restore our finalizer comes off the snapshot, through the
    /// background lane (best effort: the orphan sweep catches what is missed). `ours`: the
    /// snapshot as our protecting write left it.
    pub(super) async fn release_restored_snapshot(
        &self,
        claim: &PersistentVolumeClaim,
        ours: Option<DynamicObject>,
    ) {
        let Some(name) = provisioning::data_source::restored_snapshot(claim) else {
            return;
        };
        let namespace = claim.metadata.namespace.as_deref().unwrap_or_default();
        let uid = claim.metadata.uid.as_deref().unwrap_or_default();
        self.release_snapshot(namespace, name, uid, ours).await;
    }

    /// Makes the releases owed to snapshots whose last restorer failed (see `restorers.rs`)
    /// until `cancel`.
    pub(super) async fn release_owed_snapshots(&self, cancel: CancellationToken) {
        let Some(mut owed) = self.snapshots.take_owed() else {
            return;
        };
        loop {
            let key = tokio::select! {
                () = cancel.cancelled() => return,
                key = owed.recv() => key,
            };
            let Some((namespace, name)) = key else { return };
            klog::v!(4, snapshot = %format!("{namespace}/{name}"), "The last restore from the snapshot failed; taking off the finalizer an earlier restore kept for it");
            self.release_snapshot(&namespace, &name, "", None).await;
        }
    }

    /// Takes our finalizer off the snapshot unless an attempt other than `uid`'s (`""`: none
    /// of ours) still restores from it. `ours`: the snapshot as our add left it, if known.
    async fn release_snapshot(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        ours: Option<DynamicObject>,
    ) {
        let api = snapshots(&self.ctx.background_client, namespace);
        // The cache shows our own add until the watch brings it (a fast driver); without a
        // cached copy that has the finalizer, our add's answer or else a read (upstream always
        // reads it). Missing it would leave the finalizer until the sweep, or for ever with
        // the sweep off. A version that turns out stale costs a conflict and a re-read.
        let key = (namespace.to_string(), name.to_string());
        let turn = self.snapshots.turn(&key);
        let _turn = turn.lock().await;
        let others = self.snapshots.with(|r| {
            let others = r.others(&key, uid);
            r.owe(&key, others > 0);
            others
        });
        if others > 0 {
            // The last restore out takes it off, or the release owed once it fails.
            klog::v!(4, snapshot = %format!("{namespace}/{name}"), restores = others, "Keeping the snapshot's finalizer: other claims still restore from it");
            return;
        }
        let cache = &self.ctx.caches.snapshots;
        let cached = cache
            .snapshot(namespace, name)
            .filter(|o| has_finalizer(&o.metadata, names::SNAPSHOT_SOURCE_FINALIZER));
        let current = match cached.or(ours) {
            Some(object) => Ok(Some(object)),
            None => api.get_opt(name).await,
        };
        let result = match current {
            Ok(Some(object))
                if has_finalizer(&object.metadata, names::SNAPSHOT_SOURCE_FINALIZER) =>
            {
                let replaced = object.metadata.resource_version.clone().unwrap_or_default();
                set_snapshot_finalizer(&api, object, false, true)
                    .await
                    .map(|stored| {
                        if let Some(stored) = stored {
                            cache.snapshot_written(&replaced, stored);
                        }
                    })
            }
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            tracing::warn!(snapshot = %format!("{namespace}/{name}"), err = %e, "Failed to remove the snapshot's finalizer; it is cleaned up later");
        }
    }

    /// A VolumeSnapshot is ready (the watch saw it listed or changed): claims waiting for it
    /// try again now. A claim on another failure's backoff keeps it, or every write to the
    /// snapshot (our own finalizer's included) would retry it early. The moment is
    /// remembered for attempts that were reading the snapshot meanwhile.
    pub fn snapshot_ready(&self, namespace: &str, name: &str) {
        let mut wanted = false;
        // A claim that wants a snapshot is not Bound yet.
        for claim in self.ctx.caches.unsettled_claims() {
            let wants =
                provisioning::data_source::snapshot::wanted_by(&claim).contains(&(namespace, name));
            wanted |= wants;
            let uid = claim.metadata.uid.as_deref().unwrap_or_default();
            if wants && self.records.hold(uid).is_some_and(|h| h.awaits_snapshot) {
                klog::v!(4, claim = %claim_name(&claim), snapshot = %format!("{namespace}/{name}"), "Snapshot is ready; retrying now");
                self.records.set_hold(uid, None);
                self.enqueue(&claim);
            }
        }
        if wanted {
            let key = (namespace.to_string(), name.to_string());
            self.snapshots.seen_ready(key, Instant::now());
        }
    }

    /// The hold after a failed restore attempt ([`retry::restore_hold`] decides); `None`:
    /// keep the failure's own hold.
    pub(super) fn restore_hold(
        &self,
        uid: &str,
        source: &DataSource,
        attempt_began: Instant,
    ) -> Option<Duration> {
        let awaiting_snapshot = self
            .records
            .existing(uid, |r| std::mem::take(&mut r.awaiting_snapshot))
            .unwrap_or(false);
        let from_snapshot = source.kind == SourceKind::Snapshot;
        let key = (source.namespace.clone(), source.name.clone());
        let attempt = retry::RestoreAttempt {
            from_snapshot,
            ready_during_attempt: from_snapshot && self.snapshots.ready_since(&key, attempt_began),
            awaiting_snapshot,
            watch_running: self.ctx.caches.snapshots.watching_snapshots(),
        };
        retry::restore_hold(attempt, self.config.retry_interval_max)
    }
}
