//! Provisioning one claim: prepare → secrets → finalizer → CreateVolume → PV → release.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{StorageClass, VolumeAttributesClass};
use kube::Api;
use kube::api::PostParams;
use provisioning::errors::{
    ProvisionError, ProvisioningState, classify_create_volume_error, is_infeasible, may_reschedule,
};
use provisioning::names;
use provisioning::prepare::{
    PrepareInputs, Prepared, ProvisionPlan, TopologyFacts, check_volume_attributes_class,
    secret_fetch_error,
};
use provisioning::pv::{
    CapacityDecision, PersistentVolumeInputs, build_persistent_volume, capacity_decision,
    too_small_message,
};
use runtime::events::EventType;

use super::facts::TopologySnapshot;
use super::{ClaimsController, SyncError, update};
use crate::secrets;

impl ClaimsController {
    /// Runs upstream's `prepareProvision` over cached facts. `with_topology` is false for the
    /// cleanup path, which must not depend on where the volume was placed.
    pub(super) fn prepare(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
        with_topology: bool,
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

        let mut plan = match self.prepare(claim, class, true) {
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
            Err(err) => return self.fail(claim, class, err).await,
        };
        let selected = provisioning::claim::selected_node(claim);
        // Retries must ask the driver for the same placement (upstream #1465).
        match self.memory.topology(&uid, selected) {
            Some(cached) => plan.accessibility_requirements = cached,
            None => self.memory.remember_topology(
                &uid,
                selected,
                plan.accessibility_requirements.clone(),
            ),
        }
        let (secret_data, mutable) = match self.request_inputs(&plan).await {
            Ok(inputs) => inputs,
            Err(err) => return self.fail(claim, class, err).await,
        };
        let request = match plan.create_volume_request(claim, secret_data, mutable) {
            Ok(r) => r,
            Err(err) => return self.fail(claim, class, err).await,
        };

        // From here a volume may exist: the claim must not disappear without us knowing.
        let claim = match update::add_finalizer(&ctx.client, claim).await {
            Ok(Some(c)) => c,
            Ok(None) => return Ok(()),
            Err(e) => {
                return Err(SyncError::retry(format!(
                    "cannot add finalizer to claim {namespace}/{name}: {e}"
                )));
            }
        };
        let volume = match ctx.driver.client.create_volume(request).await {
            Ok(resp) => match resp.volume {
                Some(v) => v,
                None => {
                    let err = ProvisionError::background(
                        "CreateVolume returned no volume; the driver is broken",
                    );
                    return self.fail(&claim, class, err).await;
                }
            },
            Err(status) => {
                let state = classify_create_volume_error(
                    status.code(),
                    may_reschedule(ctx.supports_topology(), selected),
                );
                let mut message = csi::status::go_error_string(&status);
                if is_infeasible(status.code()) {
                    message = names::infeasible_message(&message);
                }
                let result = self
                    .fail(&claim, class, ProvisionError { state, message })
                    .await;
                return if is_infeasible(status.code()) {
                    // Upstream's slow set: an infeasible request is not retried quickly.
                    Err(SyncError::RetryAfter(ctx.opts.retry_interval_max))
                } else {
                    result
                };
            }
        };
        self.memory.volume_created(&uid, &volume.volume_id);

        let capacity = match capacity_decision(plan.requested_bytes, volume.capacity_bytes) {
            CapacityDecision::TooSmall { got, want } => {
                // Upstream deletes the volume and retries in the background.
                if self.delete_volume(&volume.volume_id, &plan).await {
                    self.memory.volume_gone(&uid);
                }
                let err = ProvisionError::background(too_small_message(got, want));
                return self.fail(&claim, class, err).await;
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
        self.save_pv(&claim, class, &pv).await?;
        self.memory.forget(&uid);
        self.memory.pv_created(&uid, &plan.volume_name);
        ctx.recorder.event(
            &reference,
            EventType::Normal,
            names::EVENT_PROVISIONING_SUCCEEDED,
            names::provisioning_succeeded_message(&plan.volume_name),
        );
        ctx.metrics
            .provision_succeeded(&class_name(class), "", started.elapsed().as_secs_f64());
        klog::v!(2, claim = %format!("{namespace}/{name}"), pv = %plan.volume_name, "Provisioned volume");
        // The finalizer is released when the binder's write of the claim brings it back here.
        Ok(())
    }

    /// Creates the PV. An existing PV bound to this claim counts as success (a retry after a
    /// lost response); one bound elsewhere is a name collision we must not paper over.
    async fn save_pv(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
        pv: &PersistentVolume,
    ) -> Result<(), SyncError> {
        let api: Api<PersistentVolume> = Api::all(self.ctx.client.clone());
        let name = pv.metadata.name.clone().unwrap_or_default();
        match api.create(&PostParams::default(), pv).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let existing = api
                    .get(&name)
                    .await
                    .map_err(|e| SyncError::retry(format!("cannot read PV {name}: {e}")))?;
                let bound_uid = existing
                    .spec
                    .as_ref()
                    .and_then(|s| s.claim_ref.as_ref())
                    .and_then(|r| r.uid.clone());
                if bound_uid == claim.metadata.uid {
                    Ok(())
                } else {
                    let err = ProvisionError::finished(format!(
                        "PersistentVolume {name} already exists for another claim; volume names collide \
                         (is --volume-name-uuid-length too short?). The volume was kept; delete the claim \
                         or fix the flag"
                    ));
                    self.fail(claim, class, err).await
                }
            }
            Err(e) => {
                tracing::error!(pv = %name, err = %e, "Failed to save PersistentVolume; will retry");
                Err(SyncError::retry(format!("cannot create PV {name}: {e}")))
            }
        }
    }

