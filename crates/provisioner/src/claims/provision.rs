//! Step 3, provision: the provisioning event, prepare, the request, our finalizer, then
//! CreateVolume; a created volume goes on to `save`, a failure to `fail`.

use std::time::Instant;

use controller_kit::events::EventType;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use provisioning::attempt::{
    CallResult, VolumeState, after_call, failed_call, replaces_probe_request,
};
use provisioning::errors::{
    ProvisionError, classify_create_volume_error, is_infeasible, may_reschedule,
};
use provisioning::names;
use provisioning::prepare::Prepared;
use provisioning::pv::{
    CapacityDecision, PersistentVolumeInputs, build_persistent_volume, capacity_decision,
    missing_content_source, too_small_message,
};
use provisioning::retry;

use super::{ClaimError, ClaimsController, SyncError, claim_name, class_name, update};
use crate::capacity_controller::Refresh;

impl ClaimsController {
    pub(super) async fn provision(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
    ) -> Result<(), SyncError> {
        let ctx = &self.ctx;
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        if let Some(hold) = self.records.hold(&uid)
            && let Some(wait) = retry::wait(&hold, Instant::now(), class.metadata.uid.as_deref())
        {
            klog::v!(4, claim = %claim_name(claim), wait = ?wait, "Claim changed during the backoff of its last failed attempt; waiting");
            return Err(SyncError::Hold(wait));
        }
        let started = self.records.attempt_started(&uid);
        let attempt_began = started;
        let reference = provisioning::pv::claim_reference(claim);
        let (namespace, name) = (
            reference.namespace.clone().unwrap_or_default(),
            reference.name.clone().unwrap_or_default(),
        );
        // A progress event: when its outcome comes before it is sent, only the outcome is.
        ctx.recorder.progress(
            &reference,
            EventType::Normal,
            names::EVENT_PROVISIONING,
            names::provisioning_started_message(&namespace, &name),
        );
        self.warn_deprecated_parameters(class);

        let selected = provisioning::claim::selected_node(claim);
        // Retries ask the driver for the first attempt's placement (upstream #1465), even when
        // the selected Node or CSINode is gone by now.
        let reused = self.records.topology(&uid, selected);
        let plan = match self.prepare_reusing(claim, class, reused.as_ref()) {
            Ok(Prepared::Provision(plan)) => plan,
            Ok(Prepared::ExternalPopulator {
                kind,
                other_namespace,
            }) => {
                // Upstream checks a cross-namespace reference before it hands the claim to a
                // populator: a refused one is said on the claim instead.
                if let Some(source_namespace) = other_namespace
                    && let Err(err) = self.check_grant(claim, &source_namespace).await
                {
                    return self.fail(claim, class, err, false).await;
                }
                klog::v!(4, claim = %format!("{namespace}/{name}"), reason = %provisioning::prepare::populator_reason(&kind), "Ignoring claim");
                ctx.populator_recorder.event(
                    &reference,
                    EventType::Normal,
                    names::EVENT_PROVISIONING,
                    names::POPULATOR_EVENT_MESSAGE.to_string(),
                );
                // Upstream counts an ignored claim (errStopProvision) as a failed attempt.
                let (class_label, source) = provisioning::claim::metric_labels(claim);
                ctx.metrics.provision_failed(class_label, source);
                return Ok(());
            }
            Err(err) => return self.fail(claim, class, err, false).await,
        };
        if reused.is_none() {
            self.records
                .remember_topology(&uid, selected, plan.accessibility_requirements.clone());
        }
        if self.name_taken(claim) {
            // The driver would hand us the other claim's volume: never ask.
            self.records
                .set_volume_state(&uid, VolumeState::Collision, None);
            return self
                .fail(
                    claim,
                    class,
                    ProvisionError::name_collision(&plan.volume_name),
                    false,
                )
                .await;
        }
        // A snapshot or claim to fill the volume from: checked, and protected from deletion
        // while the driver copies it. The restore counts as running until this attempt ends.
        let mut restoring = plan
            .data_source
            .as_ref()
            .map(|_| self.snapshots.uses.attempt(&uid));
        let content_source = match &plan.data_source {
            Some(source) => match self.content_source(claim, class, source, true).await {
                Ok(cs) => Some(cs),
                Err(err) => {
                    let failed = self.fail(claim, class, err, false).await;
                    return match (failed, self.restore_hold(&uid, source, attempt_began)) {
                        (Err(SyncError::Hold(_)), Some(wait)) => {
                            self.records
                                .set_hold(&uid, Some(retry::snapshot_wait(wait)));
                            Err(SyncError::Hold(wait))
                        }
                        (failed, _) => failed,
                    };
                }
            },
            None => None,
        };
        let (secret_data, mutable) = match self.request_inputs(&plan).await {
            Ok(inputs) => inputs,
            Err(err) => return self.fail(claim, class, err, false).await,
        };
        let request = match plan.create_volume_request(claim, secret_data, mutable, content_source)
        {
            Ok(r) => r,
            Err(err) => return self.fail(claim, class, err, false).await,
        };

        // Recorded before the finalizer goes on: a claim that held it already may have a
        // volume from an earlier process (unless it was created after this one started).
        let before = self
            .records
            .volume_state_recorded(&uid, self.earlier_attempt_possible(claim));
        let hold = match self
            .reserve(claim, &class_name(class), plan.requested_bytes, &before)
            .await
        {
            Ok(hold) => hold,
            Err(err) => return self.fail(claim, class, err, false).await,
        };
        // From here a volume may exist: the claim must not disappear without us knowing.
        let claim = match update::add_finalizer(&ctx.client, &ctx.caches.claims, claim).await {
            Ok(Some(c)) => c,
            Ok(None) => return Ok(()),
            // Nothing else writes the claim for it: say on the claim what stops provisioning.
            Err(source) if crate::api_error::refused(&source) => {
                let err = ProvisionError::no_change(format!(
                    "cannot add the finalizer {} before creating the volume: {}; let this \
                     provisioner update the claim's finalizers (its RBAC, an admission webhook or \
                     policy)",
                    provisioning::names::CREATING_VOLUME_FINALIZER,
                    crate::api_error::message(&source)
                ));
                return self.fail(claim, class, err, false).await;
            }
            Err(source) => {
                return Err(ClaimError::ClaimWrite {
                    claim: format!("{namespace}/{name}"),
                    what: "add the finalizer to",
                    source,
                }
                .into());
            }
        };
        let client = ctx.driver.client.migrated(plan.migrated_from.is_some());
        let mut hold = hold;
        if let Some(hold) = hold.as_mut() {
            // A call cut short may still make the volume.
            hold.may_exist(true);
        }
        let called = client.create_volume(request.clone()).await;
        // The call ended. A volume it may have made keeps the reservation until GetCapacity
        // shows it; a final error ends it now, whatever GetCapacity does.
        if let Some(mut hold) = hold {
            hold.may_exist(volume_may_exist(
                &before,
                called.as_ref().err().map(|s| s.code()),
                may_reschedule(ctx.supports_topology(), selected),
            ));
        }
        let volume = match called {
            Ok(resp) => match resp.volume {
                // An id is what every later call names the volume by: without one there is
                // nothing to record or delete; asking again under the same name gets it.
                Some(v) if v.volume_id.is_empty() => {
                    let state = after_call(&before, &CallResult::InProgress);
                    self.records.set_volume_state(&uid, state, Some(request));
                    let err = ProvisionError::background(
                        "CreateVolume returned a volume with an empty volume_id; the driver is broken",
                    );
                    return self.fail(&claim, class, err, false).await;
                }
                Some(v) => v,
                None => {
                    let state = after_call(&before, &CallResult::InProgress);
                    self.records.set_volume_state(&uid, state, Some(request));
                    let err = ProvisionError::background(
                        "CreateVolume returned no volume; the driver is broken",
                    );
                    return self.fail(&claim, class, err, false).await;
                }
            },
            Err(status) => {
                let state = classify_create_volume_error(
                    status.code(),
                    may_reschedule(ctx.supports_topology(), selected),
                );
                // The driver's final answer (or a reschedule) ends this placement: the next
                // attempt computes a new one. Other failures keep it, as upstream's pvcNodeStore.
                if matches!(
                    state,
                    provisioning::errors::ProvisioningState::Finished
                        | provisioning::errors::ProvisioningState::Reschedule
                ) {
                    self.records.forget_topology(&uid);
                }
                let result = failed_call(status.code(), state);
                let after = after_call(&before, &result);
                let kept = replaces_probe_request(&before, &result).then_some(request);
                self.records.set_volume_state(&uid, after, kept);
                let mut message = csi::status::go_error_string(&status);
                let infeasible = is_infeasible(status.code());
                if infeasible {
                    message = names::infeasible_message(&message);
                }
                return self
                    .fail(&claim, class, ProvisionError { state, message }, infeasible)
                    .await;
            }
        };
        self.records.set_volume_state(
            &uid,
            VolumeState::Created(volume.volume_id.clone()),
            Some(request.clone()),
        );

        let capacity = match capacity_decision(plan.requested_bytes, volume.capacity_bytes) {
            CapacityDecision::TooSmall { got, want } => {
                // Upstream deletes the volume and retries in the background.
                let mut message = too_small_message(got, want);
                if self.delete_unkept(&uid, &volume.volume_id, &request).await {
                    let state = after_call(&before, &CallResult::Final);
                    self.records.set_volume_state(&uid, state, Some(request));
                } else {
                    message.push_str(&cleanup_later(&volume.volume_id));
                }
                let err = ProvisionError::background(message);
                return self.fail(&claim, class, err, false).await;
            }
            decision => decision
                .bytes(plan.requested_bytes)
                .unwrap_or(plan.requested_bytes),
        };
        if missing_content_source(
            &claim,
            &volume,
            self.provisioner_config().cross_namespace_data_sources,
        ) {
            // The driver made an empty volume where data was asked for: it goes again.
            let deleted = self.delete_unkept(&uid, &volume.volume_id, &request).await;
            let mut message = "volume content source missing".to_string();
            if deleted {
                let state = after_call(&before, &CallResult::Final);
                self.records.set_volume_state(&uid, state, Some(request));
            } else {
                message.push_str(&cleanup_later(&volume.volume_id));
            }
            return self
                .fail(&claim, class, ProvisionError::background(message), false)
                .await;
        }
        let pv = build_persistent_volume(&PersistentVolumeInputs {
            volume_name: &plan.volume_name,
            claim: &claim,
            class,
            driver_name: &ctx.driver.name,
            provisioner_identity: &ctx.identity,
            volume: &volume,
            capacity_bytes: capacity,
            fs_type: &plan.fs_type,
            capabilities: &plan.capabilities,
            controller_publish_read_only: ctx.opts.controller_publish_readonly,
            secrets: &plan.secrets,
            supports_topology: ctx.supports_topology(),
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
        let pv = match plan.migrated_from {
            None => pv,
            Some(_) => match provisioning::migration::csi_pv_to_in_tree(&pv) {
                Ok(pv) => pv,
                Err(e) => {
                    // No PV can be written for it: the volume goes again. Upstream keeps it and
                    // retries CreateVolume, which finds the same volume and fails the same way.
                    if self.delete_unkept(&uid, &volume.volume_id, &request).await {
                        let state = after_call(&before, &CallResult::Final);
                        self.records.set_volume_state(&uid, state, Some(request));
                    }
                    let err = ProvisionError::finished(format!(
                        "failed to translate CSI PV to in-tree due to: {e}. Deleting provisioned PV"
                    ));
                    return self.fail(&claim, class, err, false).await;
                }
            },
        };
        // The snapshot has done its job: our finalizer comes off on the background lane, whose
        // write normally waits behind this PV's (nothing orders them strictly, nor does
        // upstream), unless another of our attempts still restores from it.
        if provisioning::data_source::restored_snapshot(&claim).is_some() {
            if let Some(restoring) = restoring.as_mut() {
                restoring.succeeded();
            }
            let (this, claim) = (self.clone(), claim.clone());
            let ours = self.records.with(&uid, |r| r.protected_snapshot.take());
            tokio::spawn(async move { this.release_restored_snapshot(&claim, ours).await });
        }
        self.save_pv(&claim, pv, started).await
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
