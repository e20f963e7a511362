//! Beyond upstream: explain a waiting claim that no published capacity can hold.

use controller_kit::events::EventType;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;

use super::ClaimsController;

/// Event reason when no published capacity of a waiting claim's class can hold it (ours).
pub const NOT_ENOUGH_CAPACITY: &str = capacity::explain::REASON;

impl ClaimsController {
    /// Beyond upstream: a late-binding claim of our driver that waits for a node although no
    /// published capacity of its class can hold it gets one Warning saying so
    /// ([`provisioning::claim_step::Step::ExplainWait`]).
    pub(super) fn explain_if_nothing_fits(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
    ) {
        let (Some(capacity), Ok(requested)) = (
            &self.ctx.capacity,
            provisioning::claim::requested_bytes(claim),
        ) else {
            return;
        };
        let class_name = class.metadata.name.as_deref().unwrap_or_default();
        if let Some(message) = capacity.explain(class_name, requested) {
            self.explain(claim, message);
        }
    }

    /// Puts `message` on the claim as our `NotEnoughCapacity` Warning, unless this process
    /// already said the same there.
    pub(super) fn explain(&self, claim: &PersistentVolumeClaim, message: String) {
        let uid = claim.metadata.uid.as_deref().unwrap_or_default();
        if self.records.explain_once(uid, &message) {
            let reference = provisioning::pv::claim_reference(claim);
            self.ctx
                .recorder
                .event(&reference, EventType::Warning, NOT_ENOUGH_CAPACITY, message);
        }
    }
}
