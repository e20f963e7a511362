//! Starting both provisioners with identical flags, and the mock driver, as guarded children.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use testenv::Process;

use super::results::Impl;

/// The binaries a bench run uses: release builds of ours and the mock driver, and the cached
/// upstream build.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub ours: PathBuf,
    pub upstream: PathBuf,
    pub driver: PathBuf,
}

impl Binaries {
    pub fn provisioner(&self, which: Impl) -> &Path {
        match which {
            Impl::Ours => &self.ours,
            Impl::Upstream => &self.upstream,
        }
    }
}

/// The capacity part of the API budget.
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityBudget {
    pub qps: u32,
    pub burst: u32,
    /// A Go duration, e.g. `1m`.
    pub poll_interval: String,
    pub threads: u32,
}

/// The API budget and worker count both provisioners get in a scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    pub kube_qps: u32,
    pub kube_burst: u32,
    pub worker_threads: u32,
    pub capacity: Option<CapacityBudget>,
}

impl Budget {
    /// Upstream's defaults: QPS 5, burst 10, 100 workers, no capacity tracking.
    pub fn defaults() -> Budget {
        Budget {
            kube_qps: 5,
            kube_burst: 10,
            worker_threads: 100,
            capacity: None,
        }
    }

    pub fn with_qps(self, qps: u32, burst: u32) -> Budget {
        Budget {
            kube_qps: qps,
            kube_burst: burst,
            ..self
        }
    }

    pub fn with_capacity(self, qps: u32, burst: u32, poll_interval: &str) -> Budget {
        Budget {
            capacity: Some(CapacityBudget {
                qps,
                burst,
                poll_interval: poll_interval.into(),
                threads: 1,
            }),
            ..self
        }
    }
}

/// Flags shared by both binaries; everything that matters for speed is explicit, so a change
/// of either side's default cannot skew the comparison.
pub fn provisioner_args(
    budget: &Budget,
    kubeconfig: &Path,
    socket: &Path,
    http_addr: &str,
) -> Vec<String> {
    let mut args = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--csi-address={}", socket.display()),
        format!("--http-endpoint={http_addr}"),
        "--leader-election=false".into(),
        format!("--kube-api-qps={}", budget.kube_qps),
        format!("--kube-api-burst={}", budget.kube_burst),
        format!("--worker-threads={}", budget.worker_threads),
        "--timeout=10s".into(),
        // No owner: the provisioner runs outside any Pod.
        "--capacity-ownerref-level=-1".into(),
    ];
    if let Some(c) = &budget.capacity {
        args.extend([
            "--enable-capacity".to_string(),
            format!("--kube-api-capacity-qps={}", c.qps),
            format!("--kube-api-capacity-burst={}", c.burst),
            format!("--capacity-poll-interval={}", c.poll_interval),
            format!("--capacity-threads={}", c.threads),
        ]);
    }
    args
}

/// A free port on 127.0.0.1 (released again; the provisioner binds it right after).
pub fn free_addr() -> Result<String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.to_string())
}

/// A running provisioner.
pub struct Running {
    pub which: Impl,
    pub http_addr: String,
    pub process: Process,
    /// When the process was spawned.
    pub started: Instant,
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Fails with the log tail when the process has exited.
    pub fn check_alive(&self) -> Result<()> {
        if !self.process.is_running() {
            bail!(
                "{} provisioner exited; log {}:\n{}",
                self.which,
                self.process.log_path().display(),
                self.process.log_tail(30)
            );
        }
        Ok(())
    }
}

pub fn start_provisioner(
    bins: &Binaries,
    which: Impl,
    dir: &Path,
    args: &[String],
    env: &[(&str, &str)],
) -> Result<Running> {
    let http_addr = args
        .iter()
        .find_map(|a| a.strip_prefix("--http-endpoint="))
        .context("provisioner arguments without --http-endpoint")?
        .to_string();
    let mut cmd = Command::new(bins.provisioner(which));
    cmd.args(args).envs(env.iter().copied());
    let process = testenv::try_spawn(&format!("csi-provisioner-{which}"), cmd, dir)?;
    Ok(Running {
        which,
        http_addr,
        process,
        started: Instant::now(),
    })
}

/// A running mock driver.
pub struct Driver {
    pub socket: PathBuf,
    pub call_log: PathBuf,
    pub process: Process,
}

/// Starts the mock driver in `dir` with `--driver-name` and `args`, and waits for its socket.
pub fn start_driver(bins: &Binaries, dir: &Path, name: &str, args: &[String]) -> Result<Driver> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let socket = dir.join("csi.sock");
    let call_log = dir.join("calls.jsonl");
    let _ = std::fs::remove_file(&socket);
    let mut cmd = Command::new(&bins.driver);
    cmd.arg(format!("--endpoint=unix://{}", socket.display()))
        .arg(format!("--driver-name={name}"))
        .arg(format!("--call-log={}", call_log.display()))
        .args(args);
    let mut process = testenv::try_spawn("mock-csi-driver", cmd, dir)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !socket.exists() {
        if let Ok(Some(status)) = process.try_wait() {
            bail!(
                "mock-csi-driver exited ({status}):\n{}",
                process.log_tail(20)
            );
        }
        if Instant::now() > deadline {
            bail!("mock-csi-driver did not create {}", socket.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Driver {
        socket,
        call_log,
        process,
    })
}

/// `--pool` arguments: one pool of `size` per fake node, in the node's topology segment.
pub fn node_pools(topology_key: &str, nodes: &[String], size: &str) -> Vec<String> {
    nodes
        .iter()
        .map(|n| format!("--pool={topology_key}={n}:{size}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_identical_and_explicit() {
        let kc = Path::new("/cp/kubeconfig");
        let sock = Path::new("/run/csi.sock");
        let plain = provisioner_args(&Budget::defaults(), kc, sock, "127.0.0.1:9000");
        assert_eq!(
            plain,
            vec![
                "--kubeconfig=/cp/kubeconfig",
                "--csi-address=/run/csi.sock",
                "--http-endpoint=127.0.0.1:9000",
                "--leader-election=false",
                "--kube-api-qps=5",
                "--kube-api-burst=10",
                "--worker-threads=100",
                "--timeout=10s",
                "--capacity-ownerref-level=-1",
            ]
        );
        let budget = Budget::defaults()
            .with_qps(100, 200)
            .with_capacity(20, 50, "10s");
        let args = provisioner_args(&budget, kc, sock, "127.0.0.1:9000");
        for want in [
            "--kube-api-qps=100",
            "--kube-api-burst=200",
            "--enable-capacity",
            "--kube-api-capacity-qps=20",
            "--kube-api-capacity-burst=50",
            "--capacity-poll-interval=10s",
            "--capacity-threads=1",
        ] {
            assert!(args.iter().any(|a| a == want), "{want} missing in {args:?}");
        }
    }

    #[test]
    fn pools_per_node() {
        let nodes = vec!["node-1".to_string(), "node-2".to_string()];
        assert_eq!(
            node_pools("topo/node", &nodes, "100Gi"),
            vec![
                "--pool=topo/node=node-1:100Gi",
                "--pool=topo/node=node-2:100Gi"
            ]
        );
    }

    #[test]
    fn free_addresses_are_local() {
        assert!(free_addr().unwrap().starts_with("127.0.0.1:"));
    }
}
