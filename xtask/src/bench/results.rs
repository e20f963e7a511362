//! The raw results of one scenario, as written to `bench/results/<n>.json` and read back to
//! render BENCHMARKS.md and the plots.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// Which provisioner ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Impl {
    Ours,
    Upstream,
}

impl Impl {
    pub const BOTH: [Impl; 2] = [Impl::Ours, Impl::Upstream];

    /// Both, in the order run `run` starts them: alternating, so that neither always runs
    /// first on a machine whose load drifts.
    pub fn order(run: u32) -> [Impl; 2] {
        if run % 2 == 1 {
            [Impl::Ours, Impl::Upstream]
        } else {
            [Impl::Upstream, Impl::Ours]
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Impl::Ours => "ours",
            Impl::Upstream => "upstream",
        }
    }
}

impl fmt::Display for Impl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// A metric a scenario reports, in table order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricDef {
    pub key: String,
    pub label: String,
    pub unit: String,
    /// For the reader: whether a ratio below 1 means we are better.
    pub lower_is_better: bool,
}

impl MetricDef {
    pub fn new(key: &str, label: &str, unit: &str, lower_is_better: bool) -> MetricDef {
        MetricDef {
            key: key.into(),
            label: label.into(),
            unit: unit.into(),
            lower_is_better,
        }
    }
}

/// One measured run of one provisioner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub implementation: Impl,
    /// Scenario variant (e.g. `qps 5/10`); empty when the scenario has one.
    pub variant: String,
    pub run: u32,
    pub values: BTreeMap<String, f64>,
    /// Named time series (x, y) kept for plots.
    #[serde(default)]
    pub series: BTreeMap<String, Vec<(f64, f64)>>,
    /// What went wrong, if anything (timeouts, incomplete work), or how the run differs from
    /// the setup described (identical notes of several runs are shown once).
    #[serde(default)]
    pub notes: Vec<String>,
}

impl RunRecord {
    pub fn new(implementation: Impl, variant: &str, run: u32) -> RunRecord {
        RunRecord {
            implementation,
            variant: variant.into(),
            run,
            values: BTreeMap::new(),
            series: BTreeMap::new(),
            notes: Vec::new(),
        }
    }

    pub fn set(&mut self, key: &str, value: f64) {
        self.values.insert(key.into(), value);
    }
}

/// What a scenario's plot shows: one series name taken from the median run of each
/// (implementation, variant).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlotSpec {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// The series key in [`RunRecord::series`].
    pub series: String,
    /// The metric that picks the median run.
    pub pick_by: String,
}

/// Everything one scenario produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScenarioResult {
    pub scenario: u8,
    pub title: String,
    pub quick: bool,
    /// RFC 3339 time the scenario finished.
    pub finished_at: String,
    /// Wall time of the whole scenario (setup, all runs, cleanup).
    pub wall_seconds: f64,
    pub command: String,
    /// Markdown describing the setup.
    pub setup: String,
    pub metrics: Vec<MetricDef>,
    pub runs: Vec<RunRecord>,
    pub plot: Option<PlotSpec>,
    /// Scenario-level problems (setup failures, skipped runs).
    #[serde(default)]
    pub notes: Vec<String>,
    /// The upstream release the scenario ran against.
    #[serde(default = "before_the_field")]
    pub upstream: String,
    /// The Kubernetes version of the control plane it ran on (the API server's `gitVersion`),
    /// or of each part when kept runs ran on another ([`relabel`]). Empty in files from before
    /// the field; [`read`] and [`read_all`] fill it in.
    #[serde(default)]
    pub kubernetes: String,
}

/// The upstream release every comparison builds and runs now.
pub const UPSTREAM: &str = "v6.4.0";

/// Results written before the field existed ran against v6.3.0.
fn before_the_field() -> String {
    "v6.3.0".into()
}

/// The control plane of results written before [`ScenarioResult::kubernetes`] existed, by
/// when they finished: the test environment built Kubernetes v1.36.3 until commit 5c5f573
/// (2026-12-04 14:31 UTC) moved it to v1.37.2. No run of either suite spanned that time.
fn kubernetes_before_the_field(finished_at: &str) -> &'static str {
    // "YYYY-MM-DD HH:MM UTC" sorts as text.
    if finished_at < "2026-12-04 14:31 UTC" {
        "v1.36.3"
    } else {
        "v1.37.2"
    }
}

/// What a file from before a field existed leaves for the reader to fill in.
fn fill_in(r: &mut ScenarioResult) {
    if r.kubernetes.is_empty() {
        r.kubernetes = kubernetes_before_the_field(&r.finished_at).into();
    }
}

