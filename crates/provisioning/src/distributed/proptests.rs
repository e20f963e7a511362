//! Properties of the node race ([`claim_turn`], [`reports`]): every instance computes the same
//! order from the same objects, whatever order its cache lists them in, so exactly one
//! instance takes a claim at once and exactly one reports that nothing fits.

use std::time::Duration;

use proptest::prelude::*;

use super::*;

const STEP: Duration = Duration::from_secs(2);
const MAX: Duration = Duration::from_secs(20);
const INSTANCES: [&str; 5] = [
    "external-provisioner-n0",
    "external-provisioner-n1",
    "external-provisioner-n2",
    "external-provisioner-n3",
    "external-provisioner-n4",
];
const CLASSES: [&str; 2] = ["fast", "slow"];

/// Objects as (instance, class, capacity, maximum) indexes and sizes.
type Raw = (usize, usize, Option<i64>, Option<i64>);

fn objects() -> impl Strategy<Value = Vec<Raw>> {
    let size = || proptest::option::of(0i64..8);
    proptest::collection::vec(
        (0..INSTANCES.len(), 0..CLASSES.len(), size(), size()),
        0..10,
    )
}

fn published(raw: &[Raw]) -> Vec<Published<'static>> {
    raw.iter()
        .map(|&(i, c, capacity, maximum_volume_size)| Published {
            instance: INSTANCES[i],
            class: CLASSES[c],
            capacity,
            maximum_volume_size,
        })
        .collect()
}

fn turns(uid: &str, bytes: i64, published: &[Published<'_>]) -> Vec<Turn> {
    INSTANCES
        .iter()
        .map(|own| claim_turn(uid, own, "fast", bytes, published, STEP, MAX))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// The order does not depend on the order in which a cache lists the objects.
    #[test]
    fn every_instance_computes_the_same_order(
        raw in objects(),
        seed in any::<u64>(),
        uid in "[a-f0-9]{8}",
        bytes in 0i64..8,
    ) {
        let list = published(&raw);
        let mut shuffled = list.clone();
        // A deterministic shuffle from the seed.
        let n = shuffled.len();
        for i in (1..n).rev() {
            let j = (seed.wrapping_mul(i as u64 + 7) % (i as u64 + 1)) as usize;
            shuffled.swap(i, j);
        }
        prop_assert_eq!(turns(&uid, bytes, &list), turns(&uid, bytes, &shuffled));
    }

    /// When some instance's object for the class holds the claim, exactly one instance takes
    /// it at once, and it is one of those; the other candidates wait distinct steps (up to the
    /// cap). (With no candidate at all, instances that publish nothing for the class cannot be
    /// ordered by anyone: they go at once, and the guarded write of `selected-node` lets one
    /// win.)
    #[test]
    fn one_candidate_goes_first(
        raw in objects(),
        fitting in 0..INSTANCES.len(),
        uid in "[a-f0-9]{8}",
        bytes in 0i64..8,
    ) {
        let mut raw = raw;
        raw.push((fitting, 0, Some(bytes), None));
        let list = published(&raw);
        let all = turns(&uid, bytes, &list);
        let candidate = |i: &str| list.iter().any(|p| p.instance == i && p.class == "fast" && p.fits(bytes));
        let first: Vec<&str> = INSTANCES
            .iter()
            .zip(&all)
            .filter(|(_, t)| **t == Turn::Now)
            .map(|(i, _)| *i)
            .collect();
        prop_assert_eq!(first.len(), 1, "{:?}", all);
        prop_assert!(candidate(first[0]), "{:?}", all);
        let mut waits: Vec<Duration> = INSTANCES
            .iter()
            .zip(&all)
            .filter(|(i, _)| candidate(i))
            .filter_map(|(_, t)| match t {
                Turn::After(d) if *d < MAX => Some(*d),
                _ => None,
            })
            .collect();
        let n = waits.len();
        waits.sort();
        waits.dedup();
        prop_assert_eq!(waits.len(), n, "two candidates would race: {:?}", all);
    }

    /// When no object for the class holds the claim, exactly one instance that publishes for
    /// it reports so.
    #[test]
    fn exactly_one_instance_reports_no_room(
        raw in objects(),
        uid in "[a-f0-9]{8}",
        bytes in 1i64..8,
    ) {
        // Every object for the class too small, and at least one of them.
        let mut raw: Vec<Raw> = raw
            .into_iter()
            .map(|(i, c, cap, max)| match c {
                0 => (i, c, cap.map(|v| v.min(bytes - 1)), max),
                _ => (i, c, cap, max),
            })
            .collect();
        raw.push((0, 0, Some(bytes - 1), None));
        let list = published(&raw);
        let reporting = turns(&uid, bytes, &list)
            .iter()
            .filter(|t| **t == Turn::NoRoom { report: true })
            .count();
        prop_assert_eq!(reporting, 1);
    }

    /// An instance whose own attempts failed steps behind every candidate's wait.
    #[test]
    fn a_failing_instance_steps_behind(raw in objects(), uid in "[a-f0-9]{8}", failures in 1u32..10) {
        let list = published(&raw);
        let turn = claim_turn(&uid, INSTANCES[0], "fast", 1, &list, STEP, MAX);
        match after_own_failures(turn.clone(), failures, STEP, MAX) {
            Turn::After(d) => prop_assert!(d > MAX, "{turn:?} -> {d:?}"),
            Turn::NoRoom { .. } => {
                let no_room = matches!(turn, Turn::NoRoom { .. });
                prop_assert!(no_room, "{:?}", turn);
            }
            other => prop_assert!(false, "{other:?}"),
        }
    }
}
