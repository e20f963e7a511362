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
use super::policy;
use super::results::{Impl, MetricDef, PlotSpec, RunRecord};
use super::sampler::{self, Sampler};

/// One variant of scenarios 1 and 2: the API budget of both provisioners, and whether ours
/// runs with the admission policy that keeps its finalizer on the API server's side, or with
/// the write-ahead record instead of the finalizer (`CSI_PROVISIONER_WRITE_AHEAD_RECORD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variant {
    pub qps: u32,
    pub burst: u32,
    pub policy: bool,
    pub record: bool,
}

/// Upstream's defaults and a raised budget, each without and with the policy; the defaults
/// with the record too.
pub const VARIANTS: [Variant; 5] = [
    Variant::new(5, 10, false, false),
    Variant::new(5, 10, true, false),
    Variant::new(5, 10, false, true),
    Variant::new(100, 200, false, false),
    Variant::new(100, 200, true, false),
];

/// The suffix of a variant's name when ours runs with the admission policy.
pub const WITH_POLICY: &str = ", admission policy";
/// The suffix of a variant's name when ours runs with the write-ahead record.
pub const WITH_RECORD: &str = ", write-ahead record";

impl Variant {
    const fn new(qps: u32, burst: u32, policy: bool, record: bool) -> Variant {
        Variant {
            qps,
            burst,
            policy,
            record,
        }
    }

    pub fn name(&self) -> String {
        let suffix = match (self.policy, self.record) {
            (true, _) => WITH_POLICY,
            (false, true) => WITH_RECORD,
            (false, false) => "",
        };
        format!("qps {}/{}{suffix}", self.qps, self.burst)
    }

    /// The same budget without the policy or the record.
    fn plain(self) -> Variant {
        Variant {
            policy: false,
            record: false,
            ..self
        }
    }

