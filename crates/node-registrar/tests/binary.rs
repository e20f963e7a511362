//! The `node-registrar` binary end to end: a driver that starts late, kubelet's GetInfo on
//! `<dir>/<driver>-reg.sock`, and SIGTERM.

mod support;

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use node_registrar::v1::{InfoRequest, PluginInfo, RegistrationStatus};

const DRIVER: &str = "late.csi.test";
const ENDPOINT: &str = "/var/lib/kubelet/plugins/late.csi.test/csi.sock";

/// The registrar process, killed if a test fails before it exits.
struct Registrar {
    child: Child,
    log: std::path::PathBuf,
}

impl Registrar {
    fn start(dir: &Path, csi_socket: &Path) -> Registrar {
        let log = dir.join("registrar.log");
        let child = Command::new(env!("CARGO_BIN_EXE_node-registrar"))
            .arg(format!("--csi-address=unix://{}", csi_socket.display()))
            .arg(format!("--kubelet-registration-path={ENDPOINT}"))
            .arg(format!("--plugin-registration-path={}", dir.display()))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Registrar { child, log }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn alive(&mut self) -> Result<(), String> {
        match self.child.try_wait().unwrap() {
            None => Ok(()),
            Some(status) => Err(format!("registrar exited with {status}: {}", self.stderr())),
        }
    }

    /// SIGTERM, then wait for the exit.
    fn terminate(&mut self) -> ExitStatus {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(sent.success(), "kill -TERM {pid} failed");
        self.wait_exit()
    }

    /// Waits for the exit, bounded so that a registrar that does not stop fails the test
    /// instead of hanging it.
    fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "registrar did not exit within 30s: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Registrar {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_a_late_driver_and_cleans_up_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let csi_socket = dir.path().join("csi.sock");
    let mut registrar = Registrar::start(dir.path(), &csi_socket);
    // The driver comes up after the registrar, as it may in a pod; the registrar must wait.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    registrar.alive().unwrap();
    let _driver = support::spawn_fake_driver(csi_socket, DRIVER);

    let reg_socket = dir.path().join(format!("{DRIVER}-reg.sock"));
    let wait_socket = reg_socket.clone();
    let mut registrar = tokio::task::spawn_blocking(move || {
        support::wait_for_socket(&wait_socket, || registrar.alive());
        registrar
    })
    .await
    .unwrap();

    let info = support::registration_client(&reg_socket)
        .get_info(InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        info,
        PluginInfo {
            r#type: "CSIPlugin".into(),
            name: DRIVER.into(),
            endpoint: ENDPOINT.into(),
            supported_versions: vec!["1.0.0".into()],
        }
    );

    let status = tokio::task::spawn_blocking(move || {
        let status = registrar.terminate();
        (status, registrar.stderr())
    })
    .await
    .unwrap();
    assert_eq!(status.0.code(), Some(0), "{}", status.1);
    assert!(
        !reg_socket.exists(),
        "the registration socket outlived the registrar"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exits_non_zero_when_kubelet_rejects_the_driver() {
    let dir = tempfile::tempdir().unwrap();
    let csi_socket = dir.path().join("csi.sock");
    let _driver = support::spawn_fake_driver(csi_socket.clone(), DRIVER);
    let mut registrar = Registrar::start(dir.path(), &csi_socket);
    let reg_socket = dir.path().join(format!("{DRIVER}-reg.sock"));
    let wait_socket = reg_socket.clone();
    let mut registrar = tokio::task::spawn_blocking(move || {
        support::wait_for_socket(&wait_socket, || registrar.alive());
        registrar
    })
    .await
    .unwrap();

    support::registration_client(&reg_socket)
        .notify_registration_status(RegistrationStatus {
            plugin_registered: false,
            error: "no CSI node plugin support".into(),
        })
        .await
        .unwrap();
    let (status, stderr) = tokio::task::spawn_blocking(move || {
        let status = registrar.wait_exit();
        (status, registrar.stderr())
    })
    .await
    .unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no CSI node plugin support"), "{stderr}");
    assert!(
        !reg_socket.exists(),
        "the registration socket outlived the registrar"
    );
}

#[test]
fn gives_up_on_a_driver_that_never_comes() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("registrar.log");
    let status = Command::new(env!("CARGO_BIN_EXE_node-registrar"))
        .arg(format!(
            "--csi-address={}",
            dir.path().join("none.sock").display()
        ))
        .arg(format!("--kubelet-registration-path={ENDPOINT}"))
        .arg(format!(
            "--plugin-registration-path={}",
            dir.path().display()
        ))
        .arg("--connection-timeout=1s")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .status()
        .unwrap();
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("none.sock"), "{stderr}");
}
