//! Which steps of a released PV's deletion remain (pure): DeleteVolume, dropping our
//! finalizer, deleting the object. Syncs of the same PV repeat while the cache catches up with
//! our own writes, so each step is decided from how far earlier syncs got and what the PV shows.

/// How far the deletion of a released PV got (remembered until the object is gone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// DeleteVolume succeeded.
    VolumeGone,
    /// ... and the PV object's delete was accepted.
    ObjectDeleted,
}

/// The steps this sync performs, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Steps {
    /// Call DeleteVolume.
    pub delete_volume: bool,
    /// Remove our finalizer from the PV.
    pub drop_finalizer: bool,
    /// Delete the PV object.
    pub delete_object: bool,
}

/// The deletion steps this sync still performs.
///
/// `stage`: what earlier syncs achieved; `has_finalizer`: the PV still carries ours;
/// `being_deleted`: it has a deletionTimestamp.
pub fn remaining(stage: Option<Stage>, has_finalizer: bool, being_deleted: bool) -> Steps {
    Steps {
        // The volume is deleted once: a later sync only finishes the object.
        delete_volume: stage.is_none(),
        // Dropped before the object is deleted: then it is a write to a PV nobody else touches,
        // instead of racing kube-controller-manager's pv-protection update after the delete.
        drop_finalizer: has_finalizer,
        // Our finalizer write shows up in the cache before the deletion does: one delete call.
        delete_object: !being_deleted && stage != Some(Stage::ObjectDeleted),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        use Stage::*;
        // (stage, has finalizer, being deleted) → (DeleteVolume, drop finalizer, delete object)
        let cases = [
            // First sync of a released PV.
            (None, true, false, (true, true, true)),
            // A crash after DeleteVolume and the finalizer drop: the volume call is repeated
            // (we cannot know it succeeded; CSI makes it idempotent), the object is deleted.
            (None, false, false, (true, false, true)),
            // Someone else deleted the object while our finalizer held it.
            (None, true, true, (true, true, false)),
            // The finalizer write failed after DeleteVolume: retry it and the delete.
            (Some(VolumeGone), true, false, (false, true, true)),
            // The object delete failed after the finalizer went.
            (Some(VolumeGone), false, false, (false, false, true)),
            // Our finalizer write came back through the cache before the deletion did.
            (Some(ObjectDeleted), false, false, (false, false, false)),
            // The deletion shows; pv-protection still holds the object.
            (Some(ObjectDeleted), false, true, (false, false, false)),
            // Someone put our finalizer back on a PV being deleted: drop it again.
            (Some(ObjectDeleted), true, true, (false, true, false)),
        ];
        for (stage, fin, deleting, (dv, df, dobj)) in cases {
            let want = Steps {
                delete_volume: dv,
                drop_finalizer: df,
                delete_object: dobj,
            };
            assert_eq!(
                remaining(stage, fin, deleting),
                want,
                "stage {stage:?}, finalizer {fin}, being deleted {deleting}"
            );
        }
    }
}
