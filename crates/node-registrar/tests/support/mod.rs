//! Shared by the integration tests: a gRPC channel over a unix socket, and a minimal CSI
//! Identity server standing in for a driver.

#![allow(dead_code)] // each test binary uses a different part

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use csi::v1::identity_server::{Identity, IdentityServer};
use csi::v1::{
    GetPluginCapabilitiesRequest, GetPluginCapabilitiesResponse, GetPluginInfoRequest,
    GetPluginInfoResponse, ProbeRequest, ProbeResponse,
};
use hyper_util::rt::TokioIo;
use node_registrar::v1::registration_client::RegistrationClient;
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Request, Response, Status};

/// A gRPC channel over the unix socket at `path`, dialled lazily on the first call.
pub fn channel(path: &Path) -> Channel {
    let path = path.to_path_buf();
    Endpoint::from_static("http://localhost").connect_with_connector_lazy(tower::service_fn(
        move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        },
    ))
}

/// A `Registration` client, as kubelet would use it.
pub fn registration_client(path: &Path) -> RegistrationClient<Channel> {
    RegistrationClient::new(channel(path))
}

/// Waits (bounded, generous for a shared machine) until `path` accepts a connection.
pub fn wait_for_socket(path: &Path, mut alive: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::os::unix::net::UnixStream::connect(path).is_err() {
        if let Err(why) = alive() {
            panic!("{} never accepted: {why}", path.display());
        }
        assert!(
            Instant::now() < deadline,
            "{} never accepted within 60s",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A driver that only answers Identity calls, with a fixed name.
struct FakeDriver {
    name: String,
}

#[tonic::async_trait]
impl Identity for FakeDriver {
    async fn get_plugin_info(
        &self,
        _: Request<GetPluginInfoRequest>,
    ) -> Result<Response<GetPluginInfoResponse>, Status> {
        Ok(Response::new(GetPluginInfoResponse {
            name: self.name.clone(),
            vendor_version: "0.0.1".into(),
            ..Default::default()
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<GetPluginCapabilitiesRequest>,
    ) -> Result<Response<GetPluginCapabilitiesResponse>, Status> {
        Ok(Response::new(GetPluginCapabilitiesResponse::default()))
    }

    async fn probe(&self, _: Request<ProbeRequest>) -> Result<Response<ProbeResponse>, Status> {
        Ok(Response::new(ProbeResponse::default()))
    }
}

/// Serves a fake driver named `name` on `socket` on the current runtime until it ends.
pub fn spawn_fake_driver(socket: PathBuf, name: &str) -> tokio::task::JoinHandle<()> {
    let listener = UnixListener::bind(&socket).unwrap();
    let driver = FakeDriver {
        name: name.to_string(),
    };
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(IdentityServer::new(driver))
            .serve_with_incoming(UnixListenerStream::new(listener))
            .await
            .unwrap();
    })
}
