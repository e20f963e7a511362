//! `cargo xtask chaos`: the reliability suite. Each scenario attacks our csi-provisioner and
//! upstream external-provisioner v6.4.0 the same way, one after the other on one real local
//! control plane, and counts what was lost from the driver's own state and call log. Results:
//! `reliability/results/<n>.json` and `RELIABILITY.md` (through the benchmark report code).
//! A program, not a test: no count fails it.

mod capacity;
mod churn;
mod failover;
mod faults;
mod harness;
mod race;
mod restart;
mod soak;
mod tally;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use testenv::ControlPlane;

use crate::bench::ctx::{Ctx, Slot};
use crate::bench::launch::{Driver, Running};
use crate::bench::report;
use crate::bench::results::{self, Impl, MetricDef, RunRecord, ScenarioResult};

/// What sets each scenario's result apart, scenario 1 first (how it runs: [`measure`]).
const SCENARIOS: [Scenario; 7] = [
    Scenario::new("kill -9 during churn", churn::setup, churn::METRICS),
    Scenario::new("Create→delete race", race::setup, race::METRICS),
    Scenario::new(
        "API server and etcd restart",
        restart::setup,
        restart::METRICS,
    ),
    Scenario::new("CSI faults", faults::setup, faults::METRICS),
    Scenario::new("Leader failover", failover::setup, failover::METRICS),
    // Counts capacity objects, not volumes.
    Scenario {
        volumes: false,
        ..Scenario::new("Capacity under faults", capacity::setup, capacity::METRICS)
    },
    Scenario::new("Soak", soak::setup, soak::METRICS),
];

/// The number of the last scenario.
const LAST: u8 = SCENARIOS.len() as u8;

struct Scenario {
    title: &'static str,
    setup: fn(&Sizes) -> String,
    /// What it reports: after [`VOLUME_LOSSES`] if it counts volumes.
    metrics: &'static [Metric],
    volumes: bool,
}

impl Scenario {
    const fn new(
        title: &'static str,
        setup: fn(&Sizes) -> String,
        metrics: &'static [Metric],
    ) -> Self {
        Scenario {
            title,
            setup,
            metrics,
            volumes: true,
        }
    }

    fn metric_defs(&self) -> Vec<MetricDef> {
        let losses: &[Metric] = if self.volumes { &VOLUME_LOSSES } else { &[] };
        losses.iter().chain(self.metrics).map(Metric::def).collect()
    }
}

/// A [`MetricDef`] as a constant: key, label, unit, and whether lower is better.
pub struct Metric(&'static str, &'static str, &'static str, bool);

impl Metric {
    fn def(&self) -> MetricDef {
        MetricDef::new(self.0, self.1, self.2, self.3)
    }
}

/// The counts every volume scenario reports first.
const VOLUME_LOSSES: [Metric; 5] = [
    Metric("leaked", "Leaked volumes (in the driver, no PV)", "", true),
    Metric("orphan_pvs", "Orphan PVs (volume gone)", "", true),
    Metric(
        "duplicates",
        "Duplicate volumes (two ids for one claim)",
        "",
        true,
    ),
    Metric("unbound", "Claims not Bound that should be", "", true),
    RECOVERY_S,
];

// Metrics more than one scenario reports.
pub const RECOVERY_S: Metric = Metric(
    "recovery_s",
    "Time to settle after the last fault",
    "s",
    true,
);
pub const BOUND_S: Metric = Metric("bound_s", "Time until every claim is Bound", "s", true);
pub const CREATE_CALLS: Metric = Metric("create_calls", "CreateVolume calls", "", true);
pub const DELETE_CALLS: Metric = Metric("delete_calls", "DeleteVolume calls", "", true);

#[derive(Debug, Clone)]
pub struct Options {
    pub scenarios: Vec<u8>,
    pub runs: u32,
    pub quick: bool,
    pub report_only: bool,
    /// The number of the first run (which provisioner starts alternates by it).
    pub first_run: u32,
    /// Keep the runs already in the results file and add these.
    pub append: bool,
    /// A line added to the scenario's notes (how these runs differ, e.g. run side by side).
    pub note: Option<String>,
    /// Run only ours; upstream's runs are kept from the results file, ours' replaced.
    pub ours_only: bool,
    /// The Kubernetes minor when not the default (`1.34`): results go to its own directory.
    pub kubernetes: Option<String>,
}

/// Problem sizes; `--quick` shrinks them.
#[derive(Debug, Clone, PartialEq)]
pub struct Sizes {
    pub s1_claims: usize,
    pub s1_kills: usize,
    /// How long scenario 1's churn lasts.
    pub s1_churn: Duration,
    pub s2_claims: usize,
    /// Over how long scenario 2's claims are created.
    pub s2_spread: Duration,
    pub s3_claims: usize,
    pub s4_claims: usize,
    pub s5_claims: usize,
    pub s6_nodes: usize,
    /// How long scenario 7's churn lasts.
    pub s7_soak: Duration,
    /// The longest a run waits for the cluster to settle.
    pub settle: Duration,
}

impl Sizes {
    pub fn full() -> Sizes {
        Sizes {
            s1_claims: 500,
            s1_kills: 20,
            s1_churn: Duration::from_secs(120),
            s2_claims: 1000,
            s2_spread: Duration::from_secs(100),
            s3_claims: 300,
            s4_claims: 300,
            s5_claims: 300,
            s6_nodes: 10,
            s7_soak: Duration::from_secs(3600),
            settle: Duration::from_secs(600),
        }
    }

    pub fn quick() -> Sizes {
        Sizes {
            s1_claims: 40,
            s1_kills: 4,
            s1_churn: Duration::from_secs(30),
            s2_claims: 60,
            s2_spread: Duration::from_secs(10),
            s3_claims: 40,
            s4_claims: 30,
            s5_claims: 40,
            s6_nodes: 4,
            s7_soak: Duration::from_secs(150),
            settle: Duration::from_secs(180),
        }
    }
}

/// What a run started and must stop.
#[derive(Default)]
pub struct Started {
    pub victim: Option<harness::Victim>,
    pub driver: Option<Driver>,
    /// Scenario 5's provisioners, by host name.
    pub replicas: Vec<(String, Running)>,
}

/// One run of a scenario against one provisioner: what its steps use, where they record, and
/// what they started (the caller tears it down even when a step fails).
pub struct Run<'a> {
    pub ctx: &'a Ctx,
    pub cp: &'a ControlPlane,
    pub sizes: &'a Sizes,
    pub slot: &'a Slot,
    pub rec: &'a mut RunRecord,
    pub started: &'a mut Started,
}

