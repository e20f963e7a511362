//! Scenario 4: about 30% of CreateVolume and DeleteVolume calls fail, with a mix of gRPC codes
//! and calls that outlast the provisioner's `--timeout`.

use std::collections::BTreeSet;
use std::time::Instant;

use anyhow::Result;
use futures::{StreamExt, TryStreamExt};
use serde_json::{Value, json};

use super::Sizes;
use super::harness;
use crate::bench::calllog;
use crate::bench::cluster::PARALLEL;
use crate::bench::ctx::{Ctx, Slot};
use crate::bench::results::{MetricDef, RunRecord};

/// The codes each failing call gets, each with the same share.
const CODES: [&str; 5] = [
    "Unavailable",
    "DeadlineExceeded",
    "Aborted",
    "Internal",
    "ResourceExhausted",
];
/// Each entry's chance; six entries in a row give 1 − 0.94⁶ ≈ 31% of the calls a fault.
const CHANCE: f64 = 0.06;

/// The faults of one method: the codes, then a delay past `--timeout=10s`.
fn method_faults() -> Value {
    let mut list: Vec<Value> = CODES
        .iter()
        .map(|c| json!({"code": c, "probability": CHANCE}))
        .collect();
    list.push(json!({"delay_ms": 12000, "probability": CHANCE}));
    Value::Array(list)
}

pub fn faults() -> Value {
    json!({"CreateVolume": method_faults(), "DeleteVolume": method_faults()})
}

pub fn setup(sizes: &Sizes) -> String {
    format!(
        "{} claims of 1 Gi in an Immediate class (reclaim Delete) are created at once; once all \
         are Bound (or after {} s) they are deleted at once. In the mock driver about 31% of \
         CreateVolume and DeleteVolume calls fail: each call has a 6% chance of each of \
         {} and a further 6% of taking 12 s, past both provisioners' `--timeout=10s`.",
        sizes.s4_claims,
        sizes.settle.as_secs(),
        CODES.join(", "),
    )
}

pub fn metrics() -> Vec<MetricDef> {
    super::with_losses([
        MetricDef::new("bound_s", "Time until every claim is Bound", "s", true),
        MetricDef::new("gone_s", "Time until every volume is deleted", "s", true),
        MetricDef::new(
            "failed_calls",
            "CreateVolume/DeleteVolume calls failed",
            "",
            true,
        ),
        MetricDef::new("create_calls", "CreateVolume calls", "", true),
        MetricDef::new("delete_calls", "DeleteVolume calls", "", true),
    ])
}

pub async fn measure(
    ctx: &Ctx,
    sizes: &Sizes,
    slot: &Slot,
    rec: &mut RunRecord,
    started: &mut super::Started,
) -> Result<()> {
    let (socket, call_log) = harness::begin(ctx, slot, &faults(), started).await?;
    let paths = (socket.as_path(), call_log.as_path());
    let claims = harness::claims_api(ctx, slot);
    let names = harness::claim_names(sizes.s4_claims);

    let t0 = Instant::now();
    harness::create_claims(&claims, slot, &names).await?;
    let after_create =
        harness::settle_and_count(ctx, slot, paths, &names, sizes.settle, t0, rec).await?;
    // Settling after the creation is not the recovery this scenario reports.
    if let Some(seconds) = rec.values.remove("recovery_s") {
        rec.set("bound_s", seconds);
    }

    let t1 = Instant::now();
    futures::stream::iter(names.iter())
        .map(|n| harness::delete_claim(&claims, n))
        .buffer_unordered(PARALLEL)
        .try_collect::<Vec<()>>()
        .await?;
    let none = BTreeSet::new();
    let mut t = harness::settle_and_count(ctx, slot, paths, &none, sizes.settle, t1, rec).await?;
    if let Some(seconds) = rec.values.get("recovery_s").copied() {
        rec.set("gone_s", seconds);
    }
    // Claims that never became Bound were counted before they were deleted.
    t.unbound = after_create.unbound;
    t.record(rec);
    let failed = calllog::read(&call_log)
        .iter()
        .filter(|c| c.method == "CreateVolume" || c.method == "DeleteVolume")
        .filter(|c| c.error.is_some())
        .count();
    rec.set("failed_calls", failed as f64);
    Ok(())
}
