//! A claim deleted (or bound to a PV that is not ours) while a volume for it may exist without
//! a PV (CreateVolume in flight, or the provisioner was down): find the volume, delete it, then
//! let the claim go.
//!
//! What to do is [`provisioning::attempt::cleanup`]'s answer, from what this process saw of the
//! claim's CreateVolume calls. A volume that any PV names is never deleted here.

use controller_kit::events::EventType;
use csi::v1::CreateVolumeRequest;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use provisioning::attempt::{
    Cleanup, ProbeFailure, after_probe, after_probe_error, cleanup, unless_saved,
};
use provisioning::errors::ProvisioningState;
use provisioning::prepare::Prepared;
use provisioning::record::Leaving;

use crate::capacity_controller::Refresh;

use super::{ClaimError, ClaimsController, SyncError, bound_uid, claim_name, update};

/// Event reason when cleanup is stuck (upstream's library uses it for failed cleanups too).
pub const CLEANUP_FAILED: &str = "ProvisioningCleanupFailed";

impl ClaimsController {
    /// The clean-up ([`provisioning::claim_step::Step::CleanUp`]), or with `left` this node's
    /// ([`provisioning::claim_step::Step::CleanUpLeft`]): a claim this node gave back while a
    /// volume of it may exist here, held by this node's finalizer, is deleted or bound to a PV
    /// (on another node). Then the node's finalizer goes, and the creating-volume one too when
    /// the claim is deleted and no node holds it.
    ///
    /// `left`'s record is this node's own; without one (a restart), this node's finalizer says
    /// a call was made, and the request is rebuilt as for this node. The claim's PV, if any, is
    /// on another node and holds that node's volume, so only a PV this node's cache holds (its
    /// own node's) keeps the volume found here.
    pub(super) async fn clean_up(
        &self,
        claim: &PersistentVolumeClaim,
        left: Option<&str>,
    ) -> Result<(), SyncError> {
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        // This node's finalizer, or our write-ahead entry, says as much as ours.
        let holds = left.is_some()
            || provisioning::lifecycle::has_finalizer(claim)
            || self.entries.holds(&uid);
        let earlier = self.earlier_attempt_possible(claim, holds);
        let state = self.records.volume_state(&uid, earlier);
        let last_request = self.records.last_request(&uid);
        let secrets = last_request
            .as_ref()
            .map(|r| r.secrets.clone())
            .unwrap_or_default();
        // As the first attempt here asked: for this node.
        let rebuilt_for = match left {
            Some(node) => super::race::on_node(claim, node),
            None => claim.clone(),
        };
        // After a restart the entry has the request the call was sent with.
        let recorded = match last_request {
            None => self.entries.entry(&uid),
            Some(_) => None,
        };
        let (step, secrets) = match (cleanup(&state, self.name_taken(claim)), recorded) {
            (Cleanup::ProbeLastRequest | Cleanup::ProbeRebuilt, Some(entry)) => {
                let request = self.recorded_request(claim, &entry).await?;
                let secrets = request.secrets.clone();
                (self.probe(claim, request).await?, secrets)
            }
            (Cleanup::ProbeLastRequest, _) => match last_request {
                Some(request) => (self.probe(claim, request).await?, secrets),
                None => self.probe_rebuilt(&rebuilt_for).await?,
            },
            (Cleanup::ProbeRebuilt, _) => self.probe_rebuilt(&rebuilt_for).await?,
            (other, _) => (other, secrets),
        };
        // The cache may not show a PV saved a moment ago (a claim deleted while its PV was
        // being written): the API server decides before a volume is deleted.
        let step = match step {
            Cleanup::Delete(_) if left.is_none() => unless_saved(step, self.pv_saved(claim).await?),
            other => other,
        };
        if let Cleanup::Delete(volume_id) = step {
            match self.delete_own_volume(&uid, &volume_id, secrets).await {
                Ok(true) => {
                    klog::v!(2, claim = %claim_name(claim), volume = %volume_id, "Deleted the volume of a claim deleted or bound elsewhere before its PV existed");
                    self.refresh_capacity(claim);
                }
                Ok(false) => {}
                Err(status) => {
                    let message = format!(
                        "cannot delete volume {volume_id} created for this claim, which no PV of it will own: {}",
                        csi::status::go_error_string(&status)
                    );
                    return Err(self.cleanup_failed(claim, message));
                }
            }
        }
        if self.entries.holds(&uid) {
            // No finalizer of ours to drop (a claim gone from the API server has none at all).
            // Written at once: the volume is gone, and a crash before this write would have
            // the next process probe for it, making it again only to delete it.
            self.entries.forget(&uid, Leaving::VolumeDeleted);
            if !provisioning::lifecycle::has_finalizer(claim) {
                self.records.forget(&uid);
                return Ok(());
            }
        }
        let node_finalizer = self.node_finalizer();
        let creating = match left {
            // Another node's claim: its finalizer is that node's to drop.
            Some(_) => {
                claim.metadata.deletion_timestamp.is_some()
                    && provisioning::claim::annotation(
                        claim,
                        provisioning::names::ANN_SELECTED_NODE,
                    )
                    .is_none_or(str::is_empty)
            }
            None => true,
        };
        update::remove_finalizers(
            &self.ctx.client,
            &self.ctx.caches.claims,
            claim,
            &[
                creating.then_some(provisioning::names::CREATING_VOLUME_FINALIZER),
                node_finalizer.as_deref(),
            ],
        )
        .await
        .map_err(|source| ClaimError::ClaimWrite {
            claim: claim_name(claim),
            what: "remove the finalizer from",
            source,
        })?;
        // A queued sync reads the claim through this write: no finalizer, nothing to clean.
        self.records.forget(&uid);
        Ok(())
    }