    /// Only ours runs: upstream has no finalizer for the policy or the record to replace,
    /// so its columns repeat its runs of the plain variant.
    fn ours_only(self) -> bool {
        self != self.plain()
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
    if variant.policy {
        policy::remove(&ctx.client, &slot.driver).await;
    }
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
    if variant.policy {
        policy::install(&ctx.client, &ctx.bins.ours, &slot.driver, &slot.namespace).await?;
    }
    let driver = started.1.insert(ctx.start_driver(slot, &[])?);
    let socket = driver.socket.clone();
    let budget = Budget::defaults().with_qps(variant.qps, variant.burst);
    let record_env = [
        ("POD_NAMESPACE", slot.namespace.as_str()),
        (provisioning::record::SWITCH, "true"),
    ];
    let env: &[(&str, &str)] = if variant.record { &record_env } else { &[] };
    let args = ctx
        .provisioner_args(slot, &budget, &driver.socket, &[])
        .await?;
    let prov = started
        .0
        .insert(ctx.spawn_provisioner_env(slot, &args, env)?);

    // Warm-up: one volume through the whole lifecycle, so caches are synced and both paths
    // work before anything is measured.
    ctx.provision_one(slot, prov, "warmup", &slot.driver, Duration::from_secs(120))
        .await?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &slot.namespace);
    claims.delete("warmup", &DeleteParams::default()).await?;
    let pvs: Api<PersistentVolume> = Api::all(ctx.client.clone());
    wait_gone(&pvs, &slot.driver, &socket, Duration::from_secs(120)).await?;
    if variant.policy && !policy::seen_by(prov).await? {
        anyhow::bail!("the provisioner does not report the admission policy as active");
    }

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

/// Runs every variant and run; returns the records of both scenarios. In a policy variant only
/// ours runs (upstream has no finalizer for the policy to save): its upstream records are
/// upstream's runs of the same budget, repeated under the variant's name.
pub async fn run(ctx: &Ctx) -> (Vec<RunRecord>, Vec<RunRecord>) {
    let (mut creates, mut deletes) = (Vec::new(), Vec::new());
    for variant in VARIANTS {
        let name = variant.name();
        for run in 1..=ctx.runs {
            for which in Impl::order(run) {
                if variant.ours_only() && which == Impl::Upstream {
                    let plain = variant.plain().name();
                    creates.extend(repeated(&creates, &plain, &name, run));
                    deletes.extend(repeated(&deletes, &plain, &name, run));
                    continue;
                }
                measure_into(ctx, variant, run, which, (&mut creates, &mut deletes)).await;
            }
        }
    }
    (creates, deletes)
}

/// `--policy-only`: runs ours with the admission policy in both policy variants and merges
/// the records with the kept runs of scenarios 1 and 2: the plain variants stay as they were,
/// and upstream's plain runs are repeated under the policy variants.
pub async fn run_policy_only(
    ctx: &Ctx,
    kept_creates: Vec<RunRecord>,
    kept_deletes: Vec<RunRecord>,
) -> Result<(Vec<RunRecord>, Vec<RunRecord>)> {
    let plain = |records: Vec<RunRecord>| -> Vec<RunRecord> {
        records
            .into_iter()
            .filter(|r| !r.variant.ends_with(WITH_POLICY))
            .collect()
    };
    let (mut creates, mut deletes) = (plain(kept_creates), plain(kept_deletes));
    if creates.is_empty() {
        anyhow::bail!(
            "--policy-only needs the plain variants' results of scenarios 1 and 2 in bench/results; run `cargo xtask bench --scenario 1,2` first"
        );
    }
    for variant in VARIANTS.into_iter().filter(|v| v.policy) {
        let name = variant.name();
        let from = variant.plain().name();
        for run in 1..=ctx.runs {
            measure_into(ctx, variant, run, Impl::Ours, (&mut creates, &mut deletes)).await;
            creates.extend(repeated(&creates, &from, &name, run));
            deletes.extend(repeated(&deletes, &from, &name, run));
        }
    }
    Ok((creates, deletes))
}

/// Whether variant `name` runs ours only (see [`Variant::ours_only`]).
pub fn is_ours_only(name: &str) -> bool {
    VARIANTS.iter().any(|v| v.name() == name && v.ours_only())
}

/// `--variant NAME`: runs variant `name` only and merges the records with the kept runs of
/// scenarios 1 and 2. A plain variant runs both provisioners, and its ours-only variants
/// repeat the new upstream runs; an ours-only variant runs ours and repeats the kept upstream
/// runs of its plain variant. The other variants stay as they were.
pub async fn run_variant(
    ctx: &Ctx,
    name: &str,
    kept_creates: Vec<RunRecord>,
    kept_deletes: Vec<RunRecord>,
) -> Result<(Vec<RunRecord>, Vec<RunRecord>)> {
    let Some(variant) = VARIANTS.into_iter().find(|v| v.name() == name) else {
        let names: Vec<String> = VARIANTS.iter().map(Variant::name).collect();
        anyhow::bail!("--variant {name:?}: not a variant; one of {names:?}");
    };
    let plain = variant.plain().name();
    // The ours-only variants of the same budget repeat its upstream runs.
    let derived: Vec<String> = VARIANTS
        .iter()
        .filter(|v| v.ours_only() && v.plain() == variant)
        .map(Variant::name)
        .collect();
    let (mut creates, mut deletes) = (Vec::new(), Vec::new());
    for run in 1..=ctx.runs {
        for which in Impl::order(run) {
            if variant.ours_only() && which == Impl::Upstream {
                continue;
            }
            measure_into(ctx, variant, run, which, (&mut creates, &mut deletes)).await;
        }
        if variant.ours_only() {
            creates.extend(repeated(&kept_creates, &plain, name, run));
            deletes.extend(repeated(&kept_deletes, &plain, name, run));
        }
        for to in &derived {
            creates.extend(repeated(&creates, name, to, run));
            deletes.extend(repeated(&deletes, name, to, run));
        }
    }
    Ok((
        merged(kept_creates, creates, name, &derived),
        merged(kept_deletes, deletes, name, &derived),
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

/// The kept records with variant `name`'s runs (both provisioners) and upstream's repeats
/// under the `derived` variants replaced by `new`.
pub fn merged(
    kept: Vec<RunRecord>,
    new: Vec<RunRecord>,
    name: &str,
    derived: &[String],
) -> Vec<RunRecord> {
    let replaced = |r: &RunRecord| {
        r.variant == name || (derived.contains(&r.variant) && r.implementation == Impl::Upstream)
    };
    let mut all: Vec<RunRecord> = kept.into_iter().filter(|r| !replaced(r)).collect();
    all.extend(new);
    order_runs(&mut all);
    all
}

const KEPT_NOTE: &str = "the plain variants' runs (both provisioners) are those finished ";

/// The note saying where the kept plain runs come from. A file that was itself written by
/// `--policy-only` already says so, and its `finished_at` is that policy run's, not the
/// plain runs': its note is kept as it is.
pub fn kept_note(kept_notes: &[String], finished_at: &str) -> String {
    kept_notes
        .iter()
        .find(|n| n.starts_with(KEPT_NOTE))
        .cloned()
        .unwrap_or_else(|| {
            format!(
                "{KEPT_NOTE}{finished_at} (at an earlier commit than the one named above); the admission-policy variants were run afterwards with `--policy-only`, so their upstream columns repeat those upstream runs"
            )
        })
}

/// Upstream's run `run` of variant `from`, renamed to variant `to`.
pub fn repeated(records: &[RunRecord], from: &str, to: &str, run: u32) -> Option<RunRecord> {
    let mut r = records
        .iter()
        .find(|r| r.implementation == Impl::Upstream && r.variant == from && r.run == run)?
        .clone();
    r.variant = to.to_string();
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_policy_only_run_keeps_the_plain_runs_date() {
        let first = kept_note(&[], "2026-11-24 10:26 UTC");
        assert!(first.starts_with(KEPT_NOTE));
        assert!(first.contains("2026-11-24 10:26 UTC"));
        // The file written by the first policy-only run finished later; its note still names
        // the plain runs' time.
        let second = kept_note(
            &["other".to_string(), first.clone()],
            "2026-11-25 17:50 UTC",
        );
        assert_eq!(second, first);
    }

    #[test]
    fn policy_variants_follow_their_plain_budget() {
        let names: Vec<String> = VARIANTS.iter().map(Variant::name).collect();
        assert_eq!(
            names,
            [
                "qps 5/10",
                "qps 5/10, admission policy",
                "qps 5/10, write-ahead record",
                "qps 100/200",
                "qps 100/200, admission policy"
            ]
        );
        for (i, v) in VARIANTS.iter().enumerate().filter(|(_, v)| v.ours_only()) {
            assert!(
                VARIANTS[..i].contains(&v.plain()),
                "{} runs before the plain variant whose upstream runs it repeats",
                v.name()
            );
        }
    }

    #[test]
    fn one_variant_replaces_only_its_runs_and_its_upstream_repeats() {
        let record = |which, variant: &str, bound| {
            let mut r = RunRecord::new(which, variant, 1);
            r.set("bound_s", bound);
            r
        };
        let policy = "qps 5/10, admission policy";
        let kept = vec![
            record(Impl::Ours, "qps 5/10", 1.0),
            record(Impl::Upstream, "qps 5/10", 2.0),
            record(Impl::Ours, policy, 3.0),
            record(Impl::Upstream, policy, 2.0),
            record(Impl::Ours, "qps 100/200", 4.0),
        ];
        let new = vec![
            record(Impl::Ours, "qps 5/10", 10.0),
            record(Impl::Upstream, "qps 5/10", 20.0),
            record(Impl::Upstream, policy, 20.0),
        ];
        let all = merged(kept, new, "qps 5/10", &[policy.to_string()]);
        let mut got: Vec<(String, Impl, f64)> = all
            .iter()
            .map(|r| (r.variant.clone(), r.implementation, r.values["bound_s"]))
            .collect();
        let order: Vec<&str> = got.iter().map(|(v, _, _)| v.as_str()).collect();
        assert_eq!(
            order,
            ["qps 5/10", "qps 5/10", policy, policy, "qps 100/200"],
            "in the variants' order"
        );
        got.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let want = [
            ("qps 100/200", Impl::Ours, 4.0),
            ("qps 5/10", Impl::Ours, 10.0),
            ("qps 5/10", Impl::Upstream, 20.0),
            (policy, Impl::Ours, 3.0),
            (policy, Impl::Upstream, 20.0),
        ];
        let want: Vec<(String, Impl, f64)> = want
            .iter()
            .map(|(v, i, b)| (v.to_string(), *i, *b))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn upstream_records_are_repeated_under_the_policy_variant() {
        let mut up = RunRecord::new(Impl::Upstream, "qps 5/10", 2);
        up.set("bound_s", 250.0);
        let ours = RunRecord::new(Impl::Ours, "qps 5/10", 2);
        let records = [ours, up];
        let r = repeated(&records, "qps 5/10", "qps 5/10, admission policy", 2).unwrap();
        assert_eq!(r.implementation, Impl::Upstream);
        assert_eq!(r.variant, "qps 5/10, admission policy");
        assert_eq!(r.values["bound_s"], 250.0);
        assert!(repeated(&records, "qps 5/10", "x", 3).is_none());
    }
}
