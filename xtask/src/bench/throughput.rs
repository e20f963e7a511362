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
use super::results::{self, Impl, MetricDef, PlotSpec, RunRecord};
use super::sampler::{self, Sampler};

/// One variant of scenarios 1 and 2: the API budget of both provisioners.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variant {
    pub qps: u32,
    pub burst: u32,
}

/// Upstream's defaults and a raised budget.
pub const VARIANTS: [Variant; 2] = [Variant::new(5, 10), Variant::new(100, 200)];

impl Variant {
    const fn new(qps: u32, burst: u32) -> Variant {
        Variant { qps, burst }
    }

    pub fn name(&self) -> String {
        format!("qps {}/{}", self.qps, self.burst)
    }
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
pub async fn measure(ctx: &Ctx, slot: &Slot, variant: Variant) -> (RunRecord, RunRecord) {
    let mut create = RunRecord::new(slot.which, &slot.variant, slot.run);
    let mut delete = RunRecord::new(slot.which, &slot.variant, slot.run);
    let mut started = (None, None);
    let outcome = phases(ctx, slot, variant, &mut create, &mut delete, &mut started).await;
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
    variant: Variant,
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
    let budget = Budget::defaults().with_qps(variant.qps, variant.burst);
    let args = ctx
        .provisioner_args(slot, &budget, &driver.socket, &[])
        .await?;
    let prov = started.0.insert(ctx.spawn_provisioner(slot, &args)?);

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

/// One measured run of `variant` by `which`, said on the terminal, its records added to
/// `into` (creation, deletion).
async fn measure_into(
    ctx: &Ctx,
    variant: Variant,
    run: u32,
    which: Impl,
    into: (&mut Vec<RunRecord>, &mut Vec<RunRecord>),
) {
    let name = variant.name();
    let slot = ctx.slot(1, &name, which, run);
    println!("bench: scenarios 1+2, {name}, run {run}, {which}");
    let (c, d) = measure(ctx, &slot, variant).await;
    println!("  create {:?}\n  delete {:?}", c.values, d.values);
    into.0.push(c);
    into.1.push(d);
}

/// Runs every variant and run; returns the records of both scenarios.
pub async fn run(ctx: &Ctx) -> (Vec<RunRecord>, Vec<RunRecord>) {
    let (mut creates, mut deletes) = (Vec::new(), Vec::new());
    for variant in VARIANTS {
        for run in 1..=ctx.runs {
            for which in Impl::order(run) {
                measure_into(ctx, variant, run, which, (&mut creates, &mut deletes)).await;
            }
        }
    }
    (creates, deletes)
}

/// `--variant NAME`: runs variant `name` only, by the provisioners in `ran` (both, or ours
/// with `--ours-only`), and merges the records with the kept runs of scenarios 1 and 2: the
/// new runs replace that variant's runs of `ran`; the rest stay as they were.
pub async fn run_variant(
    ctx: &Ctx,
    name: &str,
    ran: &[Impl],
    kept_creates: Vec<RunRecord>,
    kept_deletes: Vec<RunRecord>,
) -> Result<(Vec<RunRecord>, Vec<RunRecord>)> {
    let Some(variant) = VARIANTS.into_iter().find(|v| v.name() == name) else {
        let names: Vec<String> = VARIANTS.iter().map(Variant::name).collect();
        anyhow::bail!("--variant {name:?}: not a variant; one of {names:?}");
    };
    let (mut creates, mut deletes) = (Vec::new(), Vec::new());
    for run in 1..=ctx.runs {
        for which in Impl::order(run).into_iter().filter(|w| ran.contains(w)) {
            measure_into(ctx, variant, run, which, (&mut creates, &mut deletes)).await;
        }
    }
    Ok((
        merged(kept_creates, creates, name, ran),
        merged(kept_deletes, deletes, name, ran),
    ))
}

/// Runs in the order of [`VARIANTS`] (a partial re-run appends its variant's runs last);
/// runs of other variants, or of no variant, keep their place after them.
pub fn order_runs(runs: &mut [RunRecord]) {
    let index = |r: &RunRecord| {
        VARIANTS
            .iter()
            .position(|v| v.name() == r.variant)
            .unwrap_or(usize::MAX)
    };
    runs.sort_by_key(index);
}

/// The kept records with variant `name`'s runs by the provisioners in `ran` replaced by `new`,
/// in the variants' order.
pub fn merged(
    kept: Vec<RunRecord>,
    new: Vec<RunRecord>,
    name: &str,
    ran: &[Impl],
) -> Vec<RunRecord> {
    let mut all = results::replace_runs(kept, new, name, ran);
    order_runs(&mut all);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_are_upstreams_defaults_and_a_raised_budget() {
        let names: Vec<String> = VARIANTS.iter().map(Variant::name).collect();
        assert_eq!(names, ["qps 5/10", "qps 100/200"]);
    }

    fn record(which: Impl, variant: &str, bound: f64) -> RunRecord {
        let mut r = RunRecord::new(which, variant, 1);
        r.set("bound_s", bound);
        r
    }

    fn kept() -> Vec<RunRecord> {
        vec![
            record(Impl::Ours, "qps 100/200", 4.0),
            record(Impl::Ours, "qps 5/10", 1.0),
            record(Impl::Upstream, "qps 5/10", 2.0),
            record(Impl::Upstream, "qps 100/200", 5.0),
        ]
    }

    fn summary(all: &[RunRecord]) -> Vec<(String, Impl, f64)> {
        all.iter()
            .map(|r| (r.variant.clone(), r.implementation, r.values["bound_s"]))
            .collect()
    }

    #[test]
    fn one_variant_replaces_only_its_runs_in_the_variants_order() {
        let new = vec![
            record(Impl::Upstream, "qps 5/10", 20.0),
            record(Impl::Ours, "qps 5/10", 10.0),
        ];
        let all = merged(kept(), new, "qps 5/10", &Impl::BOTH);
        let got = summary(&all);
        let want = [
            ("qps 5/10", Impl::Upstream, 20.0),
            ("qps 5/10", Impl::Ours, 10.0),
            ("qps 100/200", Impl::Ours, 4.0),
            ("qps 100/200", Impl::Upstream, 5.0),
        ];
        let want: Vec<(String, Impl, f64)> = want
            .iter()
            .map(|(v, i, b)| (v.to_string(), *i, *b))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn ours_only_keeps_upstreams_runs_of_the_variant() {
        let new = vec![record(Impl::Ours, "qps 5/10", 10.0)];
        let all = merged(kept(), new, "qps 5/10", &[Impl::Ours]);
        let mut got = summary(&all);
        got.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let want = [
            ("qps 100/200", Impl::Ours, 4.0),
            ("qps 100/200", Impl::Upstream, 5.0),
            ("qps 5/10", Impl::Ours, 10.0),
            ("qps 5/10", Impl::Upstream, 2.0),
        ];
        let want: Vec<(String, Impl, f64)> = want
            .iter()
            .map(|(v, i, b)| (v.to_string(), *i, *b))
            .collect();
        assert_eq!(got, want);
    }
}
