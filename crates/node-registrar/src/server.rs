//! Serving `pluginregistration.Registration` on the registration socket.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use thiserror::Error;
use tokio::net::UnixListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

use crate::v1::registration_server::{Registration, RegistrationServer};
use crate::v1::{InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse};

/// How long a stopping server waits for kubelet's open connection before dropping it; kubelet
/// may keep the connection, and a registrar that is told to stop must not hang.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// Why the registration socket could not be served.
#[derive(Debug, Error)]
pub enum ServeError {
    /// A file is in the socket's place and cannot be removed.
    #[error("cannot remove the stale registration socket {path}: {source}; remove it by hand")]
    StaleSocket {
        /// The socket path.
        path: PathBuf,
        /// Why the removal failed.
        source: std::io::Error,
    },
    /// Binding failed, e.g. the directory is missing or not writable.
    #[error(
        "cannot listen on {path}: {source}; check that --plugin-registration-path exists and is \
         kubelet's plugins_registry directory"
    )]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// Why binding failed.
        source: std::io::Error,
    },
    /// The gRPC server itself failed.
    #[error("the registration gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Why serving ended without an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// The shutdown future completed (a signal, in the binary).
    Shutdown,
    /// kubelet reported that registration failed, with its error.
    Rejected(String),
}

/// The `Registration` service: a fixed `GetInfo` answer, and registration failures passed on
/// to [`Listener::serve`] so that the process can exit.
#[derive(Debug, Clone)]
pub struct Registrar {
    info: PluginInfo,
    rejected: mpsc::UnboundedSender<String>,
}

#[tonic::async_trait]
impl Registration for Registrar {
    async fn get_info(&self, _: Request<InfoRequest>) -> Result<Response<PluginInfo>, Status> {
        tracing::info!(driver = %self.info.name, "kubelet asked GetInfo");
        Ok(Response::new(self.info.clone()))
    }

    async fn notify_registration_status(
        &self,
        request: Request<RegistrationStatus>,
    ) -> Result<Response<RegistrationStatusResponse>, Status> {
        let status = request.into_inner();
        if status.plugin_registered {
            tracing::info!(driver = %self.info.name, "kubelet registered the driver");
        } else {
            tracing::error!(driver = %self.info.name, error = %status.error, "kubelet did not register the driver");
            // The receiver lives as long as the server; if it is gone we are stopping anyway.
            let _ = self.rejected.send(status.error);
        }
        Ok(Response::new(RegistrationStatusResponse {}))
    }
}

/// A bound registration socket, not yet serving.
#[derive(Debug)]
pub struct Listener {
    path: PathBuf,
    listener: UnixListener,
}

impl Listener {
    /// Binds `path`, first removing a stale socket a previous run left behind (kubelet ignores
    /// a socket that does not accept, but binding over it fails).
    pub fn bind(path: &Path) -> Result<Listener, ServeError> {
        match std::fs::remove_file(path) {
            Ok(()) => tracing::info!(socket = %path.display(), "removed a stale socket"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(ServeError::StaleSocket {
                    path: path.to_path_buf(),
                    source,
                });
            }
        }
        let listener = UnixListener::bind(path).map_err(|source| ServeError::Bind {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Listener {
            path: path.to_path_buf(),
            listener,
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Answers kubelet with `info` until `shutdown` completes or kubelet reports a failed
    /// registration, then removes the socket: kubelet deregisters the plugin when its socket
    /// goes away.
    pub async fn serve(
        self,
        info: PluginInfo,
        shutdown: impl Future<Output = ()>,
    ) -> Result<Stopped, ServeError> {
        let Listener { path, listener } = self;
        let (rejected_tx, mut rejected_rx) = mpsc::unbounded_channel();
        let registrar = Registrar {
            info,
            rejected: rejected_tx,
        };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        tracing::info!(socket = %path.display(), "serving plugin registration");
        let server = tonic::transport::Server::builder()
            .add_service(RegistrationServer::new(registrar))
            .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                let _ = stop_rx.await;
            });
        tokio::pin!(server);
        let outcome = tokio::select! {
            result = &mut server => result.map(|()| Stopped::Shutdown),
            () = shutdown => Ok(Stopped::Shutdown),
            Some(error) = rejected_rx.recv() => Ok(Stopped::Rejected(error)),
        };
        // Remove the socket first, so that kubelet sees the plugin go even if draining stalls.
        let _ = std::fs::remove_file(&path);
        if outcome.is_ok() {
            let _ = stop_tx.send(());
            // Lets the NotifyRegistrationStatus answer reach kubelet before we exit.
            let _ = tokio::time::timeout(SHUTDOWN_GRACE, &mut server).await;
        }
        outcome.map_err(ServeError::from)
    }
}
