//! Step 1, sync: read the claim through our own writes, gather the facts once, let
//! [`provisioning::claim_step::next_step`] pick the step, and carry it out.

use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::ObjectRef;
use provisioning::claim_step::{ClaimFacts, NodeFacts, Step, next_step};
use provisioning::distributed::{NodeOwner, node_owner};

use super::{ClaimError, ClaimKey, ClaimsController, SyncError, bound_uid, claim_name};

impl ClaimsController {
    pub(super) async fn sync(&self, key: &ClaimKey) -> Result<(), SyncError> {
        let reference = ObjectRef::new(&key.name).within(&key.namespace);
        let cached = self.ctx.caches.claims.get(&reference);
        // Claims under this name that are gone while our entry held them: cleaned up first.
        let current = cached.as_ref().and_then(|c| c.metadata.uid.as_deref());
        self.clean_up_gone(key, current).await?;
        let Some(claim) = cached else {
            return Ok(());
        };
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        let result = self.sync_claim(claim).await;
        // Deleted while we worked on it (before any finalizer held it): what the sync just
        // remembered would never be pruned by the deletion event, which came first. Held by
        // our entry: the next sync cleans up from it.
        if self
            .ctx
            .caches
            .claims
            .get(&reference)
            .is_none_or(|c| c.metadata.uid.as_deref() != Some(uid.as_str()))
        {
            match self.entries.holds(&uid) {
                true => self.queue.add(key.clone()),
                false => self.records.forget(&uid),
            }
        }
        result
    }

    async fn sync_claim(&self, claim: Arc<PersistentVolumeClaim>) -> Result<(), SyncError> {
        let class = self.class_of(&claim);
        let class = class.as_deref();
        let mut step = next_step(&self.facts(&claim, class));
        if step == Step::ProtectSource {
            self.protect_clone_source(&claim).await?;
            let facts = self.facts(&claim, class);
            step = next_step(&ClaimFacts {
                source_checked: true,
                ..facts
            });
        }
        // Taken by a node: this instance waits on it no more (what it holds in flight is
        // pruned by `in_flight`).
        if let (Some(node), Some(class)) = (&self.ctx.node, class)
            && let NodeOwner::ThisNode | NodeOwner::OtherNode =
                node_owner(&claim, class, &node.name, node.immediate_binding)
        {
            let uid = claim.metadata.uid.as_deref().unwrap_or_default();
            self.records.existing(uid, |r| r.race.forget_wait());
        }
        klog::v!(5, claim = %claim_name(&claim), step = ?step, "Syncing claim");
        self.execute(step, &claim, class).await
    }

    /// Everything [`next_step`] looks at, from the caches and the claim's record.
    fn facts<'a>(
        &'a self,
        claim: &'a PersistentVolumeClaim,
        class: Option<&'a StorageClass>,
    ) -> ClaimFacts<'a> {
        let uid = claim.metadata.uid.as_deref().unwrap_or_default();
        ClaimFacts {
            claim,
            class,
            driver: &self.ctx.driver.name,
            can_clone: self.ctx.driver.capabilities.clone_volume,
            node: self.ctx.node.as_ref().map(|n| NodeFacts {
                name: &n.name,
                immediate_binding: n.immediate_binding,
            }),
            capacity_tracking: self.ctx.capacity.is_some(),
            started: self.started,
            // Read through our own writes: a PV we just saved counts before the watch shows it.
            pv_exists: self.pv_exists(claim),
            record: provisioning::claim_step::RecordFacts {
                recorded: self.entries.holds(uid),
                ..self
                    .records
                    .existing(uid, |r| r.facts())
                    .unwrap_or_default()
            },
            source_checked: false,
        }
    }

    async fn execute(
        &self,
        step: Step,
        claim: &PersistentVolumeClaim,
        class: Option<&StorageClass>,
    ) -> Result<(), SyncError> {
        let uid = claim.metadata.uid.as_deref().unwrap_or_default();
        let node = self.ctx.node.as_ref().map(|n| n.name.as_str());
        match (step, class, node) {
            (Step::SaveUnsavedPv, ..) => self.save_unsaved_pv(claim).await,
            (Step::ProtectSource, ..) => self.protect_clone_source(claim).await,
            (Step::CleanUpLeft, _, Some(node)) => self.clean_up(claim, Some(node)).await,
            (Step::DropNodeFinalizer, ..) => self.drop_node_finalizer(claim).await,
            (Step::LetGo, ..) => self.let_go(claim).await,
            (Step::TakeNode, Some(class), _) => self.race(claim, class).await,
            // Each instance publishes one node's capacity: the explanation needs every
            // instance's objects, and one instance to give it.
            (Step::ExplainWait, Some(class), Some(_)) => self.report_no_room(claim, class),
            (Step::ExplainWait, Some(class), None) => {
                self.explain_if_nothing_fits(claim, class);
                Ok(())
            }
            (Step::ClassMissing, ..) => {
                let err = ClaimError::ClassMissing {
                    class: provisioning::claim::class_name(claim)
                        .unwrap_or_default()
                        .to_string(),
                };
                // At the default verbosity, as upstream's "error syncing claim" line; and a
                // failed attempt in the metrics, as upstream's shouldProvision error is.
                tracing::error!(claim = %claim_name(claim), "error syncing claim: {err}");
                let (class_label, source) = provisioning::claim::metric_labels(claim);
                self.ctx.metrics.provision_failed(class_label, source);
                Err(err.into())
            }
            (Step::Release, ..) => {
                self.release_later(claim);
                Ok(())
            }
            (Step::WaitForProtection, ..) => {
                self.records.abort_background_release(uid);
                Ok(())
            }
            (Step::Provision, Some(class), _) => self.provision(claim, class).await,
            (Step::CleanUp, ..) => self.clean_up(claim, None).await,
            (Step::Forget, ..) => {
                self.records.forget(uid);
                Ok(())
            }
            (Step::Nothing, ..) => {
                let driver = &self.ctx.driver.name;
                let should = provisioning::claim::should_provision(claim, class, driver);
                if should == provisioning::claim::ShouldProvision::ClassForOtherProvisioner {
                    klog::v!(4, claim = %claim_name(claim), "Class names another provisioner; ignoring claim");
                }
                Ok(())
            }
            // Never chosen without the class or node they need.
            (Step::CleanUpLeft | Step::TakeNode | Step::ExplainWait | Step::Provision, ..) => {
                Ok(())
            }
        }
    }

    /// Whether a PV for this claim exists: the PV named for it and bound to its UID (read
    /// through our own writes, so one we just created counts).
    pub(super) fn pv_exists(&self, claim: &PersistentVolumeClaim) -> bool {
        let uid = claim.metadata.uid.as_deref();
        self.named_pv(claim)
            .is_some_and(|pv| uid.is_some() && bound_uid(&pv) == uid)
    }
}
