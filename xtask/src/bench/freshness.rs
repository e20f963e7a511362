//! Scenario 4: capacity freshness. Volumes are provisioned one by one on a chosen node; the lag
//! is from CreateVolume returning (driver call log) to the node's CSIStorageCapacity showing
//! the new value through a watch.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::{CSIStorageCapacity, StorageClass};
use kube::api::PostParams;
use kube::{Api, ResourceExt};

use super::calllog;
use super::cluster::{self, create_all, poll};
use super::ctx::{Ctx, Sizes, Slot};
use super::launch::{self, Budget, Driver, Running};
use super::objects::{self, TOPOLOGY_KEY};
use super::observe::{self, Capacities, Observer};
use super::results::{Impl, MetricDef, PlotSpec, RunRecord};
use super::stats;

/// Capacity client budget for both: high enough that the lag shows each provisioner's
/// reaction, not the 1 QPS default (which would make the first publication of 600 objects
/// alone take ten minutes).
pub const CAPACITY_QPS: (u32, u32) = (20, 50);
const CLASSES: [&str; 3] = ["a", "b", "c"];
/// How long the claim's own class may take before the volume counts as missed.
const OWN_WAIT: Duration = Duration::from_secs(30);
/// How long the node's other classes may take before they count as left stale.
const OTHERS_WAIT: Duration = Duration::from_secs(2);
const STEP: Duration = Duration::from_millis(10);

pub fn setup(s: &Sizes) -> String {
    format!(
        "{} fake nodes, a 100 Gi pool per node, {} WaitForFirstConsumer StorageClasses: {} \
         CSIStorageCapacity objects. Flags: QPS 5/10, capacity QPS {}/{}, poll interval 1m, \
         one capacity worker. After the first publication, {} claims of 1 Gi are created one \
         at a time, each with the scheduler's selected-node annotation already set (node i, \
         class i mod 3); the next starts once the claim's class shows the new value (at most \
         30 s) and the node's two other classes, which share the pool, did too (at most 2 s \
         more; otherwise they count as left stale until the next poll). Lag = watch event time − CreateVolume return time in the driver's call log \
         (same clock, millisecond resolution).",
        s.s4_nodes,
        CLASSES.len(),
        s.s4_nodes * CLASSES.len(),
        CAPACITY_QPS.0,
        CAPACITY_QPS.1,
        s.s4_volumes
    )
}

pub fn metrics() -> Vec<MetricDef> {
    vec![
        MetricDef::new("lag_p50_ms", "Lag p50, the claim's class", "ms", true),
        MetricDef::new("lag_p99_ms", "Lag p99, the claim's class", "ms", true),
        MetricDef::new(
            "all_p50_ms",
            "Lag p50, all 3 classes of the node",
            "ms",
            true,
        ),
        MetricDef::new(
            "all_p99_ms",
            "Lag p99, all 3 classes of the node",
            "ms",
            true,
        ),
        MetricDef::new(
            "missed",
            "Volumes whose class was not updated within 30 s",
            "",
            true,
        ),
        MetricDef::new(
            "stale_others",
            "Volumes whose node's other classes were not updated within 2 s",
            "",
            true,
        ),
        MetricDef::new("publish_s", "First publication of all objects", "s", true),
    ]
}

pub fn plot() -> PlotSpec {
    PlotSpec {
        title: "Capacity lag after CreateVolume (CDF, the claim's class)".into(),
        x_label: "lag (ms)".into(),
        y_label: "fraction of volumes".into(),
        series: "lag_cdf".into(),
        pick_by: "lag_p50_ms".into(),
    }
}

fn class_name(driver: &str, c: &str) -> String {
    format!("{}-{c}", driver.trim_end_matches(".bench.csi"))
}

/// Waits until `want` objects are published; returns seconds since `t0`.
pub async fn wait_published(
    caps: &Observer<Capacities>,
    prov: &Running,
    want: usize,
    timeout: Duration,
    t0: Instant,
) -> Result<f64> {
    let what = format!("{want} CSIStorageCapacity objects");
    poll(&what, timeout, Duration::from_millis(100), || async {
        prov.check_alive()?;
        Ok((caps.with(|c| c.current.len()) >= want).then_some(()))
    })
    .await?;
    Ok(t0.elapsed().as_secs_f64())
}

/// The first time (class, node) showed a value other than `before`, at or after `since`.
fn changed_at(
    c: &Capacities,
    class: &str,
    node: &str,
    before: Option<f64>,
    from: usize,
) -> Option<jiff::Timestamp> {
    c.history[from..]
        .iter()
        .find(|s| s.class == class && s.node == node && s.bytes != before)
        .map(|s| s.at.wall)
}

