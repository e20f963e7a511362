//! Step 3, provision: the provisioning event, prepare, the request, our finalizer, then
//! CreateVolume; a created volume goes on to `save`. Each step returns an [`AttemptError`]
//! naming what failed; [`ClaimsController::record_call`] records what a call left, and
//! [`ClaimsController::attempt_failed`] alone turns an error into events, holds and retries.

use std::time::Instant;

use controller_kit::events::EventType;
use csi::v1::{CreateVolumeRequest, CreateVolumeResponse, Volume};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use provisioning::attempt::{
    CallResult, VolumeState, after_call, failed_call, replaces_probe_request,
};
use provisioning::data_source::DataSource;
use provisioning::errors::{
    ProvisionError, ProvisioningState, classify_create_volume_error, is_infeasible, may_reschedule,
};
use provisioning::names;
use provisioning::prepare::{Prepared, ProvisionPlan};
use provisioning::pv::{
    CapacityDecision, PersistentVolumeInputs, build_persistent_volume, capacity_decision,
    missing_content_source, too_small_message,
};
use provisioning::record::Leaving;
use provisioning::retry;

use super::{ClaimError, ClaimsController, SyncError, claim_name, class_name, restorers, update};
use crate::capacity_controller::Refresh;
use crate::write_ahead::RecordWriteError;

/// Why an attempt ended without a volume to save.
pub(super) enum AttemptError {
    /// Reported on the claim as `ProvisioningFailed`; upstream's state says what follows.
    Failed(ProvisionError),
    /// The driver called the request infeasible: the same, held for longer.
    Infeasible(ProvisionError),
    /// The data source could not be used: a snapshot that is not ready yet may be waited for.
    Source(DataSource, ProvisionError),
    /// Writing the claim failed: retried with the claim's backoff, without an event.
    ClaimWrite(ClaimError),
}

impl From<ProvisionError> for AttemptError {
    fn from(err: ProvisionError) -> Self {
        AttemptError::Failed(err)
    }
}

/// One provisioning attempt.
struct Attempt {
    /// The claim as the attempt last wrote it (with our finalizer, once added).
    claim: PersistentVolumeClaim,
    uid: String,
    started: Instant,
    /// A restore counts as running until the attempt ends (see `restorers.rs`).
    restoring: Option<restorers::Attempt>,
}

impl ClaimsController {
    pub(super) async fn provision(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
    ) -> Result<(), SyncError> {
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        if let Some(hold) = self.records.hold(&uid)
            && let Some(wait) = retry::wait(&hold, Instant::now(), class.metadata.uid.as_deref())
        {
            klog::v!(4, claim = %claim_name(claim), wait = ?wait, "Claim changed during the backoff of its last failed attempt; waiting");
            return Err(SyncError::Hold(wait));
        }
        let started = self.records.attempt_started(&uid);
        let reference = provisioning::pv::claim_reference(claim);
        // A progress event: when its outcome comes before it is sent, only the outcome is.
        self.ctx.recorder.progress(
            &reference,
            EventType::Normal,
            names::EVENT_PROVISIONING,
            names::provisioning_started_message(
                reference.namespace.as_deref().unwrap_or_default(),
                reference.name.as_deref().unwrap_or_default(),
            ),
        );
        self.warn_deprecated_parameters(class);
        let mut attempt = Attempt {
            claim: claim.clone(),
            uid,
            started,
            restoring: None,
        };
        match self.attempt(&mut attempt, class).await {
            Ok(Some(pv)) => self.save_pv(&attempt.claim, pv, started).await,
            Ok(None) => Ok(()),
            Err(err) => self.attempt_failed(&attempt, class, err).await,
        }
    }

    /// The one place a failed attempt is reported, held and retried.
    async fn attempt_failed(
        &self,
        attempt: &Attempt,
        class: &StorageClass,
        err: AttemptError,
    ) -> Result<(), SyncError> {
        let claim = &attempt.claim;
        match err {
            AttemptError::Failed(err) => self.fail(claim, class, err, false).await,
            AttemptError::Infeasible(err) => self.fail(claim, class, err, true).await,
            AttemptError::Source(source, err) => {
                let failed = self.fail(claim, class, err, false).await;
                match (
                    failed,
                    self.restore_hold(&attempt.uid, &source, attempt.started),
                ) {
                    (Err(SyncError::Hold(_)), Some(wait)) => {
                        let hold = retry::snapshot_wait(wait);
                        self.records.set_hold(&attempt.uid, Some(hold));
                        Err(SyncError::Hold(wait))
                    }
                    (failed, _) => failed,
                }
            }
            AttemptError::ClaimWrite(err) => Err(err.into()),
        }
    }