pub fn selection(asked: &[u8]) -> Result<Vec<u8>> {
    crate::bench::select(asked, LAST)
}

pub fn command_line(scenario: u8, runs: u32, quick: bool, kubernetes: Option<&str>) -> String {
    let mut c = crate::bench::reproduce("chaos", scenario, runs, quick);
    if let Some(minor) = kubernetes {
        c.push_str(&format!(" --kubernetes {minor}"));
    }
    c
}

/// Where results go: the committed files, or `target/chaos-quick/` for `--quick`; a Kubernetes
/// version other than the default has its own directory, so that RELIABILITY.md stays the
/// default's.
fn outputs(root: &Path, quick: bool, kubernetes: Option<&str>) -> (PathBuf, PathBuf) {
    let base = match (quick, kubernetes) {
        (true, None) => testenv::target_dir().join("chaos-quick"),
        (true, Some(minor)) => testenv::target_dir().join(format!("chaos-quick-{minor}")),
        (false, None) => {
            return (
                root.join("reliability/results"),
                root.join("RELIABILITY.md"),
            );
        }
        (false, Some(minor)) => root.join(format!("reliability/kubernetes-{minor}")),
    };
    (base.join("results"), base.join("RELIABILITY.md"))
}

/// The minors with a report of their own in `reliability/kubernetes-<minor>/`, oldest first.
fn other_versions(root: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(root.join("reliability")) else {
        return Vec::new();
    };
    let mut minors: Vec<(Vec<u32>, String)> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("RELIABILITY.md").is_file())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let minor = name.strip_prefix("kubernetes-")?.to_string();
            let key = minor.split('.').map(|p| p.parse().unwrap_or(0)).collect();
            Some((key, minor))
        })
        .collect();
    minors.sort();
    minors.into_iter().map(|(_, m)| m).collect()
}

/// Renders the report of `kubernetes` (`None`: the default's, RELIABILITY.md) from its results.
fn render(root: &Path, quick: bool, kubernetes: Option<&str>) -> Result<PathBuf> {
    let (results_dir, markdown) = outputs(root, quick, kubernetes);
    let plots = results_dir.with_file_name("plots");
    let others = if quick {
        Vec::new()
    } else {
        other_versions(root)
    };
    let header = header(kubernetes, &others);
    report::write_all(&header, &results_dir, &markdown, &plots, "plots", &explain)?;
    if kubernetes.is_none() {
        append_fuzzing(&markdown)?;
    }
    Ok(markdown)
}

