//! A `kube::Client` with client-go's client-side QPS/burst limiting and request metrics.
//!
//! kube-rs has no client-side limiter; the Go sidecar relies on client-go's
//! (`--kube-api-qps`/`--kube-api-burst` for the main client, `--kube-api-capacity-qps`/
//! `--kube-api-capacity-burst` for the capacity client). [`build_client`] adds it as a tower
//! layer.

mod metrics;
mod queue;
mod request_info;
mod throttle;

pub use metrics::RequestMetrics;
pub use queue::with_priority;
pub use request_info::{classify, is_watch};
pub use throttle::{Budget, Throttle, ThrottleLayer};

use http::HeaderValue;
use kube::client::ClientBuilder;

/// client-go's `DefaultQPS`, used when the configured QPS is exactly 0.
pub const DEFAULT_QPS: f32 = 5.0;
/// client-go's `DefaultBurst`, used when the configured burst is 0.
pub const DEFAULT_BURST: u32 = 10;

/// Client-side rate limits, as given on the command line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClientLimits {
    /// Sustained requests per second; fractions allowed.
    pub qps: f32,
    /// Requests allowed at once before throttling starts.
    pub burst: u32,
}

impl ClientLimits {
    /// The token bucket client-go would build, or `None` for no throttling.
    ///
    /// As in client-go's `RESTClientFor`: a QPS of exactly 0 means the default 5, a burst of 0
    /// the default 10, and a negative QPS disables throttling.
    pub fn effective(self) -> Option<(f64, u32)> {
        let qps = if self.qps == 0.0 {
            DEFAULT_QPS
        } else {
            self.qps
        };
        let burst = if self.burst == 0 {
            DEFAULT_BURST
        } else {
            self.burst
        };
        (qps > 0.0 && qps.is_finite()).then_some((f64::from(qps), burst))
    }
}

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The user agent contains characters not allowed in an HTTP header.
    #[error("invalid user agent {user_agent:?}: {source}")]
    UserAgent {
        /// The rejected value.
        user_agent: String,
        /// The header parser's complaint.
        source: http::header::InvalidHeaderValue,
    },
    /// kube could not build its HTTP stack from the configuration (TLS, auth, proxy).
    #[error("cannot build a Kubernetes client for {cluster_url}: {source}")]
    Kube {
        /// The apiserver the configuration points at.
        cluster_url: String,
        /// kube's error.
        source: kube::Error,
    },
}

/// Builds a client for `config` that throttles non-watch requests to `limits`, sends
/// `user_agent`, and counts requests into `metrics`.
///
/// Must be called inside a tokio runtime (kube spawns its request buffer).
pub fn build_client(
    config: kube::Config,
    limits: ClientLimits,
    user_agent: &str,
    metrics: Option<RequestMetrics>,
) -> Result<kube::Client, ClientError> {
    let layer = ThrottleLayer::new(limits.effective(), &host_of(&config), metrics);
    client_with(config, user_agent, &layer)
}

/// The clients that share one `--kube-api-qps` / `--kube-api-burst` budget.
pub struct Clients {
    /// The normal lane.
    pub normal: kube::Client,
    /// The background lane, for work that can wait (see [`ThrottleLayer::background`]).
    pub background: kube::Client,
    /// Requests sent after [`Clients::budget`]'s turn, which do not wait again (see
    /// [`ThrottleLayer::prepaid`]).
    pub prepaid: kube::Client,
    /// The budget the prepaid client's caller takes its turns from.
    pub budget: Budget,
}

/// The clients over ONE budget (see [`Clients`]): together they never exceed `limits`.
pub fn build_clients(
    config: kube::Config,
    limits: ClientLimits,
    user_agent: &str,
    metrics: Option<RequestMetrics>,
) -> Result<Clients, ClientError> {
    let layer = ThrottleLayer::new(limits.effective(), &host_of(&config), metrics);
    Ok(Clients {
        normal: client_with(config.clone(), user_agent, &layer)?,
        background: client_with(config.clone(), user_agent, &layer.background())?,
        prepaid: client_with(config, user_agent, &layer.prepaid())?,
        budget: layer.budget(),
    })
}

fn host_of(config: &kube::Config) -> String {
    config
        .cluster_url
        .authority()
        .map(|a| a.as_str().to_string())
        .unwrap_or_default()
}

fn client_with(
    mut config: kube::Config,
    user_agent: &str,
    layer: &ThrottleLayer,
) -> Result<kube::Client, ClientError> {
    let value = HeaderValue::from_str(user_agent).map_err(|source| ClientError::UserAgent {
        user_agent: user_agent.to_string(),
        source,
    })?;
    config
        .headers
        .retain(|(name, _)| name != http::header::USER_AGENT);
    config.headers.push((http::header::USER_AGENT, value));
    let cluster_url = config.cluster_url.to_string();
    let builder = ClientBuilder::try_from(config).map_err(|source| ClientError::Kube {
        cluster_url,
        source,
    })?;
    Ok(builder.with_layer(layer).build())
}

#[cfg(test)]
mod tests;
