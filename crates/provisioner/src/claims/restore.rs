//! Restoring from a VolumeSnapshot: read the snapshot and its content, let
//! [`provisioning::data_source::snapshot::restore_source`] check them, protect the snapshot
//! while the driver restores it, and retry waiting claims the moment a snapshot is ready.

use csi::v1::VolumeContentSource;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use provisioning::data_source::DataSource;
use provisioning::data_source::snapshot::{
    RestoreInputs, VolumeSnapshot, VolumeSnapshotContent, has_finalizer, restore_source,
};
use provisioning::errors::ProvisionError;
use provisioning::names;

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
        let api = snapshots(client, &source.namespace);
        let object = api.get(&source.name).await.map_err(|e| {
            source.error(format!(
                "error getting snapshot {} from api server: {}",
                source.name,
                crate::api_error::message(&e)
            ))
        })?;
        let snapshot: VolumeSnapshot = typed(&object).map_err(|e| source.error(e))?;
        let content_name = snapshot
            .status
            .as_ref()
            .and_then(|s| s.bound_volume_snapshot_content_name.clone());
        let content = match content_name {
            Some(name) => match contents(client).get(&name).await {
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
            provisioner: &class.provisioner,
            prevent_volume_mode_conversion: self.ctx.opts.prevent_volume_mode_conversion,
        })
        .map_err(|e| source.error(e))?;
        if let Some(warning) = &restore.warning {
            tracing::warn!(claim = %claim_name(claim), "{warning}");
        }
        if protect && !has_finalizer(&snapshot.metadata, names::SNAPSHOT_SOURCE_FINALIZER) {
            set_snapshot_finalizer(&api, object, true)
                .await
                .map_err(|e| ProvisionError::no_change(crate::api_error::message(&e)))?;
        }
        Ok(restore.content_source)
    }

    /// After a successful restore our finalizer comes off the snapshot (best effort: the orphan
    /// sweep catches what is missed).
    pub(super) async fn release_restored_snapshot(&self, claim: &PersistentVolumeClaim) {
        let Some(name) = provisioning::data_source::restored_snapshot(claim) else {
            return;
        };
        let namespace = claim.metadata.namespace.as_deref().unwrap_or_default();
        let api = snapshots(&self.ctx.client, namespace);
        let result = match api.get_opt(name).await {
            Ok(Some(object))
                if has_finalizer(&object.metadata, names::SNAPSHOT_SOURCE_FINALIZER) =>
            {
                set_snapshot_finalizer(&api, object, false).await
            }
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            tracing::warn!(snapshot = %format!("{namespace}/{name}"), err = %e, "Failed to remove the snapshot's finalizer; it is cleaned up later");
        }
    }

    /// A VolumeSnapshot became ready: claims waiting for it try again now, whatever their
    /// backoff says (the failure they wait out was most likely the snapshot itself).
    pub fn snapshot_ready(&self, namespace: &str, name: &str) {
        for claim in self.ctx.caches.claims.state() {
            let wants =
                provisioning::data_source::snapshot::wanted_by(&claim).contains(&(namespace, name));
            let uid = claim.metadata.uid.as_deref().unwrap_or_default();
            if wants && self.memory.hold(uid).is_some() {
                klog::v!(4, claim = %claim_name(&claim), snapshot = %format!("{namespace}/{name}"), "Snapshot is ready; retrying now");
                self.memory.set_hold(uid, None);
                self.enqueue(&claim);
            }
        }
    }
}
