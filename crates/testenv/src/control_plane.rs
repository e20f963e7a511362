//! A real control plane: etcd, kube-apiserver, kube-controller-manager and kube-scheduler on
//! 127.0.0.1, each a child process with its log under `<dir>/logs`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::flags::{self, Layout, Ports};
use crate::process::{Process, spawn_detached, try_spawn};
use crate::setup::{absolute, free_ports, insecure_client, prepare_dir, write_credentials};
use crate::{Error, detached, paths, registry};

/// How to start a [`ControlPlane`].
#[derive(Debug, Clone)]
pub struct ControlPlaneOptions {
    /// Working directory (certificates, etcd data, `logs/`). `None`: a fresh directory under
    /// `<target>/testenv-runs/`.
    pub dir: Option<PathBuf>,
    /// Fake nodes to create once ready, named `node-1` .. `node-N`.
    pub nodes: usize,
    /// CSI driver recorded in the fake nodes' CSINode objects.
    pub driver: String,
    /// Topology label key set on the fake nodes (`<key>=<node name>`).
    pub topology_key: String,
    /// Start the processes in their own session without PDEATHSIG (for `cargo xtask cluster
    /// up`); call [`ControlPlane::detach`] to leave them running.
    pub detached: bool,
    /// How long the components get to become ready.
    pub startup_timeout: Duration,
    /// More kube-apiserver flags, after ours (for an API server that serves less, as an
    /// older release does).
    pub apiserver_args: Vec<String>,
    /// More controllers for kube-controller-manager, beside ours (the e2e suite needs
    /// `root-ca-certificate-publisher-controller`).
    pub extra_controllers: Vec<String>,
}

impl Default for ControlPlaneOptions {
    fn default() -> Self {
        ControlPlaneOptions {
            dir: None,
            nodes: 0,
            // The mock driver's defaults, so `cluster up` nodes work with it unchanged.
            driver: "mock.csi.test".into(),
            topology_key: "topology.mock.csi/node".into(),
            detached: false,
            startup_timeout: Duration::from_secs(60),
            apiserver_args: Vec::new(),
            extra_controllers: Vec::new(),
        }
    }
}

/// A running control plane. Dropping it kills its processes and deletes the etcd data; the
/// logs stay.
pub struct ControlPlane {
    layout: Layout,
    kubeconfig: PathBuf,
    server_url: String,
    processes: Mutex<Vec<Process>>,
    /// Each component's program and flags, to start it again ([`ControlPlane::restart`]).
    commands: Vec<(String, PathBuf, Vec<String>)>,
    /// As first started (a restarted component gets a new pid, not recorded here).
    pids: Vec<(String, u32)>,
    startup: Duration,
    /// False when attached to a cluster someone else started: never kill or clean it up.
    owned: bool,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("dir", &self.layout.dir)
            .field("server_url", &self.server_url)
            .field("pids", &self.pids)
            .finish()
    }
}

impl ControlPlane {
    /// Starts the four components and waits until the API server's `/readyz` and the
    /// controller manager's and scheduler's `/healthz` answer `ok`.
    pub async fn start(opts: ControlPlaneOptions) -> Result<ControlPlane, Error> {
        let began = Instant::now();
        let dir = match &opts.dir {
            Some(d) => absolute(d)?,
            None => registry::new_run_dir()?,
        };
        let layout = Layout { dir };
        // Find every binary before starting anything.
        let etcd = paths::etcd_binary();
        let apiserver = paths::try_go_binary("kube-apiserver")?;
        let kcm = paths::try_go_binary("kube-controller-manager")?;
        let sched = paths::try_go_binary("kube-scheduler")?;
        prepare_dir(&layout)?;
        let [etcd_client, etcd_peer, api_port, kcm_port, sched_port] = free_ports()?;
        let ports = Ports {
            etcd_client,
            etcd_peer,
            apiserver: api_port,
            controller_manager: kcm_port,
            scheduler: sched_port,
        };
        let server_url = format!("https://127.0.0.1:{}", ports.apiserver);
        write_credentials(&layout, &server_url)?;
        let mut cp = ControlPlane {
            kubeconfig: layout.kubeconfig(),
            layout,
            server_url,
            processes: Mutex::new(Vec::new()),
            commands: Vec::new(),
            pids: Vec::new(),
            startup: Duration::ZERO,
            owned: true,
        };
        registry::register(&cp.layout.dir);
        let deadline = began + opts.startup_timeout;
        let timeout = opts.startup_timeout;

        cp.launch(
            opts.detached,
            "etcd",
            &etcd,
            flags::etcd(&ports, &cp.layout),
        )?;
        let mut args = flags::apiserver(&ports, &cp.layout);
        args.extend(opts.apiserver_args.iter().cloned());
        cp.launch(opts.detached, "kube-apiserver", &apiserver, args)?;
        let client = cp.try_client().await?;
        cp.wait_ok(&client, "/readyz", "kube-apiserver", deadline, timeout)
            .await?;

        let args = flags::controller_manager(&ports, &cp.layout, &opts.extra_controllers);
        cp.launch(opts.detached, "kube-controller-manager", &kcm, args)?;
        let args = flags::scheduler(&ports, &cp.layout);
        cp.launch(opts.detached, "kube-scheduler", &sched, args)?;
        for (name, port) in [
            ("kube-controller-manager", ports.controller_manager),
            ("kube-scheduler", ports.scheduler),
        ] {
            let client = insecure_client(port)?;
            cp.wait_ok(&client, "/healthz", name, deadline, timeout)
                .await?;
        }

        if opts.nodes > 0 {
            let names: Vec<String> = (1..=opts.nodes).map(|i| format!("node-{i}")).collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            crate::try_create_fake_nodes(&client, &opts.driver, &opts.topology_key, &names).await?;
        }
        cp.startup = began.elapsed();
        Ok(cp)
    }

