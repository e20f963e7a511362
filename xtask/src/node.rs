//! `cargo xtask node up|down`: the machine's one real node (containerd + kubelet) joined to a
//! cluster that `cargo xtask cluster up` left running.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use testenv::{ControlPlane, RealNode};

pub fn up(dir: &Path) -> Result<()> {
    let runtime = runtime()?;
    let cp = ControlPlane::attach(dir)?;
    let node = runtime.block_on(RealNode::start(&cp, true))?;
    let log = node.kubelet_log();
    let name = node.name().to_string();
    let pids = node.detach();
    println!("real node {name} Ready (containerd and kubelet, pids {pids:?})");
    if let Some(log) = log {
        println!("  kubelet log: {}", log.display());
    }
    println!("  stop: cargo xtask node down --dir {}", dir.display());
    Ok(())
}

pub fn down(dir: &Path) -> Result<()> {
    let removed = testenv::node::teardown_leftovers()?;
    println!(
        "real node torn down: {} processes, {} mounts, {} network namespaces, {} links, {} iptables chains, {} cgroups removed",
        removed.processes,
        removed.mounts,
        removed.netns,
        removed.links,
        removed.chains,
        removed.cgroups
    );
    // The cluster may still be up: without its kubelet, the Node would only mislead the
    // scheduler.
    if let Ok(cp) = ControlPlane::attach(dir) {
        runtime()?.block_on(async {
            let nodes: Api<Node> = Api::all(cp.try_client().await?);
            if nodes.get_opt(testenv::node::NODE_NAME).await?.is_some() {
                nodes
                    .delete(testenv::node::NODE_NAME, &Default::default())
                    .await?;
                println!("deleted Node {}", testenv::node::NODE_NAME);
            }
            Ok::<_, anyhow::Error>(())
        })?;
    }
    Ok(())
}

/// Installs the Debian packages the real node needs when some are missing (CI starts from a
/// machine that may not have them).
pub fn ensure_packages() -> Result<()> {
    let missing = testenv::node::missing_packages();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("node: installing {} with apt-get", missing.join(" "));
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
    };
    if !install().is_ok_and(|s| s.success()) {
        // A stale package index names versions the mirror no longer has.
        let _ = Command::new("apt-get").arg("update").status();
        let status = install().context("running apt-get")?;
        if !status.success() {
            bail!(
                "apt-get install {} failed ({status}); the real node needs them",
                missing.join(" ")
            );
        }
    }
    Ok(())
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting a tokio runtime")
}
