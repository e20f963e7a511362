//! Which steps of a released PV's deletion remain (pure): DeleteVolume, dropping our
//! finalizer, deleting the object.
//!
//! The PV is read through our own writes (the finalizer drop, the delete), so a sync that
//! repeats before the watch catches up sees how far the object got. The one thing no object
//! shows is whether DeleteVolume already succeeded: the controller remembers that.

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
/// `volume_deleted`: an earlier sync's DeleteVolume succeeded; `has_finalizer`: the PV still
/// carries ours; `being_deleted`: it has a deletionTimestamp.
pub fn remaining(volume_deleted: bool, has_finalizer: bool, being_deleted: bool) -> Steps {
    Steps {
        // The volume is deleted once: a later sync only finishes the object.
        delete_volume: !volume_deleted,
        // Dropped before the object is deleted: then it is a write to a PV nobody else touches,
        // instead of racing kube-controller-manager's pv-protection update after the delete.
        drop_finalizer: has_finalizer,
        // Our own delete shows as the deletionTimestamp: one delete call.
        delete_object: !being_deleted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        // (volume deleted, has finalizer, being deleted) → (DeleteVolume, drop finalizer, delete object)
        let cases = [
            // First sync of a released PV.
            (false, true, false, (true, true, true)),
            // A crash after DeleteVolume and the finalizer drop: the volume call is repeated
            // (we cannot know it succeeded; CSI makes it idempotent), the object is deleted.
            (false, false, false, (true, false, true)),
            // Someone else deleted the object while our finalizer held it.
            (false, true, true, (true, true, false)),
            // The finalizer write failed after DeleteVolume: retry it and the delete.
            (true, true, false, (false, true, true)),
            // The object delete failed after the finalizer went.
            (true, false, false, (false, false, true)),
            // Our delete shows (from the cache or our own write); pv-protection holds the object.
            (true, false, true, (false, false, false)),
            // Someone put our finalizer back on a PV being deleted: drop it again.
            (true, true, true, (false, true, false)),
        ];
        for (gone, fin, deleting, (dv, df, dobj)) in cases {
            let want = Steps {
                delete_volume: dv,
                drop_finalizer: df,
                delete_object: dobj,
            };
            assert_eq!(
                remaining(gone, fin, deleting),
                want,
                "volume deleted {gone}, finalizer {fin}, being deleted {deleting}"
            );
        }
    }
}
