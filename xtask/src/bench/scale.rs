//! Scenario 5: capacity at scale. Many nodes × 3 classes with a 10 s poll interval: time to
//! publish every object, then how much of the capacity work gets done, over ten poll intervals
//! in which nothing but the driver's call log watches the provisioner, and over ten more in
//! which its `/metrics` is scraped every 30 s, as a Prometheus would.
//!
//! The quiet phase exists because observing can be the load: upstream computes
//! `csistoragecapacities_obsolete` by comparing every object with every work item under the
//! lock its capacity worker needs, so at 6,000 objects one scrape holds the worker for seconds.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Result;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::storage::v1::{CSIStorageCapacity, StorageClass};
use kube::Api;

use super::calllog;
use super::cluster::{self, create_all};
use super::ctx::{Ctx, Sizes, Slot};
use super::freshness::wait_published;
use super::launch::{self, Budget, Driver, Running};
use super::objects::{self, TOPOLOGY_KEY};
use super::observe;
use super::prom;
use super::results::{Impl, MetricDef, PlotSpec, RunRecord};
use super::sampler::{self, Sampler};
use super::stats;
use super::sweep;

/// Capacity client budget for both. At upstream's default of 1 QPS the first publication of
/// 6,000 objects alone would take 100 minutes, so the scenario raises it for both.
pub const CAPACITY_QPS: (u32, u32) = (100, 200);
const POLL: Duration = Duration::from_secs(10);
/// Prometheus-style scrapes in the second phase: kube-prometheus' usual interval, and
/// Prometheus' default scrape timeout.
const SCRAPE_EVERY: Duration = Duration::from_secs(30);
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long each provisioner gets to publish every object before the phases start anyway.
const PUBLISH_WAIT: Duration = Duration::from_secs(600);
/// A StorageClass parameter that tells the classes apart in GetCapacity calls (the mock driver
/// ignores it), so the call log shows which object each call refreshed.
const CLASS_PARAMETER: &str = "benchClass";

pub fn setup(s: &Sizes) -> String {
    format!(
        "{} fake nodes, a 100 Gi pool per node, 3 WaitForFirstConsumer StorageClasses: {} \
         CSIStorageCapacity objects. Flags: QPS 5/10, capacity QPS {}/{}, \
         `--capacity-poll-interval=10s`, one capacity worker. Measured: time from start until \
         every object exists (watch; at most {} s), then {} poll intervals in which only the \
         driver's call log is read (which objects got a GetCapacity in each 10 s interval), then \
         {} more in which the provisioner's `/metrics` is scraped every {} s with a {} s timeout \
         (as Prometheus would), reading the `csistoragecapacity` queue depth and the time each \
         scrape took. RSS and CPU come from /proc.",
        s.s5_nodes,
        s.s5_nodes * 3,
        CAPACITY_QPS.0,
        CAPACITY_QPS.1,
        PUBLISH_WAIT.as_secs(),
        s.s5_intervals,
        s.s5_intervals,
        SCRAPE_EVERY.as_secs(),
        SCRAPE_TIMEOUT.as_secs(),
    )
}

pub fn metrics() -> Vec<MetricDef> {
    vec![
        MetricDef::new("publish_s", "Time to publish all objects", "s", true),
        MetricDef::new(
            "quiet_refreshed_pct",
            "Objects refreshed per poll interval, unscraped (median)",
            "%",
            false,
        ),
        MetricDef::new(
            "quiet_getcapacity_per_s",
            "GetCapacity calls per second, unscraped",
            "",
            true,
        ),
        MetricDef::new(
            "quiet_depth",
            "Queue depth after the unscraped intervals",
            "",
            true,
        ),
        MetricDef::new(
            "scraped_refreshed_pct",
            "Objects refreshed per poll interval, scraped every 30 s (median)",
            "%",
            false,
        ),
        MetricDef::new(
            "scraped_depth_max",
            "Queue depth, max of the 30 s scrapes",
            "",
            true,
        ),
        MetricDef::new(
            "scrape_s",
            "Time to answer one /metrics scrape (median)",
            "s",
            true,
        ),
        MetricDef::new("cpu_s", "CPU time over the unscraped intervals", "s", true),
        MetricDef::new("rss_mib", "RSS at the end", "MiB", true),
        MetricDef::new(
            "rss_growth_mib",
            "RSS growth over both phases (end − start)",
            "MiB",
            true,
        ),
        MetricDef::new("peak_rss_mib", "Peak RSS", "MiB", true),
    ]
}

pub fn plot() -> PlotSpec {
    PlotSpec {
        title: "GetCapacity calls per second (poll every 10 s; /metrics scraped in the 2nd phase)"
            .into(),
        x_label: "seconds since start".into(),
        y_label: "GetCapacity calls per second".into(),
        series: "getcapacity".into(),
        pick_by: "publish_s".into(),
    }
}

/// One Prometheus-style scrape: how long it took, and the queue depth if it answered in time.
async fn scrape(addr: &str) -> (f64, Option<f64>) {
    let began = Instant::now();
    let body = tokio::time::timeout(SCRAPE_TIMEOUT, prom::get(addr, "/metrics")).await;
    let took = began.elapsed().as_secs_f64();
    let depth = match body {
        Ok(Ok(text)) => Some(prom::sum(
            &prom::parse(&text),
            "workqueue_depth",
            &[("name", "csistoragecapacity")],
        )),
        _ => None,
    };
    (took, depth)
}

