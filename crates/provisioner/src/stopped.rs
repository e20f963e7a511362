//! Why the provisioner stopped: the one error `main` turns into an exit status.

use crate::{driver, http, kubeconfig};

/// Why the provisioner stopped.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Kubeconfig(#[from] kubeconfig::KubeconfigError),
    #[error(transparent)]
    Client(#[from] controller_kit::client::ClientError),
    #[error(transparent)]
    Driver(#[from] driver::DriverError),
    #[error(transparent)]
    Http(#[from] http::HttpError),
    #[error(transparent)]
    Caches(#[from] controller_kit::reflect::ReflectError),
    #[error("invalid leader election settings: {0}")]
    LeaderElection(#[from] leader_election::ConfigError),
    #[error("leaderelection lost")]
    LostLease,
    /// Upstream exits too: replicas sharing a made-up identity would each think they lead.
    #[error("error getting the default leader identity: {0}")]
    LeaderIdentity(std::io::Error),
    /// Upstream's `ExitOnConnectionLoss`: a sidecar whose driver went away cannot do anything
    /// useful, and restarting the container is the recovery Kubernetes offers.
    #[error("Lost connection to CSI driver, exiting")]
    DriverLost,
    #[error("controller task {task} stopped: {reason}")]
    TaskFailed { task: &'static str, reason: String },
    #[error("{0}")]
    Unsupported(String),
    #[error(
        "cannot look up the owner for CSIStorageCapacity objects (POD_NAME {pod:?} in NAMESPACE {namespace:?}): {source}"
    )]
    Owner {
        pod: String,
        namespace: String,
        source: kube::Error,
    },
}
