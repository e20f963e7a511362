//! The one real node of this machine: containerd and kubelet (v1.37.2, built like the control
//! plane) registered with a [`ControlPlane`], so that pods really start and volumes really
//! mount. One per machine: its paths are fixed (see [`config::NodeLayout`]), and starting one
//! first tears down whatever a killed one left. Needs root and Debian's `containerd`, `runc`,
//! `containernetworking-plugins`, `busybox-static` and gcc.

pub mod config;
mod images;
pub mod teardown;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::CSINode;
use kube::Api;

use crate::error::IoContext;
use crate::process::{Process, spawn_detached, try_spawn};
use crate::setup::free_ports;
use crate::{ControlPlane, Error, paths, socket};
pub use config::{BUSYBOX_IMAGE, NODE_NAME, NodeLayout, PAUSE_IMAGE};
pub use teardown::{Leftovers, Removed, leftovers};

/// How long kubelet gets to register the Node and report it Ready.
const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// The programs the node runs or builds with, and the Debian package of each.
const PREREQUISITES: &[(&str, &str)] = &[
    ("/usr/bin/containerd", "containerd"),
    ("/usr/bin/ctr", "containerd"),
    ("/usr/sbin/runc", "runc"),
    ("/usr/lib/cni/bridge", "containernetworking-plugins"),
    ("/bin/busybox", "busybox-static"),
];

/// A running real node. Dropping it tears it down (every process, mount, network namespace
/// and cgroup it made); [`RealNode::stop`] does the same and reports what it removed.
#[derive(Debug)]
pub struct RealNode {
    layout: NodeLayout,
    processes: Vec<Process>,
    stopped: bool,
    /// What the teardown before this node's start removed (a killed node's leftovers).
    cleaned: Removed,
}

impl RealNode {
    /// Starts containerd and kubelet against `cp` and waits for the Node to be Ready.
    /// `detached`: the processes outlive this one (for `cargo xtask node up`; call
    /// [`RealNode::detach`]).
    pub async fn start(cp: &ControlPlane, detached: bool) -> Result<RealNode, Error> {
        check_prerequisites()?;
        let kubelet_binary = paths::try_go_binary("kubelet")?;
        let layout = NodeLayout::default();
        STARTED.store(true, Ordering::Relaxed);
        // A node killed before it could tear down left its processes and mounts.
        let cleaned = teardown::teardown(&layout)?;
        teardown::mark_ours(&layout)?;
        teardown::record_host_settings(&layout)?;
        let mut node = RealNode {
            layout,
            processes: Vec::new(),
            stopped: false,
            cleaned,
        };
        let layout = node.layout.clone();
        let node_ip = host_node_ip()?;
        write_configs(&layout, &node_ip)?;
        let log_dir = cp.log_dir();

        let mut containerd = Command::new("containerd");
        containerd.arg("--config").arg(layout.containerd_config());
        let mut containerd = start_process("containerd", containerd, &log_dir, detached)?;
        socket::wait_for_socket(&mut containerd, &layout.containerd_socket())?;
        node.processes.push(containerd);
        images::build_and_import(&layout, &layout.containerd_socket())?;

        let mut kubelet = Command::new(kubelet_binary);
        kubelet.args(config::kubelet_args(&layout, cp.kubeconfig(), &node_ip));
        node.processes
            .push(start_process("kubelet", kubelet, &log_dir, detached)?);
        node.wait_ready(cp).await?;
        Ok(node)
    }

    pub fn name(&self) -> &str {
        NODE_NAME
    }

    /// What starting this node removed of a node before it that was killed.
    pub fn cleaned_at_start(&self) -> &Removed {
        &self.cleaned
    }

    pub fn layout(&self) -> &NodeLayout {
        &self.layout
    }

    /// Starts our `node-registrar` for the CSI driver at `socket` (node service and all), so
    /// that kubelet registers it as the driver's node plugin; its log goes to `log_dir`.
    pub fn start_registrar(&self, socket: &Path, log_dir: &Path) -> Result<Process, Error> {
        try_spawn("node-registrar", registrar_command(socket)?, log_dir)
    }

    /// kubelet's log.
    pub fn kubelet_log(&self) -> Option<PathBuf> {
        self.processes
            .iter()
            .find(|p| p.name() == "kubelet")
            .map(|p| p.log_path().to_path_buf())
    }

