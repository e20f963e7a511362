//! The CSI client for one driver connection: per-call timeouts, v5 call logging, call metrics.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status};

use crate::capabilities::{DriverCapabilities, fold_capabilities};
use crate::connection::{ConnectError, ConnectOptions, connect_channel};
use crate::metrics::CallMetrics;
use crate::probe::{ProbeOutcome, probe_outcome};
use crate::sanitize::sanitize;
use crate::status::{DEADLINE_EXCEEDED_MESSAGE, deadline_status, go_error_string};
use crate::v1;
use crate::v1::controller_client::ControllerClient;
use crate::v1::identity_client::IdentityClient;
use crate::v1::node_client::NodeClient;

/// Full gRPC method names, as used in logs and the `method_name` metric label.
pub mod methods {
    /// Identity.Probe.
    pub const PROBE: &str = "/csi.v1.Identity/Probe";
    /// Identity.GetPluginInfo.
    pub const GET_PLUGIN_INFO: &str = "/csi.v1.Identity/GetPluginInfo";
    /// Identity.GetPluginCapabilities.
    pub const GET_PLUGIN_CAPABILITIES: &str = "/csi.v1.Identity/GetPluginCapabilities";
    /// Controller.ControllerGetCapabilities.
    pub const CONTROLLER_GET_CAPABILITIES: &str = "/csi.v1.Controller/ControllerGetCapabilities";
    /// Controller.CreateVolume.
    pub const CREATE_VOLUME: &str = "/csi.v1.Controller/CreateVolume";
    /// Controller.DeleteVolume.
    pub const DELETE_VOLUME: &str = "/csi.v1.Controller/DeleteVolume";
    /// Controller.GetCapacity.
    pub const GET_CAPACITY: &str = "/csi.v1.Controller/GetCapacity";
    /// Controller.ListVolumes.
    pub const LIST_VOLUMES: &str = "/csi.v1.Controller/ListVolumes";
    /// Controller.ValidateVolumeCapabilities.
    pub const VALIDATE_VOLUME_CAPABILITIES: &str = "/csi.v1.Controller/ValidateVolumeCapabilities";
    /// Controller.ControllerModifyVolume.
    pub const CONTROLLER_MODIFY_VOLUME: &str = "/csi.v1.Controller/ControllerModifyVolume";
    /// Node.NodeGetInfo.
    pub const NODE_GET_INFO: &str = "/csi.v1.Node/NodeGetInfo";
}

/// A connection to one CSI driver. Cheap to clone; clones share the connection and metrics.
///
/// Every call carries the `--timeout` both as the `grpc-timeout` header (drivers may honour it)
/// and as a local deadline, which yields `DeadlineExceeded` with Go's message
/// "context deadline exceeded". At `-v=5` each call logs "GRPC call" with the method and the
/// sanitised request, then "GRPC response" with the sanitised response and, on failure, the
/// error. Secrets never reach the log.
#[derive(Clone, Debug)]
pub struct Client {
    channel: Channel,
    /// While any clone lives, the driver closing the connection counts as a lost connection.
    _alive: Arc<()>,
    timeout: Duration,
    metrics: Option<CallMetrics>,
    address: Arc<str>,
    /// Whether this handle's calls serve in-tree volumes (CSI migration), for the metrics.
    migrated: bool,
}

