//! Properties of the ledger under any sequence of attempts: what it hides from the scheduler
//! never exceeds the bytes of the claims in flight (or whose volume a reading may not show
//! yet), one entry each; what it refuses on is a part of that; and published capacity never
//! goes below zero or above the reading.

use proptest::prelude::*;

use super::*;
use crate::Segment;

fn key(i: usize) -> Key {
    Key {
        segment: Segment::from([("topology/node".to_string(), format!("n{i}"))]),
        class: "fast".into(),
    }
}

#[derive(Debug, Clone)]
enum Op {
    Hold {
        uid: usize,
        key: usize,
        bytes: i64,
    },
    Release {
        uid: usize,
    },
    End {
        uid: usize,
    },
    Deleted {
        uid: usize,
    },
    /// A refresh round of the key began and its reading came back.
    Reading {
        key: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..6usize, 0..2usize, -5i64..1_000).prop_map(|(uid, key, bytes)| Op::Hold {
            uid,
            key,
            bytes
        }),
        (0..6usize).prop_map(|uid| Op::Release { uid }),
        (0..6usize).prop_map(|uid| Op::End { uid }),
        (0..6usize).prop_map(|uid| Op::Deleted { uid }),
        (0..2usize).prop_map(|key| Op::Reading { key }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn hidden_bytes_never_exceed_what_is_in_flight(ops in proptest::collection::vec(op(), 0..60)) {
        let mut ledger = Ledger::default();
        // Refresh rounds begun and ended per key (one at a time, as the work queue runs them).
        let mut rounds = [0u64; 2];
        // What each claim asked for last, while it has an entry.
        let mut asked: std::collections::HashMap<usize, (usize, i64)> = Default::default();
        for op in ops {
            match op {
                Op::Hold { uid, key: k, bytes } => {
                    ledger.hold(&uid.to_string(), key(k), bytes, rounds[k]);
                    asked.insert(uid, (k, bytes.max(0)));
                }
                Op::Release { uid } => {
                    if let Some(&(k, _)) = asked.get(&uid) {
                        ledger.release(&uid.to_string(), rounds[k]);
                    }
                }
                Op::End { uid } => {
                    ledger.end(&uid.to_string());
                    asked.remove(&uid);
                }
                Op::Deleted { uid } => {
                    if ledger.deleted(&uid.to_string()).is_some() {
                        asked.remove(&uid);
                    }
                }
                Op::Reading { key: k } => {
                    rounds[k] += 1;
                    ledger.settle(&key(k), rounds[k]);
                    asked.retain(|uid, _| ledger.contains(&uid.to_string()));
                }
            }
            prop_assert!(ledger.len() <= asked.len(), "one entry per claim at most");
            for (k, &last) in rounds.iter().enumerate() {
                let in_flight: i64 = asked.values().filter(|(kk, _)| *kk == k).map(|(_, b)| b).sum();
                for round in 0..=last + 1 {
                    let shown = ledger.reserved(&key(k), round, None);
                    let certain = ledger.certain(&key(k), round, &[]);
                    prop_assert!(shown.bytes >= 0 && shown.bytes <= in_flight);
                    prop_assert!(certain.bytes <= shown.bytes, "refusal only on what is hidden");
                    prop_assert!(certain.held <= shown.held);
                }
            }
        }
        // Once every claim's attempt ended, nothing is hidden.
        for uid in 0..6 {
            ledger.end(&uid.to_string());
        }
        prop_assert!(ledger.is_empty());
    }

    #[test]
    fn published_capacity_stays_between_zero_and_the_reading(
        available in -10i64..1_000,
        maximum in proptest::option::of(0i64..2_000),
        reserved in -100i64..2_000,
    ) {
        let reading = Capacity { available, maximum_volume_size: maximum };
        let shown = apply(reading, reserved);
        prop_assert!(shown.available <= reading.available.max(0) || reserved <= 0);
        prop_assert!(shown.available >= 0 || reserved <= 0);
        if let (Some(m), Some(before)) = (shown.maximum_volume_size, maximum) {
            prop_assert!(m <= before, "a reservation never raises the maximum");
        }
        prop_assert!(!fits(reading, reserved, shown.limit().saturating_add(1)));
    }
}
