//! Scenario 3: the API server, then etcd, is killed and started again in the middle of a burst
//! of claims (CreateVolume taking 0–3 s).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt};
use serde_json::json;
use testenv::ControlPlane;

use super::Sizes;
use super::harness::{self, Victim};
use super::tally;
use crate::bench::calllog;
use crate::bench::cluster::PARALLEL;
use crate::bench::ctx::{Ctx, Slot};
use crate::bench::launch::Driver;
use crate::bench::results::{MetricDef, RunRecord};

/// How long each component stays down.
const DOWN: Duration = Duration::from_secs(10);

pub fn setup(sizes: &Sizes) -> String {
    format!(
        "{} claims of 1 Gi in an Immediate class (reclaim Delete) are created at once; the \
         mock driver's CreateVolume takes a random 0–3 s. Once a quarter of their PVs exist, \
         kube-apiserver is killed (SIGKILL) and started again {} s later; once it is ready, \
         etcd is killed and started again {} s later. Then the run waits (up to {} s) until \
         every claim is Bound and the driver holds exactly their volumes. The provisioner is \
         not restarted.",
        sizes.s3_claims,
        DOWN.as_secs(),
        DOWN.as_secs(),
        sizes.settle.as_secs(),
    )
}

pub fn metrics() -> Vec<MetricDef> {
    let mut m = super::loss_metrics();
    m.extend([
        MetricDef::new("bound_s", "Time until every claim is Bound", "s", true),
        MetricDef::new("create_calls", "CreateVolume calls", "", true),
    ]);
    m
}

pub async fn measure(
    ctx: &Ctx,
    cp: &ControlPlane,
    sizes: &Sizes,
    slot: &Slot,
    rec: &mut RunRecord,
    started: &mut super::Started,
) -> Result<()> {
    harness::prepare(ctx, slot).await?;
    let faults = json!({"CreateVolume": {"delay_ms": 0, "delay_max_ms": 3000}});
    let driver: &Driver = started
        .driver
        .insert(harness::start_driver(ctx, slot, &faults)?);
    let (socket, call_log) = (driver.socket.clone(), driver.call_log.clone());
    let victim = started
        .victim
        .insert(Victim::start(ctx, slot, driver).await?);
    let claims = harness::claims_api(ctx, slot);
    let names: BTreeSet<String> = (0..sizes.s3_claims).map(|i| format!("c{i}")).collect();

    let t0 = Instant::now();
    futures::stream::iter(names.iter())
        .map(|n| harness::create_claim(&claims, slot, n))
        .buffer_unordered(PARALLEL)
        .try_collect::<Vec<()>>()
        .await?;
    let quarter = sizes.s3_claims / 4;
    crate::bench::cluster::poll(
        "a quarter of the PVs",
        sizes.settle,
        Duration::from_millis(100),
        || async {
            if let Some(r) = &victim.running {
                r.check_alive()?;
            }
            Ok((harness::count_pvs(ctx, slot).await? >= quarter).then_some(()))
        },
    )
    .await?;
    rec.set(
        "pvs_at_restart",
        harness::count_pvs(ctx, slot).await? as f64,
    );
    for component in ["kube-apiserver", "etcd"] {
        cp.restart(component, DOWN)
            .await
            .with_context(|| format!("restarting {component}"))?;
    }
    let last_fault = Instant::now();
    match harness::settle(ctx, slot, &socket, &names, sizes.settle).await? {
        Some(_) => {
            rec.set("bound_s", t0.elapsed().as_secs_f64());
            rec.set("recovery_s", last_fault.elapsed().as_secs_f64());
        }
        None => rec.notes.push(format!(
            "not settled {} s after the restarts",
            sizes.settle.as_secs()
        )),
    }
    if let Some(r) = &victim.running
        && !r.process.is_running()
    {
        rec.notes
            .push("the provisioner exited during the restarts".to_string());
    }
    tally::gather(ctx, slot, &socket, &call_log, &names)
        .await?
        .record(rec);
    let calls = calllog::read(&call_log);
    rec.set(
        "create_calls",
        calllog::count(&calls, "CreateVolume") as f64,
    );
    Ok(())
}
