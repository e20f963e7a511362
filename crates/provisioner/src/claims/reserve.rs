//! Before CreateVolume: the claim's size is reserved on its selected node's published
//! capacity (`--capacity-reservations`, ours), or the claim goes back to the scheduler when
//! it does not fit there with the volumes already on their way.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use provisioning::attempt::VolumeState;
use provisioning::errors::{ProvisionError, may_reschedule};

use super::ClaimsController;
use crate::capacity_controller::Hold;

impl ClaimsController {
    /// The reservation for this attempt, held until the caller drops it after CreateVolume.
    /// `before` is what may exist of the claim's volume: a volume that may be in the
    /// backend already is counted but never refused (its space may be in the reading).
    /// Refusing on the driver's behalf needs `--strict-topology` and the CSIDriver's
    /// `storageCapacity: true`; the pod check (`--capacity-pod-aware`) comes first.
    pub(super) async fn reserve(
        &self,
        claim: &PersistentVolumeClaim,
        class: &str,
        requested: i64,
        before: &VolumeState,
    ) -> Result<Option<Hold>, ProvisionError> {
        let Some(capacity) = &self.ctx.capacity else {
            return Ok(None);
        };
        let selected = provisioning::claim::selected_node(claim);
        let Some(node) = selected.filter(|_| may_reschedule(self.supports_topology(), selected))
        else {
            return Ok(None);
        };
        // With the CSIDriver's storageCapacity off the scheduler reads no object of ours and
        // the driver decides: nothing is held and nothing refused on its behalf.
        let allowed = capacity.allowed().await;
        if !allowed.hold {
            return Ok(None);
        }
        let uid = claim.metadata.uid.as_deref().unwrap_or_default();
        let fresh = *before == VolumeState::None && allowed.refuse;
        if fresh {
            self.pod_check(claim, node).await?;
        }
        // Only with --strict-topology is the selected node all the driver may use: without it
        // the driver may put the volume elsewhere, and the answer is the driver's.
        let check = fresh && self.config.strict_topology;
        // Refused only on certainty (see `capacity::ledger`); the failure path then refreshes
        // the node's objects before the claim goes back to the scheduler.
        capacity
            .hold(uid, (class, node), requested, check)
            .map_err(|no_room| ProvisionError::reschedule(no_room.to_string()))
    }
}
