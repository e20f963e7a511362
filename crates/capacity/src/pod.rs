//! The claims of one pod, placed together (ours, `--capacity-pod-aware`).
//!
//! kube-scheduler checks each claim of a pod against the published capacity on its own, so a
//! pod with two 60Gi claims passes a 100Gi node; one volume is made there, the other is
//! refused, and the pod stays pinned to a node that cannot hold it. Before the first volume of
//! such a pod is made, the claims that go to one node are added up; if they do not fit, none
//! is made and the node is shown, for a while, as too small for the largest of them, so the
//! scheduler's next try goes elsewhere.
//!
//! What "fit" means follows the two fields of a CSIStorageCapacity: `maximumVolumeSize`
//! limits each volume (so each claim is checked against it, as the scheduler does), and
//! `capacity` is what the pool has free (so the sum is checked against it). Claims are added
//! up per storage class, each class against its own object for the node: classes may draw on
//! separate pools, and each has its own object.

use std::collections::BTreeMap;

use crate::Capacity;
use crate::ledger::{apply, fits};

/// One claim of the pod, as far as the decision goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sibling {
    /// Its storage class: claims are added up per class.
    pub class: String,
    /// Requested bytes.
    pub bytes: i64,
    /// `selected-node`, if the scheduler wrote it yet.
    pub node: Option<String>,
    /// Its reservation is already counted (CreateVolume running or done, or bound).
    pub counted: bool,
}

/// What to do with a claim of a pod that has others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodCheck {
    /// Nothing to add up: one claim of ours, or the others go to other nodes.
    Alone,
    /// A sibling has no node yet: the scheduler writes them one after the other.
    Wait,
    /// Together they fit.
    Fits,
    /// The claims of `class` do not fit together (or one of them does not fit alone).
    TooBig {
        /// The storage class whose object for the node is too small.
        class: String,
        /// Bytes of the class's claims not counted yet.
        total: i64,
        /// The largest claim of the class.
        largest: i64,
    },
}

/// A reading of one (node, class) and the bytes it certainly does not show.
pub type Room = (Capacity, i64);

/// Decides for the claims of one pod (all of ours, this one included) going to `node`.
/// `rooms` holds, per storage class, the reading of that class's object for the node and the
/// `reserved` bytes it certainly does not show (other claims than these); a class without an
/// entry (nothing read there) is not judged.
pub fn check(node: &str, claims: &[Sibling], rooms: &BTreeMap<String, Room>) -> PodCheck {
    // One claim left to make: the per-claim check is all there is.
    let open: Vec<&Sibling> = claims.iter().filter(|c| !c.counted).collect();
    if open.len() < 2 {
        return PodCheck::Alone;
    }
    if open.iter().any(|c| c.node.is_none()) {
        return PodCheck::Wait;
    }
    if open.iter().any(|c| c.node.as_deref() != Some(node)) {
        return PodCheck::Alone;
    }
    let mut by_class: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for c in &open {
        by_class.entry(&c.class).or_default().push(c.bytes);
    }
    for (class, sizes) in by_class {
        let Some(&(reading, reserved)) = rooms.get(class) else {
            continue;
        };
        if fit_together(reading, reserved, &sizes) {
            continue;
        }
        let largest = claims
            .iter()
            .filter(|c| c.class == class)
            .map(|c| c.bytes)
            .max()
            .unwrap_or(0);
        return PodCheck::TooBig {
            class: class.to_string(),
            total: sum(&sizes),
            largest,
        };
    }
    PodCheck::Fits
}

/// Whether volumes of `sizes` bytes can all be made in the pool that `reading` describes with
/// `reserved` bytes on their way: each passes the scheduler's filter (`maximumVolumeSize`
/// when set), and together they take no more than `capacity` has free.
///
/// A thin pool over-committed on purpose (`maximumVolumeSize` above `capacity`) is checked
/// per volume only: its volumes do not take their size from the pool when made (the same
/// reading [`apply`] makes), so their sum says nothing about what the driver accepts.
pub fn fit_together(reading: Capacity, reserved: i64, sizes: &[i64]) -> bool {
    if !sizes.iter().all(|&bytes| fits(reading, reserved, bytes)) {
        return false;
    }
    thin(reading) || apply(reading, reserved).available >= sum(sizes)
}

/// Bytes to hold on a (node, class) read as `reading`, with `reserved` bytes already held
/// there, so that a claim of `largest` bytes no longer passes the scheduler's filter (smaller
/// claims still do); 0 when it does not pass already, or when nothing held can stop it (a
/// thin pool's `maximumVolumeSize` is never lowered).
pub fn block(reading: Capacity, reserved: i64, largest: i64) -> i64 {
    if !fits(reading, reserved, largest) || thin(reading) {
        return 0;
    }
    // A thick pool's maximumVolumeSize follows the lowered capacity: lowering the capacity
    // below `largest` is what stops it, whichever field the scheduler reads.
    (apply(reading, reserved).available - largest + 1).max(0)
}

