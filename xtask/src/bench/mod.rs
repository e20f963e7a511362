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
mod policy;
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
use results::{RunRecord, ScenarioResult};

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
    /// Scenarios 1 and 2: only the admission-policy variants, merged with the kept results.
    pub policy_only: bool,
    /// Scenarios 1 and 2: only this plain variant (both provisioners), merged likewise.
    pub variant: Option<String>,
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
    let ctx = Ctx {
        client: cp.try_client().await?,
        kubeconfig: cp.kubeconfig().to_path_buf(),
        audit_log: cp.audit_log(),
        bins,
        runs,
        quick,
        sizes: if quick { Sizes::quick() } else { Sizes::full() },
        work: work.to_path_buf(),
        command,
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

pub fn run(root: &Path, bin_dir: &Path, opts: &Options) -> Result<()> {
    let outputs = Outputs::new(root, opts.quick);
    if opts.report_only {
        outputs.render()?;
        println!("bench: wrote {}", outputs.markdown.display());
        return Ok(());
    }
    let scenarios = selection(&opts.scenarios)?;
    if opts.runs == 0 {
        bail!("--runs must be at least 1");
    }
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
        // A partial re-run names both releases its columns ran against.
        let mut upstream = None;
        match s {
            // One measured run covers both: deletion needs the claims creation made.
            1 | 2 if !throughput_done => {
                throughput_done = true;
                let (c, d) = if let Some(name) = &opts.variant {
                    let (kept, _) = results::read_all(&outputs.results)?;
                    let runs = |n: u8| kept_runs(&kept, n);
                    if let Some(created) = kept.iter().find(|r| r.scenario == 1) {
                        let (ran, up) = if throughput::is_ours_only(name) {
                            (
                                format!(
                                    "only ours in the {name} variant (its upstream columns repeat upstream's runs of the same budget)"
                                ),
                                created.upstream.clone(),
                            )
                        } else {
                            (
                                format!(
                                    "only the {name} variant (both provisioners, and upstream's columns of the variants that repeat them), against {}",
                                    results::UPSTREAM
                                ),
                                format!(
                                    "{} ({name}); {} (other variants)",
                                    results::UPSTREAM,
                                    created.upstream
                                ),
                            )
                        };
                        notes.push(format!(
                            "{ran} was run at this commit; the other variants' runs are kept from the results finished {}, and the notes after this one are theirs",
                            created.finished_at
                        ));
                        notes.extend(created.notes.iter().cloned());
                        upstream = Some(up);
                    }
                    throughput::run_variant(ctx, name, runs(1), runs(2)).await?
                } else if opts.policy_only {
                    let (kept, _) = results::read_all(&outputs.results)?;
                    let runs = |n: u8| kept_runs(&kept, n);
                    // Scenario 1's note and time say when the kept plain runs were made.
                    if let Some(created) = kept.iter().find(|r| r.scenario == 1) {
                        notes.push(throughput::kept_note(&created.notes, &created.finished_at));
                    }
                    throughput::run_policy_only(ctx, runs(1), runs(2)).await?
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
            if let Some(upstream) = &upstream {
                result.upstream = upstream.clone();
            }
            let path = outputs.results.join(format!("{n}.json"));
            results::write(&path, &result)?;
            println!("bench: wrote {}", path.display());
        }
        outputs.render()?;
    }
    Ok(())
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