/// `value` (a column like [`ScenarioResult::kubernetes`]: `v` for every run, or
/// `v (a, b); w (c)` by part) with part `label` now at `version`; `rest` names what a plain
/// `value` covered. One part left is written plain.
pub fn relabel(value: &str, label: &str, version: &str, rest: &str) -> String {
    let mut parts = if value.contains(" (") {
        parse_parts(value)
    } else {
        vec![(value.to_string(), vec![rest.to_string()])]
    };
    for (_, labels) in &mut parts {
        labels.retain(|l| l != label);
    }
    parts.retain(|(_, labels)| !labels.is_empty());
    match parts.iter_mut().find(|(v, _)| v == version) {
        Some((_, labels)) => labels.insert(0, label.to_string()),
        None => parts.insert(0, (version.to_string(), vec![label.to_string()])),
    }
    format_parts(&parts)
}

/// The parts of a column by part (`v (a, b); w (c)`): each version with its labels.
pub fn parse_parts(value: &str) -> Vec<(String, Vec<String>)> {
    value
        .split("; ")
        .filter_map(|part| {
            let (version, labels) = part.strip_suffix(')')?.split_once(" (")?;
            let labels = labels.split(", ").map(str::to_string).collect();
            Some((version.to_string(), labels))
        })
        .collect()
}

/// [`parse_parts`]' inverse; one part is written plain.
pub fn format_parts(parts: &[(String, Vec<String>)]) -> String {
    if let [(version, _)] = parts {
        return version.clone();
    }
    let shown: Vec<String> = parts
        .iter()
        .map(|(v, labels)| format!("{v} ({})", labels.join(", ")))
        .collect();
    shown.join("; ")
}

/// `kept` without the runs of variant `variant` by the provisioners in `ran`, followed by
/// `new` (which ran them again): a re-run of part of a scenario, the rest kept.
pub fn replace_runs(
    kept: Vec<RunRecord>,
    new: Vec<RunRecord>,
    variant: &str,
    ran: &[Impl],
) -> Vec<RunRecord> {
    let replaced = |r: &RunRecord| r.variant == variant && ran.contains(&r.implementation);
    let mut all: Vec<RunRecord> = kept.into_iter().filter(|r| !replaced(r)).collect();
    all.extend(new);
    all
}

/// The note of a result whose runs are partly kept from `kept`, the earlier result of the same
/// file: `ran` was run now, `rest` comes from `kept` (named by when it finished, its upstream
/// release and Kubernetes version). `kept`'s own notes follow this one.
pub fn kept_note(ran: &str, rest: &str, kept: &ScenarioResult) -> String {
    format!(
        "{ran} was run at this commit; {rest} are kept from the result finished {} (upstream {}, Kubernetes {}), and the notes after this one are theirs",
        kept.finished_at, kept.upstream, kept.kubernetes
    )
}

impl ScenarioResult {
    /// Variants in first-seen order.
    pub fn variants(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for r in &self.runs {
            if !out.contains(&r.variant) {
                out.push(r.variant.clone());
            }
        }
        out
    }

    /// `(run, value)` of one metric for one implementation and variant.
    pub fn values(&self, which: Impl, variant: &str, key: &str) -> Vec<(u32, f64)> {
        self.runs
            .iter()
            .filter(|r| r.implementation == which && r.variant == variant)
            .filter_map(|r| r.values.get(key).map(|v| (r.run, *v)))
            .collect()
    }
}

pub fn write(path: &Path, result: &ScenarioResult) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    // Compact: pretty-printing puts every number of the series on its own line, which made
    // scenario 5's file (6,000-point series per run) over 2 MiB. `jq .` shows it indented.
    let text = serde_json::to_string(result)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

/// `new`'s runs added to `old`'s, for a scenario whose runs come from separate invocations
/// (the soak's hours): a run of the same provisioner, variant and number is replaced; the
/// description is `new`'s, the wall time the sum, the notes both (once each).
pub fn merge(old: ScenarioResult, new: ScenarioResult) -> ScenarioResult {
    let same = |a: &RunRecord, b: &RunRecord| {
        (a.implementation, &a.variant, a.run) == (b.implementation, &b.variant, b.run)
    };
    let mut runs: Vec<RunRecord> = old
        .runs
        .into_iter()
        .filter(|o| !new.runs.iter().any(|n| same(o, n)))
        .collect();
    runs.extend(new.runs);
    runs.sort_by_key(|a| (a.run, a.implementation));
    let mut notes = old.notes;
    for n in new.notes {
        if !notes.contains(&n) {
            notes.push(n);
        }
    }
    ScenarioResult {
        wall_seconds: old.wall_seconds + new.wall_seconds,
        runs,
        notes,
        ..new
    }
}

/// How many distinct run numbers `result` holds.
pub fn run_count(result: &ScenarioResult) -> u32 {
    let mut numbers: Vec<u32> = result.runs.iter().map(|r| r.run).collect();
    numbers.sort_unstable();
    numbers.dedup();
    numbers.len() as u32
}