/// Renders the report of `kubernetes` and, for another version's, the default's too (its
/// header links to the other versions' reports).
fn render_with_main(root: &Path, quick: bool, kubernetes: Option<&str>) -> Result<PathBuf> {
    let markdown = render(root, quick, kubernetes)?;
    if kubernetes.is_some() && !quick {
        render(root, quick, None)?;
    }
    Ok(markdown)
}

/// The fuzzing section is written by hand (`reliability/fuzzing.md`, from `cargo xtask fuzz`
/// runs) and kept at the end of the generated report.
fn append_fuzzing(markdown: &Path) -> Result<()> {
    let section = testenv::workspace_root().join("reliability/fuzzing.md");
    let Ok(fuzzing) = std::fs::read_to_string(&section) else {
        return Ok(());
    };
    let mut text = std::fs::read_to_string(markdown)
        .with_context(|| format!("reading {}", markdown.display()))?;
    text.push('\n');
    text.push_str(&fuzzing);
    std::fs::write(markdown, text).with_context(|| format!("writing {}", markdown.display()))
}

/// `--ours-only`: the result already at `path`, whose upstream runs the new result keeps;
/// `None` when it has none (a version upstream was never run on), and then only ours' runs
/// are written, with a note saying so.
fn kept_for_ours_only(path: &Path) -> Result<Option<ScenarioResult>> {
    let kept = results::read(path)?;
    Ok(kept.filter(|r| {
        r.runs
            .iter()
            .any(|run| run.implementation == Impl::Upstream)
    }))
}

/// The note of an ours-only result with no upstream runs to keep.
const NO_UPSTREAM_NOTE: &str =
    "Only ours ran (--ours-only): upstream has no runs on this Kubernetes version here.";

/// `new` (ours' runs only) with upstream's runs kept from `kept`, the scenario's earlier
/// result: a note says where they come from, and their upstream release and Kubernetes
/// version stay named.
fn with_kept_upstream(new: ScenarioResult, kept: ScenarioResult) -> ScenarioResult {
    let mut notes = vec![results::kept_note("only ours", "upstream's runs", &kept)];
    notes.extend(kept.notes.iter().cloned());
    notes.extend(new.notes.iter().cloned());
    let mut runs = results::replace_runs(kept.runs, new.runs, "", &[Impl::Ours]);
    runs.sort_by_key(|r| r.run);
    ScenarioResult {
        runs,
        notes,
        kubernetes: results::relabel(&kept.kubernetes, "ours", &new.kubernetes, "upstream"),
        upstream: kept.upstream,
        ..new
    }
}

/// By scenario, what `--ours-only` keeps of upstream's runs (`None`: there are none).
type KeptUpstream = std::collections::BTreeMap<u8, Option<ScenarioResult>>;

/// What can be checked before anything is built: the scenarios, the run numbers, and for
/// `--ours-only` every scenario's kept upstream runs, if any (returned by scenario).
pub fn preflight(root: &Path, opts: &Options) -> Result<(Vec<u8>, KeptUpstream)> {
    let scenarios = selection(&opts.scenarios)?;
    if opts.runs == 0 {
        bail!("--runs must be at least 1");
    }
    if opts.first_run == 0 {
        bail!("--first-run must be at least 1");
    }
    let (results_dir, _) = outputs(root, opts.quick, opts.kubernetes.as_deref());
    let mut kept = std::collections::BTreeMap::new();
    if opts.ours_only {
        for &n in &scenarios {
            let found = kept_for_ours_only(&results_dir.join(format!("{n}.json")))?;
            kept.insert(n, found);
        }
    }
    Ok((scenarios, kept))
}

