//! Serving the driver on a unix socket.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use csi::v1::controller_server::ControllerServer;
use csi::v1::identity_server::IdentityServer;
use thiserror::Error;
use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;

use crate::calllog::{CallLog, CallLogError};
use crate::cli::Config;
use crate::node_cleanup::NodeService;
use crate::pools::Pools;
use crate::service::MockDriver;

/// How long calls in flight may still run after the shutdown signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Why the driver could not start or stopped with an error.
#[derive(Debug, Error)]
pub enum ServeError {
    #[error("cannot remove stale socket {path}: {source}")]
    StaleSocket {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot listen on {path}: {source}")]
    Bind {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    CallLog(#[from] CallLogError),
    #[error("gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Builds the driver from its configuration (opens the call log).
pub fn driver(cfg: &Config) -> Result<MockDriver, ServeError> {
    let log = cfg.call_log.as_deref().map(CallLog::open).transpose()?;
    Ok(MockDriver::new(
        cfg.driver.clone(),
        Pools::new(cfg.pools.clone())
            .with_overcommit(cfg.overcommit)
            .with_id_format(cfg.volume_id_format.clone()),
        cfg.faults.clone(),
        log,
    ))
}

/// Binds `socket` (replacing a stale socket file) and serves until `shutdown` completes,
/// then removes the socket file.
pub async fn serve(
    driver: MockDriver,
    socket: &Path,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let path = socket.display().to_string();
    match std::fs::remove_file(socket) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(ServeError::StaleSocket { path, source }),
    }
    let listener = UnixListener::bind(socket).map_err(|source| ServeError::Bind {
        path: path.clone(),
        source,
    })?;
    tracing::info!(socket = %path, "serving CSI");
    let calls = driver.clone();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tonic::transport::Server::builder()
        .add_service(IdentityServer::new(driver.clone()))
        .add_service(ControllerServer::new(driver.clone()))
        .add_service(NodeService::new(driver))
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
            let _ = stop_rx.await;
        });
    tokio::pin!(server);
    let result = tokio::select! {
        result = &mut server => result,
        () = shutdown => {
            let _ = stop_tx.send(());
            // A graceful stop waits for every connection to close, and clients such as the
            // provisioner keep theirs open: wait only for calls in flight (bounded), then drop
            // the server and with it the connections.
            let drained = async {
                while calls.in_flight() > 0 {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            };
            tokio::select! {
                result = &mut server => result,
                _ = tokio::time::timeout(SHUTDOWN_GRACE, drained) => Ok(()),
            }
        }
    };
    // Best effort: the socket is ours, and a leftover file only costs the next start a remove.
    let _ = std::fs::remove_file(socket);
    result.map_err(ServeError::from)
}
