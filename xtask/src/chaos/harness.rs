//! What every chaos scenario shares: a provisioner that can be killed and started again with
//! the same flags, a driver with a faults file, claims made and removed, and the wait until
//! the cluster has settled.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::Value;

use super::Run;
use super::tally::{self, Tally, is_bound};
use crate::bench::calllog;
use crate::bench::cluster::{PARALLEL, create_all, driver_volume_ids, poll, pv_driver};
use crate::bench::ctx::{Ctx, Slot};
use crate::bench::launch::{Budget, Driver, Running};
use crate::bench::objects;
use crate::bench::results::RunRecord;

/// Both provisioners get the same budget: rate limits are not what this suite attacks.
pub fn budget() -> Budget {
    Budget::defaults().with_qps(100, 200)
}

/// The provisioner under attack: the same flags on every start.
pub struct Victim {
    args: Vec<String>,
    pub running: Option<Running>,
    /// How often it was started (1 + restarts).
    pub starts: u32,
}

impl Victim {
    pub async fn start(ctx: &Ctx, slot: &Slot, driver: &Driver) -> Result<Victim> {
        Victim::start_with(ctx, slot, driver, &budget()).await
    }

    /// [`Victim::start`] with another budget (capacity tracking).
    pub async fn start_with(
        ctx: &Ctx,
        slot: &Slot,
        driver: &Driver,
        budget: &Budget,
    ) -> Result<Victim> {
        let args = ctx
            .provisioner_args(slot, budget, &driver.socket, &[])
            .await?;
        let running = ctx.spawn_provisioner(slot, &args)?;
        Ok(Victim {
            args,
            running: Some(running),
            starts: 1,
        })
    }

    /// SIGKILL, as the kernel's OOM killer or a node failure would.
    pub fn kill9(&mut self) {
        if let Some(mut r) = self.running.take() {
            r.process.kill9();
        }
    }

    /// Starts it again (its log is appended to).
    pub fn restart(&mut self, ctx: &Ctx, slot: &Slot) -> Result<()> {
        self.kill9();
        self.running = Some(ctx.spawn_provisioner(slot, &self.args)?);
        self.starts += 1;
        Ok(())
    }
}

/// CreateVolume taking a random `min_ms`–`max_ms` (a faults file's JSON).
pub fn slow_creates(min_ms: u64, max_ms: u64) -> Value {
    serde_json::json!({"CreateVolume": {"delay_ms": min_ms, "delay_max_ms": max_ms}})
}

/// What a begun run's steps act on: the slot's claims, and the driver's socket and call log.
pub struct Stage<'a> {
    ctx: &'a Ctx,
    slot: &'a Slot,
    /// The longest a wait on the cluster lasts.
    settle: Duration,
    pub socket: PathBuf,
    pub call_log: PathBuf,
    claims: Api<PersistentVolumeClaim>,
}

/// What most scenarios start with: [`begin_driver`], then the provisioner (kept in `started`
/// for the teardown).
pub async fn begin<'a>(run: &mut Run<'a>, faults: &Value) -> Result<Stage<'a>> {
    let stage = begin_driver(run, faults).await?;
    let driver = run
        .started
        .driver
        .as_ref()
        .expect("begin_driver started it");
    run.started.victim = Some(Victim::start(run.ctx, run.slot, driver).await?);
    Ok(stage)
}

/// The slot's namespace, CSIDriver and class, and the driver with `faults` (kept in `started`
/// for the teardown).
pub async fn begin_driver<'a>(run: &mut Run<'a>, faults: &Value) -> Result<Stage<'a>> {
    let (ctx, slot) = (run.ctx, run.slot);
    prepare(ctx, slot).await?;
    let driver = run.started.driver.insert(start_driver(ctx, slot, faults)?);
    Ok(Stage {
        ctx,
        slot,
        settle: run.sizes.settle,
        socket: driver.socket.clone(),
        call_log: driver.call_log.clone(),
        claims: Api::namespaced(ctx.client.clone(), &slot.namespace),
    })
}

