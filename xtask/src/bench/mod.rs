//! `cargo xtask bench`: our csi-provisioner and upstream external-provisioner v6.4.0 measured
//! side by side on one real local control plane. Results: `bench/results/<n>.json` (raw, latest
//! run), `BENCHMARKS.md` and `bench/plots/<n>.png` (rendered from the JSON). A program, not a
//! test: no number ever fails it.

pub(crate) mod calllog;
pub(crate) mod cluster;
pub(crate) mod ctx;
mod distributed;
pub(crate) mod explain;
mod freshness;
mod hostpathlog;
mod identity;
pub(crate) mod launch;
mod memory;
pub(crate) mod objects;
mod observe;
mod placement;
pub(crate) mod plot;
pub(crate) mod procfs;
mod prom;
pub(crate) mod report;
mod restore;
pub(crate) mod results;
mod sampler;
mod scale;
pub(crate) mod scoring;
pub(crate) mod stats;
mod sweep;
mod throughput;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use testenv::{ControlPlane, ControlPlaneOptions};

use ctx::{Ctx, Sizes};
use launch::Binaries;
use results::{Impl, RunRecord, ScenarioResult};

/// The number of the last scenario.
const LAST: u8 = 9;

/// What `cargo xtask bench` was asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    pub scenarios: Vec<u8>,
    pub runs: u32,
    pub quick: bool,
    /// Only re-render BENCHMARKS.md and the plots from the JSON results.
    pub report_only: bool,
    /// Scenarios 1 and 2: only this variant, merged with the other runs kept in the results.
    pub variant: Option<String>,
    /// With `variant`: only ours runs; upstream's runs of the variant are kept too.
    pub ours_only: bool,
}

/// Where results go: the committed files for full runs, `target/bench-quick/` for `--quick`.
struct Outputs {
    results: PathBuf,
    markdown: PathBuf,
    plots: PathBuf,
    plots_in_doc: String,
}

impl Outputs {
    fn new(root: &Path, quick: bool) -> Outputs {
        if quick {
            let base = testenv::target_dir().join("bench-quick");
            Outputs {
                results: base.join("results"),
                markdown: base.join("BENCHMARKS.md"),
                plots: base.join("plots"),
                plots_in_doc: "plots".into(),
            }
        } else {
            Outputs {
                results: root.join("bench/results"),
                markdown: root.join("BENCHMARKS.md"),
                plots: root.join("bench/plots"),
                plots_in_doc: "bench/plots".into(),
            }
        }
    }

    fn render(&self) -> Result<()> {
        report::write_all(
            report::HEADER,
            &self.results,
            &self.markdown,
            &self.plots,
            &self.plots_in_doc,
            &explain::explain,
        )
    }
}

/// Our release binaries and the cached upstream one; fails naming the one that is missing.
pub(crate) fn binaries(root: &Path, bin_dir: &Path) -> Result<Binaries> {
    let bins = Binaries {
        ours: root.join("target/release/csi-provisioner"),
        upstream: bin_dir.join("csi-provisioner-upstream"),
        driver: root.join("target/release/mock-csi-driver"),
    };
    for b in [&bins.ours, &bins.upstream, &bins.driver] {
        if !b.exists() {
            bail!(
                "{} is missing (the command builds it; did the build fail?)",
                b.display()
            );
        }
    }
    Ok(bins)
}

/// A fresh directory for one invocation's logs: `target/<kind>-runs/<time>/`.
pub(crate) fn work_dir(kind: &str) -> PathBuf {
    let stamp = jiff::Timestamp::now()
        .strftime("%Y%m%dT%H%M%SZ")
        .to_string();
    testenv::target_dir()
        .join(format!("{kind}-runs"))
        .join(stamp)
}

