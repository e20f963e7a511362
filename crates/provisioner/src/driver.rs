//! Connecting to the CSI driver at start-up, as upstream does: wait for the socket, Probe
//! until ready, then ask once for the driver name and capabilities (failure is fatal).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use csi::v1::{GetPluginInfoRequest, NodeGetInfoRequest, NodeGetInfoResponse};
use csi::{CallMetrics, Client, ConnectOptions, DriverCapabilities};
use tokio_util::sync::CancellationToken;

/// What we learnt about the driver at start-up.
#[derive(Clone, Debug)]
pub struct Driver {
    pub client: Client,
    /// `GetPluginInfo.name`: the provisioner name every claim and class is matched against.
    pub name: String,
    pub capabilities: DriverCapabilities,
    /// Cancelled when the connection to the driver is lost outside a shutdown; `app::run`
    /// then ends with [`crate::stopped::AppError::DriverLost`] and `main` exits 1.
    pub lost: CancellationToken,
}

/// Why start-up could not talk to the driver.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("cannot connect to the CSI driver at {address}: {source}")]
    Connect {
        address: String,
        source: csi::ConnectError,
    },
    #[error("CSI driver at {address} did not become ready: {}", csi::status::go_error_string(.source))]
    Probe {
        address: String,
        source: tonic::Status,
    },
    #[error("error getting CSI driver name: {}", csi::status::go_error_string(.0))]
    PluginInfo(tonic::Status),
    #[error("CSI driver returned an empty name from GetPluginInfo; the driver is broken")]
    EmptyName,
    #[error("error getting CSI driver capabilities: {}", csi::status::go_error_string(.0))]
    Capabilities(tonic::Status),
    #[error("error getting node info from the CSI driver: {}", csi::status::go_error_string(.0))]
    NodeInfo(tonic::Status),
}

/// Upstream probes every second.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// Connects, probes and discovers, in upstream's order. `timeout` is `--timeout`.
pub async fn connect(
    address: &str,
    timeout: Duration,
    metrics: CallMetrics,
) -> Result<Driver, DriverError> {
    let lost = CancellationToken::new();
    let on_lost = {
        let lost = lost.clone();
        move || {
            // A connection closing under a deliberate shutdown is no loss.
            if !SHUTTING_DOWN.load(Ordering::Acquire) {
                lost.cancel();
            }
        }
    };
    let options = ConnectOptions {
        timeout,
        on_connection_lost: Some(Arc::new(on_lost)),
        metrics: Some(metrics),
        ..ConnectOptions::default()
    };
    let client =
        Client::connect(address, options)
            .await
            .map_err(|source| DriverError::Connect {
                address: address.to_string(),
                source,
            })?;
    client
        .probe_until_ready(PROBE_INTERVAL)
        .await
        .map_err(|source| DriverError::Probe {
            address: address.to_string(),
            source,
        })?;
    let info = client
        .get_plugin_info(GetPluginInfoRequest {})
        .await
        .map_err(DriverError::PluginInfo)?;
    if info.name.is_empty() {
        return Err(DriverError::EmptyName);
    }
    client.set_driver_name(&info.name);
    tracing::info!(driver = %info.name, "Detected CSI driver");
    let capabilities = client
        .capabilities()
        .await
        .map_err(DriverError::Capabilities)?;
    Ok(Driver {
        client,
        name: info.name,
        capabilities,
        lost,
    })
}

/// NodeGetInfo, for `--node-deployment` start-up checks.
pub async fn node_info(client: &Client) -> Result<NodeGetInfoResponse, DriverError> {
    client
        .node_get_info(NodeGetInfoRequest {})
        .await
        .map_err(DriverError::NodeInfo)
}

/// Set once a shutdown has begun: the connection closing under a stopping runtime is no loss.
static SHUTTING_DOWN: AtomicBool = AtomicBool::new(false);

/// Says that the process is shutting down on purpose (SIGTERM): from now on a closed driver
/// connection does not turn a clean exit into a failure.
pub fn shutting_down() {
    SHUTTING_DOWN.store(true, Ordering::Release);
}

/// The identity stored in every PV we create (`storage.kubernetes.io/csiProvisionerIdentity`):
/// upstream's `<unix millis>-<random 0..9999>-<driver>`.
pub fn provisioner_identity(driver: &str, now_millis: i64, random: u32) -> String {
    format!("{now_millis}-{}-{driver}", random % 10_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_has_upstream_shape() {
        assert_eq!(
            provisioner_identity("mock.csi.test", 1_700_000_000_123, 12_345),
            "1700000000123-2345-mock.csi.test"
        );
    }
}
