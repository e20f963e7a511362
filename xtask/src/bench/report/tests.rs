use super::*;
use crate::bench::results::{MetricDef, PlotSpec, RunRecord};

fn run(which: Impl, variant: &str, n: u32, secs: f64, rss: Option<f64>) -> RunRecord {
    let mut r = RunRecord::new(which, variant, n);
    r.set("secs", secs);
    if let Some(rss) = rss {
        r.set("rss", rss);
    }
    r.series
        .insert("done".into(), vec![(0.0, 0.0), (secs, f64::from(n))]);
    r
}

fn sample() -> ScenarioResult {
    ScenarioResult {
        scenario: 1,
        title: "Throughput".into(),
        quick: false,
        finished_at: "2026-01-01T00:00:00Z".into(),
        wall_seconds: 600.0,
        command: "cargo xtask bench --scenario 1".into(),
        setup: "1,000 claims.".into(),
        metrics: vec![
            MetricDef::new("secs", "Time to all Bound", "s", true),
            MetricDef::new("rss", "Peak RSS", "MiB", true),
            MetricDef::new("unused", "Never measured", "", true),
        ],
        runs: vec![
            run(Impl::Ours, "qps 5/10", 1, 10.0, Some(20.0)),
            run(Impl::Upstream, "qps 5/10", 1, 20.0, Some(40.0)),
            run(Impl::Ours, "qps 5/10", 2, 12.0, None),
            run(Impl::Upstream, "qps 5/10", 2, 16.0, None),
            run(Impl::Ours, "qps 5/10", 3, 30.0, None),
            run(Impl::Upstream, "qps 5/10", 3, 30.0, None),
        ],
        plot: Some(PlotSpec {
            title: "Bound over time".into(),
            x_label: "s".into(),
            y_label: "volumes".into(),
            series: "done".into(),
            pick_by: "secs".into(),
        }),
        notes: vec!["setup took long".into()],
        upstream: crate::bench::results::UPSTREAM.into(),
        kubernetes: "v1.37.2".into(),
    }
}

#[test]
fn numbers_are_short() {
    let cases = [
        (1234.5, "1234"),
        (12.345, "12.3"),
        (1.2345, "1.23"),
        (0.012345, "0.012"),
        (0.0, "0"),
        (f64::NAN, "–"),
    ];
    for (x, want) in cases {
        assert_eq!(fmt_num(x), want, "{x}");
    }
}

#[test]
fn table_has_ratios_first_and_skips_empty_metrics() {
    let t = table(&sample(), "qps 5/10");
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines[0], "| Metric | us / upstream | ours | upstream |");
    // Paired ratios 0.5, 0.75, 1.0 → median 0.75.
    assert_eq!(
        lines[2],
        "| Time to all Bound (s), lower is better | **0.75** (0.50–1.00) | 12.0 (10.0–30.0) | 20.0 (16.0–30.0) |"
    );
    assert_eq!(
        lines[3],
        "| Peak RSS (MiB), lower is better | **0.50** | 20.0 | 40.0 |"
    );
    assert_eq!(lines.len(), 4, "{t}");
}

#[test]
fn plot_uses_the_median_run_of_each_side() {
    let lines = plot_lines(&sample());
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0].label, "ours qps 5/10");
    // Ours: secs 10, 12, 30 → run 2; upstream: 20, 16, 30 → run 1 (secs 20).
    assert_eq!(lines[0].points, vec![(0.0, 0.0), (12.0, 2.0)]);
    assert_eq!(lines[1].points, vec![(0.0, 0.0), (20.0, 1.0)]);
}

