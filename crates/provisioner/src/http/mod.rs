//! The HTTP endpoint (`--http-endpoint` / `--metrics-address`): metrics, leader-election
//! health, optional profiling.
//!
//! STUB: interface fixed by the lead; implementation to be filled in (see the HTTP/metrics task).

use std::sync::Arc;

use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

/// What the endpoint serves.
pub struct HttpOptions {
    /// Go listen address: `:8080`, `127.0.0.1:8080`, `[::1]:8080`.
    pub address: String,
    /// `--metrics-path`.
    pub metrics_path: String,
    /// `--enable-pprof`.
    pub enable_pprof: bool,
}

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: String,
        source: std::io::Error,
    },
}

/// Binds the listener now (so a bad address fails start-up) and returns the server future.
pub async fn serve(
    _opts: HttpOptions,
    _registry: Arc<Registry>,
    _leader_health: Option<leader_election::HealthCheck>,
    _shutdown: CancellationToken,
) -> Result<impl std::future::Future<Output = ()> + Send + 'static, HttpError> {
    Ok(async {})
}
