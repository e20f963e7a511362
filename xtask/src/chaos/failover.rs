//! Scenario 5: two replicas with leader election, each in its own UTS namespace with its own
//! host name (upstream's candidate identity is the host name); the leader is killed mid-burst.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

use super::{BOUND_S, CREATE_CALLS, Metric, Run, Sizes, harness};
use crate::bench::cluster::poll;
use crate::bench::ctx::{Ctx, Slot};
use crate::bench::launch::{self, Running};

const REPLICAS: [&str; 2] = ["replica-a", "replica-b"];

pub fn setup(sizes: &Sizes) -> String {
    format!(
        "Two replicas of the provisioner run with `--leader-election` (upstream's defaults: \
         lease 15 s, renew deadline 10 s, retry period 5 s), each started with `unshare --uts` \
         under its own host name. {} claims of 1 Gi in an Immediate class are created at once \
         (CreateVolume takes a random 0–3 s); once a quarter of their PVs exist the leader is \
         killed with SIGKILL and not started again. The gap is the time from the kill until \
         the Lease names the other replica. Then the run waits (up to {} s) until every claim \
         is Bound.",
        sizes.s5_claims,
        sizes.settle.as_secs(),
    )
}

pub const METRICS: &[Metric] = &[
    Metric("gap_s", "Time without a leader after the kill", "s", true),
    BOUND_S,
    CREATE_CALLS,
];

/// Starts one replica under host name `host`: the run's flags with its own metrics address and
/// leader election on.
fn spawn(ctx: &Ctx, slot: &Slot, args: &[String], host: &str) -> Result<Running> {
    let addr = launch::free_addr()?;
    let mut flags: Vec<String> = args
        .iter()
        .filter(|a| !a.starts_with("--http-endpoint=") && !a.starts_with("--leader-election"))
        .cloned()
        .collect();
    flags.extend([
        format!("--http-endpoint={addr}"),
        "--leader-election=true".into(),
        format!("--leader-election-namespace={}", slot.namespace),
    ]);
    let program = ctx.bins.provisioner(slot.which);
    let mut cmd = Command::new("unshare");
    cmd.args(["--uts", "sh", "-c", "hostname \"$0\" && exec \"$@\"", host])
        .arg(program)
        .args(&flags)
        .env("NAMESPACE", &slot.namespace);
    let name = format!("csi-provisioner-{}-{host}", slot.which);
    let process = testenv::try_spawn(&name, cmd, &slot.dir)?;
    Ok(Running {
        which: slot.which,
        http_addr: addr,
        process,
        started: Instant::now(),
    })
}

/// The Lease's holder, if any.
async fn holder(leases: &Api<Lease>, name: &str) -> Result<Option<String>> {
    Ok(leases
        .get_opt(name)
        .await?
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty()))
}

pub async fn measure(mut run: Run<'_>) -> Result<()> {
    let stage = harness::begin_driver(&mut run, &harness::slow_creates(0, 3000)).await?;
    let (ctx, sizes, slot) = (run.ctx, run.sizes, run.slot);
    let args = ctx
        .provisioner_args(slot, &harness::budget(), &stage.socket, &[])
        .await?;
    let replicas = &mut run.started.replicas;
    for host in REPLICAS {
        replicas.push((host.to_string(), spawn(ctx, slot, &args, host)?));
    }
    let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), &slot.namespace);
    let lease = leader_election::lock_name(&slot.driver);
    let first = poll(
        "a leader",
        sizes.settle,
        Duration::from_millis(200),
        || async { holder(&leases, &lease).await },
    )
    .await?;

    let names = harness::claim_names(sizes.s5_claims);
    let t0 = Instant::now();
    stage.create_all(&names).await?;
    stage.until_quarter(sizes.s5_claims, None).await?;
    let Some(index) = replicas
        .iter()
        .position(|(host, _)| first.contains(host.as_str()))
    else {
        bail!("the Lease holder {first:?} is neither replica");
    };
    replicas[index].1.process.kill9();
    let killed = Instant::now();
    poll(
        "a new leader",
        sizes.settle,
        Duration::from_millis(100),
        || async { Ok(holder(&leases, &lease).await?.filter(|h| *h != first)) },
    )
    .await
    .context("after killing the leader")?;
    run.rec.set("gap_s", killed.elapsed().as_secs_f64());
    let tally = stage.finish(&names, killed, run.rec).await?;
    if tally.unbound == 0 {
        run.rec.set("bound_s", t0.elapsed().as_secs_f64());
    }
    Ok(())
}