impl Stage<'_> {
    /// Creates one 1Gi claim of the slot's class.
    pub async fn create(&self, name: &str) -> Result<()> {
        let claim = objects::claim(name, &class_name(self.slot), "1Gi", &self.slot.driver, None);
        self.claims
            .create(&PostParams::default(), &claim)
            .await
            .with_context(|| format!("creating claim {name}"))?;
        Ok(())
    }

    /// Deletes a claim (a claim already gone is fine).
    pub async fn delete(&self, name: &str) -> Result<()> {
        match self.claims.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e).with_context(|| format!("deleting claim {name}")),
        }
    }

    /// Creates every claim in `names`, [`PARALLEL`] at a time.
    pub async fn create_all(&self, names: &BTreeSet<String>) -> Result<()> {
        each(names, |n| self.create(n)).await
    }

    /// Deletes every claim in `names`, [`PARALLEL`] at a time.
    pub async fn delete_all(&self, names: &BTreeSet<String>) -> Result<()> {
        each(names, |n| self.delete(n)).await
    }

    /// How many PVs of the slot's driver exist.
    pub async fn pvs(&self) -> Result<usize> {
        count_pvs(self.ctx, self.slot).await
    }

    /// Waits until a quarter of `claims` have a PV; fails early if `victim` has exited.
    pub async fn until_quarter(&self, claims: usize, victim: Option<&Victim>) -> Result<()> {
        let quarter = claims / 4;
        let every = Duration::from_millis(100);
        poll("a quarter of the PVs", self.settle, every, || async {
            if let Some(r) = victim.and_then(|v| v.running.as_ref()) {
                r.check_alive()?;
            }
            Ok((self.pvs().await? >= quarter).then_some(()))
        })
        .await
    }

    /// Waits until the cluster has settled on `kept` ([`settle`]) and counts what was lost.
    /// The time since `since` is the run's `recovery_s`; a run that did not settle gets a note
    /// instead. Also records the driver's CreateVolume and DeleteVolume calls.
    pub async fn count(
        &self,
        kept: &BTreeSet<String>,
        since: Instant,
        rec: &mut RunRecord,
    ) -> Result<Tally> {
        let (ctx, slot, timeout) = (self.ctx, self.slot, self.settle);
        match settle(ctx, slot, &self.socket, kept, timeout).await? {
            Settled::Done(_) => rec.set("recovery_s", since.elapsed().as_secs_f64()),
            Settled::Stuck => rec.notes.push(format!(
                "claims and PVs final, the driver's volumes not theirs for {} s: see the counts",
                QUIET.as_secs()
            )),
            Settled::TimedOut => rec.notes.push(format!(
                "not settled within {} s: see the counts",
                timeout.as_secs()
            )),
        }
        let calls = calllog::read(&self.call_log);
        rec.set(
            "create_calls",
            calllog::count(&calls, "CreateVolume") as f64,
        );
        rec.set(
            "delete_calls",
            calllog::count(&calls, "DeleteVolume") as f64,
        );
        tally::gather(ctx, slot, &self.socket, &self.call_log, kept).await
    }

    /// [`Stage::count`], with the counts recorded: how most runs end.
    pub async fn finish(
        &self,
        kept: &BTreeSet<String>,
        since: Instant,
        rec: &mut RunRecord,
    ) -> Result<Tally> {
        let tally = self.count(kept, since, rec).await?;
        tally.record(rec);
        Ok(tally)
    }
}

/// Runs `act` on every name, [`PARALLEL`] at a time; the first error ends it.
async fn each<'n, F, Fut>(names: &'n BTreeSet<String>, act: F) -> Result<()>
where
    F: FnMut(&'n String) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    futures::stream::iter(names)
        .map(act)
        .buffer_unordered(PARALLEL)
        .try_collect::<Vec<()>>()
        .await
        .map(drop)
}

/// `c0` .. `c<n-1>`.
pub fn claim_names(n: usize) -> BTreeSet<String> {
    (0..n).map(|i| format!("c{i}")).collect()
}

/// Starts the mock driver of a slot with `faults` (a faults file's JSON) in force.
fn start_driver(ctx: &Ctx, slot: &Slot, faults: &Value) -> Result<Driver> {
    std::fs::create_dir_all(&slot.dir)?;
    let path = faults_path(slot);
    write_faults(&path, faults)?;
    ctx.start_driver(slot, &[format!("--faults={}", path.display())])
}

