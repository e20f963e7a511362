//! Starting the built `mock-csi-driver` binary as a child process for integration tests.

#![allow(dead_code)] // each test binary uses a different part

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

/// A running driver, killed when dropped. Its stderr goes to `<dir>/driver.log`.
pub struct Driver {
    pub child: Child,
    pub socket: PathBuf,
    pub log: PathBuf,
}

impl Driver {
    /// Starts the driver on `<dir>/csi.sock` with `args` and waits until the socket accepts.
    pub fn start(dir: &Path, args: &[String]) -> Driver {
        let socket = dir.join("csi.sock");
        let log = dir.join("driver.log");
        let stderr = std::fs::File::create(&log).expect("create driver log");
        let child = Command::new(env!("CARGO_BIN_EXE_mock-csi-driver"))
            .arg(format!("--endpoint=unix://{}", socket.display()))
            .args(args)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn mock-csi-driver");
        let mut driver = Driver { child, socket, log };
        driver.wait_ready();
        driver
    }

    fn wait_ready(&mut self) {
        // Generous: the machine is shared; this is a readiness wait, not a timing assertion.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("driver exited with {status}: {}", self.stderr());
            }
            assert!(
                Instant::now() < deadline,
                "driver socket never accepted: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then wait (bounded) for the exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(sent.is_ok_and(|s| s.success()), "kill -TERM {pid} failed");
        // Bounded, so a driver that ignores SIGTERM fails the test instead of hanging it.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for driver") {
                return status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                panic!("driver ignored SIGTERM for 30s: {}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A gRPC channel over the driver's unix socket.
    pub async fn channel(&self) -> Channel {
        let path = self.socket.clone();
        Endpoint::from_static("http://mock.invalid")
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
            }))
            .await
            .expect("connect to driver socket")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