pub fn run(root: &Path, bin_dir: &Path, opts: &Options) -> Result<()> {
    let kubernetes = opts.kubernetes.as_deref();
    if opts.report_only {
        let markdown = render_with_main(root, opts.quick, kubernetes)?;
        println!("chaos: wrote {}", markdown.display());
        // The default's report alone: the other versions' get its header's changes too.
        if kubernetes.is_none() && !opts.quick {
            for minor in other_versions(root) {
                let markdown = render(root, false, Some(&minor))?;
                println!("chaos: wrote {}", markdown.display());
            }
        }
        return Ok(());
    }
    let (scenarios, mut kept) = preflight(root, opts)?;
    let (results_dir, _) = outputs(root, opts.quick, kubernetes);
    let ran: &[Impl] = if opts.ours_only {
        &[Impl::Ours]
    } else {
        &Impl::BOTH
    };
    let bins = crate::bench::binaries(root, bin_dir)?;
    let work = crate::bench::work_dir("chaos");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting a tokio runtime")?;
    let sizes = if opts.quick {
        Sizes::quick()
    } else {
        Sizes::full()
    };
    runtime.block_on(async {
        let (runs, quick) = (opts.runs, opts.quick);
        let minor = opts.kubernetes.clone();
        let command = Box::new(move |s| command_line(s, runs, quick, minor.as_deref()));
        let (cp, ctx) = crate::bench::start_suite(&work, bins, runs, quick, command).await?;
        check_version(&ctx.kubernetes, kubernetes)?;
        for &n in &scenarios {
            let began = Instant::now();
            let runs = run_scenario(&ctx, &cp, &sizes, n, opts.first_run, ran).await;
            let mut result = assemble(&ctx, &sizes, n, runs, began.elapsed().as_secs_f64());
            match kept.remove(&n) {
                Some(Some(kept)) => result = with_kept_upstream(result, kept),
                Some(None) => {
                    result.notes.push(NO_UPSTREAM_NOTE.into());
                    // The summary's Upstream column: no release ran here.
                    result.upstream = "–".into();
                }
                None => {}
            }
            result.notes.extend(opts.note.clone());
            let path = results_dir.join(format!("{n}.json"));
            if opts.append {
                let command = |runs| command_line(n, runs, opts.quick, kubernetes);
                results::append(&path, result, command)?;
            } else {
                results::write(&path, &result)?;
            }
            println!("chaos: wrote {}", path.display());
            render_with_main(root, opts.quick, kubernetes)?;
        }
        anyhow::Ok(())
    })?;
    let (_, markdown) = outputs(root, opts.quick, kubernetes);
    println!("chaos: report {}", markdown.display());
    Ok(())
}

/// Fails unless the control plane's version `running` (`v1.34.3`) is of the minor asked for
/// (`None`: the default): with TESTENV_BIN set elsewhere its results would land in the wrong
/// report.
fn check_version(running: &str, asked: Option<&str>) -> Result<()> {
    let minor = asked.unwrap_or(crate::recipe::DEFAULT_KUBERNETES);
    if !running.starts_with(&format!("v{minor}.")) {
        bail!(
            "the control plane is Kubernetes {running}, not {minor}: is TESTENV_BIN set to another build?"
        );
    }
    Ok(())
}

/// The runs of scenario `n` by the provisioners in `ran`.
async fn run_scenario(
    ctx: &Ctx,
    cp: &ControlPlane,
    sizes: &Sizes,
    n: u8,
    first_run: u32,
    ran: &[Impl],
) -> Vec<RunRecord> {
    let mut records = Vec::new();
    for run in first_run..first_run + ctx.runs {
        for which in Impl::order(run).into_iter().filter(|w| ran.contains(w)) {
            let slot = ctx.slot(n, "", which, run);
            println!("chaos: scenario {n}, run {run}, {which}");
            let mut rec = RunRecord::new(which, "", run);
            let mut started = Started::default();
            let this = Run {
                ctx,
                cp,
                sizes,
                slot: &slot,
                rec: &mut rec,
                started: &mut started,
            };
            if let Err(e) = measure(n, this).await {
                rec.notes.push(format!("{e:#}"));
            }
            teardown(ctx, &slot, started).await;
            println!("  {:?} {:?}", rec.values, rec.notes);
            records.push(rec);
        }
    }
    records
}

/// What scenario `n` does in one run; the run's start and end are [`harness`]'s.
async fn measure(n: u8, run: Run<'_>) -> Result<()> {
    match n {
        1 => churn::measure(run).await,
        2 => race::measure(run).await,
        3 => restart::measure(run).await,
        4 => faults::measure(run).await,
        5 => failover::measure(run).await,
        6 => capacity::measure(run).await,
        _ => soak::measure(run).await,
    }
}

async fn teardown(ctx: &Ctx, slot: &Slot, started: Started) {
    for (_, mut replica) in started.replicas {
        replica.process.kill();
    }
    let prov = started.victim.and_then(|v| v.running);
    ctx.teardown(slot, prov, started.driver).await;
}

fn assemble(ctx: &Ctx, sizes: &Sizes, n: u8, runs: Vec<RunRecord>, wall: f64) -> ScenarioResult {
    let s = &SCENARIOS[usize::from(n) - 1];
    let setup = format!(
        "{} Both provisioners: `--kube-api-qps=100 --kube-api-burst=200 \
         --worker-threads=100 --timeout=10s`, no leader election.",
        (s.setup)(sizes)
    );
    ctx.result(n, s.title, setup, s.metric_defs(), runs, wall)
}

