//! Scenario 3: the API server, then etcd, is killed and started again in the middle of a burst
//! of claims (CreateVolume taking 0–3 s).

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::{BOUND_S, CREATE_CALLS, Metric, Run, Sizes, harness};

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

pub const METRICS: &[Metric] = &[BOUND_S, CREATE_CALLS];

pub async fn measure(mut run: Run<'_>) -> Result<()> {
    let stage = harness::begin(&mut run, &harness::slow_creates(0, 3000)).await?;
    let sizes = run.sizes;
    let victim = run.started.victim.as_ref().expect("begin started it");
    let names = harness::claim_names(sizes.s3_claims);
    let t0 = Instant::now();
    stage.create_all(&names).await?;
    stage.until_quarter(sizes.s3_claims, Some(victim)).await?;
    run.rec.set("pvs_at_restart", stage.pvs().await? as f64);
    for component in ["kube-apiserver", "etcd"] {
        run.cp
            .restart(component, DOWN)
            .await
            .with_context(|| format!("restarting {component}"))?;
    }
    let tally = stage.finish(&names, Instant::now(), run.rec).await?;
    if tally.unbound == 0 {
        run.rec.set("bound_s", t0.elapsed().as_secs_f64());
    }
    if let Some(r) = &victim.running
        && !r.process.is_running()
    {
        run.rec
            .notes
            .push("the provisioner exited during the restarts".to_string());
    }
    Ok(())
}
