//! Scenario 4: about 30% of CreateVolume and DeleteVolume calls fail, with a mix of gRPC codes
//! and calls that outlast the provisioner's `--timeout`; and the driver's socket goes away for
//! 20 s while the claims are being provisioned.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{Value, json};

use super::{BOUND_S, CREATE_CALLS, DELETE_CALLS, Metric, Run, Sizes, Started, harness};
use crate::bench::calllog;
use crate::bench::ctx::{Ctx, Slot};

/// How long after the socket outage began a provisioner that exited is still started again
/// (the outage is the mock driver's default `--socket-outage-ms`, 20 s).
const RESTART_WINDOW: Duration = Duration::from_secs(90);
/// How long an exited provisioner stays down before it is started again (kubelet's first
/// restart back-off is 10 s; shorter here, the same for both).
const RESTART_AFTER: Duration = Duration::from_secs(1);

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
         {} and a further 6% of taking 12 s, past both provisioners' `--timeout=10s`. Once a \
         quarter of the claims have a PV the driver's socket goes away for 20 s (connections \
         dropped, file removed; the driver keeps its volumes) and comes back; a provisioner \
         that exits meanwhile is started again {} s later, as kubelet would.",
        sizes.s4_claims,
        sizes.settle.as_secs(),
        CODES.join(", "),
        RESTART_AFTER.as_secs(),
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
    Metric(
        "outage_restarts",
        "Provisioner restarts after the socket outage",
        "",
        true,
    ),
];

pub async fn measure(mut run: Run<'_>) -> Result<()> {
    let stage = harness::begin(&mut run, &faults()).await?;
    let sizes = run.sizes;
    let names = harness::claim_names(sizes.s4_claims);

    let t0 = Instant::now();
    stage.create_all(&names).await?;
    let (after_create, restarts) = tokio::join!(
        stage.count(&names, t0, run.rec),
        socket_outage(&stage, run.ctx, run.slot, run.started, names.len())
    );
    let after_create = after_create?;
    run.rec.set("outage_restarts", f64::from(restarts?));
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

/// Once a quarter of the claims have a PV, SIGUSR1 to the mock driver takes its socket away;
/// for [`RESTART_WINDOW`] an exited provisioner is started again. Returns the restarts.
async fn socket_outage(
    stage: &harness::Stage<'_>,
    ctx: &Ctx,
    slot: &Slot,
    started: &mut Started,
    claims: usize,
) -> Result<u32> {
    stage.until_quarter(claims, started.victim.as_ref()).await?;
    let pid = started
        .driver
        .as_ref()
        .context("the driver was started")?
        .process
        .pid();
    let sent = std::process::Command::new("kill")
        .args(["-USR1", &pid.to_string()])
        .status()
        .context("kill -USR1 the mock driver")?;
    anyhow::ensure!(sent.success(), "kill -USR1 {pid} failed");
    let victim = started
        .victim
        .as_mut()
        .context("the provisioner was started")?;
    let first = victim.starts;
    let until = Instant::now() + RESTART_WINDOW;
    while Instant::now() < until {
        let exited = victim
            .running
            .as_mut()
            .is_some_and(|r| r.process.try_wait().ok().flatten().is_some());
        if exited {
            tokio::time::sleep(RESTART_AFTER).await;
            victim.restart(ctx, slot)?;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(victim.starts - first)
}