/// Starts the control plane in `work` and the context every scenario runs in. The control
/// plane lives as long as the returned handle.
pub(crate) async fn start_suite(
    work: &Path,
    bins: Binaries,
    runs: u32,
    quick: bool,
    command: Box<dyn Fn(u8) -> String + Send + Sync>,
) -> Result<(ControlPlane, Ctx)> {
    let cp = ControlPlane::start(ControlPlaneOptions {
        dir: Some(work.join("control-plane")),
        startup_timeout: Duration::from_secs(120),
        ..Default::default()
    })
    .await?;
    println!(
        "control plane in {} (logs in {}/logs)",
        work.display(),
        cp.dir().display()
    );
    let client = cp.try_client().await?;
    let kubernetes = client
        .apiserver_version()
        .await
        .context("asking the API server for its version")?
        .git_version;
    println!("control plane: Kubernetes {kubernetes}");
    let ctx = Ctx {
        client,
        kubeconfig: cp.kubeconfig().to_path_buf(),
        audit_log: cp.audit_log(),
        bins,
        runs,
        quick,
        sizes: if quick { Sizes::quick() } else { Sizes::full() },
        work: work.to_path_buf(),
        command,
        kubernetes,
    };
    Ok((cp, ctx))
}

/// The scenarios to run, sorted, without duplicates; all of them when none are named.
pub fn selection(asked: &[u8]) -> Result<Vec<u8>> {
    select(asked, LAST)
}

/// Scenarios `asked` of `1..=last`, sorted and without duplicates; all when none are named.
pub(crate) fn select(asked: &[u8], last: u8) -> Result<Vec<u8>> {
    if let Some(bad) = asked.iter().find(|s| !(1..=last).contains(*s)) {
        bail!("there is no scenario {bad}: scenarios are 1 to {last}");
    }
    let mut s: Vec<u8> = if asked.is_empty() {
        (1..=last).collect()
    } else {
        asked.to_vec()
    };
    s.sort_unstable();
    s.dedup();
    Ok(s)
}

/// The command that reproduces one scenario as it was run.
pub fn command_line(scenario: u8, runs: u32, quick: bool) -> String {
    reproduce("bench", scenario, runs, quick)
}

/// `cargo xtask <tool> --scenario N` with the run count and size it was run with.
pub(crate) fn reproduce(tool: &str, scenario: u8, runs: u32, quick: bool) -> String {
    let mut c = format!("cargo xtask {tool} --scenario {scenario}");
    if runs != 3 {
        c.push_str(&format!(" --runs {runs}"));
    }
    if quick {
        c.push_str(" --quick");
    }
    c
}

/// What can be checked before anything is built: the scenarios (returned), the run count, and
/// `--variant` with what it keeps.
pub fn preflight(root: &Path, opts: &Options) -> Result<Vec<u8>> {
    let scenarios = selection(&opts.scenarios)?;
    if opts.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let Some(name) = &opts.variant else {
        return Ok(scenarios);
    };
    if !scenarios.iter().any(|s| matches!(s, 1 | 2)) {
        bail!("--variant is a variant of scenarios 1 and 2, which --scenario leaves out");
    }
    let names: Vec<String> = throughput::VARIANTS.iter().map(|v| v.name()).collect();
    if !names.contains(name) {
        bail!("--variant {name:?}: not a variant; one of {names:?}");
    }
    if opts.ours_only {
        let outputs = Outputs::new(root, opts.quick);
        let (kept, _) = results::read_all(&outputs.results)?;
        let has_upstream = kept_runs(&kept, 1)
            .iter()
            .any(|r| r.variant == *name && r.implementation == Impl::Upstream);
        if !has_upstream {
            bail!(
                "--ours-only --variant {name:?}: {} has no upstream runs of that variant to keep; run it without --ours-only",
                outputs.results.display()
            );
        }
    }
    Ok(scenarios)
}

pub fn run(root: &Path, bin_dir: &Path, opts: &Options) -> Result<()> {
    let outputs = Outputs::new(root, opts.quick);
    if opts.report_only {
        outputs.render()?;
        println!("bench: wrote {}", outputs.markdown.display());
        return Ok(());
    }
    let scenarios = preflight(root, opts)?;
    let bins = binaries(root, bin_dir)?;
    let work = work_dir("bench");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting a tokio runtime")?;
    let began = Instant::now();
    runtime.block_on(async {
        let (runs, quick) = (opts.runs, opts.quick);
        let command = Box::new(move |s| command_line(s, runs, quick));
        let (_cp, ctx) = start_suite(&work, bins, runs, quick, command).await?;
        run_scenarios(&ctx, &scenarios, &outputs, opts).await
    })?;
    println!(
        "bench: done in {:.1} min; results in {}, report {}",
        began.elapsed().as_secs_f64() / 60.0,
        outputs.results.display(),
        outputs.markdown.display()
    );
    Ok(())
}