/// The line under each table: what the counts say, from the results themselves, and what
/// protects a volume in that scenario on each side.
fn explain(r: &ScenarioResult) -> String {
    let summary = |which: Impl, key: &str| {
        let v: Vec<f64> = r
            .values(which, "", key)
            .into_iter()
            .map(|(_, x)| x)
            .collect();
        crate::bench::stats::summarize(&v)
    };
    let median = |which: Impl, key: &str| summary(which, key).map(|s| s.median);
    let range = |which: Impl, key: &str| report::fmt_summary(summary(which, key));
    let by_run = |which: Impl, key: &str| {
        let mut v = r.values(which, "", key);
        v.sort_by_key(|(run, _)| *run);
        let parts: Vec<String> = v
            .iter()
            .map(|(run, x)| format!("run {run} {} MiB", report::fmt_num(*x)))
            .collect();
        parts.join(", ")
    };
    let lost = |which: Impl| -> f64 {
        r.runs
            .iter()
            .filter(|run| run.implementation == which)
            .flat_map(|run| LOSSES.iter().filter_map(|k| run.values.get(*k)))
            .sum()
    };
    let (ours, upstream) = (lost(Impl::Ours), lost(Impl::Upstream));
    let objects = r.scenario == 6;
    let upstream_ran = r
        .runs
        .iter()
        .any(|run| run.implementation == Impl::Upstream);
    let counts = match (ours == 0.0 && upstream == 0.0, objects) {
        // Ours alone (`--ours-only` on a version upstream never ran on).
        _ if !upstream_ran => format!(
            "Only ours ran here. Lost over all its runs (leaked + orphan + duplicate volumes + \
             claims not Bound, or objects for scenario 6): {}.",
            report::fmt_num(ours)
        ),
        (true, false) => "Neither lost anything in any run: no leaked, orphan or duplicate \
                          volume, every claim that should be Bound was."
            .to_string(),
        (true, true) => "Neither left a duplicate, missing or wrong object in any run.".to_string(),
        (false, false) => format!(
            "Lost over all runs (leaked + orphan + duplicate volumes + claims not Bound): ours \
             {}, upstream {}.",
            report::fmt_num(ours),
            report::fmt_num(upstream)
        ),
        (false, true) => format!(
            "Duplicate + missing + wrong objects over all runs: ours {}, upstream {}.",
            report::fmt_num(ours),
            report::fmt_num(upstream)
        ),
    };
    let settle = match (
        median(Impl::Ours, "recovery_s"),
        median(Impl::Upstream, "recovery_s"),
    ) {
        (Some(o), Some(u)) => format!(
            " Settled after the last fault in {} s (ours) and {} s (upstream), medians.",
            report::fmt_num(o),
            report::fmt_num(u)
        ),
        _ => String::new(),
    };
    let guard = match r.scenario {
        1 => {
            "What keeps a volume whose CreateVolume a kill cut short: ours records the claim \
             before the call, in its write-ahead record (a Lease per driver; runs built before \
             commit f738e30 made it the default put the creating-volume finalizer on the claim \
             instead), so after a restart even a claim deleted meanwhile is asked for again \
             under the same name and its volume saved or deleted; upstream asks again under the \
             same name only while the claim still exists (its in-flight set is in memory, \
             external-provisioner #486)"
        }
        2 => {
            "What keeps a volume whose claim is deleted mid-call: ours keeps the claim's entry \
             in its write-ahead record until the call has returned and the volume's PV is \
             saved, and cleans up a claim deleted meanwhile from its entry: DeleteVolume with \
             the id the call returned (a call whose answer was lost to a timeout is asked again \
             under the same name, and that volume deleted). Runs built before commit f738e30 \
             made the record the default held the claim with the creating-volume finalizer \
             instead, so the claim's deletion released a PV whose reclaim policy deleted the \
             volume. Upstream finds the claim gone when the call returns and deletes the volume \
             too (external-provisioner #1469's leak needs a CreateVolume replayed after that \
             DeleteVolume). Both settle about two minutes after the last deletion: \
             kube-controller-manager's pvc-protection releases the deleted claims at its own pace"
        }
        3 => {
            "Neither provisioner is restarted: both keep their in-flight calls, retry the \
             writes the outage refused and resume their watches"
        }
        7 => {
            return format!(
                "{counts}{settle} Memory and descriptors that grow over the hour would be state \
                 kept per claim ever seen rather than per claim alive. RSS after the warm-up → at \
                 the end: ours {} → {} MiB, upstream {} → {} MiB; open descriptors ours {} → {}, \
                 upstream {} → {}. Both keep client-go's event correlator: three LRU caches of \
                 4096 entries, which fill up during the first half hour (about two events per \
                 claim) and then stay at that size. Until commit 9f96ad8 ours kept their keys \
                 and messages as strings (8.1 MiB when full, measured alone with 3,600 claims' \
                 events); since then and a23be8a they keep 64-bit hashes (2.8 MiB when full). \
                 Ours' RSS growth by run: {}; the notes below say which runs had which binary.",
                range(Impl::Ours, "rss_start_mib"),
                range(Impl::Ours, "rss_end_mib"),
                range(Impl::Upstream, "rss_start_mib"),
                range(Impl::Upstream, "rss_end_mib"),
                range(Impl::Ours, "fds_start"),
                range(Impl::Ours, "fds_end"),
                range(Impl::Upstream, "fds_start"),
                range(Impl::Upstream, "fds_end"),
                by_run(Impl::Ours, "rss_growth_mib"),
            );
        }
        6 => {
            "After the restart each finds its own objects by their labels; a node removed \
             while GetCapacity failed must lose its objects, one added then must get them once \
             GetCapacity answers, and nobody may publish a second object for one class and node"
        }
        4 => {
            return format!(
                "{counts}{settle} Both retry failed and timed-out calls under the same name, \
                 which the driver answers idempotently; a retry that comes while the driver still \
                 runs the timed-out call for that volume is answered Aborted (one call per volume \
                 at a time), for both alike. Ours spaces each volume's retries by its backoff, \
                 1, 2, 4, 8, 16, 32 s … after each failure (DeleteVolume calls {} vs {}): one \
                 volume whose calls fail five or six times in a row sets the end of a run. {} \
                 ({} vs {} s). Restarts after the socket went away (a provisioner that exits was \
                 started again): ours {}, upstream {}.",
                range(Impl::Ours, "delete_calls"),
                range(Impl::Upstream, "delete_calls"),
                match (
                    summary(Impl::Ours, "gone_s"),
                    summary(Impl::Upstream, "gone_s")
                ) {
                    (Some(o), Some(u)) if o.max > u.max => {
                        "Ours' time until every volume was deleted has the longer tail"
                    }
                    _ => "Upstream's time until every volume was deleted has the longer tail",
                },
                range(Impl::Ours, "gone_s"),
                range(Impl::Upstream, "gone_s"),
                range(Impl::Ours, "outage_restarts"),
                range(Impl::Upstream, "outage_restarts"),
            );
        }
        _ => {
            return format!(
                "{counts}{settle} The new leader starts from the API server's state. Both use \
                 the same Lease algorithm and timings (lease 15 s, retry 5 s with client-go's \
                 jitter of up to 1.2 retry periods), so the gap is the lease plus where the \
                 candidate's polls fell: ours {} s, upstream {} s, median (min–max); three runs \
                 each do not separate them.",
                range(Impl::Ours, "gap_s"),
                range(Impl::Upstream, "gap_s"),
            );
        }
    };
    format!("{counts}{settle} {guard}.")
}

