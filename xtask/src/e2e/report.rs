//! The e2e results (pure): specs read from ginkgo's JSON report, kept per provisioner and
//! deployment in `e2e/results/`, and E2E.md, which sets ours beside upstream's.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One spec's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    pub name: String,
    /// ginkgo's state: passed, failed, skipped, pending, panicked, timedout, ...
    pub state: String,
    /// The failure (or skip) message's first line, if any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// One run: who provisioned, how, and every spec the suite reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    pub provisioner: String,
    pub deployment: String,
    pub kubernetes: String,
    pub finished: String,
    pub seconds: u64,
    pub focus: String,
    pub skip: String,
    pub specs: Vec<Spec>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub ran: usize,
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
}

impl Run {
    pub fn counts(&self) -> Counts {
        let mut c = Counts::default();
        for s in &self.specs {
            match s.state.as_str() {
                "passed" => {
                    c.ran += 1;
                    c.passed += 1;
                }
                "skipped" | "pending" => c.skipped += 1,
                _ => {
                    c.ran += 1;
                    c.failed += 1;
                }
            }
        }
        c
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct SuiteReport {
    #[serde(default)]
    spec_reports: Vec<SpecReport>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct SpecReport {
    // null for suite-level nodes
    #[serde(default)]
    container_hierarchy_texts: Option<Vec<String>>,
    #[serde(default)]
    leaf_node_text: String,
    #[serde(default)]
    leaf_node_type: String,
    #[serde(default)]
    state: String,
    #[serde(default)]
    failure: Option<Failure>,
    /// 0 for a spec the focus and skip expressions left out.
    #[serde(default)]
    num_attempts: u32,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Failure {
    #[serde(default)]
    message: String,
}

/// The `It` specs of a ginkgo JSON report that were selected (attempted at least once; a spec
/// skipped at run time, such as for a capability the driver lacks, counts); suite set-up nodes
/// and the specs the focus and skip left out are not kept.
pub fn parse_ginkgo(json: &str) -> Result<Vec<Spec>, serde_json::Error> {
    let suites: Vec<SuiteReport> = serde_json::from_str(json)?;
    Ok(suites
        .into_iter()
        .flat_map(|s| s.spec_reports)
        .filter(|r| r.leaf_node_type == "It" && r.num_attempts > 0)
        .map(|r| {
            let mut parts = r.container_hierarchy_texts.unwrap_or_default();
            parts.push(r.leaf_node_text);
            Spec {
                name: parts.join(" "),
                state: r.state,
                message: r
                    .failure
                    .map(|f| f.message.lines().next().unwrap_or_default().to_string())
                    .unwrap_or_default(),
            }
        })
        .collect())
}

/// E2E.md: for each deployment, ours beside upstream's, then the specs that failed, and the
/// specs upstream passes that ours does not.
/// `explained`: (part of a spec name, why it fails here), shown beside each failure it names.
pub fn render(
    runs: &[Run],
    left_out: &[(&str, &str)],
    explained: &[(&str, &str)],
    notes: &str,
) -> String {
    let mut out = String::from(
        "# The Kubernetes External Storage e2e suite, ours and upstream\n\n\
Written by `cargo xtask e2e` from `e2e/results/*.json`; do not edit by hand. Each run: the e2e\n\
suite of Kubernetes (`e2e.test`, built from `k8s.io/kubernetes/test/e2e`) against\n\
csi-driver-host-path v1.18.0 on the machine's one real node (kubelet and containerd), with the\n\
provisioner named, as upstream's CI runs it: focus `External.Storage`, skip\n\
`Disruptive|Serial|Slow|Feature:SELinux` plus the specs this machine cannot run (below).\n\n",
    );
    out.push_str(notes);
    out.push('\n');
    let mut by_deployment: BTreeMap<&str, Vec<&Run>> = BTreeMap::new();
    for r in runs {
        by_deployment
            .entry(r.deployment.as_str())
            .or_default()
            .push(r);
    }
    for (deployment, runs) in &by_deployment {
        out.push_str(&format!("## {deployment} deployment\n\n"));
        out.push_str("| Provisioner | Kubernetes | Specs run | Passed | Failed | Skipped at run time | Minutes | Finished |\n|---|---|---|---|---|---|---|---|\n");
        for r in runs {
            let c = r.counts();
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {:.0} | {} |\n",
                r.provisioner,
                r.kubernetes,
                c.ran,
                c.passed,
                c.failed,
                c.skipped,
                r.seconds as f64 / 60.0,
                r.finished
            ));
        }
        out.push('\n');
        let ours = runs.iter().find(|r| r.provisioner == "ours");
        let upstream = runs.iter().find(|r| r.provisioner == "upstream");
        if let (Some(ours), Some(upstream)) = (ours, upstream) {
            let ours_passed: Vec<&str> = passed(ours);
            let missing: Vec<&str> = passed(upstream)
                .into_iter()
                .filter(|n| !ours_passed.contains(n))
                .collect();
            if missing.is_empty() {
                out.push_str(&format!(
                    "Every spec upstream passes ({}) passes with ours.\n\n",
                    passed(upstream).len()
                ));
            } else {
                out.push_str("Specs upstream passes that ours does not:\n\n");
                for n in missing {
                    out.push_str(&format!("- {n}\n"));
                }
                out.push('\n');
            }
        }
        for r in runs {
            let failed: Vec<&Spec> = r
                .specs
                .iter()
                .filter(|s| !matches!(s.state.as_str(), "passed" | "skipped" | "pending"))
                .collect();
            if failed.is_empty() {
                continue;
            }
            out.push_str(&format!("Failures with {}:\n\n", r.provisioner));
            for s in failed {
                out.push_str(&format!("- {} ({}): {}\n", s.name, s.state, s.message));
                if let Some((_, why)) = explained.iter().find(|(part, _)| s.name.contains(part)) {
                    out.push_str(&format!("  - Why: {why}\n"));
                }
            }
            out.push('\n');
        }
    }
    out.push_str("## Capabilities left out of the test-driver file\n\n");
    for (cap, why) in left_out {
        out.push_str(&format!("- {cap}: {why}.\n"));
    }
    out
}

fn passed(run: &Run) -> Vec<&str> {
    run.specs
        .iter()
        .filter(|s| s.state == "passed")
        .map(|s| s.name.as_str())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, state: &str) -> Spec {
        Spec {
            name: name.into(),
            state: state.into(),
            message: if state == "failed" {
                "boom".into()
            } else {
                String::new()
            },
        }
    }

    fn run(provisioner: &str, specs: Vec<Spec>) -> Run {
        Run {
            provisioner: provisioner.into(),
            deployment: "central".into(),
            kubernetes: "v1.37.2".into(),
            finished: "2026-12-04".into(),
            seconds: 600,
            focus: "External.Storage".into(),
            skip: "Slow".into(),
            specs,
        }
    }

    #[test]
    fn ginkgo_reports_give_the_it_specs_with_their_first_failure_line() {
        let json = r#"[{"SuiteDescription":"e2e","SpecReports":[
            {"ContainerHierarchyTexts":null,"LeafNodeType":"SynchronizedBeforeSuite","State":"passed"},
            {"ContainerHierarchyTexts":["External Storage [Driver: hp]","provisioning"],
             "LeafNodeText":"should provision storage","LeafNodeType":"It","State":"passed",
             "NumAttempts":1},
            {"ContainerHierarchyTexts":["Other"],"LeafNodeText":"not selected","LeafNodeType":"It",
             "State":"skipped","NumAttempts":0},
            {"ContainerHierarchyTexts":["External Storage"],"LeafNodeText":"should mount",
             "LeafNodeType":"It","State":"failed","Failure":{"Message":"timed out\nmore"},
             "NumAttempts":1}]}]"#;
        let specs = parse_ginkgo(json).unwrap();
        assert_eq!(
            specs,
            vec![
                Spec {
                    name: "External Storage [Driver: hp] provisioning should provision storage"
                        .into(),
                    state: "passed".into(),
                    message: String::new()
                },
                Spec {
                    name: "External Storage should mount".into(),
                    state: "failed".into(),
                    message: "timed out".into()
                },
            ]
        );
    }

    #[test]
    fn counts_and_the_side_by_side_table() {
        let ours = run(
            "ours",
            vec![
                spec("a", "passed"),
                spec("b", "failed"),
                spec("c", "skipped"),
            ],
        );
        let upstream = run(
            "upstream",
            vec![
                spec("a", "passed"),
                spec("b", "passed"),
                spec("c", "skipped"),
            ],
        );
        assert_eq!(
            ours.counts(),
            Counts {
                ran: 2,
                passed: 1,
                failed: 1,
                skipped: 1
            }
        );
        let md = render(
            &[ours, upstream.clone()],
            &[("RWX", "why")],
            &[("b", "because")],
            "",
        );
        assert!(
            md.contains("- b (failed): boom\n  - Why: because\n"),
            "{md}"
        );
        assert!(
            md.contains("| ours | v1.37.2 | 2 | 1 | 1 | 1 | 10 |"),
            "{md}"
        );
        assert!(
            md.contains("Specs upstream passes that ours does not:\n\n- b\n"),
            "{md}"
        );
        assert!(md.contains("- b (failed): boom"), "{md}");
        assert!(md.contains("- RWX: why."), "{md}");
        let same = render(&[upstream.clone(), upstream], &[], &[], "");
        assert!(!same.contains("ours does not"), "{same}");
    }
}
