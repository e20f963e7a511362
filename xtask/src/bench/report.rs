//! BENCHMARKS.md and its plots, rendered from the JSON results alone.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};

use super::plot::{self, Line};
use super::results::{Impl, ScenarioResult, UPSTREAM};
use super::stats::{self, Summary};

/// A number with about three significant digits.
pub fn fmt_num(x: f64) -> String {
    let a = x.abs();
    if !x.is_finite() {
        "–".into()
    } else if a >= 100.0 || a == 0.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

/// `median (min–max)`, or the single value when there is one run.
pub fn fmt_summary(s: Option<Summary>) -> String {
    match s {
        None => "–".into(),
        Some(s) if s.n == 1 => fmt_num(s.median),
        Some(s) => format!(
            "{} ({}–{})",
            fmt_num(s.median),
            fmt_num(s.min),
            fmt_num(s.max)
        ),
    }
}

/// The table of one variant: ratios first, then absolute medians with min–max.
pub fn table(result: &ScenarioResult, variant: &str) -> String {
    let mut out = String::new();
    out.push_str("| Metric | us / upstream | ours | upstream |\n|---|---|---|---|\n");
    for m in &result.metrics {
        let ours = result.values(Impl::Ours, variant, &m.key);
        let upstream = result.values(Impl::Upstream, variant, &m.key);
        if ours.is_empty() && upstream.is_empty() {
            continue;
        }
        let just = |v: &[(u32, f64)]| v.iter().map(|(_, x)| *x).collect::<Vec<_>>();
        let ratios = stats::paired_ratios(&ours, &upstream);
        let ratio = match stats::summarize(&ratios) {
            None => "–".to_string(),
            Some(s) if s.n == 1 => format!("**{:.2}**", s.median),
            Some(s) => format!("**{:.2}** ({:.2}–{:.2})", s.median, s.min, s.max),
        };
        let direction = if m.lower_is_better { "lower" } else { "higher" };
        let unit = if m.unit.is_empty() {
            String::new()
        } else {
            format!(" ({})", m.unit)
        };
        let _ = writeln!(
            out,
            "| {}{unit}, {direction} is better | {ratio} | {} | {} |",
            m.label,
            fmt_summary(stats::summarize(&just(&ours))),
            fmt_summary(stats::summarize(&just(&upstream))),
        );
    }
    out
}

/// The lines of a scenario's plot: the median run (by the plot's metric) of each
/// implementation and variant.
pub fn plot_lines(result: &ScenarioResult) -> Vec<Line> {
    let Some(spec) = &result.plot else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    for variant in result.variants() {
        for which in Impl::BOTH {
            let runs: Vec<_> = result
                .runs
                .iter()
                .filter(|r| r.implementation == which && r.variant == variant)
                .filter(|r| r.series.contains_key(&spec.series))
                .collect();
            let keys: Vec<f64> = runs
                .iter()
                .map(|r| r.values.get(&spec.pick_by).copied().unwrap_or(f64::NAN))
                .collect();
            let pick = stats::median_index(&keys).or(if runs.is_empty() { None } else { Some(0) });
            // A variant may repeat another's runs: one line.
            let repeated = |i: usize| {
                let points = &runs[i].series[&spec.series];
                lines.iter().any(|l: &Line| &l.points == points)
            };
            if let Some(i) = pick.filter(|&i| !repeated(i)) {
                let label = if variant.is_empty() {
                    which.to_string()
                } else {
                    format!("{which} {variant}")
                };
                lines.push(Line {
                    label,
                    points: runs[i].series[&spec.series].clone(),
                });
            }
        }
    }
    lines
}

/// The scenario's notes, then the runs': a note several runs of one provisioner and variant
/// share is one line naming them all.
fn notes(result: &ScenarioResult) -> Vec<String> {
    let mut out: Vec<String> = result.notes.clone();
    let mut grouped: Vec<(Impl, &str, &str, Vec<u32>)> = Vec::new();
    for r in &result.runs {
        for n in &r.notes {
            let same = |g: &&mut (Impl, &str, &str, Vec<u32>)| {
                (g.0, g.1, g.2) == (r.implementation, r.variant.as_str(), n.as_str())
            };
            match grouped.iter_mut().find(same) {
                Some(g) => g.3.push(r.run),
                None => grouped.push((r.implementation, &r.variant, n, vec![r.run])),
            }
        }
    }
    for (which, variant, note, mut runs) in grouped {
        runs.sort_unstable();
        let numbers: Vec<String> = runs.iter().map(u32::to_string).collect();
        let runs = match numbers.as_slice() {
            [one] => format!("run {one}"),
            _ => format!("runs {}", numbers.join(", ")),
        };
        out.push(format!("{which} {variant} {runs}: {note}").replace("  ", " "));
    }
    out
}

/// The whole document. `explain` gives the one line on what explains the difference.
pub fn render(
    header: &str,
    results: &[ScenarioResult],
    plot_dir: &str,
    explain: &dyn Fn(&ScenarioResult) -> String,
) -> String {
    let mut out = String::from(header);
    let total: f64 = results.iter().map(|r| r.wall_seconds).sum();
    let _ = writeln!(
        out,
        "| Scenario | Upstream | Kubernetes | Finished | Wall time |\n|---|---|---|---|---|"
    );
    for r in results {
        let _ = writeln!(
            out,
            "| {}. {}{} | {} | {} | {} | {:.0} min |",
            r.scenario,
            r.title,
            if r.quick { " (quick sizes)" } else { "" },
            r.upstream,
            r.kubernetes,
            r.finished_at,
            r.wall_seconds / 60.0
        );
    }
    let _ = writeln!(out, "| **all** | | | | **{:.0} min** |\n", total / 60.0);
    let older: Vec<String> = results
        .iter()
        .filter(|r| r.upstream != UPSTREAM)
        .map(|r| r.scenario.to_string())
        .collect();
    if !older.is_empty() {
        let _ = writeln!(
            out,
            "Scenarios {} last ran against an earlier upstream release (the Upstream column) \
             and have not been re-run since the move to {UPSTREAM}; `docs/compatibility.md` \
             says what changed between the two.\n",
            older.join(", ")
        );
    }
    for r in results {
        let _ = writeln!(out, "## {}. {}\n", r.scenario, r.title);
        let _ = writeln!(out, "{}\n", r.setup.trim());
        let _ = writeln!(out, "```sh\n{}\n```\n", r.command);
        for variant in r.variants() {
            if !variant.is_empty() {
                let _ = writeln!(out, "**{variant}**\n");
            }
            let _ = writeln!(out, "{}", table(r, &variant));
        }
        if r.plot.is_some() {
            let _ = writeln!(
                out,
                "![{}]({plot_dir}/{}.png)\n",
                r.plot
                    .as_ref()
                    .map(|p| p.title.as_str())
                    .unwrap_or_default(),
                r.scenario
            );
        }
        let _ = writeln!(out, "**What explains the difference:** {}\n", explain(r));
        let notes = notes(r);
        if !notes.is_empty() {
            out.push_str("Notes on these runs:\n\n");
            for n in notes {
                let _ = writeln!(out, "- {n}");
            }
            out.push('\n');
        }
    }
    out
}

pub const HEADER: &str = "# Benchmarks: csi-provisioner (Rust) vs external-provisioner v6.4.0

Generated by `cargo xtask bench` from the raw results in `bench/results/`; do not edit by
hand. Both provisioners run one after the other (never both on one driver name) against one
real local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler; the
Kubernetes column below names its version), the same release-built mock CSI driver with no added latency (scenario 8: csi-driver-host-path's
hostpathplugin with the real snapshot controller and csi-snapshotter), and the same flags: API QPS and
burst, worker threads and capacity budget are set explicitly for both. Every run gets its own
driver name and namespace; runs alternate which provisioner goes first.

