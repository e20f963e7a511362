//! The capacity planner: segments from CSINodes and Node labels, the desired (segment, class)
//! set, GetCapacity readings clamped, in-flight reservations subtracted, and one plan per key.
//!
//! Properties: every published value (and its quantity) is non-negative and canonical; there is
//! exactly one desired key per (segment, class) pair; a reservation never raises what is
//! published; a key's plan keeps at most one object (the smallest live name) and never writes
//! a key that has no reading.
#![no_main]

use std::collections::{BTreeMap, BTreeSet};

use arbitrary::{Arbitrary, Unstructured};
use capacity::Capacity;
use capacity::class::Class;
use capacity::desired::desired_keys;
use capacity::ledger::apply;
use capacity::plan::{Write, plan_key};
use capacity::published::{Published, format_bytes};
use capacity::segment::{NodeDriver, segments};
use csi_provisioner_fuzz::{assert_canonical_quantity, word};
use libfuzzer_sys::fuzz_target;

const KEYS: &[&str] = &["zone", "node"];
const VALUES: &[&str] = &["a", "b"];
const NODES: &[&str] = &["n1", "n2", "n3"];

#[derive(Debug)]
struct Input {
    drivers: Vec<NodeDriver>,
    labels: BTreeMap<String, BTreeMap<String, String>>,
    classes: Vec<Class>,
    readings: Vec<(i64, Option<i64>, i64)>,
    objects: Vec<(String, Option<i64>, bool)>,
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let mut drivers = Vec::new();
        for _ in 0..u.int_in_range(0..=3)? {
            let mut keys: Vec<String> = Vec::new();
            for _ in 0..u.int_in_range(0..=2)? {
                let k = word(u, KEYS)?;
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
            drivers.push(NodeDriver {
                node: word(u, NODES)?,
                topology_keys: keys,
            });
        }
        let mut labels = BTreeMap::new();
        for _ in 0..u.int_in_range(0..=3)? {
            let mut l = BTreeMap::new();
            for _ in 0..u.int_in_range(0..=2)? {
                l.insert(word(u, KEYS)?, word(u, VALUES)?);
            }
            labels.insert(word(u, NODES)?, l);
        }
        let mut names = BTreeSet::new();
        for _ in 0..u.int_in_range(0..=3)? {
            names.insert(word(u, &["fast", "slow"])?);
        }
        let classes = names
            .into_iter()
            .map(|name| Class {
                name,
                parameters: BTreeMap::new(),
            })
            .collect();
        Ok(Input {
            drivers,
            labels,
            classes,
            readings: Arbitrary::arbitrary(u)?,
            objects: (0..u.int_in_range(0..=3)?)
                .map(|_| {
                    Ok((
                        word(u, &["csisc-a", "csisc-b"])?,
                        Option::<i64>::arbitrary(u)?,
                        bool::arbitrary(u)?,
                    ))
                })
                .collect::<arbitrary::Result<_>>()?,
        })
    }
}

fn assert_publishable(c: Capacity) {
    assert!(c.available >= 0, "negative capacity {c:?}");
    assert_canonical_quantity(&format_bytes(c.available), c.available);
    if let Some(m) = c.maximum_volume_size {
        assert!(m >= 0, "negative maximum volume size {c:?}");
        assert_canonical_quantity(&format_bytes(m), m);
    }
}

fuzz_target!(|input: Input| {
    let segments = segments(&input.drivers, &input.labels);
    let keys = desired_keys(&segments, &input.classes);
    assert_eq!(
        keys.len(),
        segments.len() * input.classes.len(),
        "one key per (segment, class)"
    );
    for key in &keys {
        assert!(input.classes.iter().any(|c| c.name == key.class));
        assert!(segments.contains(&key.segment));
    }

    for (i, key) in keys.iter().enumerate() {
        let reading = input
            .readings
            .get(i)
            .map(|&(available, maximum, reserved)| {
                let read = Capacity::from_response(available, maximum);
                assert_publishable(read);
                let shown = apply(read, reserved);
                assert_publishable(shown);
                assert!(
                    shown.available <= read.available,
                    "a reservation raised capacity"
                );
                assert!(shown.limit() <= read.limit() || reserved <= 0);
                shown
            });
        // Object names are unique in the API.
        let mut seen = BTreeSet::new();
        let objects: Vec<Published> = input
            .objects
            .iter()
            .filter(|(name, _, _)| seen.insert(name.clone()))
            .map(|(name, cap, deleting)| Published {
                name: name.clone(),
                key: Some(key.clone()),
                capacity: *cap,
                maximum_volume_size: None,
                controller_uid: None,
                deleting: *deleting,
            })
            .collect();
        let refs: Vec<&Published> = objects.iter().collect();
        let plan = plan_key(reading, &refs, Some("uid-1"));
        let live: BTreeSet<&str> = objects
            .iter()
            .filter(|o| !o.deleting)
            .map(|o| o.name.as_str())
            .collect();
        let kept = match &plan.write {
            Write::Create => {
                assert!(live.is_empty() && reading.is_some());
                None
            }
            Write::Update { name } => {
                assert!(reading.is_some());
                Some(name.as_str())
            }
            Write::Nothing => None,
        };
        if let Some(kept) = kept {
            assert_eq!(Some(&kept), live.first(), "the smallest live name is kept");
        }
        let deleted: BTreeSet<&str> = plan.delete_duplicates.iter().map(String::as_str).collect();
        assert!(
            deleted.iter().all(|d| live.contains(d)),
            "deletes only live duplicates"
        );
        assert!(
            !live.first().is_some_and(|first| deleted.contains(first)),
            "deletes the survivor"
        );
    }
});
