//! Data sources: read the VolumeSnapshot (and its content) or the source claim (and its PV),
//! let [`provisioning::data_source`] check them and build the content source, and keep the
//! source from disappearing while the new volume is filled from it (upstream's finalizers).

use csi::v1::VolumeContentSource;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use provisioning::data_source::clone::{CloneInputs, clone_source, source_volume_name};
use provisioning::data_source::grant::{self, ReferenceGrant};
use provisioning::data_source::snapshot::{
    self, RestoreInputs, VolumeSnapshot, VolumeSnapshotContent, has_finalizer, restore_source,
};
use provisioning::data_source::{DataSource, SourceKind};
use provisioning::errors::ProvisionError;
use provisioning::names;

use super::{ClaimsController, claim_name, update};

fn snapshot_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(snapshot::API_GROUP, snapshot::API_VERSION, kind),
        plural,
    )
}

fn snapshots(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    let resource = snapshot_resource("VolumeSnapshot", "volumesnapshots");
    Api::namespaced_with(client.clone(), namespace, &resource)
}

fn contents(client: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &snapshot_resource("VolumeSnapshotContent", "volumesnapshotcontents"),
    )
}

/// Reads a dynamic object's fields into one of our typed views.
fn typed<T: serde::de::DeserializeOwned>(object: &DynamicObject) -> Result<T, String> {
    serde_json::to_value(object)
        .and_then(serde_json::from_value)
        .map_err(|e| {
            format!(
                "cannot read {}: {e}",
                object.metadata.name.as_deref().unwrap_or_default()
            )
        })
}

impl ClaimsController {
    /// The content source for a claim with a snapshot or claim data source. With `protect`,
    /// the source gets its protection finalizer once the checks pass (upstream's order); a
    /// clean-up probe passes `false` and writes nothing.
    pub(super) async fn content_source(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
        source: &DataSource,
        protect: bool,
    ) -> Result<VolumeContentSource, ProvisionError> {
        if claim.metadata.namespace.as_deref() != Some(source.namespace.as_str()) {
            self.check_grant(claim, source).await?;
        }
        match source.kind {
            SourceKind::Snapshot => self.restore_source(claim, class, source, protect).await,
            SourceKind::Claim => self.clone_source(claim, class, source, protect).await,
        }
    }

