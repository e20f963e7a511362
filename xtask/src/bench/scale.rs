//! Scenario 5: capacity at scale. Many nodes × 3 classes with a 10 s poll interval: time to
//! publish every object, then the capacity queue's depth (pending work), RSS and CPU over ten
//! poll intervals.

use std::time::{Duration, Instant};

use anyhow::Result;
use k8s_openapi::api::storage::v1::{CSIStorageCapacity, StorageClass};
use kube::Api;

use super::calllog;
use super::cluster::{self, create_all};
use super::ctx::{Ctx, Sizes, Slot};
use super::freshness::wait_published;
use super::launch::{self, Budget, Driver, Running};
use super::objects::{self, TOPOLOGY_KEY};
use super::observe;
use super::results::{Impl, MetricDef, PlotSpec, RunRecord};
use super::sampler::{self, Sampler, Scrape};
use super::stats;

/// Capacity client budget for both. At upstream's default of 1 QPS the first publication of
/// 6,000 objects alone would take 100 minutes, so the scenario raises it for both.
pub const CAPACITY_QPS: (u32, u32) = (100, 200);
const POLL: Duration = Duration::from_secs(10);

pub fn setup(s: &Sizes) -> String {
    format!(
        "{} fake nodes, a 100 Gi pool per node, 3 WaitForFirstConsumer StorageClasses: {} \
         CSIStorageCapacity objects. Flags: QPS 5/10, capacity QPS {}/{}, \
         `--capacity-poll-interval=10s`, one capacity worker. Measured: time from start until \
         every object exists (watch), then over {} poll intervals the depth of the \
         `csistoragecapacity` work queue (`workqueue_depth`, scraped every second), RSS, CPU \
         and GetCapacity calls per second (driver call log).",
        s.s5_nodes,
        s.s5_nodes * 3,
        CAPACITY_QPS.0,
        CAPACITY_QPS.1,
        s.s5_intervals
    )
}

pub fn metrics() -> Vec<MetricDef> {
    vec![
        MetricDef::new("publish_s", "Time to publish all objects", "s", true),
        MetricDef::new(
            "depth_median",
            "Queue depth, median over the intervals",
            "",
            true,
        ),
        MetricDef::new("depth_max", "Queue depth, max over the intervals", "", true),
        MetricDef::new(
            "getcapacity_per_s",
            "GetCapacity calls per second",
            "1/s",
            false,
        ),
        MetricDef::new("cpu_s", "CPU time over the intervals", "s", true),
        MetricDef::new("rss_mib", "RSS at the end", "MiB", true),
        MetricDef::new(
            "rss_growth_mib",
            "RSS growth over the intervals (end − start)",
            "MiB",
            true,
        ),
        MetricDef::new("peak_rss_mib", "Peak RSS", "MiB", true),
    ]
}

pub fn plot() -> PlotSpec {
    PlotSpec {
        title: "Pending capacity work (workqueue_depth) with a 10 s poll".into(),
        x_label: "seconds since start".into(),
        y_label: "queue depth".into(),
        series: "depth".into(),
        pick_by: "publish_s".into(),
    }
}

async fn measure(
    ctx: &Ctx,
    slot: &Slot,
    rec: &mut RunRecord,
    started: &mut (Option<Running>, Option<Driver>),
) -> Result<()> {
    let nodes = cluster::ensure_nodes(&ctx.client, ctx.sizes.s5_nodes, &slot.driver).await?;
    ctx.prepare(slot, true).await?;
    let base = slot.driver.trim_end_matches(".bench.csi");
    let scs: Vec<StorageClass> = ["a", "b", "c"]
        .iter()
        .map(|c| {
            objects::storage_class(
                &format!("{base}-{c}"),
                &slot.driver,
                "WaitForFirstConsumer",
                "Delete",
            )
        })
        .collect();
    create_all(&Api::all(ctx.client.clone()), scs).await?;
    let pools = launch::node_pools(TOPOLOGY_KEY, &nodes, "100Gi");
    let driver = started.1.insert(ctx.start_driver(slot, &pools)?);
    let call_log = driver.call_log.clone();
    let budget = Budget::defaults().with_capacity(CAPACITY_QPS.0, CAPACITY_QPS.1, "10s");
    let t0 = Instant::now();
    let caps_api: Api<CSIStorageCapacity> = Api::namespaced(ctx.client.clone(), &slot.namespace);
    let caps = observe::watch_capacities(caps_api, t0, &slot.driver);
    let prov = started
        .0
        .insert(ctx.start_provisioner(slot, &budget, driver).await?);
    let scrape = Scrape {
        addr: prov.http_addr.clone(),
        name: "workqueue_depth".into(),
        labels: vec![("name".into(), "csistoragecapacity".into())],
    };
    let sampler = Sampler::start(prov.pid(), t0, Duration::from_secs(1), Some(scrape));
    let want = nodes.len() * 3;
    let published = wait_published(&caps, prov, want, ctx.sizes.long_wait, t0).await;
    match &published {
        Ok(s) => rec.set("publish_s", *s),
        Err(e) => rec
            .notes
            .push(format!("{e:#}; measuring the intervals anyway")),
    }
    let window_start = t0.elapsed().as_secs_f64();
    let wall_start = jiff::Timestamp::now();
    let cpu_start = super::ctx::cpu_seconds(prov);
    tokio::time::sleep(POLL * ctx.sizes.s5_intervals).await;
    prov.check_alive()?;
    let window = t0.elapsed().as_secs_f64() - window_start;
    rec.set("cpu_s", super::ctx::cpu_seconds(prov) - cpu_start);
    let ticks = sampler.finish().await;
    let depths: Vec<f64> = ticks
        .iter()
        .filter(|t| t.secs >= window_start)
        .filter_map(|t| t.metric)
        .collect();
    rec.set(
        "depth_median",
        stats::summarize(&depths).map_or(f64::NAN, |s| s.median),
    );
    rec.set("depth_max", depths.iter().copied().fold(f64::NAN, f64::max));
    if let Some(last) = ticks.last() {
        rec.set("rss_mib", last.proc.rss_mib);
        // Flat memory over the polls is the claim to check: compare with the first sample of
        // the window (after the first publication).
        if let Some(first) = ticks.iter().find(|t| t.secs >= window_start) {
            rec.set("rss_growth_mib", last.proc.rss_mib - first.proc.rss_mib);
        }
    }
    rec.set(
        "peak_rss_mib",
        sampler::peak_rss(&ticks, 0.0).unwrap_or(f64::NAN),
    );
    let calls = calllog::read(&call_log);
    let in_window = calls
        .iter()
        .filter(|c| c.method == "GetCapacity" && c.start >= wall_start)
        .count();
    rec.set("getcapacity_per_s", in_window as f64 / window);
    rec.series
        .insert("depth".into(), sampler::metric_series(&ticks));
    rec.series.insert("rss".into(), sampler::rss_series(&ticks));
    rec.series
        .insert("published".into(), caps.with(|c| c.count_timeline.clone()));
    Ok(())
}

pub async fn run(ctx: &Ctx) -> (Vec<RunRecord>, Vec<String>) {
    let mut records = Vec::new();
    for run in 1..=ctx.runs {
        for which in Impl::order(run) {
            let slot = ctx.slot(5, "", which, run);
            println!("bench: scenario 5, run {run}, {which}");
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
