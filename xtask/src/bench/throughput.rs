//! Scenarios 1 and 2: N Immediate claims created at once until all are Bound, then deleted
//! until every PV is gone and the driver holds no volume. One measured run does both.

use std::time::{Duration, Instant};

use anyhow::Result;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::Api;
use kube::api::{DeleteParams, ListParams};

use super::cluster::{self, create_all};
use super::ctx::{self, Ctx, Slot, api_requests, cpu_seconds, cumulative, remaining, since};
use super::launch::Budget;
use super::objects;
use super::observe;
use super::results::{Impl, MetricDef, PlotSpec, RunRecord};
use super::sampler::{self, Sampler};

/// (QPS, burst) of the two variants: upstream's defaults and a raised budget.
pub const VARIANTS: [(u32, u32); 2] = [(5, 10), (100, 200)];

pub fn variant_name(qps: u32, burst: u32) -> String {
    format!("qps {qps}/{burst}")
}

pub fn create_metrics() -> Vec<MetricDef> {
    vec![
        MetricDef::new("bound_s", "Time until all claims Bound", "s", true),
        MetricDef::new("provisioned_s", "Time until all PVs created", "s", true),
        MetricDef::new(
            "volumes_per_s",
            "Volumes per second (to Bound)",
            "1/s",
            false,
        ),
        MetricDef::new("api_per_volume", "API requests per volume", "", true),
        MetricDef::new("cpu_s", "CPU time", "s", true),
        MetricDef::new("peak_rss_mib", "Peak RSS", "MiB", true),
    ]
}

pub fn delete_metrics() -> Vec<MetricDef> {
    vec![
        MetricDef::new("pvs_gone_s", "Time until all PVs gone", "s", true),
        MetricDef::new(
            "driver_empty_s",
            "Time until the driver is empty",
            "s",
            true,
        ),
        MetricDef::new("deleted_per_s", "Volumes deleted per second", "1/s", false),
        MetricDef::new("api_per_volume", "API requests per volume", "", true),
        MetricDef::new("cpu_s", "CPU time", "s", true),
        MetricDef::new("peak_rss_mib", "Peak RSS", "MiB", true),
    ]
}

pub fn create_plot() -> PlotSpec {
    PlotSpec {
        title: "Claims Bound after N were created at once".into(),
        x_label: "seconds".into(),
        y_label: "claims Bound".into(),
        series: "bound".into(),
        pick_by: "bound_s".into(),
    }
}

pub fn delete_plot() -> PlotSpec {
    PlotSpec {
        title: "PVs left after all claims were deleted".into(),
        x_label: "seconds".into(),
        y_label: "PVs left".into(),
        series: "remaining".into(),
        pick_by: "pvs_gone_s".into(),
    }
}

/// One measured run of both phases: (creation record, deletion record).
pub async fn measure(ctx: &Ctx, slot: &Slot, qps: (u32, u32)) -> (RunRecord, RunRecord) {
    let mut create = RunRecord::new(slot.which, &slot.variant, slot.run);
    let mut delete = RunRecord::new(slot.which, &slot.variant, slot.run);
    let mut started = (None, None);
    let outcome = phases(ctx, slot, qps, &mut create, &mut delete, &mut started).await;
    if let Err(e) = outcome {
        let note = format!("{e:#}");
        eprintln!("bench: {} failed: {note}", slot.driver);
        if create.values.is_empty() {
            create.notes.push(note);
        } else {
            delete.notes.push(note);
        }
    }
    ctx.teardown(slot, started.0, started.1).await;
    (create, delete)
}