    /// The attempt up to the PV to save (`None`: nothing to save, and nothing failed).
    async fn attempt(
        &self,
        a: &mut Attempt,
        class: &StorageClass,
    ) -> Result<Option<PersistentVolume>, AttemptError> {
        let Some(plan) = self.plan(&a.claim, &a.uid, class).await? else {
            return Ok(None);
        };
        if self.name_taken(&a.claim) {
            // The driver would hand us the other claim's volume: never ask.
            self.entries.forget(&a.uid, Leaving::NoVolume);
            self.records
                .set_volume_state(&a.uid, VolumeState::Collision, None);
            return Err(ProvisionError::name_collision(&plan.volume_name).into());
        }
        // A snapshot or claim to fill the volume from: checked, and protected from deletion
        // while the driver copies it.
        let content_source = match &plan.data_source {
            Some(source) => {
                a.restoring = Some(self.snapshots.attempt(&a.uid));
                let checked = self.content_source(&a.claim, class, source, true).await;
                Some(checked.map_err(|err| AttemptError::Source(source.clone(), err))?)
            }
            None => None,
        };
        let (secret_data, mutable) = self.request_inputs(&plan).await?;
        let request = plan.create_volume_request(&a.claim, secret_data, mutable, content_source)?;
        // Recorded before the finalizer or the entry goes on: a claim that held one already may
        // have a volume from an earlier process (unless it was created after this one started).
        let finalizer = provisioning::lifecycle::has_finalizer(&a.claim);
        let holds = finalizer || self.entries.holds(&a.uid);
        let before = self
            .records
            .volume_state_recorded(&a.uid, self.earlier_attempt_possible(&a.claim, holds));
        let mut hold = self
            .reserve(&a.claim, &class_name(class), plan.requested_bytes, &before)
            .await?;
        let selected = provisioning::claim::selected_node(&a.claim);
        let reschedule = may_reschedule(self.supports_topology(), selected);
        // From here a volume may exist: the claim must not disappear without us knowing. A
        // claim that holds our finalizer from an earlier version keeps it until it settles.
        if self.entries.enabled() && !finalizer {
            self.record_entry(&a.claim, class, &plan, &request).await?;
        } else {
            match self.protect_claim(&a.claim).await? {
                Some(claim) => a.claim = claim,
                None => return Ok(None),
            }
        }
        let client = self
            .ctx
            .driver
            .client
            .migrated(plan.migrated_from.is_some());
        if let Some(hold) = hold.as_mut() {
            // A call cut short may still make the volume.
            hold.may_exist(true);
        }
        let called = client.create_volume(request.clone()).await;
        // The call ended. A volume it may have made keeps the reservation until GetCapacity
        // shows it; a final error ends it now, whatever GetCapacity does.
        if let Some(mut hold) = hold {
            let code = called.as_ref().err().map(|s| s.code());
            hold.may_exist(volume_may_exist(&before, code, reschedule));
        }
        let (result, volume) = call_result(called, reschedule);
        self.record_call(&a.uid, &before, &result, request.clone());
        let volume = volume.map_err(|(err, infeasible)| {
            // The driver's final answer (or a reschedule) ends this placement: the next
            // attempt computes a new one. Other failures keep it, as upstream's pvcNodeStore.
            if matches!(
                err.state,
                ProvisioningState::Finished | ProvisioningState::Reschedule
            ) {
                self.records.forget_topology(&a.uid);
            }
            match infeasible {
                true => AttemptError::Infeasible(err),
                false => AttemptError::Failed(err),
            }
        })?;
        let pv = self
            .build_pv(a, class, &plan, &volume, &before, &request)
            .await?;
        // The snapshot has done its job: our finalizer comes off on the background lane, whose
        // write normally waits behind this PV's (nothing orders them strictly, nor does
        // upstream), unless another of our attempts still restores from it.
        if provisioning::data_source::restored_snapshot(&a.claim).is_some() {
            if let Some(restoring) = a.restoring.as_mut() {
                restoring.succeeded();
            }
            let (this, claim) = (self.clone(), a.claim.clone());
            let ours = self.records.with(&a.uid, |r| r.protected_snapshot.take());
            tokio::spawn(async move { this.release_restored_snapshot(&claim, ours).await });
        }
        Ok(Some(pv))
    }