    /// Cleans up after the claims under `key`'s name that our entries hold but that are gone
    /// from the API server (`current`: the UID of the claim the cache has under that name now).
    /// Without a finalizer nothing kept them; the entry says what was asked for them.
    pub(super) async fn clean_up_gone(
        &self,
        key: &super::ClaimKey,
        current: Option<&str>,
    ) -> Result<(), SyncError> {
        // A node cleans up its own volume: a PV of the claim elsewhere holds another node's.
        let node = self.ctx.node.as_ref().map(|n| n.name.clone());
        for entry in self.entries.gone(&key.namespace, &key.name, current) {
            klog::v!(2, claim = %key, uid = %entry.uid, "Claim held by a write-ahead entry is gone; cleaning up from the entry");
            self.clean_up(&gone_claim(&entry), node.as_deref()).await?;
        }
        Ok(())
    }

    /// The request a recorded entry was sent with, with its secrets read again.
    async fn recorded_request(
        &self,
        claim: &PersistentVolumeClaim,
        entry: &provisioning::record::Entry,
    ) -> Result<CreateVolumeRequest, SyncError> {
        let stuck = |reason: &str| {
            let message = format!(
                "cannot check whether a volume exists for deleted claim {}: {reason}. Fix that, or \
                 check the storage system for a volume named {} and {}",
                claim_name(claim),
                entry.volume,
                self.let_go_by_hand(claim)
            );
            self.cleanup_failed(claim, message)
        };
        let mut request = entry.request().map_err(|e| stuck(&e.to_string()))?;
        if let Some(secret) = &entry.secret {
            let secret = provisioning::secrets::SecretRef::from(secret);
            let data = crate::secrets::fetch(&self.ctx.client, &secret)
                .await
                .map_err(|e| {
                    stuck(&format!(
                        "cannot read secret {}/{}: {e}",
                        secret.namespace, secret.name
                    ))
                })?;
            request.secrets = data.into_iter().collect();
        }
        Ok(request)
    }