Ratios are **us / upstream** of each run pair, as median (min–max) over the runs; absolute
numbers are median (min–max). CPU is user + system seconds and RSS comes from
`/proc/<pid>/status` of each provisioner process. The machine is a shared 2-core VM: trust the
ratios before the absolute numbers.

To reproduce: `cargo xtask bench [--scenario N[,M]] [--runs K] [--quick] [--no-build]
[--report-only] [--variant NAME [--ours-only]]`. It builds release binaries of ours and the mock driver (the upstream binary
is built once and cached, as by `cargo xtask testenv build --with-upstream`), starts one
control plane, runs the scenarios, and writes `bench/results/<n>.json`, this file and
`bench/plots/`. Scenarios 1 and 2 share their runs. `--quick` uses small sizes and writes to
`target/bench-quick/` instead; `--report-only` re-renders this file from the JSON;
`--variant NAME` runs only that variant of scenarios 1 and 2 and keeps the other variants' runs
already in the JSON, and `--ours-only` with it runs only ours, keeping upstream's runs of the
variant too. Logs of
every run (both provisioners, the driver and its call log, the control plane) stay in
`target/bench-runs/<time>/`. API requests are counted by the API server
(`apiserver_flowcontrol_dispatched_requests_total` of a FlowSchema that matches only the
ServiceAccount each run's provisioner uses), the same way for both.

";

/// Renders the document (`header` first: BENCHMARKS.md's or RELIABILITY.md's) and the plots
/// from every result in `results_dir`.
pub fn write_all(
    header: &str,
    results_dir: &Path,
    markdown: &Path,
    plot_dir: &Path,
    plot_dir_in_doc: &str,
    explain: &dyn Fn(&ScenarioResult) -> String,
) -> Result<()> {
    let (results, problems) = super::results::read_all(results_dir)?;
    for p in &problems {
        eprintln!("bench: skipping unreadable result {p}");
    }
    std::fs::create_dir_all(plot_dir)
        .with_context(|| format!("creating {}", plot_dir.display()))?;
    for r in &results {
        if let Some(spec) = &r.plot {
            let path = plot_dir.join(format!("{}.png", r.scenario));
            plot::line_chart(
                &path,
                &spec.title,
                &spec.x_label,
                &spec.y_label,
                &plot_lines(r),
            )?;
        }
    }
    let text = render(header, &results, plot_dir_in_doc, explain);
    std::fs::write(markdown, text).with_context(|| format!("writing {}", markdown.display()))
}

#[cfg(test)]
mod tests;
