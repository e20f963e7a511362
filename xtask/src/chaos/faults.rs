//! Scenario 4: about 30% of CreateVolume and DeleteVolume calls fail, with a mix of gRPC codes
//! and calls that outlast the provisioner's `--timeout`.

use std::collections::BTreeSet;
use std::time::Instant;

use anyhow::Result;
use futures::{StreamExt, TryStreamExt};
use serde_json::{Value, json};

use super::Sizes;
use super::harness::{self, Victim};
use super::tally;
use crate::bench::calllog;
use crate::bench::cluster::PARALLEL;
use crate::bench::ctx::{Ctx, Slot};
use crate::bench::launch::Driver;
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
    let mut m = super::loss_metrics();
    m.extend([
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
    ]);
    m
}

pub async fn measure(
    ctx: &Ctx,
    sizes: &Sizes,
    slot: &Slot,
    rec: &mut RunRecord,
    started: &mut super::Started,
) -> Result<()> {
    harness::prepare(ctx, slot).await?;
    let driver: &Driver = started
        .driver
        .insert(harness::start_driver(ctx, slot, &faults())?);
    let (socket, call_log) = (driver.socket.clone(), driver.call_log.clone());
    started.victim = Some(Victim::start(ctx, slot, driver).await?);
    let claims = harness::claims_api(ctx, slot);
    let names: BTreeSet<String> = (0..sizes.s4_claims).map(|i| format!("c{i}")).collect();

    let t0 = Instant::now();
    futures::stream::iter(names.iter())
        .map(|n| harness::create_claim(&claims, slot, n))
        .buffer_unordered(PARALLEL)
        .try_collect::<Vec<()>>()
        .await?;
    match harness::settle(ctx, slot, &socket, &names, sizes.settle).await? {
        Some(_) => rec.set("bound_s", t0.elapsed().as_secs_f64()),
        None => rec
            .notes
            .push(format!("not all Bound after {} s", sizes.settle.as_secs())),
    }
    // Unbound claims are counted before they are deleted.
    let after_create = tally::gather(ctx, slot, &socket, &call_log, &names).await?;

    let t1 = Instant::now();
    futures::stream::iter(names.iter())
        .map(|n| harness::delete_claim(&claims, n))
        .buffer_unordered(PARALLEL)
        .try_collect::<Vec<()>>()
        .await?;
    let none = BTreeSet::new();
    match harness::settle(ctx, slot, &socket, &none, sizes.settle).await? {
        Some(_) => {
            rec.set("gone_s", t1.elapsed().as_secs_f64());
            rec.set("recovery_s", t1.elapsed().as_secs_f64());
        }
        None => rec.notes.push(format!(
            "volumes left {} s after the deletion",
            sizes.settle.as_secs()
        )),
    }
    let mut t = tally::gather(ctx, slot, &socket, &call_log, &none).await?;
    t.unbound = after_create.unbound;
    t.record(rec);
    let calls = calllog::read(&call_log);
    let failed = calls
        .iter()
        .filter(|c| c.method == "CreateVolume" || c.method == "DeleteVolume")
        .filter(|c| c.error.is_some())
        .count();
    rec.set("failed_calls", failed as f64);
    rec.set(
        "create_calls",
        calllog::count(&calls, "CreateVolume") as f64,
    );
    rec.set(
        "delete_calls",
        calllog::count(&calls, "DeleteVolume") as f64,
    );
    Ok(())
}