/// The keys that count what a run lost.
const LOSSES: [&str; 7] = [
    "leaked",
    "orphan_pvs",
    "duplicates",
    "unbound",
    "duplicate_objects",
    "missing_objects",
    "wrong_objects",
];

/// The report's header: the default Kubernetes version's (`kubernetes` `None`), linking the
/// reports of the `others` minors, or another version's.
fn header(kubernetes: Option<&str>, others: &[String]) -> String {
    let default = crate::recipe::DEFAULT_KUBERNETES;
    let (title, command, results, versions) = match kubernetes {
        None => {
            let links: Vec<String> = others
                .iter()
                .map(|m| format!("[{m}](reliability/kubernetes-{m}/RELIABILITY.md)"))
                .collect();
            let versions = if links.is_empty() {
                String::new()
            } else {
                format!(
                    " Runs on other Kubernetes versions (`--kubernetes <minor>`) have reports of \
                     their own: {}.",
                    links.join(", ")
                )
            };
            (
                String::new(),
                "cargo xtask chaos".to_string(),
                "reliability/results/".to_string(),
                format!(
                    "Runs go on the test environment's default control plane, now Kubernetes \
                     {default}; the Kubernetes column names the version each scenario ran on.\
                     {versions}"
                ),
            )
        }
        Some(minor) => (
            format!(" on Kubernetes {minor}"),
            format!("cargo xtask chaos --kubernetes {minor}"),
            format!("reliability/kubernetes-{minor}/results/"),
            format!(
                "Runs go on a Kubernetes {minor} control plane (`--kubernetes {minor}`; the \
                 Kubernetes column names each scenario's patch release); those on the default, \
                 Kubernetes {default}, are in [RELIABILITY.md](../../RELIABILITY.md)."
            ),
        ),
    };
    format!(
        "# Reliability{title}: csi-provisioner (Rust) vs external-provisioner v6.4.0

Generated by `{command}` from the raw results in `{results}`; do not edit by
hand. Each scenario attacks both provisioners the same way, one after the other, on one real
local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) with the
same release-built mock CSI driver and the same flags. Every run gets its own driver name and
namespace; runs alternate which provisioner goes first. {versions}

What was lost is counted at the end of every run from the driver's own state (ListVolumes)
and call log and from the API server's objects, never from a provisioner's logs: **leaked
volumes** (a volume in the driver that no PV points to), **orphan PVs** (a PV whose volume
the driver does not have), **duplicate volumes** (two successful CreateVolume answers with
different ids for one claim), **claims not Bound** that should be, and the **time to settle**
after the last fault. Numbers are median (min–max) over the runs; ratios are us / upstream.

To reproduce: `cargo xtask chaos [--scenario N[,M]] [--runs K] [--quick] [--no-build]
[--report-only] [--kubernetes MINOR] [--ours-only]`. `--ours-only` runs only ours and keeps
upstream's runs already in the results (the scenario's notes say from when). Logs of every run
(both provisioners, the driver, its faults file and call log, the control plane) stay in
`target/chaos-runs/<time>/`. The scenarios: 1 kill -9 during churn, 2 create→delete race, 3
API server and etcd restart, 4 CSI faults, 5 leader failover, 6 capacity under faults, 7
one-hour soak (six hours for three runs of both: name the others with `--scenario
1,2,3,4,5,6` to leave it out). A scenario without a section below has not been run at full
size yet.