    /// Drops our finalizer from a claim being let go.
    pub(super) async fn remove_finalizer(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Result<(), ClaimError> {
        update::remove_finalizer(&self.ctx.client, &self.ctx.caches.claims, claim, None)
            .await
            .map(drop)
            .map_err(|source| ClaimError::ClaimWrite {
                claim: claim_name(claim),
                what: "remove the finalizer from",
                source,
            })
    }

    /// Whether the API server has a PV with the claim's volume name: this claim's (saved a
    /// moment ago), or another claim's whose name collides (a short `--volume-name-uuid-length`)
    /// and which a node instance's cache does not hold (it keeps its own node's PVs only).
    /// Either way that PV owns the driver's volume under the name.
    async fn pv_saved(&self, claim: &PersistentVolumeClaim) -> Result<bool, ClaimError> {
        let uid = claim.metadata.uid.as_deref();
        let Ok(name) = self.volume_name(uid.unwrap_or_default()) else {
            return Ok(false);
        };
        let api: kube::Api<k8s_openapi::api::core::v1::PersistentVolume> =
            kube::Api::all(self.ctx.client.clone());
        match api.get_opt(&name).await {
            Ok(None) => Ok(false),
            Ok(Some(pv)) if uid.is_some() && bound_uid(&pv) == uid => {
                klog::v!(2, claim = %claim_name(claim), pv = %name, "The deleted claim's PV exists; its reclaim policy decides about the volume");
                Ok(true)
            }
            Ok(Some(_)) => {
                klog::v!(2, claim = %claim_name(claim), pv = %name, "A PV of another claim has this claim's volume name; the volume under it is that claim's");
                Ok(true)
            }
            Err(e) => Err(ClaimError::Probe {
                claim: claim_name(claim),
                message: format!("cannot read PV {name}: {}", crate::api_error::message(&e)),
            }),
        }
    }

    /// DeleteVolume for a volume a CreateVolume of ours (for the claim `uid`) returned and no
    /// PV of ours will own. `Ok(false)`: a PV names it, so that PV owns it and it is left alone.
    pub(super) async fn delete_own_volume(
        &self,
        uid: &str,
        volume_id: &str,
        secrets: std::collections::HashMap<String, String>,
    ) -> Result<bool, tonic::Status> {
        if self.volume_named_by_pv(volume_id) {
            klog::v!(2, volume = %volume_id, "A PV names the volume; not deleting it");
            return Ok(false);
        }
        let request = csi::v1::DeleteVolumeRequest {
            volume_id: volume_id.to_string(),
            secrets,
        };
        self.ctx.driver.client.delete_volume(request).await?;
        self.volume_gone(uid);
        Ok(true)
    }

    /// Repeats a CreateVolume that may have created a volume. CSI promises the same volume for
    /// the same request, so a refused request shows nothing exists under that name; a backend
    /// error does not ([`after_probe_error`]).
    async fn probe(
        &self,
        claim: &PersistentVolumeClaim,
        request: CreateVolumeRequest,
    ) -> Result<Cleanup, SyncError> {
        let name = request.name.clone();
        match self.ctx.driver.client.create_volume(request).await {
            Ok(resp) => {
                let id = resp.volume.map(|v| v.volume_id);
                let used = id.as_deref().is_some_and(|id| self.volume_named_by_pv(id));
                Ok(after_probe(id.as_deref(), used))
            }
            Err(status) if status.code() == tonic::Code::AlreadyExists => Err(self.cleanup_failed(
                claim,
                format!(
                    "the driver has a volume named {name} but refuses to name it: {}; delete it in the storage \
                     system, then {}",
                    csi::status::go_error_string(&status),
                    self.let_go_by_hand(claim)
                ),
            )),
            Err(status) => match after_probe_error(status.code()) {
                ProbeFailure::Retry => Err(ClaimError::Probe {
                    claim: claim_name(claim),
                    message: csi::status::go_error_string(&status),
                }
                .into()),
                ProbeFailure::NothingMade => {
                    self.volume_gone(claim.metadata.uid.as_deref().unwrap_or_default());
                    Ok(Cleanup::Release)
                }
                ProbeFailure::Unknown => Err(self.cleanup_failed(
                    claim,
                    format!(
                        "asked again for volume {name}, the driver answered {}, which does not say \
                         whether the volume exists; this is tried again. If it persists, delete that \
                         volume in the storage system if it exists, then {}",
                        csi::status::go_error_string(&status),
                        self.let_go_by_hand(claim)
                    ),
                )),
            },
        }
    }

    /// After a restart nothing of the first attempt is known but the claim: rebuild its request
    /// as the first attempt built it (class, secrets, topology) and probe with it. Returns the
    /// step and the secrets DeleteVolume uses.
    async fn probe_rebuilt(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Result<(Cleanup, std::collections::HashMap<String, String>), SyncError> {
        let Some(class) = self.class_of(claim) else {
            let reason = format!(
                "its StorageClass {:?} is gone",
                provisioning::claim::class_name(claim).unwrap_or_default()
            );
            return Err(self.cannot_check(claim, &reason));
        };
        // The placement the first attempt asked for; if its node is gone, ask without one
        // rather than never cleaning up.
        let prepared = match self.prepare(claim, &class, true) {
            Ok(p) => Ok(p),
            Err(err) if err.state != ProvisioningState::Finished => {
                klog::v!(2, claim = %claim_name(claim), err = %err.message, "Cannot rebuild the first attempt's topology; probing without it");
                self.prepare(claim, &class, false)
            }
            Err(err) => Err(err),
        };
        let plan = match prepared {
            Ok(Prepared::Provision(plan)) => plan,
            // Nothing we could have created: a populator's claim, or a request that can never be
            // built (and so was never sent).
            Ok(Prepared::ExternalPopulator { .. }) => {
                return Ok((Cleanup::Release, Default::default()));
            }
            Err(err) if err.state == ProvisioningState::Finished => {
                return Ok((Cleanup::Release, Default::default()));
            }
            Err(err) => return Err(self.cannot_check(claim, &err.message)),
        };
        let (secrets, mutable) = self
            .request_inputs(&plan)
            .await
            .map_err(|e| self.cannot_check(claim, &e.message))?;
        // The probe must ask as the first attempt did; a source gone by now is left out (a
        // driver that then refuses the name gets the AlreadyExists explanation below).
        let content_source = match &plan.data_source {
            Some(source) => self.content_source(claim, &class, source, false).await.ok(),
            None => None,
        };
        let request = plan
            .create_volume_request(claim, secrets, mutable, content_source)
            .map_err(|e| self.cannot_check(claim, &e.message))?;
        let secrets = request.secrets.clone();
        Ok((self.probe(claim, request).await?, secrets))
    }

    /// Whether a PV of another claim has this claim's volume name (the names collide, e.g. with
    /// a short `--volume-name-uuid-length`): then the driver's volume under it is that claim's.
    pub(super) fn name_taken(&self, claim: &PersistentVolumeClaim) -> bool {
        let uid = claim.metadata.uid.as_deref();
        self.named_pv(claim).is_some_and(|pv| bound_uid(&pv) != uid)
    }

    /// Whether any PV of our driver has this volume handle, one bound to the claim being
    /// cleaned up included ([`provisioning::attempt::pv_names_volume`]).
    pub(super) fn volume_named_by_pv(&self, volume_id: &str) -> bool {
        self.ctx
            .caches
            .volumes
            .any(|pv| provisioning::attempt::pv_names_volume(pv, &self.ctx.driver.name, volume_id))
    }

    /// The probe that would tell whether a volume exists cannot be built (`reason`), and nothing
    /// of the earlier requests is known: the claim says what would let the clean-up go on.
    fn cannot_check(&self, claim: &PersistentVolumeClaim, reason: &str) -> SyncError {
        let message = format!(
            "cannot check whether a volume exists for deleted claim {}: {reason}; this provisioner \
             has no record of what was asked for it before it started. Fix that, or check the storage \
             system for a volume named {} and {} by hand",
            claim_name(claim),
            self.volume_name(claim.metadata.uid.as_deref().unwrap_or_default())
                .unwrap_or_default(),
            self.let_go_by_hand(claim)
        );
        self.cleanup_failed(claim, message)
    }

    /// What lets a claim go by hand once its volume is settled in the storage system: our
    /// write-ahead entry's removal from the record, or our finalizer's from the claim.
    fn let_go_by_hand(&self, claim: &PersistentVolumeClaim) -> String {
        let uid = claim.metadata.uid.as_deref().unwrap_or_default();
        match self.entries.holds(uid) {
            true => format!(
                "remove the annotation {} from the write-ahead record (a Lease in the \
                 provisioner's namespace)",
                provisioning::record::key_of(uid)
            ),
            false => format!(
                "remove the finalizer {}",
                provisioning::names::CREATING_VOLUME_FINALIZER
            ),
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
        ClaimError::CleanUp {
            claim: claim_name(claim),
            message,
        }
        .into()
    }

    /// Nothing of the claim `uid`'s attempts is in the backend any more: its reservation,
    /// if it waited for a reading, ends now.
    fn volume_gone(&self, uid: &str) {
        if let Some(capacity) = &self.ctx.capacity {
            capacity.volume_gone(uid);
        }
    }

    fn refresh_capacity(&self, claim: &PersistentVolumeClaim) {
        if let (Some(capacity), Some(class)) =
            (&self.ctx.capacity, provisioning::claim::class_name(claim))
        {
            capacity.refresh(Refresh::Class(class));
        }
    }
}

/// A claim gone from the API server as its entry describes it: enough for the clean-up
/// (namespace, name, UID, class), deleted, holding no finalizer.
fn gone_claim(entry: &provisioning::record::Entry) -> PersistentVolumeClaim {
    let mut claim = PersistentVolumeClaim::default();
    claim.metadata.namespace = Some(entry.namespace.clone());
    claim.metadata.name = Some(entry.name.clone());
    claim.metadata.uid = Some(entry.uid.clone());
    claim.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::now(),
    ));
    claim.spec = Some(k8s_openapi::api::core::v1::PersistentVolumeClaimSpec {
        storage_class_name: Some(entry.class.clone()),
        ..Default::default()
    });
    claim
}