    async fn wait_ready(&mut self, cp: &ControlPlane) -> Result<(), Error> {
        let nodes: Api<Node> = Api::all(cp.try_client().await?);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(node) = nodes.get_opt(NODE_NAME).await?
                && is_ready(&node)
            {
                return Ok(());
            }
            for p in &mut self.processes {
                if let Ok(Some(status)) = p.try_wait() {
                    return Err(Error::NotReady(format!(
                        "{} exited ({status}) before Node {NODE_NAME} was Ready; log {}:\n{}",
                        p.name(),
                        p.log_path().display(),
                        p.log_tail(30)
                    )));
                }
            }
            if Instant::now() > deadline {
                let tail = self
                    .processes
                    .iter()
                    .map(|p| format!("{}:\n{}", p.log_path().display(), p.log_tail(20)))
                    .collect::<Vec<_>>()
                    .join("\n");
                return Err(Error::NotReady(format!(
                    "Node {NODE_NAME} not Ready after {}s:\n{tail}",
                    READY_TIMEOUT.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Leaves the processes running after this value is gone (`cargo xtask node up`);
    /// `cargo xtask node down` finds and stops them by the node's fixed paths.
    pub fn detach(mut self) -> Vec<u32> {
        self.stopped = true;
        std::mem::take(&mut self.processes)
            .into_iter()
            .map(Process::disown)
            .collect()
    }

    /// Kills kubelet and containerd with SIGKILL and leaves the rest as a crashed node leaves
    /// it (shims, containers, mounts, network namespaces, cgroups), for tests of the teardown
    /// the next node start does.
    pub fn crash(mut self) {
        self.stopped = true;
        for p in &mut self.processes {
            p.kill9();
        }
    }

    /// Tears the node down now, and says what it removed.
    pub fn stop(mut self) -> Result<Removed, Error> {
        self.stopped = true;
        self.stop_processes();
        teardown::teardown(&self.layout)
    }

    fn stop_processes(&mut self) {
        // kubelet first, so that it starts nothing while containerd goes.
        for p in self.processes.iter_mut().rev() {
            p.kill();
        }
    }
}

impl Drop for RealNode {
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        self.stop_processes();
        if let Err(e) = teardown::teardown(&self.layout) {
            eprintln!("real node teardown: {e}");
        }
    }
}

/// Waits until kubelet lists `driver` in the real node's CSINode (the registrar's work is
/// done, and the plugin's topology is on the Node), for up to `timeout`.
pub async fn wait_driver_registered(
    client: &kube::Client,
    driver: &str,
    timeout: Duration,
) -> Result<(), Error> {
    let csinodes: Api<CSINode> = Api::all(client.clone());
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(n) = csinodes.get_opt(NODE_NAME).await?
            && n.spec.drivers.iter().any(|d| d.name == driver)
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::NotReady(format!(
                "kubelet did not register {driver} on {NODE_NAME} within {}s; see the node-registrar's and kubelet's logs",
                timeout.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Our `node-registrar` for the CSI driver at `socket`, registering it with the node's
/// kubelet (for callers that start it detached, as the demo does).
pub fn registrar_command(socket: &Path) -> Result<Command, Error> {
    let mut cmd = Command::new(paths::try_go_binary("node-registrar")?);
    cmd.arg(format!("--csi-address={}", socket.display()))
        .arg(format!("--kubelet-registration-path={}", socket.display()))
        .arg(format!(
            "--plugin-registration-path={}",
            NodeLayout::default().plugins_registry().display()
        ));
    Ok(cmd)
}

/// Whether this process started a real node: an interrupt then tears it down too
/// ([`crate::stop_on_signals`]), since its mounts and network namespaces outlive any kill.
static STARTED: AtomicBool = AtomicBool::new(false);

pub(crate) fn started_here() -> bool {
    STARTED.load(Ordering::Relaxed)
}

/// Tears down a node left running (`cargo xtask node down`, or after a kill).
pub fn teardown_leftovers() -> Result<Removed, Error> {
    teardown::teardown(&NodeLayout::default())
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The Debian packages the node needs that are not installed.
pub fn missing_packages() -> Vec<&'static str> {
    let mut missing: Vec<&str> = PREREQUISITES
        .iter()
        .filter(|(path, _)| !Path::new(path).exists())
        .map(|(_, package)| *package)
        .collect();
    missing.dedup();
    missing
}

fn check_prerequisites() -> Result<(), Error> {
    let missing = missing_packages();
    if !missing.is_empty() {
        return Err(Error::NotReady(format!(
            "the real node needs Debian's {}: apt-get install -y {}",
            missing.join(", "),
            missing.join(" ")
        )));
    }
    // SAFETY: plain syscall without arguments.
    if unsafe { libc::geteuid() } != 0 {
        return Err(Error::NotReady(
            "the real node needs root (it mounts, makes network namespaces and cgroups)".into(),
        ));
    }
    Ok(())
}

fn host_node_ip() -> Result<String, Error> {
    let out = Command::new("ip")
        .args(["-4", "-o", "addr", "show", "scope", "global"])
        .output()
        .ctx(|| "running ip -4 addr (install iproute2)".to_string())?;
    config::node_ip(&String::from_utf8_lossy(&out.stdout)).ok_or_else(|| {
        Error::NotReady(
            "the real node needs a global IPv4 address for kubelet (kubelet refuses loopback)"
                .into(),
        )
    })
}

fn write_configs(layout: &NodeLayout, node_ip: &str) -> Result<(), Error> {
    for dir in [
        layout.state.clone(),
        layout.run.clone(),
        layout.cni_conf_dir(),
        layout.kubelet_root.clone(),
        layout.plugins_registry(),
    ] {
        fs::create_dir_all(&dir).ctx(|| format!("creating {}", dir.display()))?;
    }
    // The kubelet's two ports are free now; nothing else of ours binds them before it does.
    let [port, healthz] = free_ports()?;
    let files = [
        (layout.containerd_config(), config::containerd_toml(layout)),
        (
            layout.cni_conf_dir().join("10-csi-provisioner-rs.conflist"),
            config::cni_conflist(layout),
        ),
        (
            layout.kubelet_config(),
            config::kubelet_yaml(layout, node_ip, port, healthz),
        ),
    ];
    for (path, text) in files {
        fs::write(&path, text).ctx(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn start_process(
    name: &str,
    cmd: Command,
    log_dir: &Path,
    detached: bool,
) -> Result<Process, Error> {
    if detached {
        spawn_detached(name, cmd, log_dir)
    } else {
        try_spawn(name, cmd, log_dir)
    }
}
