//! Data sources: the ReferenceGrant of a source in another namespace, then the snapshot
//! (`restore.rs`) or the source claim and its PV, checked by [`provisioning::data_source`],
//! which builds the content source; the source keeps a protection finalizer while the new
//! volume is filled from it (upstream's).

use crate::data_source_api::{reference_grants, typed};
use csi::v1::VolumeContentSource;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Api;
use kube::api::ListParams;
use kube::runtime::reflector::ObjectRef;
use provisioning::data_source::clone::{CloneInputs, clone_source, source_volume_name};
use provisioning::data_source::grant::{self, ReferenceGrant};
use provisioning::data_source::{DataSource, SourceKind};
use provisioning::errors::ProvisionError;
use provisioning::names;

use super::{ClaimsController, claim_name, update};

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
        self.check_grant(claim, &source.namespace).await?;
        match source.kind {
            SourceKind::Snapshot => self.restore_source(claim, class, source, protect).await,
            SourceKind::Claim => self.clone_source(claim, class, source, protect).await,
        }
    }

    /// A source in another namespace (`namespace`) needs a ReferenceGrant there (upstream reads
    /// them from an informer; one LIST per attempt here, only for such claims). Refusals are
    /// final for the attempt (`Finished`), as upstream. A source in the claim's own namespace
    /// needs nothing.
    pub(super) async fn check_grant(
        &self,
        claim: &PersistentVolumeClaim,
        namespace: &str,
    ) -> Result<(), ProvisionError> {
        if claim.metadata.namespace.as_deref() == Some(namespace) {
            return Ok(());
        }
        let api = reference_grants(&self.ctx.client, namespace);
        let list = api.list(&ListParams::default()).await.map_err(|e| {
            ProvisionError::finished(format!(
                "error getting ReferenceGrants in {} namespace from api server: {}",
                namespace,
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
            provisioner: provisioning::migration::source_provisioner(class),
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
            let claims = &self.ctx.caches.claims;
            let stored = update::set_finalizer(
                client,
                claims,
                source_claim,
                names::CLONE_SOURCE_FINALIZER,
                true,
            )
            .await
            .map_err(|e| ProvisionError::no_change(crate::api_error::message(&e)))?;
            // Gone (or re-created) since it was read: nothing protects it during the copy, so
            // no CreateVolume is sent; upstream's update fails here too and is retried.
            if stored.is_none() {
                return Err(ProvisionError::no_change(source_claim_gone(source)));
            }
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
}

/// Why a clone waits when its source claim went away between the read and the finalizer write
/// (upstream shows the API server's NotFound for it).
fn source_claim_gone(source: &DataSource) -> String {
    format!(
        "persistentvolumeclaims {} not found: the clone's source claim (namespace {}) was deleted \
         or re-created while the clone started; the clone is tried again",
        gofmt::quote(&source.name),
        gofmt::quote(&source.namespace)
    )
}
