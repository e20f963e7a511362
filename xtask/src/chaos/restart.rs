//! Scenario 3: the API server, then etcd, is killed and started again in the middle of a burst
//! of claims (CreateVolume taking 0–3 s).

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use testenv::ControlPlane;

use super::Sizes;
use super::harness;
use crate::bench::ctx::{Ctx, Slot};
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
    super::with_losses([
        MetricDef::new("bound_s", "Time until every claim is Bound", "s", true),
        MetricDef::new("create_calls", "CreateVolume calls", "", true),
    ])
}

pub async fn measure(
    ctx: &Ctx,
    cp: &ControlPlane,
    sizes: &Sizes,
    slot: &Slot,
    rec: &mut RunRecord,
    started: &mut super::Started,
) -> Result<()> {
    let faults = harness::slow_creates(0, 3000);
    let (socket, call_log) = harness::begin(ctx, slot, &faults, started).await?;
    let victim = started.victim.as_ref().expect("begin started it");
    let names = harness::claim_names(sizes.s3_claims);
    let t0 = Instant::now();
    harness::create_claims(&harness::claims_api(ctx, slot), slot, &names).await?;
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
    let paths = (socket.as_path(), call_log.as_path());
    let tally =
        harness::settle_and_count(ctx, slot, paths, &names, sizes.settle, Instant::now(), rec)
            .await?;
    tally.record(rec);
    if tally.unbound == 0 {
        rec.set("bound_s", t0.elapsed().as_secs_f64());
    }
    if let Some(r) = &victim.running
        && !r.process.is_running()
    {
        rec.notes
            .push("the provisioner exited during the restarts".to_string());
    }
    Ok(())
}
