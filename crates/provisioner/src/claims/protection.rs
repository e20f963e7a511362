//! Upstream's cloning protection: a source claim that is being deleted keeps our
//! `cloning-protection` finalizer while clones are still filled from it. Beyond upstream, the
//! claim gets an event naming the clones it waits for, so a stuck deletion explains itself.

use controller_kit::events::EventType;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::Api;
use kube::api::ListParams;
use provisioning::data_source::clone::pending_clones;
use provisioning::names;

use super::{ClaimError, ClaimKey, ClaimsController, SyncError, claim_name, update};

/// The claim a clone is filled from (`spec.dataSource` of kind PersistentVolumeClaim).
pub(super) fn clone_source_key(claim: &PersistentVolumeClaim) -> Option<ClaimKey> {
    let source = claim.spec.as_ref()?.data_source.as_ref()?;
    (source.kind == names::PVC_KIND && !source.name.is_empty()).then(|| ClaimKey {
        namespace: claim.metadata.namespace.clone().unwrap_or_default(),
        name: source.name.clone(),
    })
}

impl ClaimsController {
    /// Releases a deleting source claim once no pending clone in its namespace names it. While
    /// clones wait, the claim stays; each clone's change re-checks it (see `enqueue`).
    pub(super) async fn protect_clone_source(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Result<(), SyncError> {
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        let namespace = claim.metadata.namespace.as_deref().unwrap_or_default();
        // Pending clones are not Bound. A node instance caches only its node's claims, and a
        // clone waiting on another node must hold the source too: it reads the namespace.
        let claims = match &self.ctx.node {
            None => self.ctx.caches.unsettled_claims(),
            Some(_) => Api::<PersistentVolumeClaim>::namespaced(self.ctx.client.clone(), namespace)
                .list(&ListParams::default())
                .await
                .map_err(|source| ClaimError::ClaimRead {
                    what: "list the claims in the namespace of",
                    claim: claim_name(claim),
                    source,
                })?
                .items
                .into_iter()
                .map(std::sync::Arc::new)
                .collect(),
        };
        let pending = pending_clones(
            claim,
            claims
                .iter()
                .filter(|c| c.metadata.namespace.as_deref() == Some(namespace))
                .map(|c| c.as_ref()),
        );
        if !pending.is_empty() {
            let changed = self
                .records
                .with(&uid, |r| r.clone_hold.replace(pending.clone()))
                != Some(pending.clone());
            if changed
                && provisioning::distributed::speaks_for_clone_source(
                    claim,
                    self.ctx.node.as_ref().map(|n| n.name.as_str()),
                )
            {
                klog::v!(3, claim = %claim_name(claim), clones = ?pending, "Deletion waits for pending clones");
                self.ctx.recorder.event(
                    &provisioning::pv::claim_reference(claim),
                    EventType::Normal,
                    names::EVENT_WAIT_FOR_CLONES,
                    names::wait_for_clones_message(&pending),
                );
            }
            return Ok(());
        }
        self.records.existing(&uid, |r| r.clone_hold = None);
        let (client, claims) = (&self.ctx.client, &self.ctx.caches.claims);
        update::set_finalizer(client, claims, claim, names::CLONE_SOURCE_FINALIZER, false)
            .await
            .map_err(|source| ClaimError::ClaimWrite {
                claim: claim_name(claim),
                what: "remove the cloning-protection finalizer from",
                source,
            })?;
        klog::v!(3, claim = %claim_name(claim), "Removed finalizer {}", names::CLONE_SOURCE_FINALIZER);
        Ok(())
    }
}
