//! Learning the driver's name from its Identity service.

use std::time::Duration;

use thiserror::Error;
use tokio::time::Instant;

/// Pause between GetPluginInfo attempts while the driver is not answering yet.
const RETRY_INTERVAL: Duration = Duration::from_secs(1);

/// Why the driver's name could not be learned.
#[derive(Debug, Error)]
pub enum DriverError {
    /// The socket never accepted a connection.
    #[error(transparent)]
    Connect(#[from] csi::ConnectError),
    /// The socket accepted, but GetPluginInfo kept failing until the deadline.
    #[error(
        "the CSI driver at {address} did not answer GetPluginInfo within {waited:?} (last \
         error: {last_error}); check that the driver is healthy or raise --connection-timeout"
    )]
    NoAnswer {
        /// The driver's socket, as `unix:///path`.
        address: String,
        /// How long we tried.
        waited: Duration,
        /// The last call's status.
        last_error: String,
    },
}

/// Calls Identity.GetPluginInfo on `address` until it answers or `wait` has passed, and
/// returns the driver name. Every call is bounded by `timeout`. Waiting covers the usual
/// start-up race: the registrar and the driver start together and the driver may be last.
pub async fn driver_name(
    address: &str,
    timeout: Duration,
    wait: Duration,
) -> Result<String, DriverError> {
    let start = Instant::now();
    let opts = csi::ConnectOptions {
        timeout,
        connect_timeout: Some(wait),
        ..csi::ConnectOptions::default()
    };
    let client = csi::Client::connect(address, opts).await?;
    loop {
        let last_error = match client.get_plugin_info(Default::default()).await {
            Ok(info) => return Ok(info.name),
            Err(status) => format!("{:?}: {}", status.code(), status.message()),
        };
        if start.elapsed() + RETRY_INTERVAL > wait {
            return Err(DriverError::NoAnswer {
                address: client.address().to_string(),
                waited: start.elapsed(),
                last_error,
            });
        }
        tracing::warn!(address = client.address(), error = %last_error, "GetPluginInfo failed, retrying");
        tokio::time::sleep(RETRY_INTERVAL).await;
    }
}