    /// Upstream's checks over cached facts (`None`: a populator's claim, which is said on it).
    /// Retries ask the driver for the first attempt's placement (upstream #1465), even when
    /// the selected Node or CSINode is gone by now.
    async fn plan(
        &self,
        claim: &PersistentVolumeClaim,
        uid: &str,
        class: &StorageClass,
    ) -> Result<Option<ProvisionPlan>, AttemptError> {
        let selected = provisioning::claim::selected_node(claim);
        let reused = self.records.topology(uid, selected);
        match self.prepare_reusing(claim, class, reused.as_ref())? {
            Prepared::Provision(plan) => {
                if reused.is_none() {
                    let topology = plan.accessibility_requirements.clone();
                    self.records.remember_topology(uid, selected, topology);
                }
                Ok(Some(*plan))
            }
            Prepared::ExternalPopulator {
                kind,
                other_namespace,
            } => {
                // Upstream checks a cross-namespace reference before it hands the claim to a
                // populator: a refused one is said on the claim instead.
                if let Some(source_namespace) = other_namespace {
                    self.check_grant(claim, &source_namespace).await?;
                }
                klog::v!(4, claim = %claim_name(claim), reason = %provisioning::prepare::populator_reason(&kind), "Ignoring claim");
                self.ctx.populator_recorder.event(
                    &provisioning::pv::claim_reference(claim),
                    EventType::Normal,
                    names::EVENT_PROVISIONING,
                    names::POPULATOR_EVENT_MESSAGE.to_string(),
                );
                // Upstream counts an ignored claim (errStopProvision) as a failed attempt.
                let (class_label, source) = provisioning::claim::metric_labels(claim);
                self.ctx.metrics.provision_failed(class_label, source);
                Ok(None)
            }
        }
    }

