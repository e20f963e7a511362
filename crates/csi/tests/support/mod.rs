//! An in-process CSI driver on a temporary unix socket, and a log capture, for the client tests.

#![allow(dead_code)] // Each test binary uses a different part of this module.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use csi::v1;
use csi::v1::controller_server::{Controller, ControllerServer};
use csi::v1::identity_server::{Identity, IdentityServer};
use tokio::io::AsyncReadExt;
use tokio::net::UnixListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Code, Request, Response, Status};

pub const DRIVER_NAME: &str = "fake.csi.example.com";

/// What the fake driver answers, and what it saw.
#[derive(Default)]
pub struct FakeDriver {
    /// Probe calls so far.
    pub probes: AtomicUsize,
    /// How many of the next probes answer `ready: false`.
    pub not_ready_probes: AtomicUsize,
    /// If set, Probe fails with this code.
    pub probe_error: Mutex<Option<Code>>,
    /// CreateVolume waits this long before answering.
    pub create_delay: Mutex<Duration>,
    /// If set, DeleteVolume fails with this code.
    pub delete_error: Mutex<Option<Code>>,
    /// The `grpc-timeout` header of every request, in order.
    pub timeout_headers: Mutex<Vec<Option<String>>>,
}

impl FakeDriver {
    fn saw<T>(&self, request: &Request<T>) {
        let header = request
            .metadata()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok());
        self.timeout_headers
            .lock()
            .unwrap()
            .push(header.map(str::to_string));
    }
}

#[derive(Clone)]
pub struct Service(pub Arc<FakeDriver>);

