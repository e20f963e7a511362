//! Step 1, sync: read the claim through our own writes, save a PV left unsaved, and let
//! [`provisioning::lifecycle::decide`] pick the next step.

use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::runtime::reflector::ObjectRef;
use provisioning::claim::{ShouldProvision, should_provision};
use provisioning::data_source::clone::guards_source;
use provisioning::lifecycle::{Step, bound_elsewhere, decide, has_finalizer};

use super::protection;
use super::race::NodeStep;
use super::{ClaimError, ClaimKey, ClaimsController, SyncError, bound_uid};

impl ClaimsController {
    pub(super) async fn sync(&self, key: &ClaimKey) -> Result<(), SyncError> {
        let reference = ObjectRef::new(&key.name).within(&key.namespace);
        let Some(claim) = self.ctx.caches.claims.get(&reference) else {
            return Ok(());
        };
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        let result = self.sync_claim(claim).await;
        // Deleted while we worked on it (before any finalizer held it): what the sync just
        // remembered would never be pruned by the deletion event, which came first.
        if self
            .ctx
            .caches
            .claims
            .get(&reference)
            .is_none_or(|c| c.metadata.uid.as_deref() != Some(uid.as_str()))
        {
            self.records.forget(&uid);
        }
        result
    }

    pub(super) async fn sync_claim(
        &self,
        claim: Arc<PersistentVolumeClaim>,
    ) -> Result<(), SyncError> {
        let key = &ClaimKey::of(&claim);
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        let ours = provisioning::claim::is_ours(&claim, &self.ctx.driver.name);
        // A created volume whose PV did not save yet: save it first, whatever else changed.
        if ours
            && claim.metadata.deletion_timestamp.is_none()
            && let Some(pv) = self.records.unsaved_pv(&uid)
        {
            return self.save_unsaved_pv(&claim, pv).await;
        }
        if protection::is_held_source(&claim)
            && self.ctx.driver.capabilities.clone_volume
            && guards_source(&claim, &self.ctx.driver.name)
        {
            self.protect_clone_source(&claim).await?;
        }
        let class = self.class_of(&claim);
        // A claim this node gave back while a volume of it may exist here.
        if ours && let Some(done) = self.left_here(&claim).await {
            return done;
        }
        if ours {
            match self.node_step(&claim, class.as_deref()) {
                NodeStep::Continue => {}
                NodeStep::Skip => return Ok(()),
                // A claim waiting for its node (late binding, or Immediate without
                // `--node-deployment-immediate-binding`) may hold the admission policy's
                // finalizer, and no node will ever take it once it is deleted.
                NodeStep::Wait if claim.metadata.deletion_timestamp.is_some() => {
                    return self.let_go_unclaimed(&claim).await;
                }
                NodeStep::Wait => {
                    return match class.as_deref() {
                        Some(class) => self.report_no_room(&claim, class),
                        None => Ok(()),
                    };
                }
                NodeStep::Race => {
                    return match class.as_deref() {
                        Some(class) => self.race(&claim, class).await,
                        None => Ok(()),
                    };
                }
            }
        }
        let should = should_provision(&claim, class.as_deref(), &self.ctx.driver.name);
        // Read through our own writes: a PV we just saved counts before the watch shows it.
        let pv_exists = self.pv_exists(&claim);
        // After a restart the finalizer (without the admission policy) is what says a call
        // may have been made.
        let may_exist = ours
            && self
                .records
                .volume_may_exist(&uid, self.earlier_attempt_possible(&claim));
        let step = bound_elsewhere(
            decide(&claim, should, ours, ours && pv_exists),
            &claim,
            should,
            ours && pv_exists,
            may_exist,
        );
        if step == Step::Ignore && self.settled(&claim) {
            self.records.forget(&uid);
        }
        klog::v!(5, claim = %format!("{}/{}", key.namespace, key.name), step = ?step, "Syncing claim");
        match step {
            Step::Ignore | Step::WaitForNode => {
                if should == ShouldProvision::ClassForOtherProvisioner {
                    klog::v!(4, claim = %format!("{}/{}", key.namespace, key.name), "Class names another provisioner; ignoring claim");
                }
                match (&self.ctx.node, class.as_deref()) {
                    // Each instance publishes one node's capacity: the explanation needs
                    // every instance's objects, and one instance to give it.
                    (Some(_), Some(class)) => self.report_no_room(&claim, class),
                    (Some(_), None) => Ok(()),
                    (None, _) => {
                        self.explain_if_nothing_fits(&claim, class.as_deref());
                        Ok(())
                    }
                }
            }
            Step::ClassMissing => {
                let err = ClaimError::ClassMissing {
                    class: provisioning::claim::class_name(&claim)
                        .unwrap_or_default()
                        .to_string(),
                };
                // At the default verbosity, as upstream's "error syncing claim" line; and a
                // failed attempt in the metrics, as upstream's shouldProvision error is.
                tracing::error!(claim = %format!("{}/{}", key.namespace, key.name), "error syncing claim: {err}");
                let (class_label, source) = provisioning::claim::metric_labels(&claim);
                self.ctx.metrics.provision_failed(class_label, source);
                Err(err.into())
            }
            Step::ReleaseFinalizer => {
                self.release_later(&claim);
                Ok(())
            }
            Step::WaitForProtection => {
                let uid = claim.metadata.uid.as_deref().unwrap_or_default();
                self.records.abort_background_release(uid);
                Ok(())
            }
            Step::Provision => match class {
                Some(class) => self.provision(&claim, &class).await,
                None => Ok(()),
            },
            Step::CleanUp => self.clean_up(&claim).await,
        }
    }

    /// Nothing is pending for the claim: it is bound (or another driver's) and holds no finalizer
    /// of ours, and no PV of ours waits to be saved.
    pub(super) fn settled(&self, claim: &PersistentVolumeClaim) -> bool {
        let uid = claim.metadata.uid.as_deref().unwrap_or_default();
        // A call that ended without an answer, or a volume no PV holds, may leave a volume no
        // PV owns: kept until the claim is Bound (`bound_elsewhere`), even when the finalizer
        // went with the binding (an admission policy rendered before it kept it for claims bound
        // elsewhere).
        // A deleting clone source's hold stays while clones wait: its event is posted once.
        if has_finalizer(claim)
            || self.records.unsaved_pv(uid).is_some()
            || self.records.volume_may_exist(uid, false)
            || self.records.existing(uid, |r| r.clone_hold.is_some()) == Some(true)
        {
            return false;
        }
        claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .is_some_and(|v| !v.is_empty())
    }

    /// Whether a PV for this claim exists: the PV named for it and bound to its UID (read
    /// through our own writes, so one we just created counts).
    pub(super) fn pv_exists(&self, claim: &PersistentVolumeClaim) -> bool {
        let uid = claim.metadata.uid.as_deref();
        self.named_pv(claim)
            .is_some_and(|pv| uid.is_some() && bound_uid(&pv) == uid)
    }
}