async fn run_scenarios(
    ctx: &Ctx,
    scenarios: &[u8],
    outputs: &Outputs,
    opts: &Options,
) -> Result<()> {
    let mut throughput_done = false;
    for &s in scenarios {
        let began = Instant::now();
        let mut produced: Vec<(u8, Vec<RunRecord>)> = Vec::new();
        let mut notes = Vec::new();
        // A partial re-run: its note and what its columns ran against.
        let mut kept_parts: Option<Partial> = None;
        match s {
            // One measured run covers both: deletion needs the claims creation made.
            1 | 2 if !throughput_done => {
                throughput_done = true;
                let (c, d) = if let Some(name) = &opts.variant {
                    let (kept, _) = results::read_all(&outputs.results)?;
                    let runs = |n: u8| kept_runs(&kept, n);
                    let ran: &[Impl] = if opts.ours_only {
                        &[Impl::Ours]
                    } else {
                        &Impl::BOTH
                    };
                    if let Some(created) = kept.iter().find(|r| r.scenario == 1) {
                        kept_parts = Some(partial(created, name, opts.ours_only, &ctx.kubernetes));
                    }
                    throughput::run_variant(ctx, name, ran, runs(1), runs(2)).await?
                } else {
                    throughput::run(ctx).await
                };
                if scenarios.contains(&1) {
                    produced.push((1, c));
                }
                if scenarios.contains(&2) {
                    produced.push((2, d));
                }
            }
            1 | 2 => continue,
            3 => {
                let (runs, n) = memory::run(ctx).await;
                produced.push((3, runs));
                notes.extend(n);
            }
            4..=LAST => {
                let (runs, n) = match s {
                    4 => freshness::run(ctx).await,
                    5 => scale::run(ctx).await,
                    6 => placement::run(ctx).await,
                    7 => distributed::run(ctx).await,
                    8 => restore::run(ctx).await,
                    _ => scoring::run(ctx).await,
                };
                produced.push((s, runs));
                notes.extend(n);
            }
            _ => bail!("there is no scenario {s}"),
        }
        let wall = began.elapsed().as_secs_f64() / produced.len().max(1) as f64;
        for (n, runs) in produced {
            let mut result = assemble(ctx, n, runs, wall, notes.clone());
            if let Some(p) = &kept_parts {
                result.notes.splice(0..0, p.notes.iter().cloned());
                result.upstream = p.upstream.clone();
                result.kubernetes = p.kubernetes.clone();
            }
            let path = outputs.results.join(format!("{n}.json"));
            results::write(&path, &result)?;
            println!("bench: wrote {}", path.display());
        }
        outputs.render()?;
    }
    Ok(())
}

/// What a result made partly of kept runs says about them.
struct Partial {
    /// First what ran now and where the rest comes from, then the kept result's notes.
    notes: Vec<String>,
    upstream: String,
    kubernetes: String,
}

/// `--variant NAME` (with `ours_only`, ours only) on Kubernetes `now`, next to the runs kept in
/// `created`, scenario 1's earlier result (scenario 2's was written with it).
fn partial(created: &ScenarioResult, name: &str, ours_only: bool, now: &str) -> Partial {
    let (ran, rest, upstream) = if ours_only {
        (
            format!("only ours in the {name} variant"),
            "upstream's runs of that variant and the other variants' runs".to_string(),
            created.upstream.clone(),
        )
    } else {
        (
            format!(
                "only the {name} variant (both provisioners), against {}",
                results::UPSTREAM
            ),
            "the other variants' runs".to_string(),
            // The column names upstream's runs only: "ours in" parts never form.
            after_variant(&created.upstream, name, results::UPSTREAM, false),
        )
    };
    let mut notes = vec![results::kept_note(&ran, &rest, created)];
    notes.extend(created.notes.iter().cloned());
    Partial {
        notes,
        upstream,
        kubernetes: after_variant(&created.kubernetes, name, now, ours_only),
    }
}