    /// A source in another namespace needs a ReferenceGrant there (upstream reads them from
    /// an informer; one LIST per attempt here, only for such claims). Refusals are final for
    /// the attempt (`Finished`), as upstream.
    async fn check_grant(
        &self,
        claim: &PersistentVolumeClaim,
        source: &DataSource,
    ) -> Result<(), ProvisionError> {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(grant::API_GROUP, grant::API_VERSION, "ReferenceGrant"),
            "referencegrants",
        );
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.ctx.client.clone(), &source.namespace, &resource);
        let list = api.list(&ListParams::default()).await.map_err(|e| {
            ProvisionError::finished(format!(
                "error getting ReferenceGrants in {} namespace from api server: {}",
                source.namespace,
                crate::api_error::message(&e)
            ))
        })?;
        let grants = list
            .items
            .iter()
            .map(typed::<ReferenceGrant>)
            .collect::<Result<Vec<_>, _>>()
            .map_err(ProvisionError::finished)?;
        grant::check(claim, &grants).map_err(ProvisionError::finished)
    }

    async fn restore_source(
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
            self.edit_snapshot_finalizers(&api, object, true)
                .await
                .map_err(|e| ProvisionError::no_change(crate::api_error::message(&e)))?;
        }
        Ok(restore.content_source)
    }

    /// Adds (`add`) or removes our finalizer on a snapshot with an update guarded by its
    /// resourceVersion. A `Forbidden` answer is logged and ignored: older RBAC without
    /// `update` on volumesnapshots keeps working, as upstream.
    async fn edit_snapshot_finalizers(
        &self,
        api: &Api<DynamicObject>,
        mut object: DynamicObject,
        add: bool,
    ) -> Result<(), kube::Error> {
        let name = object.metadata.name.clone().unwrap_or_default();
        let finalizers = object.metadata.finalizers.get_or_insert_with(Vec::new);
        let present = finalizers
            .iter()
            .any(|f| f == names::SNAPSHOT_SOURCE_FINALIZER);
        match (add, present) {
            (true, false) => finalizers.push(names::SNAPSHOT_SOURCE_FINALIZER.to_string()),
            (false, true) => finalizers.retain(|f| f != names::SNAPSHOT_SOURCE_FINALIZER),
            _ => return Ok(()),
        }
        match api.replace(&name, &PostParams::default(), &object).await {
            Ok(_) => {
                klog::v!(3, snapshot = %format!("{}/{name}", object.metadata.namespace.as_deref().unwrap_or_default()), added = add, "Changed finalizer {}", names::SNAPSHOT_SOURCE_FINALIZER);
                Ok(())
            }
            Err(kube::Error::Api(e)) if e.code == 403 => {
                tracing::warn!(snapshot = %name, "Not allowed to update VolumeSnapshots; the restore goes on without protecting the snapshot (grant update on volumesnapshots)");
                Ok(())
            }
            Err(kube::Error::Api(e)) if e.code == 404 && !add => Ok(()),
            Err(e) => Err(e),
        }
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
                self.edit_snapshot_finalizers(&api, object, false).await
            }
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            tracing::warn!(snapshot = %format!("{namespace}/{name}"), err = %e, "Failed to remove the snapshot's finalizer; it is cleaned up later");
        }
    }

    async fn clone_source(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
        source: &DataSource,
        protect: bool,
    ) -> Result<VolumeContentSource, ProvisionError> {
        let source_claim = self
            .source_claim(source)
            .await
            .map_err(|e| source.error(e))?;
        let mut inputs = CloneInputs {
            claim,
            name: &source.name,
            source: source_claim.as_ref(),
            source_pv: None,
            provisioner: &class.provisioner,
        };
        let volume = source_volume_name(&inputs).map_err(|e| source.error(e.message))?;
        let pv = self.source_volume(volume).await;
        inputs.source_pv = pv.as_ref();
        let content_source = clone_source(&inputs).map_err(|e| {
            if let Some(detail) = &e.detail {
                tracing::warn!(claim = %claim_name(claim), "Cannot clone: {detail}");
            }
            source.error(e.message)
        })?;
        if protect && let Some(source_claim) = &source_claim {
            let client = &self.ctx.client;
            update::modify_claim(client, &self.ctx.caches.claims, source_claim, |c| {
                let finalizers = c.metadata.finalizers.get_or_insert_with(Vec::new);
                if finalizers
                    .iter()
                    .any(|f| f == names::CLONE_SOURCE_FINALIZER)
                {
                    return false;
                }
                finalizers.push(names::CLONE_SOURCE_FINALIZER.to_string());
                true
            })
            .await
            .map_err(|e| ProvisionError::no_change(crate::api_error::message(&e)))?;
        }
        Ok(content_source)
    }

    /// The source claim from the cache; a distributed instance caches only its node's claims,
    /// so a miss is read from the API server.
    async fn source_claim(
        &self,
        source: &DataSource,
    ) -> Result<Option<PersistentVolumeClaim>, String> {
        let reference = ObjectRef::new(&source.name).within(&source.namespace);
        if let Some(c) = self.ctx.caches.claims.get(&reference) {
            return Ok(Some((*c).clone()));
        }
        Api::<PersistentVolumeClaim>::namespaced(self.ctx.client.clone(), &source.namespace)
            .get_opt(&source.name)
            .await
            .map_err(|e| {
                format!(
                    "error getting PVC {} (namespace {}) from api server: {}",
                    source.name,
                    gofmt::quote(&source.namespace),
                    crate::api_error::message(&e)
                )
            })
    }

    /// The source claim's PV: from the cache of our driver's PVs, else from the API server.
    async fn source_volume(&self, name: &str) -> Option<PersistentVolume> {
        if let Some(pv) = self.ctx.caches.volumes.get(&ObjectRef::new(name)) {
            return Some((*pv).clone());
        }
        match Api::<PersistentVolume>::all(self.ctx.client.clone())
            .get_opt(name)
            .await
        {
            Ok(pv) => pv,
            Err(e) => {
                tracing::warn!(volume = %name, err = %e, "Cannot read the clone source's PV");
                None
            }
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
