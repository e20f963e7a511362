//! Scenario 4: about 30% of CreateVolume and DeleteVolume calls fail, with a mix of gRPC codes
//! and calls that outlast the provisioner's `--timeout`.

use std::collections::BTreeSet;
use std::time::Instant;

use anyhow::Result;
use serde_json::{Value, json};

use super::{BOUND_S, CREATE_CALLS, DELETE_CALLS, Metric, Run, Sizes, harness};
use crate::bench::calllog;

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

pub const METRICS: &[Metric] = &[
    BOUND_S,
    Metric("gone_s", "Time until every volume is deleted", "s", true),
    Metric(
        "failed_calls",
        "CreateVolume/DeleteVolume calls failed",
        "",
        true,
    ),
    CREATE_CALLS,
    DELETE_CALLS,
];

pub async fn measure(mut run: Run<'_>) -> Result<()> {
    let stage = harness::begin(&mut run, &faults()).await?;
    let sizes = run.sizes;
    let names = harness::claim_names(sizes.s4_claims);

    let t0 = Instant::now();
    stage.create_all(&names).await?;
    let after_create = stage.count(&names, t0, run.rec).await?;
    // Settling after the creation is not the recovery this scenario reports.
    if let Some(seconds) = run.rec.values.remove("recovery_s") {
        run.rec.set("bound_s", seconds);
    }

    let t1 = Instant::now();
    stage.delete_all(&names).await?;
    let mut t = stage.count(&BTreeSet::new(), t1, run.rec).await?;
    if let Some(seconds) = run.rec.values.get("recovery_s").copied() {
        run.rec.set("gone_s", seconds);
    }
    // Claims that never became Bound were counted before they were deleted.
    t.unbound = after_create.unbound;
    t.record(run.rec);
    let failed = calllog::read(&stage.call_log)
        .iter()
        .filter(|c| c.method == "CreateVolume" || c.method == "DeleteVolume")
        .filter(|c| c.error.is_some())
        .count();
    run.rec.set("failed_calls", failed as f64);
    Ok(())
}