/// A column by variant (`v`, or `v (qps 5/10); w (qps 100/200)`) after variant `name` ran
/// again at `now`, by ours alone (`ours_only`) or by both: a variant whose provisioners ran at
/// different versions has a part for each (`ours in NAME`, `upstream in NAME`).
fn after_variant(kept: &str, name: &str, now: &str, ours_only: bool) -> String {
    let (ours, upstream) = (format!("ours in {name}"), format!("upstream in {name}"));
    // A plain value covered every variant.
    let mut parts = if kept.contains(" (") {
        results::parse_parts(kept)
    } else {
        let all = throughput::VARIANTS.iter().map(|v| v.name()).collect();
        vec![(kept.to_string(), all)]
    };
    for (_, labels) in &mut parts {
        if let Some(i) = labels.iter().position(|l| l == name) {
            labels.splice(i..=i, [ours.clone(), upstream.clone()]);
        }
    }
    let moved = if ours_only {
        vec![ours.clone()]
    } else {
        vec![ours.clone(), upstream.clone()]
    };
    for (_, labels) in &mut parts {
        labels.retain(|l| !moved.contains(l));
    }
    parts.retain(|(_, labels)| !labels.is_empty());
    match parts.iter_mut().find(|(v, _)| v == now) {
        Some((_, labels)) => labels.extend(moved),
        None => parts.insert(0, (now.to_string(), moved)),
    }
    // Both provisioners of a variant at one version again: the variant's name, in the
    // variants' order.
    let order = |l: &String| {
        let variant = l
            .strip_prefix("ours in ")
            .or_else(|| l.strip_prefix("upstream in "))
            .unwrap_or(l);
        throughput::VARIANTS
            .iter()
            .position(|v| v.name() == variant)
            .unwrap_or(usize::MAX)
    };
    for (_, labels) in &mut parts {
        if labels.contains(&ours) && labels.contains(&upstream) {
            labels.retain(|l| *l != ours && *l != upstream);
            labels.push(name.to_string());
        }
        labels.sort_by_key(order);
    }
    results::format_parts(&parts)
}

/// The runs of scenario `n` among the results kept from an earlier invocation.
fn kept_runs(kept: &[ScenarioResult], n: u8) -> Vec<RunRecord> {
    kept.iter()
        .find(|r| r.scenario == n)
        .map(|r| r.runs.clone())
        .unwrap_or_default()
}

