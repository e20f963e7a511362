//! An owned control plane seen through the real kubectl, and its teardown on drop.

use std::path::Path;
use std::process::Command;

use testenv::{ControlPlane, ControlPlaneOptions};

fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let program = if Path::new("/usr/bin/kubectl").exists() {
        "/usr/bin/kubectl"
    } else {
        "kubectl"
    };
    let out = Command::new(program)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "kubectl {args:?} failed ({}): {text}",
        out.status
    );
    text
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn kubectl_reads_the_cluster_and_drop_stops_it() {
    let opts = ControlPlaneOptions {
        nodes: 2,
        ..Default::default()
    };
    let cp = ControlPlane::start(opts)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let capacities = kubectl(
        cp.kubeconfig(),
        &["get", "csistoragecapacities", "--all-namespaces"],
    );
    assert!(capacities.contains("No resources found"), "{capacities}");
    let nodes = kubectl(cp.kubeconfig(), &["get", "nodes", "--no-headers"]);
    for node in ["node-1", "node-2"] {
        let line = nodes.lines().find(|l| l.starts_with(node));
        let line = line.unwrap_or_else(|| panic!("{node} missing from:\n{nodes}"));
        assert!(line.split_whitespace().nth(1) == Some("Ready"), "{line}");
    }
    let csinode = kubectl(
        cp.kubeconfig(),
        &[
            "get",
            "csinode",
            "node-1",
            "-o",
            "jsonpath={.spec.drivers[0].name}",
        ],
    );
    assert_eq!(csinode, "mock.csi.test");

    let pids = cp.pids().to_vec();
    let names: Vec<&str> = pids.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, testenv::COMPONENTS);
    let dir = cp.dir().to_path_buf();
    drop(cp);
    for (name, pid) in &pids {
        // Drop reaps what it kills, so the pids are gone, not zombies.
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "{name} ({pid}) survived drop"
        );
    }
    assert!(!dir.join("etcd").exists(), "etcd data should be deleted");
    let log = std::fs::read_to_string(dir.join("logs/kube-apiserver.log")).expect("apiserver log");
    assert!(
        log.contains("--secure-port="),
        "apiserver log lacks the command line"
    );
}
