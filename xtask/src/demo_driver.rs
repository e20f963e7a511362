//! The CSI drivers `cargo xtask demo` can tell its story with: our mock driver (one pool per
//! fake node) or csi-driver-host-path's real `hostpathplugin`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::json;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DemoDriver {
    /// Our mock-csi-driver, one pool per fake node.
    Mock,
    /// csi-driver-host-path v1.18.0's hostpathplugin (built by `cargo xtask testenv build`).
    Hostpath,
}

/// What the story needs to know about its driver.
pub struct Flavor {
    pub kind: DemoDriver,
    pub driver: &'static str,
    pub topology_key: &'static str,
    /// Nodes with storage and its size; they are `node-1` .. `node-N`, in order.
    pub pools: &'static [(&'static str, &'static str)],
    /// Further nodes where no plugin runs (no CSINode entry, so no capacity).
    pub bare_nodes: &'static [&'static str],
    /// StorageClass parameters.
    pub parameters: serde_json::Value,
    /// Pods created one after the other, each with one late-binding claim of this size.
    pub pods: &'static [(&'static str, &'static str)],
}

impl Flavor {
    pub fn of(kind: DemoDriver) -> Flavor {
        match kind {
            DemoDriver::Mock => Flavor {
                kind,
                driver: "mock.csi.test",
                topology_key: "topology.mock.csi/node",
                // Different on purpose, as in the Storage Capacity page's story.
                pools: &[("node-1", "10Gi"), ("node-2", "20Gi"), ("node-3", "100Gi")],
                bare_nodes: &[],
                parameters: json!({}),
                pods: &[
                    ("app-1", "5Gi"),
                    ("app-2", "15Gi"),
                    ("app-3", "50Gi"),
                    ("app-4", "500Gi"),
                ],
            },
            // Central mode serves ONE controller socket and the plugin's GetCapacity ignores
            // topology: one plugin stands for one node's storage. A plugin per node needs
            // --node-deployment, which is not implemented yet.
            DemoDriver::Hostpath => Flavor {
                kind,
                driver: "hostpath.csi.k8s.io",
                topology_key: "topology.hostpath.csi/node",
                pools: &[("node-1", "10Gi")],
                bare_nodes: &["node-2", "node-3"],
                parameters: json!({"kind": "fast"}),
                pods: &[("app-1", "3Gi"), ("app-2", "4Gi"), ("app-3", "5Gi")],
            },
        }
    }

    pub fn name(&self) -> &'static str {
        match self.kind {
            DemoDriver::Mock => "the mock CSI driver",
            DemoDriver::Hostpath => "hostpathplugin (csi-driver-host-path v1.18.0)",
        }
    }

    /// Starts the driver detached in `dir` (stopped by `cluster down`) and returns its socket.
    pub fn start(&self, root: &Path, dir: &Path) -> Result<PathBuf> {
        let socket = dir.join("csi.sock");
        let (name, cmd) = match self.kind {
            DemoDriver::Mock => {
                let mut cmd = Command::new(root.join("target/debug/mock-csi-driver"));
                cmd.arg(format!("--driver-name={}", self.driver));
                for (node, size) in self.pools {
                    cmd.arg(format!("--pool={}={node}:{size}", self.topology_key));
                }
                ("mock-csi-driver", cmd)
            }
            DemoDriver::Hostpath => {
                let (node, size) = self.pools[0];
                // A previous run's volumes would still count against the capacity.
                let state = dir.join("hostpath-state");
                if state.exists() {
                    std::fs::remove_dir_all(&state)
                        .with_context(|| format!("removing {}", state.display()))?;
                }
                let mut cmd = Command::new(testenv::try_go_binary("hostpathplugin")?);
                cmd.arg(format!("--drivername={}", self.driver))
                    .arg(format!("--nodeid={node}"))
                    .arg(format!("--statedir={}", state.display()))
                    .arg(format!("--capacity=fast={size}"))
                    .arg("--v=3");
                ("hostpathplugin", cmd)
            }
        };
        let mut cmd = cmd;
        cmd.arg(format!("--endpoint=unix://{}", socket.display()));
        let process = testenv::spawn_detached(name, cmd, &dir.join("logs"))?;
        testenv::record_detached(dir, name, process.disown())?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !socket.exists() {
            if Instant::now() > deadline {
                bail!(
                    "{name} did not create {}; see {}/logs/{name}.log",
                    socket.display(),
                    dir.display()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(socket)
    }

    /// One line per node: what storage it has.
    pub fn describe_nodes(&self) {
        for (node, size) in self.pools {
            match self.kind {
                DemoDriver::Mock => println!("  pool on {node}: {size}"),
                DemoDriver::Hostpath => println!(
                    "  {node}: hostpathplugin --nodeid={node} --capacity=fast={size} (the provisioner's controller)"
                ),
            }
        }
        for node in self.bare_nodes {
            println!(
                "  {node}: no plugin (a plugin per node needs --node-deployment, not implemented yet)"
            );
        }
    }
}