    /// Our finalizer on the claim (`None`: the claim is gone).
    async fn protect_claim(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Result<Option<PersistentVolumeClaim>, AttemptError> {
        update::add_finalizer(&self.ctx.client, &self.ctx.caches.claims, claim)
            .await
            .map_err(|source| match crate::api_error::refused(&source) {
                // Nothing else writes the claim for it: say on the claim what stops provisioning.
                true => AttemptError::Failed(ProvisionError::no_change(format!(
                    "cannot add the finalizer {} before creating the volume: {}; let this \
                     provisioner update the claim's finalizers (its RBAC, an admission webhook or \
                     policy)",
                    names::CREATING_VOLUME_FINALIZER,
                    crate::api_error::message(&source)
                ))),
                false => AttemptError::ClaimWrite(ClaimError::ClaimWrite {
                    claim: claim_name(claim),
                    what: "add the finalizer to",
                    source,
                }),
            })
    }

    /// Our write-ahead entry for the claim, instead of the finalizer; returns once a write of
    /// the record carries it. Without it CreateVolume is never sent.
    async fn record_entry(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
        plan: &ProvisionPlan,
        request: &CreateVolumeRequest,
    ) -> Result<(), AttemptError> {
        let id = provisioning::record::ClaimId {
            namespace: claim.metadata.namespace.as_deref().unwrap_or_default(),
            name: claim.metadata.name.as_deref().unwrap_or_default(),
            uid: claim.metadata.uid.as_deref().unwrap_or_default(),
        };
        let node = self.ctx.node.as_ref().map(|n| n.name.as_str());
        let secret = plan.secrets.provisioner.as_ref();
        let entry = provisioning::record::Entry::new(id, &class_name(class), node, request, secret);
        self.entries.record(entry).await.map_err(|source| match source {
            // Said on the claim: nothing else will tell the user what stops provisioning.
            RecordWriteError::Refused { .. } => AttemptError::Failed(ProvisionError::no_change(
                format!(
                    "{source}; it is written before the volume is created, so that a volume is never \
                     lost. Let this provisioner get, create and update Leases in its namespace (its \
                     RBAC, an admission webhook or policy)"
                ),
            )),
            RecordWriteError::NotOwner { .. } => AttemptError::Failed(ProvisionError::no_change(
                format!(
                    "{source}: another instance of this driver's provisioner runs; only one may \
                     provision (run the replicas with --leader-election)"
                ),
            )),
            RecordWriteError::Withdrawn { .. } | RecordWriteError::Stopped => {
                AttemptError::ClaimWrite(ClaimError::Record {
                    claim: claim_name(claim),
                    source,
                })
            }
        })
    }

    /// The one place a CreateVolume call's outcome is recorded: the volume state it leaves,
    /// with the request a clean-up would repeat. Once nothing of ours can exist under the
    /// claim's name, its write-ahead entry goes.
    fn record_call(
        &self,
        uid: &str,
        before: &VolumeState,
        result: &CallResult,
        request: CreateVolumeRequest,
    ) {
        let kept = replaces_probe_request(before, result).then_some(request);
        let after = after_call(before, result);
        if provisioning::record::may_leave(&after, false) {
            self.entries.forget(uid, Leaving::NoVolume);
        }
        self.records.set_volume_state(uid, after, kept);
    }

    /// The PV of a created volume. A volume no PV can be made for (too small, empty where data
    /// was asked for, a migrated one that cannot be translated) is deleted again.
    async fn build_pv(
        &self,
        a: &Attempt,
        class: &StorageClass,
        plan: &ProvisionPlan,
        volume: &Volume,
        before: &VolumeState,
        request: &CreateVolumeRequest,
    ) -> Result<PersistentVolume, AttemptError> {
        let id = &volume.volume_id;
        let capacity = match capacity_decision(plan.requested_bytes, volume.capacity_bytes) {
            CapacityDecision::TooSmall { got, want } => {
                // Upstream deletes the volume and retries in the background.
                let mut message = too_small_message(got, want);
                if !self.discard(a, before, id, request).await {
                    message.push_str(&cleanup_later(id));
                }
                return Err(ProvisionError::background(message).into());
            }
            decision => decision
                .bytes(plan.requested_bytes)
                .unwrap_or(plan.requested_bytes),
        };
        let cross_namespace = self.provisioner_config().cross_namespace_data_sources;
        if missing_content_source(&a.claim, volume, cross_namespace) {
            // The driver made an empty volume where data was asked for: it goes again.
            let mut message = "volume content source missing".to_string();
            if !self.discard(a, before, id, request).await {
                message.push_str(&cleanup_later(id));
            }
            return Err(ProvisionError::background(message).into());
        }
        let ctx = &self.ctx;
        let pv = build_persistent_volume(&PersistentVolumeInputs {
            volume_name: &plan.volume_name,
            claim: &a.claim,
            class,
            driver_name: &ctx.driver.name,
            provisioner_identity: &ctx.identity,
            volume,
            capacity_bytes: capacity,
            fs_type: &plan.fs_type,
            capabilities: &plan.capabilities,
            controller_publish_read_only: self.config.controller_publish_read_only,
            secrets: &plan.secrets,
            supports_topology: self.supports_topology(),
            volume_attributes_class_enabled: self.vac_enabled(),
        });
        // Capacity changed when the driver created the volume, not when the PV object lands:
        // refresh now, without waiting for the PV write's turn in the API budget.
        if let Some(capacity) = &ctx.capacity {
            capacity.refresh(Refresh::Volume {
                class: &class_name(class),
                affinity: pv.spec.as_ref().and_then(|s| s.node_affinity.as_ref()),
            });
        }
        if plan.migrated_from.is_none() {
            return Ok(pv);
        }
        match provisioning::migration::csi_pv_to_in_tree(&pv) {
            Ok(pv) => Ok(pv),
            Err(e) => {
                // No PV can be written for it: the volume goes again. Upstream keeps it and
                // retries CreateVolume, which finds the same volume and fails the same way.
                self.discard(a, before, id, request).await;
                Err(ProvisionError::finished(format!(
                    "failed to translate CSI PV to in-tree due to: {e}. Deleting provisioned PV"
                ))
                .into())
            }
        }
    }

    /// Deletes a created volume that is not kept; whether it is gone (else the next
    /// CreateVolume under the same name finds it again).
    async fn discard(
        &self,
        a: &Attempt,
        before: &VolumeState,
        volume_id: &str,
        request: &CreateVolumeRequest,
    ) -> bool {
        let deleted = self.delete_unkept(&a.uid, volume_id, request).await;
        if deleted {
            self.record_call(&a.uid, before, &CallResult::Final, request.clone());
        }
        deleted
    }

    /// Best-effort DeleteVolume for a volume we will not keep (too small, or a migrated one
    /// whose PV cannot be written); whether it is gone.
    pub(super) async fn delete_unkept(
        &self,
        uid: &str,
        volume_id: &str,
        request: &csi::v1::CreateVolumeRequest,
    ) -> bool {
        match self
            .delete_own_volume(uid, volume_id, request.secrets.clone())
            .await
        {
            Ok(deleted) => deleted,
            Err(status) => {
                tracing::error!(volume = %volume_id, err = %csi::status::go_error_string(&status), "Failed to delete a volume that is not kept; retrying CreateVolume will find it again");
                false
            }
        }
    }

    /// Upstream's deprecation warnings for the class's parameters, logged once per class.
    pub(super) fn warn_deprecated_parameters(&self, class: &StorageClass) {
        let key = class
            .metadata
            .uid
            .clone()
            .unwrap_or_else(|| class_name(class));
        if !self.warned_classes.lock().insert(key) {
            return;
        }
        let params = class.parameters.clone().unwrap_or_default();
        for warning in provisioning::parameters::deprecation_warnings(&params) {
            tracing::warn!(class = %class_name(class), "{warning}");
        }
    }
}

/// What a CreateVolume answer means: how the call ended, and the volume or the error to
/// report (`true`: infeasible). An id is what every later call names the volume by: a volume
/// without one is not a volume, and asking again under the same name gets it.
fn call_result(
    called: Result<CreateVolumeResponse, tonic::Status>,
    reschedule: bool,
) -> (CallResult, Result<Volume, (ProvisionError, bool)>) {
    let broken = |what| {
        let message = format!("CreateVolume returned {what}; the driver is broken");
        (
            CallResult::InProgress,
            Err((ProvisionError::background(message), false)),
        )
    };
    match called.map(|r| r.volume) {
        Ok(Some(v)) if v.volume_id.is_empty() => broken("a volume with an empty volume_id"),
        Ok(Some(v)) => (CallResult::Created(v.volume_id.clone()), Ok(v)),
        Ok(None) => broken("no volume"),
        Err(status) => {
            let state = classify_create_volume_error(status.code(), reschedule);
            let mut message = csi::status::go_error_string(&status);
            let infeasible = is_infeasible(status.code());
            if infeasible {
                message = names::infeasible_message(&message);
            }
            let err = ProvisionError { state, message };
            (failed_call(status.code(), state), Err((err, infeasible)))
        }
    }
}

/// Whether a CreateVolume that ended with `error` (`None`: it returned) may have left a
/// volume of the claim in the backend, `before` being what may have existed before it.
fn volume_may_exist(before: &VolumeState, error: Option<tonic::Code>, reschedule: bool) -> bool {
    let Some(code) = error else {
        return true;
    };
    let state = classify_create_volume_error(code, reschedule);
    !provisioning::attempt::may_release(&after_call(before, &failed_call(code, state)))
}

/// What a failed clean-up of an unwanted volume adds to the event: upstream says the volume is
/// orphaned; ours is found again by the next CreateVolume under the same name, and deleted then.
fn cleanup_later(volume: &str) -> String {
    format!(". cleanup of volume {volume} failed, it is deleted on the next attempt")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    /// Only an answer that shows nothing was made (and nothing before it) ends a reservation
    /// at once; a returned volume or an unfinished call waits for a reading.
    #[test]
    fn which_calls_may_have_left_a_volume() {
        let none = VolumeState::None;
        let may = VolumeState::MayExist;
        let cases = [
            (&none, None, true, true),
            (&none, Some(Code::ResourceExhausted), true, false),
            (&none, Some(Code::InvalidArgument), true, false),
            (&none, Some(Code::InvalidArgument), false, false),
            (&none, Some(Code::DeadlineExceeded), true, true),
            (&none, Some(Code::Unavailable), true, true),
            (&may, Some(Code::ResourceExhausted), true, true),
        ];
        for (before, error, reschedule, want) in cases {
            assert_eq!(
                volume_may_exist(before, error, reschedule),
                want,
                "{before:?} {error:?}"
            );
        }
    }
}