fn median(v: &[f64]) -> f64 {
    stats::summarize(v).map_or(f64::NAN, |s| s.median)
}

fn wall(t: Timestamp, d: Duration) -> Timestamp {
    t.checked_add(SignedDuration::try_from(d).unwrap_or(SignedDuration::ZERO))
        .unwrap_or(t)
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
            let mut sc = objects::storage_class(
                &format!("{base}-{c}"),
                &slot.driver,
                "WaitForFirstConsumer",
                "Delete",
            );
            sc.parameters = Some(BTreeMap::from([(CLASS_PARAMETER.into(), c.to_string())]));
            sc
        })
        .collect();
    create_all(&Api::all(ctx.client.clone()), scs).await?;
    let pools = launch::node_pools(TOPOLOGY_KEY, &nodes, "100Gi");
    let driver = started.1.insert(ctx.start_driver(slot, &pools)?);
    let call_log = driver.call_log.clone();
    let budget = Budget::defaults().with_capacity(CAPACITY_QPS.0, CAPACITY_QPS.1, "10s");
    let (t0, t0_wall) = (Instant::now(), Timestamp::now());
    let caps_api: Api<CSIStorageCapacity> = Api::namespaced(ctx.client.clone(), &slot.namespace);
    let caps = observe::watch_capacities(caps_api, t0, &slot.driver);
    let prov = started
        .0
        .insert(ctx.start_provisioner(slot, &budget, driver).await?);
    let sampler = Sampler::start(prov.pid(), t0, Duration::from_secs(1));
    let want = nodes.len() * 3;
    let wait = PUBLISH_WAIT.min(ctx.sizes.long_wait);
    match wait_published(&caps, prov, want, wait, t0).await {
        Ok(s) => rec.set("publish_s", s),
        Err(e) => rec.notes.push(format!(
            "{e:#}; {} of {want} published; measuring the intervals anyway",
            caps.with(|c| c.current.len())
        )),
    }
    let phase = POLL * ctx.sizes.s5_intervals;

    // Quiet phase: nothing touches the provisioner.
    let quiet_start = (t0.elapsed().as_secs_f64(), Timestamp::now());
    let cpu_start = super::ctx::cpu_seconds(prov);
    tokio::time::sleep(phase).await;
    prov.check_alive()?;
    rec.set("cpu_s", super::ctx::cpu_seconds(prov) - cpu_start);
    let quiet_end = Timestamp::now();

    // Scraped phase.
    let mut scrapes = Vec::new();
    let mut depths = Vec::new();
    let scraped_start = quiet_end;
    let began = Instant::now();
    while began.elapsed() < phase {
        let at = t0.elapsed().as_secs_f64();
        let (took, depth) = scrape(&prov.http_addr).await;
        scrapes.push(took);
        if let Some(d) = depth {
            depths.push((at, d));
        }
        let next = SCRAPE_EVERY * scrapes.len() as u32;
        if let Some(left) = next.checked_sub(began.elapsed()) {
            tokio::time::sleep(left.min(phase.saturating_sub(began.elapsed()))).await;
        }
    }
    prov.check_alive()?;
    let scraped_end = wall(scraped_start, began.elapsed());
    // Let the driver finish writing the calls of the last second.
    tokio::time::sleep(Duration::from_millis(200)).await;

    let ticks = sampler.finish().await;
    let calls = calllog::read(&call_log);
    let window = SignedDuration::try_from(POLL)?;
    let quiet = sweep::coverage(&calls, quiet_start.1, quiet_end, window, want);
    let scraped = sweep::coverage(&calls, scraped_start, scraped_end, window, want);
    rec.set("quiet_refreshed_pct", median(&quiet));
    rec.set(
        "quiet_refreshed_min_pct",
        quiet.iter().copied().fold(f64::NAN, f64::min),
    );
    rec.set("scraped_refreshed_pct", median(&scraped));
    rec.set(
        "scraped_refreshed_min_pct",
        scraped.iter().copied().fold(f64::NAN, f64::min),
    );
    rec.set(
        "quiet_getcapacity_per_s",
        sweep::rate(&calls, quiet_start.1, quiet_end),
    );
    rec.set(
        "scraped_getcapacity_per_s",
        sweep::rate(&calls, scraped_start, scraped_end),
    );
    // The first scrape comes right after the quiet phase.
    if let Some((_, d)) = depths.first() {
        rec.set("quiet_depth", *d);
    }
    rec.set(
        "scraped_depth_max",
        depths.iter().map(|(_, d)| *d).fold(f64::NAN, f64::max),
    );
    rec.set("scrape_s", median(&scrapes));
    rec.set("scrapes_timed_out", (scrapes.len() - depths.len()) as f64);
    if let Some(last) = ticks.last() {
        rec.set("rss_mib", last.proc.rss_mib);
        // Flat memory over the polls is the claim to check: compare with the first sample
        // after the first publication.
        if let Some(first) = ticks.iter().find(|t| t.secs >= quiet_start.0) {
            rec.set("rss_growth_mib", last.proc.rss_mib - first.proc.rss_mib);
        }
    }
    rec.set(
        "peak_rss_mib",
        sampler::peak_rss(&ticks, 0.0).unwrap_or(f64::NAN),
    );
    rec.set(
        "scraped_from_s",
        quiet_end.duration_since(t0_wall).as_secs_f64(),
    );
    rec.series
        .insert("getcapacity".into(), sweep::per_second(&calls, t0_wall));
    rec.series.insert("depth".into(), depths);
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