"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_selection() {
        assert_eq!(selection(&[]).unwrap(), vec![1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(selection(&[4, 1, 4]).unwrap(), vec![1, 4]);
        assert!(
            selection(&[8])
                .unwrap_err()
                .to_string()
                .contains("no scenario 8")
        );
    }

    #[test]
    fn quick_sizes_are_smaller() {
        let (f, q) = (Sizes::full(), Sizes::quick());
        assert!(q.s1_claims < f.s1_claims && q.s2_claims < f.s2_claims);
        assert!(q.s3_claims < f.s3_claims && q.s4_claims < f.s4_claims);
        assert!(q.settle < f.settle);
    }

    #[test]
    fn every_scenario_reports_each_metric_once() {
        for s in &SCENARIOS {
            let defs = s.metric_defs();
            let keys: std::collections::BTreeSet<&str> =
                defs.iter().map(|m| m.key.as_str()).collect();
            assert_eq!(keys.len(), defs.len(), "{}", s.title);
            assert!(keys.contains("recovery_s"), "{}", s.title);
        }
    }

    fn result(runs: &[(Impl, u32, f64)], kubernetes: &str) -> ScenarioResult {
        ScenarioResult {
            scenario: 1,
            title: "kill".into(),
            quick: false,
            finished_at: "2026-11-28 13:44 UTC".into(),
            wall_seconds: 60.0,
            command: "cargo xtask chaos --scenario 1".into(),
            setup: "s".into(),
            metrics: Vec::new(),
            runs: runs
                .iter()
                .map(|&(which, run, leaked)| {
                    let mut r = RunRecord::new(which, "", run);
                    r.set("leaked", leaked);
                    r
                })
                .collect(),
            plot: None,
            notes: Vec::new(),
            upstream: results::UPSTREAM.into(),
            kubernetes: kubernetes.into(),
        }
    }

    #[test]
    fn ours_only_keeps_upstreams_runs_and_says_from_when() {
        let mut kept = result(
            &[
                (Impl::Ours, 1, 1.0),
                (Impl::Upstream, 1, 5.0),
                (Impl::Upstream, 2, 9.0),
                (Impl::Ours, 2, 1.0),
            ],
            "v1.36.3",
        );
        kept.upstream = "v6.3.0".into();
        kept.notes = vec!["runs 2 ran side by side".into()];
        let mut new = result(&[(Impl::Ours, 1, 0.0), (Impl::Ours, 2, 0.0)], "v1.37.2");
        new.finished_at = "2026-12-06 10:00 UTC".into();
        let merged = with_kept_upstream(new, kept);
        let runs: Vec<(Impl, u32, f64)> = merged
            .runs
            .iter()
            .map(|r| (r.implementation, r.run, r.values["leaked"]))
            .collect();
        assert_eq!(
            runs,
            [
                (Impl::Upstream, 1, 5.0),
                (Impl::Ours, 1, 0.0),
                (Impl::Upstream, 2, 9.0),
                (Impl::Ours, 2, 0.0)
            ]
        );
        assert_eq!(merged.upstream, "v6.3.0");
        assert_eq!(merged.kubernetes, "v1.37.2 (ours); v1.36.3 (upstream)");
        assert_eq!(merged.finished_at, "2026-12-06 10:00 UTC");
        assert!(
            merged.notes[0].contains("finished 2026-11-28 13:44 UTC (upstream v6.3.0"),
            "{:?}",
            merged.notes
        );
        assert_eq!(merged.notes[1], "runs 2 ran side by side");
    }

    #[test]
    fn ours_only_keeps_upstreams_runs_when_there_are_some() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.json");
        assert!(kept_for_ours_only(&path).unwrap().is_none());
        results::write(&path, &result(&[(Impl::Ours, 1, 0.0)], "v1.37.2")).unwrap();
        assert!(kept_for_ours_only(&path).unwrap().is_none());
        let both = result(&[(Impl::Ours, 1, 0.0), (Impl::Upstream, 1, 0.0)], "");
        results::write(&path, &both).unwrap();
        // Read like any result: a file without the version gets its time's.
        let kept = kept_for_ours_only(&path).unwrap().unwrap();
        assert_eq!(kept.kubernetes, "v1.36.3");
    }

    #[test]
    fn other_versions_have_their_own_directory_and_header() {
        let root = Path::new("/ws");
        assert_eq!(
            outputs(root, false, None),
            (
                PathBuf::from("/ws/reliability/results"),
                PathBuf::from("/ws/RELIABILITY.md")
            )
        );
        assert_eq!(
            outputs(root, false, Some("1.34")),
            (
                PathBuf::from("/ws/reliability/kubernetes-1.34/results"),
                PathBuf::from("/ws/reliability/kubernetes-1.34/RELIABILITY.md")
            )
        );
        let (quick, _) = outputs(root, true, Some("1.34"));
        assert!(quick.ends_with("chaos-quick-1.34/results"), "{quick:?}");
        let main = header(None, &["1.34".into(), "1.36".into()]);
        assert!(main.starts_with("# Reliability: "), "{main}");
        assert!(
            main.contains(
                "[1.34](reliability/kubernetes-1.34/RELIABILITY.md), [1.36](reliability/kubernetes-1.36/RELIABILITY.md)."
            ),
            "{main}"
        );
        assert!(!header(None, &[]).contains("other Kubernetes versions"));
        let other = header(Some("1.34"), &[]);
        assert!(
            other.starts_with("# Reliability on Kubernetes 1.34: "),
            "{other}"
        );
        assert!(
            other.contains("`cargo xtask chaos --kubernetes 1.34` from the raw results in `reliability/kubernetes-1.34/results/`"),
            "{other}"
        );
        assert!(other.contains("(../../RELIABILITY.md)"), "{other}");
    }

    #[test]
    fn other_versions_are_found_by_their_reports() {
        let dir = tempfile::tempdir().unwrap();
        for minor in ["1.36", "1.34", "1.35"] {
            let d = dir.path().join(format!("reliability/kubernetes-{minor}"));
            std::fs::create_dir_all(&d).unwrap();
            if minor != "1.35" {
                std::fs::write(d.join("RELIABILITY.md"), "x").unwrap();
            }
        }
        std::fs::create_dir_all(dir.path().join("reliability/results")).unwrap();
        assert_eq!(other_versions(dir.path()), ["1.34", "1.36"]);
        assert!(other_versions(Path::new("/nonexistent")).is_empty());
    }

    #[test]
    fn the_control_plane_must_be_the_version_asked_for() {
        assert!(check_version("v1.37.2", None).is_ok());
        assert!(check_version("v1.34.3", Some("1.34")).is_ok());
        assert!(check_version("v1.37.2", Some("1.34")).is_err());
        // 1.3 is not 1.34's prefix.
        assert!(check_version("v1.34.3", Some("1.3")).is_err());
    }

    #[test]
    fn reproducing_commands() {
        assert_eq!(
            command_line(2, 3, false, None),
            "cargo xtask chaos --scenario 2"
        );
        assert_eq!(
            command_line(1, 1, true, None),
            "cargo xtask chaos --scenario 1 --runs 1 --quick"
        );
        assert_eq!(
            command_line(5, 3, false, Some("1.34")),
            "cargo xtask chaos --scenario 5 --kubernetes 1.34"
        );
    }
}
