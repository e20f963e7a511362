//! The `csi-provisioner` under test as a guarded child process.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::{Error, Process, paths, try_spawn};

/// A running `csi-provisioner` pointed at a kubeconfig and a driver socket. It can be killed
/// (politely or with SIGKILL) and started again with the same arguments.
#[derive(Debug)]
pub struct Provisioner {
    args: Vec<String>,
    env: Vec<(String, String)>,
    dir: PathBuf,
    name: String,
    process: Process,
}

impl Provisioner {
    /// Starts `csi-provisioner --kubeconfig=<kubeconfig> --csi-address=<socket> <args...>` with
    /// `env` added, logging to `<dir>/<name>.log` (appended across restarts).
    ///
    /// # Panics
    /// When the binary is missing or cannot start.
    pub fn start(
        dir: &Path,
        name: &str,
        kubeconfig: &Path,
        socket: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Provisioner {
        let mut all = vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--csi-address={}", socket.display()),
        ];
        all.extend(args.iter().map(|a| a.to_string()));
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let process =
            launch(dir, name, &all, &env).unwrap_or_else(|e| panic!("csi-provisioner: {e}"));
        Provisioner {
            args: all,
            env,
            dir: dir.to_path_buf(),
            name: name.to_string(),
            process,
        }
    }

    /// Starts it again with the same arguments (after [`Provisioner::kill9`] or an exit).
    pub fn restart(&mut self) {
        self.process.kill9();
        self.process = launch(&self.dir, &self.name, &self.args, &self.env)
            .unwrap_or_else(|e| panic!("csi-provisioner: {e}"));
    }

    /// SIGKILL: no chance to clean up, as in a node crash or an OOM kill.
    pub fn kill9(&mut self) {
        self.process.kill9();
    }

    /// SIGTERM, then SIGKILL after a grace period.
    pub fn stop(&mut self) {
        self.process.kill();
    }

    pub fn is_running(&self) -> bool {
        self.process.is_running()
    }

    pub fn process(&mut self) -> &mut Process {
        &mut self.process
    }

    /// Everything it logged so far (all runs).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.process.log_path()).unwrap_or_default()
    }

    pub fn log_path(&self) -> &Path {
        self.process.log_path()
    }

    /// Waits until the log contains `needle`; panics with the log tail after `timeout`.
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) {
        self.wait_for_log_count(needle, 1, timeout);
    }

    /// Waits until the log contains `needle` at least `count` times (the log goes on across
    /// restarts: a restarted process's line is one more); panics with the log tail after
    /// `timeout`.
    pub fn wait_for_log_count(&self, needle: &str, count: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.log().matches(needle).count() < count {
            assert!(
                Instant::now() < deadline && self.process.is_running(),
                "csi-provisioner did not log {needle:?} {count} time(s) within {timeout:?} (running: {}); log tail:\n{}",
                self.process.is_running(),
                self.process.log_tail(40)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn launch(
    dir: &Path,
    name: &str,
    args: &[String],
    env: &[(String, String)],
) -> Result<Process, Error> {
    let binary = paths::try_workspace_binary("csi-provisioner")?;
    let mut cmd = Command::new(binary);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    try_spawn(name, cmd, dir)
}
