//! Whether the scheduler uses our objects at all: `CSIDriver.spec.storageCapacity` of the
//! CSIDriver named like the driver (the scheduler looks it up by the class's provisioner).
//!
//! An administrator turns it off when the driver's reports are not to be trusted for placement
//! (conservative or approximate, pools that grow): the driver then decides, and a claim goes back
//! to the scheduler only on its ResourceExhausted, as upstream. So reservations (ours) refuse a
//! claim without a driver call only while the field is true, and lower published objects only
//! while someone may read them. The field is mutable (1.23+): it is read again after [`REUSE`].

use std::time::{Duration, Instant};

/// How long one reading of the CSIDriver is used before the next decision reads it again.
pub const REUSE: Duration = Duration::from_secs(5);

/// What the CSIDriver object says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedulerCheck {
    /// `storageCapacity: true`: the scheduler filters nodes by our objects.
    On,
    /// `false`, unset, or no CSIDriver of that name: the scheduler ignores capacity.
    Off,
    /// The object could not be read (RBAC without `get` on csidrivers, API errors).
    Unknown,
}

impl SchedulerCheck {
    /// From a read of the CSIDriver: `None` when there is no such object, else its
    /// `spec.storageCapacity`.
    pub fn from_field(found: Option<Option<bool>>) -> SchedulerCheck {
        match found {
            Some(Some(true)) => SchedulerCheck::On,
            _ => SchedulerCheck::Off,
        }
    }
}

/// What reservations may do for a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowed {
    /// Count the claim's size against its node's objects while CreateVolume runs.
    pub hold: bool,
    /// Send the claim back to the scheduler without a driver call when it does not fit
    /// (`--strict-topology`, `--capacity-pod-aware`).
    pub refuse: bool,
}

/// Unknown keeps the lowering (harmless if nobody reads it, useful if the scheduler does)
/// but leaves refusals to the driver, as upstream does.
pub fn allowed(check: SchedulerCheck) -> Allowed {
    match check {
        SchedulerCheck::On => Allowed {
            hold: true,
            refuse: true,
        },
        SchedulerCheck::Off => Allowed {
            hold: false,
            refuse: false,
        },
        SchedulerCheck::Unknown => Allowed {
            hold: true,
            refuse: false,
        },
    }
}

/// The last reading of the CSIDriver and when it was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remembered {
    /// What the object said.
    pub check: SchedulerCheck,
    /// When it was read.
    pub read_at: Instant,
}

/// The remembered answer if it is younger than `reuse`; `None`: read the object again.
pub fn reuse(last: Option<&Remembered>, now: Instant, reuse: Duration) -> Option<SchedulerCheck> {
    let last = last?;
    (now.saturating_duration_since(last.read_at) < reuse).then_some(last.check)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_field_decides_what_reservations_may_do() {
        use SchedulerCheck::*;
        let cases = [
            // (CSIDriver read, check, hold, refuse)
            (Some(Some(true)), On, true, true),
            (Some(Some(false)), Off, false, false),
            (Some(None), Off, false, false),
            (None, Off, false, false),
        ];
        for (found, check, hold, refuse) in cases {
            assert_eq!(SchedulerCheck::from_field(found), check, "{found:?}");
            assert_eq!(allowed(check), Allowed { hold, refuse }, "{check:?}");
        }
        assert_eq!(
            allowed(Unknown),
            Allowed {
                hold: true,
                refuse: false
            },
            "unreadable: the driver decides"
        );
    }

    #[test]
    fn a_reading_is_reused_for_a_while_only() {
        let t0 = Instant::now();
        let last = Remembered {
            check: SchedulerCheck::On,
            read_at: t0,
        };
        let s = Duration::from_secs;
        assert_eq!(reuse(None, t0, s(5)), None);
        assert_eq!(reuse(Some(&last), t0, s(5)), Some(SchedulerCheck::On));
        assert_eq!(
            reuse(Some(&last), t0 + s(4), s(5)),
            Some(SchedulerCheck::On)
        );
        assert_eq!(reuse(Some(&last), t0 + s(5), s(5)), None);
        assert_eq!(reuse(Some(&last), t0 + s(60), s(5)), None);
    }
}
