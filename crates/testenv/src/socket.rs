//! Starting a CSI driver on a unix socket: no stale socket before, the socket after.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::IoContext;
use crate::{Error, Process};

/// How long a driver gets to create its socket.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(30);

/// A stale socket would make [`wait_for_socket`] succeed before the driver listens.
pub(crate) fn remove_stale_socket(socket: &Path) -> Result<(), Error> {
    match fs::remove_file(socket) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).ctx(|| format!("removing {}", socket.display()))
        }
        _ => Ok(()),
    }
}

/// Waits until `socket` exists; fails with the driver's log tail when it exits or times out.
pub(crate) fn wait_for_socket(process: &mut Process, socket: &Path) -> Result<(), Error> {
    let deadline = Instant::now() + SOCKET_TIMEOUT;
    while !socket.exists() {
        if let Ok(Some(status)) = process.try_wait() {
            return Err(Error::NotReady(format!(
                "exited ({status}) before creating {}; log {}:\n{}",
                socket.display(),
                process.log_path().display(),
                process.log_tail(20)
            )));
        }
        if Instant::now() >= deadline {
            return Err(Error::NotReady(format!(
                "no socket {} after {}s; log {}:\n{}",
                socket.display(),
                SOCKET_TIMEOUT.as_secs(),
                process.log_path().display(),
                process.log_tail(20)
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}