/// `maximumVolumeSize` above `capacity`: an over-committed thin pool (see [`apply`]).
fn thin(reading: Capacity) -> bool {
    reading
        .maximum_volume_size
        .is_some_and(|m| m > reading.available)
}

/// Requests of exabytes (parsed to `i64::MAX`) add up without wrapping.
fn sum(sizes: &[i64]) -> i64 {
    sizes.iter().fold(0_i64, |sum, &b| sum.saturating_add(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GI: i64 = 1 << 30;

    fn c(bytes: i64, node: Option<&str>, counted: bool) -> Sibling {
        in_class("fast", bytes, node, counted)
    }

    fn in_class(class: &str, bytes: i64, node: Option<&str>, counted: bool) -> Sibling {
        Sibling {
            class: class.into(),
            bytes: bytes * GI,
            node: node.map(String::from),
            counted,
        }
    }

    fn too_big(class: &str, total: i64, largest: i64) -> PodCheck {
        PodCheck::TooBig {
            class: class.into(),
            total: total * GI,
            largest: largest * GI,
        }
    }

    /// Rooms of (class, capacity Gi, maximumVolumeSize Gi, reserved Gi).
    fn rooms(of: &[(&str, i64, Option<i64>, i64)]) -> BTreeMap<String, Room> {
        of.iter()
            .map(|&(class, available, max, reserved)| {
                let reading = Capacity::from_response(available * GI, max.map(|m| m * GI));
                (class.to_string(), (reading, reserved * GI))
            })
            .collect()
    }

    #[test]
    fn one_class() {
        let hundred = |reserved| rooms(&[("fast", 100, None, reserved)]);
        let cases = [
            (vec![c(60, Some("a"), false)], 0, PodCheck::Alone),
            (
                vec![c(60, Some("a"), false), c(60, None, false)],
                0,
                PodCheck::Wait,
            ),
            (
                vec![c(60, Some("a"), false), c(60, Some("b"), false)],
                0,
                PodCheck::Alone,
            ),
            (
                vec![c(40, Some("a"), false), c(50, Some("a"), false)],
                0,
                PodCheck::Fits,
            ),
            (
                vec![c(40, Some("a"), false), c(50, Some("a"), false)],
                20,
                too_big("fast", 90, 50),
            ),
            (
                vec![c(60, Some("a"), false), c(60, Some("a"), false)],
                0,
                too_big("fast", 120, 60),
            ),
            // One is made already (its size is in the reading or the reservations).
            (
                vec![c(60, Some("a"), true), c(30, Some("a"), false)],
                0,
                PodCheck::Alone,
            ),
            (
                vec![
                    c(10, Some("a"), true),
                    c(30, Some("a"), false),
                    c(30, Some("a"), false),
                ],
                50,
                too_big("fast", 60, 30),
            ),
            (
                vec![c(60, None, true), c(30, Some("a"), false)],
                0,
                PodCheck::Alone,
            ),
        ];
        for (claims, reserved, want) in cases {
            assert_eq!(check("a", &claims, &hundred(reserved)), want, "{claims:?}");
        }
        // Requests of exabytes (parsed to i64::MAX) add up without wrapping.
        let huge = Sibling {
            class: "fast".into(),
            bytes: i64::MAX,
            node: Some("a".into()),
            counted: false,
        };
        assert_eq!(
            check("a", &[huge.clone(), huge], &hundred(0)),
            PodCheck::TooBig {
                class: "fast".into(),
                total: i64::MAX,
                largest: i64::MAX,
            }
        );
    }

    /// `maximumVolumeSize` limits each volume; `capacity` limits their sum (issue 46 item 6).
    #[test]
    fn maximum_volume_size_limits_each_claim_and_capacity_the_sum() {
        let cases = [
            // 100Gi free, 50Gi largest volume: two 40Gi claims (80 > 50) fit.
            (
                rooms(&[("fast", 100, Some(50), 0)]),
                vec![c(40, Some("a"), false), c(40, Some("a"), false)],
                PodCheck::Fits,
            ),
            // Three of them do not: 120Gi > 100Gi free.
            (
                rooms(&[("fast", 100, Some(50), 0)]),
                vec![
                    c(40, Some("a"), false),
                    c(40, Some("a"), false),
                    c(40, Some("a"), false),
                ],
                too_big("fast", 120, 40),
            ),
            // One claim above the maximum: no, whatever the sum.
            (
                rooms(&[("fast", 100, Some(50), 0)]),
                vec![c(60, Some("a"), false), c(10, Some("a"), false)],
                too_big("fast", 70, 60),
            ),
            // Exactly at the maximum and exactly full: fits.
            (
                rooms(&[("fast", 100, Some(50), 0)]),
                vec![c(50, Some("a"), false), c(50, Some("a"), false)],
                PodCheck::Fits,
            ),
            // Reservations lower the free capacity, and a thick pool's maximum with it.
            (
                rooms(&[("fast", 100, Some(50), 30)]),
                vec![c(40, Some("a"), false), c(40, Some("a"), false)],
                too_big("fast", 80, 40),
            ),
            (
                rooms(&[("fast", 100, Some(50), 60)]),
                vec![c(20, Some("a"), false), c(15, Some("a"), false)],
                PodCheck::Fits,
            ),
            // A thin pool over-committed on purpose (maximum above capacity): each claim
            // against the maximum, the sum is not bounded by the capacity.
            (
                rooms(&[("fast", 10, Some(50), 0)]),
                vec![c(30, Some("a"), false), c(30, Some("a"), false)],
                PodCheck::Fits,
            ),
            (
                rooms(&[("fast", 10, Some(50), 0)]),
                vec![c(60, Some("a"), false), c(30, Some("a"), false)],
                too_big("fast", 90, 60),
            ),
        ];
        for (rooms, claims, want) in cases {
            assert_eq!(check("a", &claims, &rooms), want, "{claims:?} in {rooms:?}");
        }
    }

    /// Claims are added up per class, each class against its own object (issue 46 item 7).
    #[test]
    fn each_class_against_its_own_pool() {
        let two = rooms(&[("fast", 100, None, 0), ("slow", 100, None, 0)]);
        let cases = [
            // 60 + 60 of two classes: each pool holds its own claim.
            (
                two.clone(),
                vec![
                    in_class("fast", 60, Some("a"), false),
                    in_class("slow", 60, Some("a"), false),
                ],
                PodCheck::Fits,
            ),
            // 60 + 30 fast (90) and 70 slow: 160 in all, each pool holds its share.
            (
                two.clone(),
                vec![
                    in_class("fast", 60, Some("a"), false),
                    in_class("fast", 30, Some("a"), false),
                    in_class("slow", 70, Some("a"), false),
                ],
                PodCheck::Fits,
            ),
            // The fast claims alone do not fit the fast pool; the slow one is not counted.
            (
                two.clone(),
                vec![
                    in_class("fast", 60, Some("a"), false),
                    in_class("fast", 50, Some("a"), false),
                    in_class("slow", 10, Some("a"), false),
                ],
                too_big("fast", 110, 60),
            ),
            // The slow pool is the full one (a reservation there).
            (
                rooms(&[("fast", 100, None, 0), ("slow", 100, None, 50)]),
                vec![
                    in_class("fast", 60, Some("a"), false),
                    in_class("slow", 30, Some("a"), false),
                    in_class("slow", 30, Some("a"), false),
                ],
                too_big("slow", 60, 30),
            ),
            // A class not read on the node is not judged; the others are.
            (
                rooms(&[("fast", 100, None, 0)]),
                vec![
                    in_class("fast", 60, Some("a"), false),
                    in_class("other", 500, Some("a"), false),
                    in_class("other", 500, Some("a"), false),
                ],
                PodCheck::Fits,
            ),
            // One claim per class, one of them alone too big for its pool.
            (
                two.clone(),
                vec![
                    in_class("fast", 60, Some("a"), false),
                    in_class("slow", 120, Some("a"), false),
                ],
                too_big("slow", 120, 120),
            ),
            // A sibling of another class without a node yet: wait for the scheduler.
            (
                two,
                vec![
                    in_class("fast", 60, Some("a"), false),
                    in_class("slow", 60, None, false),
                ],
                PodCheck::Wait,
            ),
        ];
        for (rooms, claims, want) in cases {
            assert_eq!(check("a", &claims, &rooms), want, "{claims:?} in {rooms:?}");
        }
    }

    #[test]
    fn block_keeps_the_largest_out() {
        let cases = [
            // (capacity, maximumVolumeSize, reserved, largest) -> bytes to hold
            (100, None, 0, 60, 40 * GI + 1),
            (100, None, 20, 60, 20 * GI + 1),
            (50, None, 0, 60, 0),
            // A thick pool with a maximum: the capacity is what lowers it.
            (100, Some(50), 0, 40, 60 * GI + 1),
            (100, Some(30), 0, 40, 0),
            // A thin pool's maximum is never lowered: nothing to hold.
            (10, Some(50), 0, 40, 0),
        ];
        for (available, max, reserved, largest, want) in cases {
            let reading = Capacity::from_response(available * GI, max.map(|m: i64| m * GI));
            let (reserved, largest) = (reserved * GI, largest * GI);
            let held = block(reading, reserved, largest);
            assert_eq!(held, want, "{reading:?} {reserved} {largest}");
            if held > 0 {
                let total = reserved + held;
                assert!(!fits(reading, total, largest), "{reading:?}: still fits");
                assert!(
                    fits(reading, total, largest - GI),
                    "{reading:?}: smaller too"
                );
            }
        }
    }
}