#[test]
fn document_has_every_part() {
    let mut r = sample();
    r.runs[1].notes.push("timed out".into());
    let doc = render(HEADER, &[r], "bench/plots", &|_| {
        "fewer requests per volume".into()
    });
    for want in [
        "# Benchmarks",
        "| 1. Throughput | v6.4.0 | v1.37.2 | 2026-01-01T00:00:00Z | 10 min |",
        "| **all** | | | | **10 min** |",
        "## 1. Throughput",
        "1,000 claims.",
        "```sh\ncargo xtask bench --scenario 1\n```",
        "**qps 5/10**",
        "![Bound over time](bench/plots/1.png)",
        "**What explains the difference:** fewer requests per volume",
        "- setup took long",
        "- upstream qps 5/10 run 1: timed out",
    ] {
        assert!(doc.contains(want), "missing {want:?} in\n{doc}");
    }
    assert!(!doc.contains("earlier upstream release"), "{doc}");
}

#[test]
fn a_note_several_runs_share_is_one_line() {
    let mut r = sample();
    for i in [0, 2, 4] {
        r.runs[i].notes.push("with the finalizer".into());
    }
    r.runs[2].notes.push("timed out".into());
    let doc = render(HEADER, &[r], "bench/plots", &|_| String::new());
    assert!(
        doc.contains("- ours qps 5/10 runs 1, 2, 3: with the finalizer\n"),
        "{doc}"
    );
    assert!(doc.contains("- ours qps 5/10 run 2: timed out\n"), "{doc}");
    assert_eq!(doc.matches("with the finalizer").count(), 1, "{doc}");
}

#[test]
fn files_from_before_the_kubernetes_field_name_the_control_plane_of_their_time() {
    let dir = tempfile::tempdir().unwrap();
    for (n, finished) in [(1, "2026-12-02 21:12 UTC"), (2, "2026-12-05 01:43 UTC")] {
        let mut r = sample();
        r.scenario = n;
        r.finished_at = finished.into();
        let mut json = serde_json::to_value(&r).unwrap();
        json.as_object_mut().unwrap().remove("kubernetes");
        let path = dir.path().join(format!("{n}.json"));
        std::fs::write(&path, json.to_string()).unwrap();
    }
    let (read, _) = crate::bench::results::read_all(dir.path()).unwrap();
    let versions: Vec<&str> = read.iter().map(|r| r.kubernetes.as_str()).collect();
    assert_eq!(versions, ["v1.36.3", "v1.37.2"]);
    let one = crate::bench::results::read(&dir.path().join("1.json")).unwrap();
    assert_eq!(one.unwrap().kubernetes, "v1.36.3");
    assert!(
        crate::bench::results::read(&dir.path().join("3.json"))
            .unwrap()
            .is_none()
    );
}

#[test]
fn scenarios_run_against_an_older_upstream_say_so() {
    let mut old = sample();
    old.upstream = "v6.3.0".into();
    let mut new = sample();
    new.scenario = 2;
    let doc = render(HEADER, &[old, new], "bench/plots", &|_| String::new());
    assert!(doc.contains("| 1. Throughput | v6.3.0 |"), "{doc}");
    assert!(
        doc.contains(
            "Scenarios 1 last ran against an earlier upstream release (the Upstream column)"
        ),
        "{doc}"
    );
    // Files from before the field existed were all run against v6.3.0.
    let json = serde_json::to_value(sample()).unwrap();
    let mut fields = json.as_object().unwrap().clone();
    fields.remove("upstream");
    let read: ScenarioResult = serde_json::from_value(fields.into()).unwrap();
    assert_eq!(read.upstream, "v6.3.0");
}

#[test]
fn writes_markdown_and_plots_from_results() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results");
    crate::bench::results::write(&results.join("1.json"), &sample()).unwrap();
    let md = dir.path().join("BENCHMARKS.md");
    let plots = dir.path().join("plots");
    write_all(HEADER, &results, &md, &plots, "plots", &|_| "x".into()).unwrap();
    assert!(
        std::fs::read_to_string(&md)
            .unwrap()
            .contains("## 1. Throughput")
    );
    assert!(plots.join("1.png").is_file());
}