macro_rules! rpc {
    ($(#[$doc:meta])* $name:ident($req:ty) -> $resp:ty, $client:ident, $method:expr) => {
        $(#[$doc])*
        pub async fn $name(&self, request: $req) -> Result<$resp, Status> {
            self.call($method, request, |channel, request| async move {
                $client::new(channel).$name(request).await
            })
            .await
        }
    };
}

impl Client {
    /// Connects to the driver at `address` (a unix socket: `/path`, `unix:///path` or
    /// `unix:path`), waiting until the socket accepts or `opts.connect_timeout` passes.
    pub async fn connect(address: &str, opts: ConnectOptions) -> Result<Client, ConnectError> {
        let (channel, shown, alive) = connect_channel(address, &opts).await?;
        Ok(Client {
            channel,
            _alive: alive,
            timeout: opts.timeout,
            metrics: opts.metrics,
            address: shown.into(),
            migrated: false,
        })
    }

    /// The driver's address as `unix:///path`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The per-call timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The metrics this client records into, if any.
    pub fn metrics(&self) -> Option<&CallMetrics> {
        self.metrics.as_ref()
    }

    /// A handle whose calls count as `migrated="true"` (or not) in the metrics; the connection
    /// is shared.
    pub fn migrated(&self, migrated: bool) -> Client {
        Client {
            migrated,
            ..self.clone()
        }
    }

    /// Adds the `migrated` label to every call's metrics: the driver replaces an in-tree
    /// plugin. Without metrics this does nothing.
    pub fn enable_migration_label(&self) {
        if let Some(metrics) = &self.metrics {
            metrics.enable_migration_label();
        }
    }

    /// Sets the `driver_name` metric label (call it after GetPluginInfo, as upstream does).
    /// Without metrics this does nothing.
    pub fn set_driver_name(&self, name: &str) {
        if let Some(metrics) = &self.metrics {
            metrics.set_driver_name(name);
        }
    }

    rpc!(
        /// Identity.Probe.
        probe(v1::ProbeRequest) -> v1::ProbeResponse, IdentityClient, methods::PROBE
    );
    rpc!(
        /// Identity.GetPluginInfo.
        get_plugin_info(v1::GetPluginInfoRequest) -> v1::GetPluginInfoResponse,
        IdentityClient, methods::GET_PLUGIN_INFO
    );
    rpc!(
        /// Identity.GetPluginCapabilities.
        get_plugin_capabilities(v1::GetPluginCapabilitiesRequest)
            -> v1::GetPluginCapabilitiesResponse,
        IdentityClient, methods::GET_PLUGIN_CAPABILITIES
    );
    rpc!(
        /// Controller.ControllerGetCapabilities.
        controller_get_capabilities(v1::ControllerGetCapabilitiesRequest)
            -> v1::ControllerGetCapabilitiesResponse,
        ControllerClient, methods::CONTROLLER_GET_CAPABILITIES
    );
    rpc!(
        /// Controller.CreateVolume.
        create_volume(v1::CreateVolumeRequest) -> v1::CreateVolumeResponse,
        ControllerClient, methods::CREATE_VOLUME
    );
    rpc!(
        /// Controller.DeleteVolume.
        delete_volume(v1::DeleteVolumeRequest) -> v1::DeleteVolumeResponse,
        ControllerClient, methods::DELETE_VOLUME
    );
    rpc!(
        /// Controller.GetCapacity.
        get_capacity(v1::GetCapacityRequest) -> v1::GetCapacityResponse,
        ControllerClient, methods::GET_CAPACITY
    );
    rpc!(
        /// Controller.ListVolumes.
        list_volumes(v1::ListVolumesRequest) -> v1::ListVolumesResponse,
        ControllerClient, methods::LIST_VOLUMES
    );
    rpc!(
        /// Controller.ValidateVolumeCapabilities.
        validate_volume_capabilities(v1::ValidateVolumeCapabilitiesRequest)
            -> v1::ValidateVolumeCapabilitiesResponse,
        ControllerClient, methods::VALIDATE_VOLUME_CAPABILITIES
    );
    rpc!(
        /// Controller.ControllerModifyVolume.
        controller_modify_volume(v1::ControllerModifyVolumeRequest)
            -> v1::ControllerModifyVolumeResponse,
        ControllerClient, methods::CONTROLLER_MODIFY_VOLUME
    );
    rpc!(
        /// Node.NodeGetInfo.
        node_get_info(v1::NodeGetInfoRequest) -> v1::NodeGetInfoResponse,
        NodeClient, methods::NODE_GET_INFO
    );

    /// Calls Probe every `interval` (upstream: 1 s) until the driver is ready, like
    /// csi-lib-utils' `ProbeForever`: "not ready" and timed-out probes are logged and retried;
    /// any other error is returned, because upstream then exits. Wrap it in a timeout to bound
    /// the wait. A zero interval is treated as 1 ms.
    pub async fn probe_until_ready(&self, interval: Duration) -> Result<(), Status> {
        let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(1)));
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            klog::v!(0, "Probing CSI driver for readiness");
            match probe_outcome(self.probe(v1::ProbeRequest {}).await) {
                ProbeOutcome::Ready => return Ok(()),
                ProbeOutcome::NotReady => klog::v!(0, "CSI driver is not ready"),
                ProbeOutcome::TimedOut => klog::v!(0, "CSI driver probe timed out"),
                ProbeOutcome::Failed(status) => {
                    tracing::error!(err = %go_error_string(&status), "CSI driver probe failed");
                    return Err(status);
                }
            }
        }
    }

    /// One GetPluginCapabilities and one ControllerGetCapabilities call (each with its own
    /// timeout, as upstream), folded into [`DriverCapabilities`].
    pub async fn capabilities(&self) -> Result<DriverCapabilities, Status> {
        let plugin = self
            .get_plugin_capabilities(v1::GetPluginCapabilitiesRequest {})
            .await?;
        let controller = self
            .controller_get_capabilities(v1::ControllerGetCapabilitiesRequest {})
            .await?;
        Ok(fold_capabilities(
            &plugin.capabilities,
            &controller.capabilities,
        ))
    }

    async fn call<Req, Resp, F, Fut>(
        &self,
        method: &'static str,
        request: Req,
        send: F,
    ) -> Result<Resp, Status>
    where
        Req: prost::Message + prost::Name,
        Resp: prost::Message + prost::Name + Default,
        F: FnOnce(Channel, Request<Req>) -> Fut,
        Fut: Future<Output = Result<Response<Resp>, Status>>,
    {
        klog::v!(5, method, request = %sanitize(&request), "GRPC call");
        let mut request = Request::new(request);
        request.set_timeout(self.timeout);
        let start = Instant::now();
        let call = tokio::time::timeout(self.timeout, send(self.channel.clone(), request));
        let result = match call.await {
            Ok(result) => result
                .map(Response::into_inner)
                .map_err(|status| deadline_status(status, start.elapsed(), self.timeout)),
            Err(_) => Err(Status::deadline_exceeded(DEADLINE_EXCEEDED_MESSAGE)),
        };
        if let Some(metrics) = &self.metrics {
            let code = result.as_ref().map_or_else(Status::code, |_| Code::Ok);
            metrics.record(method, code, start.elapsed(), self.migrated);
        }
        match &result {
            Ok(response) => klog::v!(5, method, response = %sanitize(response), "GRPC response"),
            // Like Go, which logs the (empty) reply message next to the error.
            Err(status) => klog::v!(
                5,
                method,
                response = %sanitize(&Resp::default()),
                err = %go_error_string(status),
                "GRPC response"
            ),
        }
        result
    }
}