    /// Reports a failed attempt as upstream does, and reschedules when asked.
    pub(super) async fn fail(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
        err: ProvisionError,
    ) -> Result<(), SyncError> {
        let ctx = &self.ctx;
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        let reference = provisioning::pv::claim_reference(claim);
        ctx.recorder.event(
            &reference,
            EventType::Warning,
            names::EVENT_PROVISIONING_FAILED,
            err.message.clone(),
        );
        ctx.metrics.provision_failed(&class_name(class), "");
        if err.state != ProvisioningState::NoChange
            && let Some(capacity) = &ctx.capacity
        {
            capacity.class_changed(&class_name(class));
        }
        match err.state {
            ProvisioningState::Reschedule
                if provisioning::claim::selected_node(claim).is_some() =>
            {
                self.memory.forget_topology(&uid);
                update::clear_selected_node(&ctx.client, claim)
                    .await
                    .map_err(|e| SyncError::retry(format!("cannot reschedule: {e}")))?;
                Ok(())
            }
            ProvisioningState::Finished | ProvisioningState::Reschedule => {
                self.memory.forget_topology(&uid);
                Err(SyncError::retry(err.message))
            }
            ProvisioningState::Background | ProvisioningState::NoChange => {
                Err(SyncError::retry(err.message))
            }
        }
    }

    /// Best-effort DeleteVolume for a volume we will not keep (too small); whether it is gone.
    async fn delete_volume(&self, volume_id: &str, plan: &ProvisionPlan) -> bool {
        let secrets = match self.request_inputs(plan).await {
            Ok((s, _)) => s,
            Err(_) => BTreeMap::new(),
        };
        let request = csi::v1::DeleteVolumeRequest {
            volume_id: volume_id.to_string(),
            secrets: secrets.into_iter().collect(),
        };
        match self.ctx.driver.client.delete_volume(request).await {
            Ok(_) => true,
            Err(status) => {
                tracing::error!(volume = %volume_id, err = %csi::status::go_error_string(&status), "Failed to delete the volume that was too small; retrying CreateVolume will find it again");
                false
            }
        }
    }
}

pub(super) fn class_name(class: &StorageClass) -> String {
    class.metadata.name.clone().unwrap_or_default()
}