async fn measure(
    ctx: &Ctx,
    slot: &Slot,
    rec: &mut RunRecord,
    started: &mut (Option<Running>, Option<Driver>),
) -> Result<()> {
    let nodes = cluster::ensure_nodes(&ctx.client, ctx.sizes.s4_nodes, &slot.driver).await?;
    ctx.prepare(slot, true).await?;
    let classes: Vec<String> = CLASSES
        .iter()
        .map(|c| class_name(&slot.driver, c))
        .collect();
    let scs: Vec<StorageClass> = classes
        .iter()
        .map(|c| objects::storage_class(c, &slot.driver, "WaitForFirstConsumer", "Delete"))
        .collect();
    create_all(&Api::all(ctx.client.clone()), scs).await?;
    let pools = launch::node_pools(TOPOLOGY_KEY, &nodes, "100Gi");
    let driver = started.1.insert(ctx.start_driver(slot, &pools)?);
    let mut tail = calllog::Tail::new(&driver.call_log);
    let mut created_at = std::collections::HashMap::new();
    let budget = Budget::defaults().with_capacity(CAPACITY_QPS.0, CAPACITY_QPS.1, "1m");
    let t0 = Instant::now();
    let caps_api: Api<CSIStorageCapacity> = Api::namespaced(ctx.client.clone(), &slot.namespace);
    let caps = observe::watch_capacities(caps_api, t0, &slot.driver);
    let prov = started
        .0
        .insert(ctx.start_provisioner(slot, &budget, driver).await?);
    let want = nodes.len() * classes.len();
    rec.set(
        "publish_s",
        wait_published(&caps, prov, want, ctx.sizes.long_wait, t0).await?,
    );

    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &slot.namespace);
    let (mut own, mut all, mut missed, mut stale) = (Vec::new(), Vec::new(), 0.0, 0.0);
    for i in 0..ctx.sizes.s4_volumes {
        let node = &nodes[i % nodes.len()];
        let class = &classes[i % classes.len()];
        let before: Vec<Option<f64>> =
            caps.with(|c| classes.iter().map(|k| c.value(k, node)).collect());
        let from = caps.with(|c| c.history.len());
        let claim = objects::claim(&format!("v-{i}"), class, "1Gi", &slot.driver, Some(node));
        let made = claims
            .create(&PostParams::default(), &claim)
            .await
            .context("creating a claim")?;
        let pv = objects::pv_name_for(&made.uid().unwrap_or_default());
        let deadline = Instant::now() + Duration::from_secs(60);
        let created = loop {
            for c in tail.read_new() {
                if let (Some(name), "CreateVolume", None) = (&c.name, c.method.as_str(), &c.error) {
                    created_at.entry(name.clone()).or_insert(c.end());
                }
            }
            if let Some(t) = created_at.get(&pv) {
                break *t;
            }
            prov.check_alive()?;
            if Instant::now() > deadline {
                anyhow::bail!("no successful CreateVolume for {pv} within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let own_class = i % classes.len();
        let caps = &caps;
        let changed = |k: usize| {
            let (class, before) = (&classes[k], before[k]);
            move || async move { Ok(caps.with(|c| changed_at(c, class, node, before, from))) }
        };
        let ms = |t: jiff::Timestamp| t.duration_since(created).as_secs_f64() * 1000.0;
        match poll(
            "the claim's class update",
            OWN_WAIT,
            STEP,
            changed(own_class),
        )
        .await
        {
            Ok(t) => own.push(ms(t)),
            Err(_) => missed += 1.0,
        }
        // The node's other classes share its pool; a provisioner that refreshes them does so
        // within milliseconds, one that does not leaves them to the next poll.
        let mut latest = Some(f64::MIN);
        for k in 0..classes.len() {
            latest = match poll("another class update", OTHERS_WAIT, STEP, changed(k)).await {
                Ok(t) => latest.map(|l| l.max(ms(t))),
                Err(_) => None,
            };
            if latest.is_none() {
                break;
            }
        }
        match latest {
            Some(l) => all.push(l),
            None => stale += 1.0,
        }
    }
    let pct = |v: &[f64], p| stats::percentile(v, p).unwrap_or(f64::NAN);
    rec.set("lag_p50_ms", pct(&own, 50.0));
    rec.set("lag_p99_ms", pct(&own, 99.0));
    rec.set("all_p50_ms", pct(&all, 50.0));
    rec.set("all_p99_ms", pct(&all, 99.0));
    rec.set("missed", missed);
    rec.set("stale_others", stale);
    rec.series.insert("lag_cdf".into(), stats::cdf(&own));
    rec.series.insert(
        "lags_ms".into(),
        own.iter()
            .enumerate()
            .map(|(i, l)| (i as f64, *l))
            .collect(),
    );
    Ok(())
}

pub async fn run(ctx: &Ctx) -> (Vec<RunRecord>, Vec<String>) {
    let mut records = Vec::new();
    for run in 1..=ctx.runs {
        for which in Impl::order(run) {
            let slot = ctx.slot(4, "", which, run);
            println!("bench: scenario 4, run {run}, {which}");
            let mut rec = RunRecord::new(which, "", run);
            let mut started = (None, None);
            if let Err(e) = measure(ctx, &slot, &mut rec, &mut started).await {
                rec.notes.push(format!("{e:#}"));
            }
            ctx.teardown(&slot, started.0, started.1).await;
            println!("  {:?} {:?}", rec.values, rec.notes);
            records.push(rec);
        }
    }
    (records, Vec::new())
}
