//! Provisioning one claim: prepare → secrets → finalizer → CreateVolume → PV → release.

use std::collections::BTreeMap;
use std::time::Instant;

use controller_kit::events::EventType;
use csi::v1::TopologyRequirement;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{StorageClass, VolumeAttributesClass};
use kube::Api;
use kube::api::PostParams;
use provisioning::attempt::{CallResult, VolumeState, after_call, after_failure, failed_call};
use provisioning::errors::{
    ProvisionError, ProvisioningState, classify_create_volume_error, is_infeasible, may_reschedule,
};
use provisioning::lifecycle::has_finalizer;
use provisioning::names;
use provisioning::prepare::{
    PrepareInputs, Prepared, ProvisionPlan, TopologyFacts, check_volume_attributes_class,
    secret_fetch_error,
};
use provisioning::pv::{
    CapacityDecision, PersistentVolumeInputs, build_persistent_volume, capacity_decision,
    too_small_message,
};
use provisioning::retry;

use super::cleanup::claim_name;
use super::facts::TopologySnapshot;
use super::{ClaimError, ClaimKey, ClaimsController, SyncError, update};
use crate::secrets;

impl ClaimsController {
    /// Runs upstream's `prepareProvision` over cached facts. `with_topology` is false when the
    /// requirement cannot be rebuilt (a clean-up after a restart whose node is gone).
    pub(super) fn prepare(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
        with_topology: bool,
    ) -> Result<Prepared, ProvisionError> {
        self.prepare_with(claim, class, with_topology, None)
    }

    /// [`prepare`](Self::prepare) with the requirement an earlier attempt computed, if any:
    /// then no topology facts are gathered at all.
    pub(super) fn prepare_reusing(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
        reused: Option<&Option<TopologyRequirement>>,
    ) -> Result<Prepared, ProvisionError> {
        self.prepare_with(claim, class, reused.is_none(), reused)
    }

    fn prepare_with(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
        with_topology: bool,
        reused_topology: Option<&Option<TopologyRequirement>>,
    ) -> Result<Prepared, ProvisionError> {
        let ctx = &self.ctx;
        let driver = ctx.driver.name.as_str();
        let config = self.provisioner_config();
        let snapshot = (with_topology && ctx.supports_topology()).then(|| {
            TopologySnapshot::take(
                &ctx.caches,
                driver,
                provisioning::claim::selected_node(claim),
            )
        });
        let csi_keys = snapshot
            .as_ref()
            .map(|s| s.csi_node_keys(driver))
            .unwrap_or_default();
        let node_labels = snapshot
            .as_ref()
            .map(|s| s.node_labels())
            .unwrap_or_default();
        let topology = snapshot.as_ref().map(|s| TopologyFacts {
            strict_topology: ctx.opts.strict_topology,
            immediate_topology: ctx.opts.immediate_topology,
            selected_node_topology_keys: s.selected_keys.as_deref(),
            selected_node_labels: s.selected_labels.as_ref(),
            csi_node_topology_keys: &csi_keys,
            node_labels: &node_labels,
            random_hash: rand::random(),
        });
        provisioning::prepare::prepare(&PrepareInputs {
            claim,
            class: Some(class),
            config: &config,
            capabilities: ctx.driver.capabilities,
            topology,
            reused_topology: reused_topology.filter(|_| ctx.supports_topology()),
        })
    }

    /// The provisioner secret's data and the VolumeAttributesClass parameters of a plan.
    pub(super) async fn request_inputs(
        &self,
        plan: &ProvisionPlan,
    ) -> Result<(BTreeMap<String, String>, BTreeMap<String, String>), ProvisionError> {
        let client = &self.ctx.client;
        let secret_data = match &plan.secrets.provisioner {
            Some(secret) => secrets::fetch(client, secret)
                .await
                .map_err(|e| secret_fetch_error(secret, &e))?,
            None => BTreeMap::new(),
        };
        let mutable = match &plan.volume_attributes_class {
            Some(name) => {
                let vac = Api::<VolumeAttributesClass>::all(client.clone())
                    .get(name)
                    .await
                    .map_err(|e| ProvisionError::no_change(e.to_string()))?;
                check_volume_attributes_class(name, &vac.driver_name, &self.ctx.driver.name)?;
                vac.parameters.unwrap_or_default()
            }
            None => BTreeMap::new(),
        };
        Ok((secret_data, mutable))
    }