/// Writes `new` merged into the file at `path` (if any) under a lock file, so that two
/// invocations finishing together both keep their runs; `command` gets the merged number of
/// runs and says how to reproduce them. Returns what was written.
pub fn append(
    path: &Path,
    new: ScenarioResult,
    command: impl FnOnce(u32) -> String,
) -> Result<ScenarioResult> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let lock = path.with_extension("lock");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&lock)
        {
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if std::time::Instant::now() > deadline {
                    anyhow::bail!("{} held for a minute; remove it if stale", lock.display());
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            Err(e) => return Err(e).with_context(|| format!("creating {}", lock.display())),
        }
    }
    let merged = read(path)
        .map(|old| match old {
            Some(old) => merge(old, new),
            None => new,
        })
        .map(|mut m| {
            m.command = command(run_count(&m));
            m
        });
    let written = merged.and_then(|m| write(path, &m).map(|()| m));
    let _ = std::fs::remove_file(&lock);
    written
}

/// The result in the file at `path` (`None`: there is none).
pub fn read(path: &Path) -> Result<Option<ScenarioResult>> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let mut r = serde_json::from_str::<ScenarioResult>(&text)
                .with_context(|| format!("parsing {}", path.display()))?;
            fill_in(&mut r);
            Ok(Some(r))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Every `<n>.json` in `dir`, by scenario number. Files that do not parse are reported, not
