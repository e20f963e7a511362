//! A claim deleted while a volume for it may exist without a PV (CreateVolume in flight, or the
//! provisioner was down): find the volume, delete it, then let the claim go.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use provisioning::errors::{ProvisioningState, classify_create_volume_error};
use provisioning::prepare::Prepared;
use runtime::events::EventType;
use tonic::Code;

use super::{ClaimsController, SyncError, update};

/// Event reason when cleanup is stuck (upstream's library uses it for failed cleanups too).
pub const CLEANUP_FAILED: &str = "ProvisioningCleanupFailed";

impl ClaimsController {
    pub(super) async fn clean_up(&self, claim: &PersistentVolumeClaim) -> Result<(), SyncError> {
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        let known = self.memory.volume_id(&uid);
        let (volume_id, secrets) = match known {
            Some(id) => (Some(id), self.cleanup_secrets(claim).await?),
            None => self.find_volume(claim).await?,
        };
        if let Some(volume_id) = volume_id {
            let request = csi::v1::DeleteVolumeRequest {
                volume_id: volume_id.clone(),
                secrets: secrets.into_iter().collect(),
            };
            if let Err(status) = self.ctx.driver.client.delete_volume(request).await {
                let message = format!(
                    "cannot delete volume {volume_id} created for this deleted claim: {}",
                    csi::status::go_error_string(&status)
                );
                return Err(self.cleanup_failed(claim, message));
            }
            klog::v!(2, claim = %claim_name(claim), volume = %volume_id, "Deleted the volume of a claim deleted before its PV existed");
            self.memory.volume_gone(&uid);
            self.refresh_capacity(claim);
        }
        update::remove_finalizer(&self.ctx.client, claim)
            .await
            .map_err(|e| {
                SyncError::retry(format!(
                    "cannot remove finalizer from {}: {e}",
                    claim_name(claim)
                ))
            })?;
        self.memory.forget(&uid);
        Ok(())
    }

    /// Asks the driver for the claim's volume with an idempotent CreateVolume under the same
    /// name. CSI promises the same volume for the same name; no topology is requested, so the
    /// answer does not depend on where the first attempt placed it. `(None, _)` means no volume
    /// exists (a final error: nothing is being created under that name).
    async fn find_volume(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Result<(Option<String>, std::collections::BTreeMap<String, String>), SyncError> {
        let Some(class) = self.class_of(claim) else {
            let message = format!(
                "cannot check whether a volume exists for deleted claim {}: its StorageClass {:?} is gone; \
                 re-create the StorageClass, or check the storage system and remove the finalizer {} by hand",
                claim_name(claim),
                provisioning::claim::class_name(claim).unwrap_or_default(),
                provisioning::names::CREATING_VOLUME_FINALIZER
            );
            return Err(self.cleanup_failed(claim, message));
        };
        let plan = match self.prepare(claim, &class, false) {
            Ok(Prepared::Provision(plan)) => plan,
            // Nothing we could have created: a populator's claim, or a request that can never be
            // built (and so was never sent).
            Ok(Prepared::ExternalPopulator { .. }) => return Ok((None, Default::default())),
            Err(err) if err.state == ProvisioningState::Finished => {
                return Ok((None, Default::default()));
            }
            Err(err) => return Err(self.cleanup_failed(claim, err.message)),
        };
        let (secrets, mutable) = self
            .request_inputs(&plan)
            .await
            .map_err(|e| self.cleanup_failed(claim, e.message))?;
        let request = plan
            .create_volume_request(claim, secrets.clone(), mutable)
            .map_err(|e| self.cleanup_failed(claim, e.message))?;
        match self.ctx.driver.client.create_volume(request).await {
            Ok(resp) => Ok((resp.volume.map(|v| v.volume_id), secrets)),
            Err(status) if status.code() == Code::AlreadyExists => Err(self.cleanup_failed(
                claim,
                format!(
                    "the driver has a volume named {} but refuses to name it: {}; delete it in the storage \
                     system, then remove the finalizer {}",
                    plan.volume_name,
                    csi::status::go_error_string(&status),
                    provisioning::names::CREATING_VOLUME_FINALIZER
                ),
            )),
            Err(status) => match classify_create_volume_error(status.code(), false) {
                ProvisioningState::Background => Err(SyncError::retry(csi::status::go_error_string(&status))),
                _ => Ok((None, secrets)),
            },
        }
    }

    /// The provisioner secret for DeleteVolume of a volume whose id we remember.
    async fn cleanup_secrets(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Result<std::collections::BTreeMap<String, String>, SyncError> {
        let Some(class) = self.class_of(claim) else {
            return Ok(Default::default());
        };
        match self.prepare(claim, &class, false) {
            Ok(Prepared::Provision(plan)) => {
                Ok(self
                    .request_inputs(&plan)
                    .await
                    .map(|(s, _)| s)
                    .map_err(|e| self.cleanup_failed(claim, e.message))?)
            }
            _ => Ok(Default::default()),
        }
    }

    fn cleanup_failed(&self, claim: &PersistentVolumeClaim, message: String) -> SyncError {
        let reference = provisioning::pv::claim_reference(claim);
        self.ctx.recorder.event(
            &reference,
            EventType::Warning,
            CLEANUP_FAILED,
            message.clone(),
        );
        SyncError::retry(message)
    }

    fn refresh_capacity(&self, claim: &PersistentVolumeClaim) {
        if let (Some(capacity), Some(class)) =
            (&self.ctx.capacity, provisioning::claim::class_name(claim))
        {
            capacity.class_changed(class);
        }
    }
}

fn claim_name(claim: &PersistentVolumeClaim) -> String {
    format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim.metadata.name.as_deref().unwrap_or_default()
    )
}