    fn launch(
        &mut self,
        detached: bool,
        name: &str,
        program: &Path,
        args: Vec<String>,
    ) -> Result<(), Error> {
        self.commands
            .push((name.to_string(), program.to_path_buf(), args.clone()));
        let mut cmd = Command::new(program);
        cmd.args(args).current_dir(&self.layout.dir);
        let logs = self.layout.logs();
        let process = if detached {
            let process = spawn_detached(name, cmd, &logs)?;
            // Recorded now, not at `detach`: a command killed while the control plane starts
            // leaves ids that `cargo xtask cluster down` (or an interrupt) can stop.
            detached::append_pid(&self.layout.pids(), &detached::Recorded::of(&process))?;
            process
        } else {
            try_spawn(name, cmd, &logs)?
        };
        self.pids.push((name.to_string(), process.pid()));
        self.lock().push(process);
        Ok(())
    }

    /// Kills one component (`etcd`, `kube-apiserver`, `kube-controller-manager` or
    /// `kube-scheduler`) with SIGKILL, leaves it down for `down`, starts it again with the
    /// same flags (its log is appended to) and waits until the API server is ready again. For
    /// failure tests; a control plane attached to, not started, cannot do this.
    pub async fn restart(&self, component: &str, down: Duration) -> Result<(), Error> {
        let (_, program, args) = self
            .commands
            .iter()
            .find(|(name, _, _)| name == component)
            .ok_or_else(|| {
                Error::NotReady(format!("no component {component} started by this process"))
            })?;
        {
            let mut procs = self.lock();
            for p in procs.iter_mut().filter(|p| p.name() == component) {
                p.kill9();
            }
            procs.retain(|p| p.name() != component);
        }
        tokio::time::sleep(down).await;
        let mut cmd = Command::new(program);
        cmd.args(args).current_dir(&self.layout.dir);
        let process = try_spawn(component, cmd, &self.layout.logs())?;
        self.lock().push(process);
        let timeout = Duration::from_secs(120);
        let client = self.try_client().await?;
        self.wait_ok(
            &client,
            "/readyz",
            "kube-apiserver",
            Instant::now() + timeout,
            timeout,
        )
        .await
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Process>> {
        // A panic while holding the lock leaves the list intact; keep using it.
        self.processes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Polls `path` until it answers `ok`, failing early if any component has exited.
    async fn wait_ok(
        &self,
        client: &kube::Client,
        path: &str,
        component: &str,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<(), Error> {
        loop {
            if let Some(dead) = self.first_exited() {
                return Err(self.not_ready(format!("{dead} exited while waiting for {component}")));
            }
            let request = http::Request::get(path).body(Vec::new());
            let request = request.map_err(|e| Error::NotReady(e.to_string()))?;
            let answer = tokio::time::timeout(Duration::from_secs(5), client.request_text(request));
            let last = match answer.await {
                Ok(Ok(text)) if text.trim() == "ok" => return Ok(()),
                Ok(Ok(text)) => text,
                Ok(Err(e)) => e.to_string(),
                Err(_) => "request timed out".into(),
            };
            if Instant::now() >= deadline {
                let secs = timeout.as_secs();
                return Err(self.not_ready(format!(
                    "{component} {path} not ok after {secs}s (last answer: {last})"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn first_exited(&self) -> Option<String> {
        let mut procs = self.lock();
        procs.iter_mut().find_map(|p| match p.try_wait() {
            Ok(Some(status)) => Some(format!("{} ({status})", p.name())),
            _ => None,
        })
    }

    /// An error carrying the last log lines of every component.
    fn not_ready(&self, what: String) -> Error {
        let mut msg = what;
        for p in self.lock().iter() {
            let tail = p.log_tail(15);
            msg.push_str(&format!(
                "\n--- last lines of {}:\n{tail}",
                p.log_path().display()
            ));
        }
        Error::NotReady(msg)
    }

    /// Uses a cluster that `cargo xtask cluster up --dir <dir>` left running. Nothing is
    /// killed or deleted when the handle drops.
    pub fn attach(dir: &Path) -> Result<ControlPlane, Error> {
        let dir = absolute(dir)?;
        if !detached::is_running(&dir)? {
            return Err(Error::NotReady(format!(
                "no cluster is running in {}: start one with `cargo xtask cluster up --dir {}`",
                dir.display(),
                dir.display()
            )));
        }
        let layout = Layout { dir };
        let kubeconfig = kube::config::Kubeconfig::read_from(layout.kubeconfig())?;
        let server_url = kubeconfig
            .clusters
            .iter()
            .find_map(|c| c.cluster.as_ref()?.server.clone())
            .ok_or_else(|| {
                Error::NotReady(format!("{}: no server", layout.kubeconfig().display()))
            })?;
        registry::register(&layout.dir);
        Ok(ControlPlane {
            kubeconfig: layout.kubeconfig(),
            pids: detached::read_pids(&layout.dir)?
                .into_iter()
                .map(|r| (r.name, r.pid))
                .collect(),
            layout,
            server_url,
            processes: Mutex::new(Vec::new()),
            commands: Vec::new(),
            startup: Duration::ZERO,
            owned: false,
        })
    }

    /// The shared control plane of this test process; see the `shared` module.
    pub fn shared() -> &'static ControlPlane {
        crate::shared::get()
    }

    /// The control plane of test group `name`: like [`ControlPlane::shared`], one per process
    /// and name, for tests whose helpers act on the whole cluster; see the `shared` module.
    pub fn shared_group(name: &'static str) -> &'static ControlPlane {
        crate::shared::get_group(name)
    }

    /// The admin kubeconfig (static token of a `system:masters` user).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The working directory; logs are in `<dir>/logs/<component>.log`.
    pub fn dir(&self) -> &Path {
        &self.layout.dir
    }

    pub fn log_dir(&self) -> PathBuf {
        self.layout.logs()
    }

    /// The API server's audit log of writes to claims (`crate::audit`).
    pub fn audit_log(&self) -> PathBuf {
        self.layout.audit_log()
    }

    /// `https://127.0.0.1:<port>`.
    pub fn server_url(&self) -> &str {
        &self.server_url
    }

    /// Component names and pids, in start order.
    pub fn pids(&self) -> &[(String, u32)] {
        &self.pids
    }

    /// Wall time from `start` until everything was ready.
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// An admin client for the caller's tokio runtime.
    ///
    /// # Panics
    /// When the kubeconfig cannot be loaded.
    pub async fn client(&self) -> kube::Client {
        self.try_client()
            .await
            .unwrap_or_else(|e| panic!("admin client for {}: {e}", self.server_url))
    }

    pub async fn try_client(&self) -> Result<kube::Client, Error> {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig)?;
        let options = kube::config::KubeConfigOptions::default();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?;
        Ok(kube::Client::try_from(config)?)
    }

    /// Leaves the processes running (they were started with `detached` and recorded in
    /// `<dir>/pids` for [`crate::stop_detached`] as they started), and returns the directory.
    pub fn detach(self) -> Result<PathBuf, Error> {
        for p in std::mem::take(&mut *self.lock()) {
            p.disown();
        }
        registry::unregister(&self.layout.dir);
        Ok(self.layout.dir.clone())
    }

    /// Kills every component without reaping: for process exit, where no lock may be taken.
    pub(crate) fn kill_all_now(&self) {
        if !self.owned {
            return;
        }
        for (_, pid) in self.pids.iter().rev() {
            // SAFETY: plain syscall on the process groups this control plane created.
            unsafe {
                libc::kill(-(*pid as libc::pid_t), libc::SIGKILL);
            }
        }
        let _ = fs::remove_dir_all(self.layout.etcd_data());
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let mut procs = std::mem::take(&mut *self.lock());
        // Empty after `detach`: the processes live on, and so must their data.
        let owned = self.owned && !procs.is_empty();
        while let Some(mut p) = procs.pop() {
            p.kill9();
        }
        if owned {
            let _ = fs::remove_dir_all(self.layout.etcd_data());
        }
        registry::unregister(&self.layout.dir);
    }
}
