//! Step 4, save: create the PV of a created volume (kept and saved again until it lands).

use std::time::Instant;

use controller_kit::events::EventType;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::Api;
use kube::api::PostParams;
use provisioning::attempt::VolumeState;
use provisioning::errors::ProvisionError;
use provisioning::names;
use provisioning::record::Leaving;

use super::{ClaimError, ClaimsController, SyncError, bound_uid, claim_name};

impl ClaimsController {
    /// Saves a PV whose first save failed. It is retried whatever happened to the StorageClass
    /// since: the volume exists, and only the PV can own it (upstream's unsaved-PV queue).
    pub(super) async fn save_unsaved_pv(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Result<(), SyncError> {
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        match self.records.existing(&uid, |r| r.unsaved_pv.clone()) {
            Some(Some(pv)) => self.save_pv(claim, pv, self.records.started(&uid)).await,
            _ => Ok(()),
        }
    }

    /// Creates the PV. An existing PV bound to this claim counts as success (a retry after a
    /// lost response); one bound elsewhere is a name collision: a final error, and the volume
    /// (the other claim's) is never deleted. Any other failure keeps the PV for the next sync.
    pub(super) async fn save_pv(
        &self,
        claim: &PersistentVolumeClaim,
        pv: PersistentVolume,
        started: Instant,
    ) -> Result<(), SyncError> {
        let ctx = &self.ctx;
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
        let name = pv.metadata.name.clone().unwrap_or_default();
        // What was stored is recorded as our write: the next sync sees the PV before the cache
        // does, and does not provision again.
        let saved = match api.create(&PostParams::default(), &pv).await {
            Ok(stored) => {
                ctx.caches.volumes.created(stored);
                Ok(true)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => api
                .get(&name)
                .await
                .map(|existing| {
                    let ours = bound_uid(&existing) == Some(uid.as_str());
                    ctx.caches.volumes.created(existing);
                    ours
                })
                .map_err(|e| {
                    format!(
                        "cannot read the existing PV: {}",
                        crate::api_error::message(&e)
                    )
                }),
            Err(kube::Error::Api(e)) if crate::api_error::invalid_object(&e) => {
                // The API server will never take this PV (the driver answered something no PV
                // can hold). Retrying the save would keep the volume forever. (A denial by an
                // admission policy is retried: the policy may change.)
                return self.unkeepable_pv(claim, &name, &e.message).await;
            }
            Err(e) => Err(crate::api_error::message(&e)),
        };
        match saved {
            Ok(true) => {}
            Ok(false) => {
                // The volume under the name is the other claim's: nothing of ours to clean up.
                self.entries.forget(&uid, Leaving::NoVolume);
                self.records
                    .set_volume_state(&uid, VolumeState::Collision, None);
                let err = ProvisionError::name_collision(&name);
                return self.fail_saving(claim, err).await;
            }
            Err(message) => {
                tracing::error!(pv = %name, err = %message, "Failed to save PersistentVolume; will retry");
                self.records.with(&uid, |r| r.unsaved_pv = Some(pv));
                return Err(ClaimError::SavePv {
                    claim: claim_name(claim),
                    pv: name,
                    message,
                }
                .into());
            }
        }
        // The PV owns the volume now; the PV cache shows our create until the watch does.
        self.records.forget(&uid);
        self.entries.forget(&uid, Leaving::PvSaved);
        let reference = provisioning::pv::claim_reference(claim);
        ctx.recorder.event(
            &reference,
            EventType::Normal,
            names::EVENT_PROVISIONING_SUCCEEDED,
            names::provisioning_succeeded_message(&name),
        );
        let (class_label, source) = provisioning::claim::metric_labels(claim);
        ctx.metrics
            .provision_succeeded(class_label, source, started.elapsed().as_secs_f64());
        klog::v!(2, claim = %claim_name(claim), pv = %name, "Provisioned volume");
        // The finalizer is released when the binder's write of the claim brings it back here.
        Ok(())
    }

    /// A PV the API server refuses as invalid: as upstream, the claim gets a
    /// `ProvisioningFailed` event, the volume is deleted and provisioning starts again (the
    /// driver may answer better next time); a volume that cannot be deleted now stays on
    /// record, so the claim keeps its finalizer until a later attempt or clean-up settles it.
    async fn unkeepable_pv(
        &self,
        claim: &PersistentVolumeClaim,
        pv: &str,
        reason: &str,
    ) -> Result<(), SyncError> {
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        self.records.existing(&uid, |r| r.unsaved_pv = None);
        let mut message = format!(
            "Error creating provisioned PV object for claim {}: {reason}. Deleting the volume.",
            claim_name(claim)
        );
        let created = match self.records.volume_state(&uid, false) {
            VolumeState::Created(id) => Some(id),
            _ => None,
        };
        match (created, self.records.last_request(&uid)) {
            (Some(id), Some(request)) => {
                if self.delete_unkept(&uid, &id, &request).await {
                    self.records
                        .set_volume_state(&uid, VolumeState::MayExist, Some(request));
                } else {
                    message.push_str(&format!(
                        " Deleting volume {id} failed; it is retried with the claim."
                    ));
                }
            }
            _ => message.push_str(&format!(" The volume of PV {pv} is not known any more.")),
        }
        self.fail_saving(claim, ProvisionError::background(message))
            .await
    }
}