pub fn faults_path(slot: &Slot) -> PathBuf {
    slot.dir.join("faults.json")
}

/// Replaces the faults file atomically (the driver re-reads it on its next call).
pub fn write_faults(path: &Path, faults: &Value) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(faults)?)?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

/// Namespace, CSIDriver and the Immediate class of a slot.
async fn prepare(ctx: &Ctx, slot: &Slot) -> Result<()> {
    prepare_classes(ctx, slot, false, &[class_name(slot)], "Immediate").await
}

/// Namespace and CSIDriver of a slot (`capacity`: with storage capacity), and the classes
/// `names` of its driver (reclaim Delete) with binding `mode`.
pub async fn prepare_classes(
    ctx: &Ctx,
    slot: &Slot,
    capacity: bool,
    names: &[String],
    mode: &str,
) -> Result<()> {
    ctx.prepare(slot, capacity).await?;
    let scs: Vec<StorageClass> = names
        .iter()
        .map(|c| objects::storage_class(c, &slot.driver, mode, "Delete"))
        .collect();
    create_all(&Api::all(ctx.client.clone()), scs).await?;
    Ok(())
}

/// The class of a slot (classes are cluster-wide, so it is named after the run's driver).
pub fn class_name(slot: &Slot) -> String {
    slot.driver.trim_end_matches(".bench.csi").to_string()
}

/// How a wait for the cluster to settle ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Settled {
    /// After this many seconds.
    Done(f64),
    /// Claims and PVs are final but the driver's volumes do not match them, unchanged for
    /// [`QUIET`]: neither provisioner ever looks at a volume no claim or PV names again.
    Stuck,
    TimedOut,
}

/// How long a final-but-wrong state must hold before the wait gives up on it.
pub const QUIET: Duration = Duration::from_secs(30);

/// Waits until exactly the claims in `kept` exist and are Bound, the driver's PVs are theirs
/// and the driver holds exactly their volumes (the tally then counts what is wrong if it
/// does not).
pub async fn settle(
    ctx: &Ctx,
    slot: &Slot,
    socket: &Path,
    kept: &BTreeSet<String>,
    timeout: Duration,
) -> Result<Settled> {
    let t0 = Instant::now();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &slot.namespace);
    let mut last: Option<(BTreeSet<String>, Instant)> = None;
    loop {
        let list = claims.list(&ListParams::default()).await?.items;
        let claims_ok = list.len() == kept.len()
            && list
                .iter()
                .all(|c| kept.contains(&c.name_any()) && is_bound(c));
        let ours = count_pvs(ctx, slot).await?;
        // The driver may be down for a moment: that is not settled.
        let volumes = driver_volume_ids(socket).await.ok();
        let count = volumes.as_ref().map(BTreeSet::len);
        if claims_ok && ours == kept.len() && count == Some(kept.len()) {
            return Ok(Settled::Done(t0.elapsed().as_secs_f64()));
        }
        if claims_ok
            && ours == kept.len()
            && let Some(volumes) = volumes
        {
            match &last {
                Some((seen, since)) if *seen == volumes => {
                    if since.elapsed() >= QUIET {
                        return Ok(Settled::Stuck);
                    }
                }
                _ => last = Some((volumes, Instant::now())),
            }
        } else {
            last = None;
        }
        if t0.elapsed() >= timeout {
            return Ok(Settled::TimedOut);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// How many PVs of the slot's driver exist.
async fn count_pvs(ctx: &Ctx, slot: &Slot) -> Result<usize> {
    let pvs: Api<PersistentVolume> = Api::all(ctx.client.clone());
    Ok(pvs
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|pv| pv_driver(pv) == Some(slot.driver.as_str()))
        .count())
}

/// `n` distinct offsets drawn uniformly from `0..span`, sorted.
pub fn random_offsets(n: usize, span: Duration) -> Vec<Duration> {
    let mut v: Vec<Duration> = (0..n)
        .map(|_| span.mul_f64(rand::random::<f64>()))
        .collect();
    v.sort();
    v
}
