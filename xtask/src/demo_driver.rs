//! The CSI drivers `cargo xtask demo` can tell its story with: our mock driver (one pool per
//! fake node) or csi-driver-host-path's real `hostpathplugin`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::json;
use testenv::node::NODE_NAME;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DemoDriver {
    /// Our mock-csi-driver, one pool per fake node.
    Mock,
    /// csi-driver-host-path v1.18.0's hostpathplugin (built by `cargo xtask testenv build`).
    Hostpath,
}

/// One driver process the story started, and the node it serves (distributed form) or `None`
/// (one central driver for all nodes).
pub struct Instance {
    pub node: Option<&'static str>,
    pub socket: PathBuf,
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
    /// The pools' one node is the machine's real node (kubelet and containerd): the pods
    /// start and write into their volumes.
    pub real_node: bool,
}

impl Flavor {
    pub fn of(kind: DemoDriver, real_node: bool) -> Result<Flavor> {
        if !real_node {
            return Ok(Self::on_fake_nodes(kind));
        }
        if kind != DemoDriver::Hostpath {
            bail!(
                "--real-node needs --driver hostpath: the mock driver does not mount volumes, so its pods would have nothing to write into"
            );
        }
        // One node, so the story is told by one pool filling up: two claims fit, the third
        // finds only what the first two left.
        Ok(Flavor {
            pools: &[(NODE_NAME, "20Gi")],
            pods: &[("app-1", "5Gi"), ("app-2", "10Gi"), ("app-3", "10Gi")],
            real_node: true,
            ..Self::on_fake_nodes(kind)
        })
    }

    fn on_fake_nodes(kind: DemoDriver) -> Flavor {
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
                real_node: false,
            },
            // The plugin's GetCapacity ignores topology, so each node gets its own plugin and
            // its own `--node-deployment` provisioner: the plugin's distributed deployment.
            DemoDriver::Hostpath => Flavor {
                kind,
                driver: "hostpath.csi.k8s.io",
                topology_key: "topology.hostpath.csi/node",
                pools: &[("node-1", "10Gi"), ("node-2", "20Gi"), ("node-3", "100Gi")],
                bare_nodes: &[],
                parameters: json!({"kind": "fast"}),
                pods: &[
                    ("app-1", "5Gi"),
                    ("app-2", "15Gi"),
                    ("app-3", "50Gi"),
                    ("app-4", "500Gi"),
                ],
                real_node: false,
            },
        }
    }

    pub fn name(&self) -> &'static str {
        match self.kind {
            DemoDriver::Mock => "the mock CSI driver",
            DemoDriver::Hostpath => "hostpathplugin (csi-driver-host-path v1.18.0)",
        }
    }

    /// Whether a provisioner runs per node (`--node-deployment`) instead of one central one.
    pub fn distributed(&self) -> bool {
        self.kind == DemoDriver::Hostpath
    }

    /// Starts the driver detached in `dir` (stopped by `cluster down`): one mock driver for
    /// all nodes, or one hostpathplugin per node.
    pub fn start(&self, root: &Path, dir: &Path) -> Result<Vec<Instance>> {
        match self.kind {
            DemoDriver::Mock => {
                let mut cmd = Command::new(root.join("target/debug/mock-csi-driver"));
                cmd.arg(format!("--driver-name={}", self.driver));
                for (node, size) in self.pools {
                    cmd.arg(format!("--pool={}={node}:{size}", self.topology_key));
                }
                let socket = launch("mock-csi-driver", cmd, dir, &dir.join("csi.sock"))?;
                Ok(vec![Instance { node: None, socket }])
            }
            DemoDriver::Hostpath => {
                let binary = testenv::try_go_binary("hostpathplugin")?;
                let mut out = Vec::new();
                for (node, size) in self.pools {
                    // Short: unix socket paths are limited to 108 bytes.
                    let own = dir.join(format!("hp-{node}"));
                    // A previous run's volumes would still count against the capacity.
                    let state = state_dir(dir, node);
                    if state.exists() {
                        std::fs::remove_dir_all(&state)
                            .with_context(|| format!("removing {}", state.display()))?;
                    }
                    std::fs::create_dir_all(&own)?;
                    let mut cmd = Command::new(&binary);
                    cmd.arg(format!("--drivername={}", self.driver))
                        .arg(format!("--nodeid={node}"))
                        .arg(format!("--statedir={}", state.display()))
                        .arg(format!("--capacity=fast={size}"))
                        .arg("--v=3");
                    let name = format!("hostpathplugin-{node}");
                    let socket = launch(&name, cmd, dir, &own.join("csi.sock"))?;
                    out.push(Instance {
                        node: Some(node),
                        socket,
                    });
                }
                Ok(out)
            }
        }
    }

    /// One line per node: what storage it has.
    pub fn describe_nodes(&self) {
        for (node, size) in self.pools {
            match self.kind {
                DemoDriver::Mock => println!("  pool on {node}: {size}"),
                DemoDriver::Hostpath if self.real_node => println!(
                    "  {node}: hostpathplugin --nodeid={node} --capacity=fast={size} (registered with kubelet as the node plugin), and csi-provisioner --node-deployment with NODE_NAME={node}"
                ),
                DemoDriver::Hostpath => println!(
                    "  {node}: hostpathplugin --nodeid={node} --capacity=fast={size}, and csi-provisioner --node-deployment with NODE_NAME={node}"
                ),
            }
        }
        for node in self.bare_nodes {
            println!("  {node}: no driver");
        }
    }
}

/// Where the hostpathplugin of `node` keeps its state (its volumes' directories among it).
pub fn state_dir(dir: &Path, node: &str) -> PathBuf {
    dir.join(format!("hp-{node}")).join("state")
}

/// Starts `cmd` detached with `--endpoint=unix://<socket>`, recorded in `dir` for
/// `cluster down`, and waits for its socket.
fn launch(name: &str, mut cmd: Command, dir: &Path, socket: &Path) -> Result<PathBuf> {
    cmd.arg(format!("--endpoint=unix://{}", socket.display()));
    let process = testenv::spawn_detached(name, cmd, &dir.join("logs"))?;
    testenv::record_detached(dir, process)?;
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
    Ok(socket.to_path_buf())
}