/// fatal: one stale file must not block the others' report.
pub fn read_all(dir: &Path) -> Result<(Vec<ScenarioResult>, Vec<String>)> {
    let mut results = Vec::new();
    let mut problems = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((results, problems)),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    for entry in entries {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let parsed = std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str::<ScenarioResult>(&t).map_err(|e| e.to_string()));
        match parsed {
            Ok(mut r) => {
                fill_in(&mut r);
                // Scenarios 1 and 2 in their variants' order, however a partial re-run merged
                // them (other runs keep theirs: the sort is stable).
                super::throughput::order_runs(&mut r.runs);
                results.push(r)
            }
            Err(e) => problems.push(format!("{}: {e}", path.display())),
        }
    }
    results.sort_by_key(|r| r.scenario);
    Ok((results, problems))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(runs: &[(Impl, u32, f64)], wall: f64, note: &str) -> ScenarioResult {
        ScenarioResult {
            scenario: 7,
            title: "soak".into(),
            quick: false,
            finished_at: String::new(),
            wall_seconds: wall,
            command: String::new(),
            setup: String::new(),
            metrics: Vec::new(),
            runs: runs
                .iter()
                .map(|&(which, run, v)| {
                    let mut r = RunRecord::new(which, "", run);
                    r.set("x", v);
                    r
                })
                .collect(),
            plot: None,
            notes: vec![note.into()],
            upstream: UPSTREAM.into(),
            kubernetes: "v1.37.2".into(),
        }
    }

    #[test]
    fn merging_keeps_both_invocations_runs_and_replaces_a_repeated_one() {
        let old = scenario(&[(Impl::Ours, 1, 1.0), (Impl::Upstream, 1, 2.0)], 10.0, "a");
        let new = scenario(&[(Impl::Upstream, 2, 3.0), (Impl::Ours, 1, 9.0)], 5.0, "b");
        let m = merge(old, new);
        let got: Vec<(Impl, u32, f64)> = m
            .runs
            .iter()
            .map(|r| (r.implementation, r.run, r.values["x"]))
            .collect();
        assert_eq!(
            got,
            [
                (Impl::Ours, 1, 9.0),
                (Impl::Upstream, 1, 2.0),
                (Impl::Upstream, 2, 3.0)
            ]
        );
        assert_eq!(m.wall_seconds, 15.0);
        assert_eq!(m.notes, ["a", "b"]);
        assert_eq!(run_count(&m), 2);
    }

    #[test]
    fn appending_to_a_missing_file_writes_the_new_result() {
        let dir = std::env::temp_dir().join(format!("xtask-append-{}", std::process::id()));
        let path = dir.join("7.json");
        let runs = |n: u32| format!("--runs {n}");
        let first = append(&path, scenario(&[(Impl::Ours, 1, 1.0)], 1.0, "a"), runs).unwrap();
        assert_eq!(first.runs.len(), 1);
        assert_eq!(first.command, "--runs 1");
        let second = append(&path, scenario(&[(Impl::Ours, 2, 2.0)], 1.0, "a"), runs).unwrap();
        assert_eq!(run_count(&second), 2);
        let written: ScenarioResult =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(written.command, "--runs 2");
        assert!(!path.with_extension("lock").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn run_order_alternates() {
        assert_eq!(Impl::order(1), [Impl::Ours, Impl::Upstream]);
        assert_eq!(Impl::order(2), [Impl::Upstream, Impl::Ours]);
        assert_eq!(Impl::order(3), [Impl::Ours, Impl::Upstream]);
    }

    #[test]
    fn results_round_trip_and_select() {
        let mut a = RunRecord::new(Impl::Ours, "qps 5/10", 1);
        a.set("secs", 2.0);
        a.series
            .insert("bound".into(), vec![(0.0, 0.0), (1.0, 5.0)]);
        let mut b = RunRecord::new(Impl::Upstream, "qps 5/10", 1);
        b.set("secs", 4.0);
        let mut c = RunRecord::new(Impl::Ours, "qps 100/200", 1);
        c.set("secs", 1.0);
        let result = ScenarioResult {
            scenario: 1,
            title: "t".into(),
            quick: true,
            finished_at: "2026-01-01T00:00:00Z".into(),
            wall_seconds: 12.0,
            command: "cargo xtask bench --scenario 1".into(),
            setup: "s".into(),
            metrics: vec![MetricDef::new("secs", "Time", "s", true)],
            runs: vec![a, b, c],
            plot: None,
            notes: vec![],
            upstream: UPSTREAM.into(),
            kubernetes: "v1.37.2".into(),
        };
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let path = dir.join("1.json");
        write(&path, &result).unwrap();
        std::fs::write(dir.join("9.json"), "not json").unwrap();
        let (back, problems) = read_all(dir).unwrap();
        assert_eq!(back, vec![result.clone()]);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(result.variants(), vec!["qps 5/10", "qps 100/200"]);
        assert_eq!(
            result.values(Impl::Ours, "qps 5/10", "secs"),
            vec![(1, 2.0)]
        );
        assert_eq!(result.values(Impl::Upstream, "qps 100/200", "secs"), vec![]);
    }

    #[test]
    fn a_column_by_part_names_each_parts_version() {
        let cases = [
            // Ours again on the control plane upstream's kept runs ran on: one version.
            ("v1.37.2", "ours", "v1.37.2", "v1.37.2"),
            (
                "v1.36.3",
                "ours",
                "v1.37.2",
                "v1.37.2 (ours); v1.36.3 (upstream)",
            ),
            // A second such run replaces ours' part.
            (
                "v1.37.2 (ours); v1.36.3 (upstream)",
                "ours",
                "v1.37.3",
                "v1.37.3 (ours); v1.36.3 (upstream)",
            ),
            (
                "v1.37.2 (ours); v1.36.3 (upstream)",
                "ours",
                "v1.36.3",
                "v1.36.3",
            ),
        ];
        for (value, label, version, want) in cases {
            assert_eq!(relabel(value, label, version, "upstream"), want, "{value}");
        }
        let parts = parse_parts("v1.37.2 (a, b); v1.36.3 (c)");
        assert_eq!(
            parts[0],
            ("v1.37.2".to_string(), vec!["a".into(), "b".into()])
        );
        assert_eq!(format_parts(&parts), "v1.37.2 (a, b); v1.36.3 (c)");
    }

    #[test]
    fn replacing_runs_keeps_the_others() {
        let kept = vec![
            RunRecord::new(Impl::Ours, "", 1),
            RunRecord::new(Impl::Upstream, "", 1),
            RunRecord::new(Impl::Ours, "", 2),
            RunRecord::new(Impl::Upstream, "", 2),
        ];
        let mut new = RunRecord::new(Impl::Ours, "", 1);
        new.set("x", 1.0);
        let all = replace_runs(kept, vec![new], "", &[Impl::Ours]);
        let got: Vec<(Impl, u32, bool)> = all
            .iter()
            .map(|r| (r.implementation, r.run, r.values.is_empty()))
            .collect();
        assert_eq!(
            got,
            [
                (Impl::Upstream, 1, true),
                (Impl::Upstream, 2, true),
                (Impl::Ours, 1, false)
            ]
        );
    }

    #[test]
    fn the_kept_note_says_where_the_kept_runs_come_from() {
        let mut kept = scenario(&[(Impl::Upstream, 1, 1.0)], 1.0, "a");
        kept.finished_at = "2026-11-28 13:44 UTC".into();
        kept.upstream = "v6.3.0".into();
        kept.kubernetes = "v1.36.3".into();
        let note = kept_note("only ours", "upstream's runs", &kept);
        assert_eq!(
            note,
            "only ours was run at this commit; upstream's runs are kept from the result finished 2026-11-28 13:44 UTC (upstream v6.3.0, Kubernetes v1.36.3), and the notes after this one are theirs"
        );
    }

    #[test]
    fn missing_directory_is_empty() {
        let (r, p) = read_all(Path::new("/nonexistent/bench/results")).unwrap();
        assert!(r.is_empty() && p.is_empty());
    }
}