/// The result of scenario `n` with its fixed description.
fn assemble(
    ctx: &Ctx,
    n: u8,
    runs: Vec<RunRecord>,
    wall: f64,
    notes: Vec<String>,
) -> ScenarioResult {
    let sizes = &ctx.sizes;
    let (title, setup, metrics, plot) = match n {
        1 => (
            "Provisioning throughput",
            explain::setup_throughput(sizes, false),
            throughput::create_metrics(),
            throughput::create_plot(),
        ),
        2 => (
            "Deletion throughput",
            explain::setup_throughput(sizes, true),
            throughput::delete_metrics(),
            throughput::delete_plot(),
        ),
        3 => (
            "Memory at rest",
            memory::setup(sizes),
            memory::metrics(),
            memory::plot(),
        ),
        4 => (
            "Capacity freshness",
            freshness::setup(sizes),
            freshness::metrics(),
            freshness::plot(),
        ),
        5 => (
            "Capacity scale",
            scale::setup(sizes),
            scale::metrics(),
            scale::plot(),
        ),
        6 => (
            "Placement under a burst",
            placement::setup(sizes),
            placement::metrics(),
            placement::plot(),
        ),
        7 => (
            "Distributed provisioning",
            distributed::setup(sizes),
            distributed::metrics(),
            distributed::plot(),
        ),
        8 => (
            "Restore waits for the snapshot",
            restore::setup(sizes),
            restore::metrics(),
            restore::plot(),
        ),
        _ => (
            "Placement under capacity scoring",
            scoring::setup(sizes),
            scoring::metrics(),
            scoring::plot(),
        ),
    };
    ScenarioResult {
        plot: Some(plot),
        notes,
        ..ctx.result(n, title, setup, metrics, runs, wall)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_selection() {
        assert_eq!(selection(&[]).unwrap(), vec![1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(selection(&[8, 4, 1, 4]).unwrap(), vec![1, 4, 8]);
        let err = selection(&[10]).unwrap_err().to_string();
        assert!(err.contains("no scenario 10"), "{err}");
        assert!(selection(&[0]).is_err());
    }

    #[test]
    fn reproducing_commands() {
        assert_eq!(command_line(1, 3, false), "cargo xtask bench --scenario 1");
        assert_eq!(
            command_line(5, 1, true),
            "cargo xtask bench --scenario 5 --runs 1 --quick"
        );
        assert_eq!(command_line(8, 3, false), "cargo xtask bench --scenario 8");
    }

    fn kept() -> ScenarioResult {
        let mut r: ScenarioResult = serde_json::from_value(serde_json::json!({
            "scenario": 1, "title": "t", "quick": false, "finished_at": "2026-12-05 05:49 UTC",
            "wall_seconds": 1.0, "command": "c", "setup": "s", "metrics": [], "runs": [],
            "plot": null, "notes": ["theirs"],
        }))
        .unwrap();
        r.upstream = "v6.4.0 (qps 5/10); v6.3.0 (qps 100/200)".into();
        r.kubernetes = "v1.37.2 (qps 5/10); v1.36.3 (qps 100/200)".into();
        r
    }

    #[test]
    fn a_partial_run_names_what_ran_and_what_was_kept() {
        let p = partial(&kept(), "qps 5/10", true, "v1.37.2");
        assert!(
            p.notes[0].starts_with("only ours in the qps 5/10 variant was run at this commit; upstream's runs of that variant and the other variants' runs are kept from the result finished 2026-12-05 05:49 UTC"),
            "{:?}",
            p.notes
        );
        assert_eq!(p.notes[1], "theirs");
        assert_eq!(p.upstream, kept().upstream);
        assert_eq!(p.kubernetes, kept().kubernetes);
        let p = partial(&kept(), "qps 100/200", false, "v1.37.2");
        assert_eq!(p.kubernetes, "v1.37.2");
        assert_eq!(p.upstream, "v6.4.0");
    }

    #[test]
    fn columns_by_variant_follow_what_ran_where() {
        let kept = "v1.37.2 (qps 5/10); v1.36.3 (qps 100/200)";
        let cases = [
            ("v1.36.3", "qps 5/10", "v1.37.2", false, kept),
            ("v1.37.2", "qps 5/10", "v1.37.2", true, "v1.37.2"),
            (kept, "qps 5/10", "v1.37.2", true, kept),
            (
                kept,
                "qps 100/200",
                "v1.37.2",
                true,
                "v1.37.2 (qps 5/10, ours in qps 100/200); v1.36.3 (upstream in qps 100/200)",
            ),
            (
                "v1.36.3",
                "qps 5/10",
                "v1.37.2",
                true,
                "v1.37.2 (ours in qps 5/10); v1.36.3 (upstream in qps 5/10, qps 100/200)",
            ),
            // Upstream following ours to the same version joins the variant again.
            (
                "v1.37.2 (ours in qps 5/10); v1.36.3 (upstream in qps 5/10, qps 100/200)",
                "qps 5/10",
                "v1.37.2",
                false,
                kept,
            ),
        ];
        for (before, name, now, ours_only, want) in cases {
            assert_eq!(
                after_variant(before, name, now, ours_only),
                want,
                "{before} {name} {ours_only}"
            );
        }
    }

    #[test]
    fn quick_output_stays_out_of_the_tree() {
        let root = Path::new("/ws");
        let full = Outputs::new(root, false);
        assert_eq!(full.results, PathBuf::from("/ws/bench/results"));
        assert_eq!(full.markdown, PathBuf::from("/ws/BENCHMARKS.md"));
        let quick = Outputs::new(root, true);
        assert!(
            quick.results.ends_with("bench-quick/results"),
            "{:?}",
            quick.results
        );
    }
}
