//! A failed attempt: the event, the metrics, the claim writes it calls for and the hold on the
//! next attempt.

use std::time::Instant;

use controller_kit::events::EventType;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use provisioning::attempt::after_failure;
use provisioning::errors::{ProvisionError, ProvisioningState};
use provisioning::lifecycle::has_finalizer;
use provisioning::names;
use provisioning::retry;

use super::{ClaimError, ClaimKey, ClaimsController, SyncError, claim_name, class_name, update};
use crate::capacity_controller::Refresh;

/// The longest a rescheduled claim waits for its node's capacity objects to be refreshed.
const REFRESH_BEFORE_RESCHEDULE: std::time::Duration = std::time::Duration::from_secs(5);

impl ClaimsController {
    /// Reports a failed attempt as upstream does, reschedules when asked, and holds the next
    /// attempt for the claim's backoff (longer for an `infeasible` request).
    pub(super) async fn fail(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
        err: ProvisionError,
        infeasible: bool,
    ) -> Result<(), SyncError> {
        let class_uid = class.metadata.uid.as_deref();
        self.fail_as(claim, &class_name(class), class_uid, infeasible, err)
            .await
    }

    /// [`Self::fail`] for a step without the class in hand (saving the PV): the class the
    /// claim names.
    pub(super) async fn fail_saving(
        &self,
        claim: &PersistentVolumeClaim,
        err: ProvisionError,
    ) -> Result<(), SyncError> {
        let class = provisioning::claim::class_name(claim).unwrap_or_default();
        self.fail_as(claim, class, None, false, err).await
    }

    /// `class_uid`: a re-created class lifts an `InvalidArgument` hold.
    async fn fail_as(
        &self,
        claim: &PersistentVolumeClaim,
        class: &str,
        class_uid: Option<&str>,
        infeasible: bool,
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
        let (class_label, source) = provisioning::claim::metric_labels(claim);
        ctx.metrics.provision_failed(class_label, source);
        if err.state != ProvisioningState::NoChange
            && let Some(capacity) = &ctx.capacity
        {
            // Rescheduled away from a node: its objects show the driver's answer before the
            // scheduler is asked again, so it does not pick the same node on stale data.
            if err.state == ProvisioningState::Reschedule
                && let Some(node) = provisioning::claim::selected_node(claim)
            {
                let node = Refresh::Node { class, node };
                let refreshed = capacity.refresh_then_tell(node);
                let _ = tokio::time::timeout(REFRESH_BEFORE_RESCHEDULE, refreshed).await;
            }
            capacity.refresh(Refresh::Class(class));
        }
        let writes = after_failure(
            err.state,
            &self.records.volume_state(&uid, true),
            has_finalizer(claim),
            // Only the GA annotation can be removed to reschedule (the library's rule): with
            // the alpha one alone the failure is final and retried, not sent back.
            provisioning::claim::annotation(claim, names::ANN_SELECTED_NODE).is_some(),
            ctx.node.is_some(),
        );
        let now = Instant::now();
        let hold = retry::hold_after_failure(
            now,
            self.queue.next_backoff(&ClaimKey::of(claim)),
            infeasible,
            self.config.retry_interval_max,
            class_uid,
        );
        let wait = hold.until - now;
        // Held before the writes: should they fail, the claim still waits out this failure
        // instead of calling the driver again on the next change that queues it.
        self.records.set_hold(&uid, Some(hold));
        if writes.reschedule || writes.release || writes.hold_here {
            // With the record, this node's entry holds a claim it gives back: no finalizer.
            let node_finalizer = self.node_finalizer().filter(|_| !self.entries.enabled());
            update::after_failure(
                &ctx.client,
                &ctx.caches.claims,
                claim,
                writes,
                node_finalizer.as_deref(),
            )
            .await
            .map_err(|source| ClaimError::ClaimWrite {
                claim: claim_name(claim),
                what: "reschedule or release",
                source,
            })?;
        }
        if writes.reschedule {
            self.records.set_hold(&uid, None);
            if self.ctx.node.is_some() {
                // This node steps back when the claim is taken again (`claims/race.rs`).
                let now = Instant::now();
                self.records.with(&uid, |r| r.race.failed_here(now));
                self.records.prune(now);
            }
            return Ok(());
        }
        klog::v!(2, claim = %claim_name(claim), err = %err.message, retry_in = ?wait, "Provisioning failed");
        Err(SyncError::Hold(wait))
    }
}