async fn phases(
    ctx: &Ctx,
    slot: &Slot,
    (qps, burst): (u32, u32),
    create: &mut RunRecord,
    delete: &mut RunRecord,
    started: &mut (
        Option<super::launch::Running>,
        Option<super::launch::Driver>,
    ),
) -> Result<()> {
    let n = ctx.sizes.s1_claims;
    let wait = ctx.sizes.long_wait;
    ctx.prepare(slot, false).await?;
    let class = objects::storage_class(&slot.driver, &slot.driver, "Immediate", "Delete");
    create_all(&Api::all(ctx.client.clone()), vec![class]).await?;
    let driver = started.1.insert(ctx.start_driver(slot, &[])?);
    let socket = driver.socket.clone();
    let budget = Budget::defaults().with_qps(qps, burst);
    let prov = started
        .0
        .insert(ctx.start_provisioner(slot, &budget, driver).await?);

    // Warm-up: one volume through the whole lifecycle, so caches are synced and both paths
    // work before anything is measured.
    ctx.provision_one(slot, prov, "warmup", &slot.driver, Duration::from_secs(120))
        .await?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &slot.namespace);
    claims.delete("warmup", &DeleteParams::default()).await?;
    let pvs: Api<PersistentVolume> = Api::all(ctx.client.clone());
    wait_gone(&pvs, &slot.driver, &socket, Duration::from_secs(120)).await?;

    // Phase 1: creation.
    let t0 = Instant::now();
    let volumes = observe::watch_volumes(pvs.clone(), t0, &slot.driver);
    let bound = observe::watch_claims(claims.clone(), t0);
    let requests0 = api_requests(ctx, slot).await?;
    let breakdown0 = ctx::request_breakdown(prov).await;
    let cpu0 = cpu_seconds(prov);
    let sampler = Sampler::start(prov.pid(), t0, Duration::from_millis(500));
    let batch =
        (0..n).map(|i| objects::claim(&format!("c-{i}"), &slot.driver, "1Gi", &slot.driver, None));
    create_all(&claims, batch.collect()).await?;
    let what = format!("{n} claims Bound");
    cluster::poll(&what, wait, Duration::from_millis(250), || async {
        prov.check_alive()?;
        let done = volumes.with(|v| v.created.len()) >= n && bound.with(|c| c.bound.len()) >= n;
        Ok(done.then_some(()))
    })
    .await?;
    let bound_times: Vec<f64> = bound.with(|c| c.bound.values().copied().collect());
    let created_times: Vec<f64> = volumes.with(|v| v.created.values().copied().collect());
    let bound_s = bound_times.iter().copied().fold(0.0, f64::max);
    create.set("bound_s", bound_s);
    create.set(
        "provisioned_s",
        created_times.iter().copied().fold(0.0, f64::max),
    );
    create.set("volumes_per_s", n as f64 / bound_s);
    create.set(
        "api_per_volume",
        (api_requests(ctx, slot).await? - requests0) / n as f64,
    );
    create.set("cpu_s", cpu_seconds(prov) - cpu0);
    create
        .series
        .insert("bound".into(), cumulative(bound_times));
    create
        .series
        .insert("provisioned".into(), cumulative(created_times));

    // Phase 2: deletion of all claims at once.
    let t1 = since(t0);
    let requests1 = api_requests(ctx, slot).await?;
    let breakdown1 = ctx::request_breakdown(prov).await;
    ctx::record_breakdown(create, &breakdown0, &breakdown1, n);
    let cpu1 = cpu_seconds(prov);
    claims
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    let what = format!("{n} PVs gone");
    cluster::poll(&what, wait, Duration::from_millis(250), || async {
        prov.check_alive()?;
        Ok((volumes.with(|v| v.present()) == 0).then_some(()))
    })
    .await?;
    let gone: Vec<f64> = volumes.with(|v| v.deleted.values().map(|t| t - t1).collect());
    let pvs_gone_s = gone.iter().copied().fold(0.0, f64::max);
    let socket = socket.clone();
    cluster::poll(
        "the driver to be empty",
        wait,
        Duration::from_millis(100),
        || async { Ok((cluster::driver_volume_count(&socket).await? == 0).then_some(())) },
    )
    .await?;
    let ticks = sampler.finish().await;
    create.set(
        "peak_rss_mib",
        sampler::peak_rss(&ticks, 0.0).unwrap_or(f64::NAN),
    );
    delete.set(
        "peak_rss_mib",
        sampler::peak_rss(&ticks, t1).unwrap_or(f64::NAN),
    );
    delete.set("pvs_gone_s", pvs_gone_s);
    delete.set("driver_empty_s", since(t0) - t1);
    delete.set("deleted_per_s", n as f64 / pvs_gone_s);
    delete.set(
        "api_per_volume",
        (api_requests(ctx, slot).await? - requests1) / n as f64,
    );
    let breakdown2 = ctx::request_breakdown(prov).await;
    ctx::record_breakdown(delete, &breakdown1, &breakdown2, n);
    delete.set("cpu_s", cpu_seconds(prov) - cpu1);
    delete.series.insert("remaining".into(), remaining(n, gone));
    Ok(())
}

/// Waits until the driver's PVs are gone and the driver holds no volume.
async fn wait_gone(
    pvs: &Api<PersistentVolume>,
    driver: &str,
    socket: &std::path::Path,
    timeout: Duration,
) -> Result<()> {
    cluster::poll(
        "the warm-up volume to be deleted",
        timeout,
        Duration::from_millis(100),
        || async {
            let left = pvs
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .filter(|pv| cluster::pv_driver(pv) == Some(driver))
                .count();
            Ok((left == 0 && cluster::driver_volume_count(socket).await? == 0).then_some(()))
        },
    )
    .await
}

/// Runs every variant and run; returns the records of both scenarios.
pub async fn run(ctx: &Ctx) -> (Vec<RunRecord>, Vec<RunRecord>) {
    let (mut creates, mut deletes) = (Vec::new(), Vec::new());
    for (qps, burst) in VARIANTS {
        let variant = variant_name(qps, burst);
        for run in 1..=ctx.runs {
            for which in Impl::order(run) {
                let slot = ctx.slot(1, &variant, which, run);
                println!("bench: scenarios 1+2, {variant}, run {run}, {which}");
                let (c, d) = measure(ctx, &slot, (qps, burst)).await;
                println!("  create {:?}\n  delete {:?}", c.values, d.values);
                creates.push(c);
                deletes.push(d);
            }
        }
    }
    (creates, deletes)
}
