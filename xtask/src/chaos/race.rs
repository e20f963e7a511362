//! Scenario 2: every claim is deleted 0–3 s after it was created, while CreateVolume is slow
//! (2–5 s), so most deletions land in the middle of the call (external-provisioner #1469).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::Result;
use futures::StreamExt;
use serde_json::json;

use super::Sizes;
use super::harness::{self, Victim};
use super::tally;
use crate::bench::calllog;
use crate::bench::ctx::{Ctx, Slot};
use crate::bench::launch::Driver;
use crate::bench::results::{MetricDef, RunRecord};

const DELETE_WITHIN: Duration = Duration::from_secs(3);

pub fn setup(sizes: &Sizes) -> String {
    format!(
        "{} claims of 1 Gi in an Immediate class (reclaim Delete) are created over {} s; each \
         is deleted a random 0–3 s after its creation. The mock driver's CreateVolume takes a \
         random 2–5 s, so most deletions come while the volume is being made. Then the run \
         waits (up to {} s) until no claim, no PV and no volume is left.",
        sizes.s2_claims,
        sizes.s2_spread.as_secs(),
        sizes.settle.as_secs(),
    )
}

pub fn metrics() -> Vec<MetricDef> {
    let mut m = super::loss_metrics();
    m.extend([
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
    let faults = json!({"CreateVolume": {"delay_ms": 2000, "delay_max_ms": 5000}});
    let driver: &Driver = started
        .driver
        .insert(harness::start_driver(ctx, slot, &faults)?);
    let (socket, call_log) = (driver.socket.clone(), driver.call_log.clone());
    started.victim = Some(Victim::start(ctx, slot, driver).await?);
    let claims = harness::claims_api(ctx, slot);

    let t0 = Instant::now();
    let every = sizes.s2_spread.div_f64(sizes.s2_claims as f64);
    // Each claim's life: created on its slot in the spread, deleted 0–3 s later.
    let lives = futures::stream::iter(0..sizes.s2_claims)
        .map(|i| {
            let claims = claims.clone();
            async move {
                tokio::time::sleep_until((t0 + every.mul_f64(i as f64)).into()).await;
                let name = format!("c{i}");
                harness::create_claim(&claims, slot, &name).await?;
                tokio::time::sleep(DELETE_WITHIN.mul_f64(rand::random::<f64>())).await;
                harness::delete_claim(&claims, &name).await
            }
        })
        .buffer_unordered(1024)
        .collect::<Vec<Result<()>>>()
        .await;
    lives.into_iter().collect::<Result<Vec<()>>>()?;
    let last_delete = Instant::now();
    let none = BTreeSet::new();
    match harness::settle(ctx, slot, &socket, &none, sizes.settle).await? {
        Some(_) => rec.set("recovery_s", last_delete.elapsed().as_secs_f64()),
        None => rec.notes.push(format!(
            "not settled {} s after the last deletion",
            sizes.settle.as_secs()
        )),
    }
    tally::gather(ctx, slot, &socket, &call_log, &none)
        .await?
        .record(rec);
    let calls = calllog::read(&call_log);
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