    pub(super) async fn provision(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
    ) -> Result<(), SyncError> {
        let ctx = &self.ctx;
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        if let Some(hold) = self.memory.hold(&uid)
            && let Some(wait) = retry::wait(&hold, Instant::now(), class.metadata.uid.as_deref())
        {
            klog::v!(4, claim = %claim_name(claim), wait = ?wait, "Claim changed during the backoff of its last failed attempt; waiting");
            return Err(SyncError::Hold(wait));
        }
        let started = self.memory.started(&uid);
        let reference = provisioning::pv::claim_reference(claim);
        let (namespace, name) = (
            reference.namespace.clone().unwrap_or_default(),
            reference.name.clone().unwrap_or_default(),
        );
        ctx.recorder.event(
            &reference,
            EventType::Normal,
            names::EVENT_PROVISIONING,
            names::provisioning_started_message(&namespace, &name),
        );
        self.warn_deprecated_parameters(class);

        let selected = provisioning::claim::selected_node(claim);
        // Retries ask the driver for the first attempt's placement (upstream #1465), even when
        // the selected Node or CSINode is gone by now.
        let reused = self.memory.topology(&uid, selected);
        let plan = match self.prepare_reusing(claim, class, reused.as_ref()) {
            Ok(Prepared::Provision(plan)) => plan,
            Ok(Prepared::ExternalPopulator { kind }) => {
                klog::v!(4, claim = %format!("{namespace}/{name}"), reason = %provisioning::prepare::populator_reason(&kind), "Ignoring claim");
                ctx.populator_recorder.event(
                    &reference,
                    EventType::Normal,
                    names::EVENT_PROVISIONING,
                    names::POPULATOR_EVENT_MESSAGE.to_string(),
                );
                return Ok(());
            }
            Err(err) => return self.fail(claim, class, err, false).await,
        };
        if reused.is_none() {
            self.memory
                .remember_topology(&uid, selected, plan.accessibility_requirements.clone());
        }
        if self.name_taken(claim) {
            // The driver would hand us the other claim's volume: never ask.
            self.memory
                .set_volume_state(&uid, VolumeState::Collision, None);
            return self
                .fail(claim, class, collision_error(&plan.volume_name), false)
                .await;
        }
        let (secret_data, mutable) = match self.request_inputs(&plan).await {
            Ok(inputs) => inputs,
            Err(err) => return self.fail(claim, class, err, false).await,
        };
        let request = match plan.create_volume_request(claim, secret_data, mutable) {
            Ok(r) => r,
            Err(err) => return self.fail(claim, class, err, false).await,
        };

        // Recorded before the finalizer goes on: a claim that held it already may have a
        // volume from an earlier process.
        let before = self
            .memory
            .volume_state_recorded(&uid, has_finalizer(claim));
        // From here a volume may exist: the claim must not disappear without us knowing.
        let claim = match update::add_finalizer(&ctx.client, &ctx.caches.claims, claim).await {
            Ok(Some(c)) => c,
            Ok(None) => return Ok(()),
            Err(source) => {
                return Err(ClaimError::ClaimWrite {
                    claim: format!("{namespace}/{name}"),
                    what: "add the finalizer to",
                    source,
                }
                .into());
            }
        };
        let volume = match ctx.driver.client.create_volume(request.clone()).await {
            Ok(resp) => match resp.volume {
                Some(v) => v,
                None => {
                    let state = after_call(&before, &CallResult::InProgress);
                    self.memory.set_volume_state(&uid, state, Some(request));
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
                let after = after_call(&before, &failed_call(status.code(), state));
                self.memory.set_volume_state(&uid, after, Some(request));
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
        self.memory.set_volume_state(
            &uid,
            VolumeState::Created(volume.volume_id.clone()),
            Some(request.clone()),
        );

        let capacity = match capacity_decision(plan.requested_bytes, volume.capacity_bytes) {
            CapacityDecision::TooSmall { got, want } => {
                // Upstream deletes the volume and retries in the background.
                if self
                    .delete_too_small(&uid, &volume.volume_id, &request)
                    .await
                {
                    let state = after_call(&before, &CallResult::Final);
                    self.memory.set_volume_state(&uid, state, Some(request));
                }
                let err = ProvisionError::background(too_small_message(got, want));
                return self.fail(&claim, class, err, false).await;
            }
            decision => decision
                .bytes(plan.requested_bytes)
                .unwrap_or(plan.requested_bytes),
        };
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
            capacity.volume_changed(
                &class_name(class),
                pv.spec.as_ref().and_then(|s| s.node_affinity.as_ref()),
            );
        }
        self.save_pv(&claim, pv, started).await
    }

    /// Saves a PV whose first save failed. It is retried whatever happened to the StorageClass
    /// since: the volume exists, and only the PV can own it (upstream's unsaved-PV queue).
    pub(super) async fn save_unsaved_pv(
        &self,
        claim: &PersistentVolumeClaim,
        pv: PersistentVolume,
    ) -> Result<(), SyncError> {
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        let started = self.memory.started(&uid);
        self.save_pv(claim, pv, started).await
    }

    /// Creates the PV. An existing PV bound to this claim counts as success (a retry after a
    /// lost response); one bound elsewhere is a name collision: a final error, and the volume
    /// (the other claim's) is never deleted. Any other failure keeps the PV for the next sync.
    async fn save_pv(
        &self,
        claim: &PersistentVolumeClaim,
        pv: PersistentVolume,
        started: Instant,
    ) -> Result<(), SyncError> {
        let ctx = &self.ctx;
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        let class = provisioning::claim::class_name(claim)
            .unwrap_or_default()
            .to_string();
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
                    let ours = existing
                        .spec
                        .as_ref()
                        .and_then(|s| s.claim_ref.as_ref())
                        .and_then(|r| r.uid.as_deref())
                        == Some(uid.as_str());
                    ctx.caches.volumes.created(existing);
                    ours
                })
                .map_err(|e| format!("cannot read the existing PV: {e}")),
            Err(e) => Err(e.to_string()),
        };
        match saved {
            Ok(true) => {}
            Ok(false) => {
                self.memory
                    .set_volume_state(&uid, VolumeState::Collision, None);
                let failed = Failed {
                    class: &class,
                    class_uid: None,
                    infeasible: false,
                };
                return self.fail_named(claim, failed, collision_error(&name)).await;
            }
            Err(message) => {
                tracing::error!(pv = %name, err = %message, "Failed to save PersistentVolume; will retry");
                self.memory.keep_unsaved_pv(&uid, pv);
                return Err(ClaimError::SavePv {
                    claim: claim_name(claim),
                    pv: name,
                    message,
                }
                .into());
            }
        }
        self.memory.forget(&uid);
        let reference = provisioning::pv::claim_reference(claim);
        ctx.recorder.event(
            &reference,
            EventType::Normal,
            names::EVENT_PROVISIONING_SUCCEEDED,
            names::provisioning_succeeded_message(&name),
        );
        ctx.metrics
            .provision_succeeded(&class, "", started.elapsed().as_secs_f64());
        klog::v!(2, claim = %claim_name(claim), pv = %name, "Provisioned volume");
        // The finalizer is released when the binder's write of the claim brings it back here.
        Ok(())
    }

    /// Reports a failed attempt as upstream does, reschedules when asked, and holds the next
    /// attempt for the claim's backoff (longer for an `infeasible` request).
    pub(super) async fn fail(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
        err: ProvisionError,
        infeasible: bool,
    ) -> Result<(), SyncError> {
        let failed = Failed {
            class: &class_name(class),
            class_uid: class.metadata.uid.as_deref(),
            infeasible,
        };
        self.fail_named(claim, failed, err).await
    }

    async fn fail_named(
        &self,
        claim: &PersistentVolumeClaim,
        failed: Failed<'_>,
        err: ProvisionError,
    ) -> Result<(), SyncError> {
        let ctx = &self.ctx;
        let class = failed.class;
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        let reference = provisioning::pv::claim_reference(claim);
        ctx.recorder.event(
            &reference,
            EventType::Warning,
            names::EVENT_PROVISIONING_FAILED,
            err.message.clone(),
        );
        ctx.metrics.provision_failed(class, "");
        if err.state != ProvisioningState::NoChange
            && let Some(capacity) = &ctx.capacity
        {
            capacity.class_changed(class);
        }
        if matches!(
            err.state,
            ProvisioningState::Finished | ProvisioningState::Reschedule
        ) {
            self.memory.forget_topology(&uid);
        }
        let writes = after_failure(
            err.state,
            &self.memory.volume_state(&uid, true),
            has_finalizer(claim),
            provisioning::claim::selected_node(claim).is_some(),
        );
        if writes.reschedule || writes.release {
            update::after_failure(&ctx.client, &ctx.caches.claims, claim, writes)
                .await
                .map_err(|source| ClaimError::ClaimWrite {
                    claim: claim_name(claim),
                    what: "reschedule or release",
                    source,
                })?;
        }
        if writes.reschedule {
            self.memory.set_hold(&uid, None);
            return Ok(());
        }
        let now = Instant::now();
        let hold = retry::hold_after_failure(
            now,
            self.queue.next_backoff(&ClaimKey::of(claim)),
            failed.infeasible,
            ctx.opts.retry_interval_max,
            failed.class_uid,
        );
        let wait = hold.until - now;
        self.memory.set_hold(&uid, Some(hold));
        klog::v!(2, claim = %claim_name(claim), err = %err.message, retry_in = ?wait, "Provisioning failed");
        Err(SyncError::Hold(wait))
    }

    /// Best-effort DeleteVolume for a volume we will not keep (too small); whether it is gone.
    async fn delete_too_small(
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
                tracing::error!(volume = %volume_id, err = %csi::status::go_error_string(&status), "Failed to delete the volume that was too small; retrying CreateVolume will find it again");
                false
            }
        }
    }

    /// Upstream's deprecation warnings for the class's parameters, logged once per class.
    fn warn_deprecated_parameters(&self, class: &StorageClass) {
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

/// The class a failed attempt used, for metrics and the retry hold.
struct Failed<'a> {
    class: &'a str,
    class_uid: Option<&'a str>,
    infeasible: bool,
}

fn collision_error(volume_name: &str) -> ProvisionError {
    ProvisionError::finished(format!(
        "PersistentVolume {volume_name} already exists for another claim; volume names collide \
         (is --volume-name-uuid-length too short?). The other claim's volume is left alone; \
         delete this claim or lengthen --volume-name-uuid-length"
    ))
}

pub(super) fn class_name(class: &StorageClass) -> String {
    class.metadata.name.clone().unwrap_or_default()
}