#[tonic::async_trait]
impl Identity for Service {
    async fn get_plugin_info(
        &self,
        request: Request<v1::GetPluginInfoRequest>,
    ) -> Result<Response<v1::GetPluginInfoResponse>, Status> {
        self.0.saw(&request);
        Ok(Response::new(v1::GetPluginInfoResponse {
            name: DRIVER_NAME.into(),
            vendor_version: "1.0".into(),
            manifest: Default::default(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        request: Request<v1::GetPluginCapabilitiesRequest>,
    ) -> Result<Response<v1::GetPluginCapabilitiesResponse>, Status> {
        use v1::plugin_capability::{Service, Type, service};
        self.0.saw(&request);
        let cap = |t: service::Type| v1::PluginCapability {
            r#type: Some(Type::Service(Service { r#type: t as i32 })),
        };
        Ok(Response::new(v1::GetPluginCapabilitiesResponse {
            capabilities: vec![
                cap(service::Type::ControllerService),
                cap(service::Type::VolumeAccessibilityConstraints),
            ],
        }))
    }

    async fn probe(
        &self,
        request: Request<v1::ProbeRequest>,
    ) -> Result<Response<v1::ProbeResponse>, Status> {
        self.0.saw(&request);
        self.0.probes.fetch_add(1, Ordering::SeqCst);
        if let Some(code) = *self.0.probe_error.lock().unwrap() {
            return Err(Status::new(code, "probe failed on purpose"));
        }
        let not_ready = self
            .0
            .not_ready_probes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        Ok(Response::new(v1::ProbeResponse {
            ready: not_ready.then_some(false),
        }))
    }
}

fn unimplemented<T>() -> Result<Response<T>, Status> {
    Err(Status::unimplemented("not in the fake driver"))
}

#[tonic::async_trait]
impl Controller for Service {
    async fn create_volume(
        &self,
        request: Request<v1::CreateVolumeRequest>,
    ) -> Result<Response<v1::CreateVolumeResponse>, Status> {
        self.0.saw(&request);
        let delay = *self.0.create_delay.lock().unwrap();
        tokio::time::sleep(delay).await;
        let req = request.into_inner();
        Ok(Response::new(v1::CreateVolumeResponse {
            volume: Some(v1::Volume {
                capacity_bytes: req.capacity_range.map_or(0, |r| r.required_bytes),
                volume_id: format!("id-{}", req.name),
                ..Default::default()
            }),
        }))
    }

    async fn delete_volume(
        &self,
        request: Request<v1::DeleteVolumeRequest>,
    ) -> Result<Response<v1::DeleteVolumeResponse>, Status> {
        self.0.saw(&request);
        match *self.0.delete_error.lock().unwrap() {
            Some(code) => Err(Status::new(
                code,
                format!("volume {} is busy", request.get_ref().volume_id),
            )),
            None => Ok(Response::new(v1::DeleteVolumeResponse {})),
        }
    }

    async fn validate_volume_capabilities(
        &self,
        _: Request<v1::ValidateVolumeCapabilitiesRequest>,
    ) -> Result<Response<v1::ValidateVolumeCapabilitiesResponse>, Status> {
        unimplemented()
    }

    async fn list_volumes(
        &self,
        _: Request<v1::ListVolumesRequest>,
    ) -> Result<Response<v1::ListVolumesResponse>, Status> {
        unimplemented()
    }

    async fn get_capacity(
        &self,
        request: Request<v1::GetCapacityRequest>,
    ) -> Result<Response<v1::GetCapacityResponse>, Status> {
        self.0.saw(&request);
        Ok(Response::new(v1::GetCapacityResponse {
            available_capacity: 1 << 30,
            maximum_volume_size: Some(1 << 20),
            minimum_volume_size: None,
        }))
    }

    async fn controller_get_capabilities(
        &self,
        request: Request<v1::ControllerGetCapabilitiesRequest>,
    ) -> Result<Response<v1::ControllerGetCapabilitiesResponse>, Status> {
        use v1::controller_service_capability::{Rpc, Type, rpc};
        self.0.saw(&request);
        let cap = |t: rpc::Type| v1::ControllerServiceCapability {
            r#type: Some(Type::Rpc(Rpc { r#type: t as i32 })),
        };
        Ok(Response::new(v1::ControllerGetCapabilitiesResponse {
            capabilities: vec![
                cap(rpc::Type::CreateDeleteVolume),
                cap(rpc::Type::GetCapacity),
            ],
        }))
    }

    async fn controller_modify_volume(
        &self,
        _: Request<v1::ControllerModifyVolumeRequest>,
    ) -> Result<Response<v1::ControllerModifyVolumeResponse>, Status> {
        unimplemented()
    }
}

/// A running fake driver.
pub struct Server {
    pub path: PathBuf,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

/// Serves `driver` on a unix socket at `path` (replacing a stale socket file).
pub fn serve(path: &Path, driver: Arc<FakeDriver>) -> Server {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path).expect("bind test socket");
    let (tx, rx) = oneshot::channel::<()>();
    let service = Service(driver);
    let task = tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(IdentityServer::new(service.clone()))
            .add_service(ControllerServer::new(service))
            .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                let _ = rx.await;
            })
            .await
            .expect("test server");
    });
    Server {
        path: path.to_path_buf(),
        shutdown: Some(tx),
        task,
    }
}

impl Server {
    /// Stops serving, waits until the server has closed its connections, removes the socket.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = (&mut self.task).await;
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A socket that accepts connections and never answers a byte, so only the client's own
/// deadline can end a call.
pub fn serve_black_hole(path: &Path) -> JoinHandle<()> {
    let listener = UnixListener::bind(path).expect("bind test socket");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
            });
        }
    })
}

/// Collects formatted log lines of the current thread while the guard lives.
#[derive(Clone, Default)]
pub struct LogCapture(Arc<Mutex<Vec<u8>>>);

impl LogCapture {
    pub fn install(&self) -> tracing::subscriber::DefaultGuard {
        keep_two_dispatchers_registered();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::TRACE)
            .with_writer(self.clone())
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    pub fn clear(&self) {
        self.0.lock().unwrap().clear();
    }
}

/// tracing-core decides callsite interest against the *calling thread's* default subscriber
/// whenever only one dispatcher is registered. Tests run in parallel threads, so another test's
/// thread (with no subscriber) could then mark callsites "never" for the capture too, and the
/// capture silently missed lines. A second dispatcher that lives for the whole process keeps
/// tracing-core asking every registered dispatcher; its "never" combined with the capture's
/// "always" makes each event ask its own thread's subscriber.
fn keep_two_dispatchers_registered() {
    static KEEPER: std::sync::OnceLock<tracing::Dispatch> = std::sync::OnceLock::new();
    KEEPER.get_or_init(|| tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default()));
}

impl Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogCapture {
    type Writer = LogCapture;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}
