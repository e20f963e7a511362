//! The gRPC services: fault injection, locking, the stderr line and the call log around the
//! plain handlers.

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use csi::v1::controller_server::Controller;
use csi::v1::identity_server::Identity;
use csi::v1::node_server::Node;
use csi::v1::*;
use jiff::Timestamp;
use parking_lot::Mutex;
use tonic::{Request, Response, Status};

use crate::calllog::{CallLog, CallRecord};
use crate::codes::code_name;
use crate::faults::{FaultAction, FaultFile, Reply};
use crate::handlers::{self, DriverConfig};
use crate::pools::Pools;

/// The driver: Identity, Controller and Node in one cheaply clonable value.
#[derive(Clone)]
pub struct MockDriver {
    inner: Arc<Inner>,
}

struct Inner {
    cfg: DriverConfig,
    pools: Mutex<Pools>,
    faults: Mutex<FaultFile>,
    log: Option<CallLog>,
    in_flight: AtomicUsize,
    /// The volumes (by name) a CreateVolume or DeleteVolume is working on.
    busy: Mutex<HashSet<String>>,
}

/// Counts a call as in flight until dropped (also when the client cancels it).
struct InFlight<'a>(&'a AtomicUsize);

impl<'a> InFlight<'a> {
    fn enter(counter: &'a AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        Self(counter)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl MockDriver {
    pub fn new(
        cfg: DriverConfig,
        pools: Pools,
        faults: Option<PathBuf>,
        log: Option<CallLog>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                cfg,
                pools: Mutex::new(pools),
                faults: Mutex::new(FaultFile::new(faults)),
                log,
                in_flight: AtomicUsize::new(0),
                busy: Mutex::new(HashSet::new()),
            }),
        }
    }

    /// How many calls are being handled right now.
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight.load(Ordering::SeqCst)
    }

    /// Runs a Node RPC that only reads the pools (see `node_cleanup`).
    pub(crate) async fn node_undo<Req, Resp>(
        &self,
        method: &'static str,
        request: Request<Req>,
        handle: impl FnOnce(&Pools, &Req) -> Result<Resp, Status> + Send + 'static,
    ) -> Result<Response<Resp>, Status>
    where
        Req: prost::Message + 'static,
        Resp: prost::Message + 'static,
    {
        self.call(method, request, |d, r| handle(&d.pools.lock(), r))
            .await
    }

    /// Runs one RPC: injected delay or error first, then the handler, then an injected
    /// rewrite of its answer, then the logs. It runs on its own task, so a call whose client
    /// goes away (a killed provisioner, a client deadline) still runs to its end, as a real
    /// driver's backend would: the volume is made and the call logged, only the answer is lost.
    async fn call<Req, Resp>(
        &self,
        method: &'static str,
        request: Request<Req>,
        handle: impl FnOnce(&Inner, &Req) -> Result<Resp, Status> + Send + 'static,
    ) -> Result<Response<Resp>, Status>
    where
        Req: prost::Message + 'static,
        Resp: prost::Message + 'static,
    {
        let inner = self.inner.clone();
        let req = request.into_inner();
        tokio::spawn(async move { run_call(&inner, method, req, handle).await })
            .await
            .unwrap_or_else(|e| Err(Status::internal(format!("mock driver task failed: {e}"))))
            .map(Response::new)
    }
}

/// The body of [`MockDriver::call`], on its own task.
async fn run_call<Req, Resp>(
    inner: &Inner,
    method: &'static str,
    req: Req,
    handle: impl FnOnce(&Inner, &Req) -> Result<Resp, Status>,
) -> Result<Resp, Status>
where
    Req: prost::Message + 'static,
    Resp: prost::Message + 'static,
{
    let _in_flight = InFlight::enter(&inner.in_flight);
    let time = Timestamp::now();
    let started = Instant::now();
    let result = match Busy::enter(inner, &req) {
        // Refused before it reaches the "backend": no fault is used up.
        Err(aborted) => Err(aborted),
        Ok(_busy) => match next_fault(inner, method, &req) {
            Some(action) => {
                if !action.delay.is_zero() {
                    tokio::time::sleep(action.delay).await;
                }
                match action.error {
                    Some((code, message)) => Err(Status::new(code, message)),
                    None => handle(inner, &req).map(|mut resp| {
                        if let Some(reply) = &action.reply {
                            rewrite(&mut resp, reply);
                        }
                        resp
                    }),
                }
            }
            None => handle(inner, &req),
        },
    };
    let duration = started.elapsed();
    // Only the method and outcome reach stderr: requests may carry secrets.
    match &result {
        Ok(_) => tracing::info!(method, ms = duration.as_millis() as u64, "OK"),
        Err(s) => tracing::info!(
            method,
            ms = duration.as_millis() as u64,
            code = code_name(s.code()),
            message = s.message(),
            "failed"
        ),
    }
    if let Some(log) = &inner.log {
        let codec = log.codec();
        log.write(&CallRecord {
            time,
            method: method.to_owned(),
            duration,
            request: codec.to_json(&format!("csi.v1.{method}Request"), &req),
            outcome: match &result {
                Ok(resp) => Ok(codec.to_json(&format!("csi.v1.{method}Response"), resp)),
                Err(s) => Err((s.code(), s.message().to_owned())),
            },
        });
    }
    result
}

/// A volume a call works on until dropped. As the CSI spec asks of a plugin, a second
/// CreateVolume or DeleteVolume for a volume with a call pending is refused with ABORTED
/// rather than run alongside it: otherwise a call the client gave up on (a timeout, a killed
/// provisioner) could make its volume again after a later call deleted it.
struct Busy<'a> {
    set: &'a Mutex<HashSet<String>>,
    name: String,
}

impl<'a> Busy<'a> {
    /// `Ok(None)`: the call works on no volume.
    fn enter(inner: &'a Inner, req: &dyn Any) -> Result<Option<Self>, Status> {
        let name = if let Some(r) = req.downcast_ref::<CreateVolumeRequest>() {
            r.name.clone()
        } else if let Some(r) = req.downcast_ref::<DeleteVolumeRequest>() {
            // By name, so that a delete waits for a create of the same volume.
            let pools = inner.pools.lock();
            pools
                .get(&r.volume_id)
                .map_or_else(|| r.volume_id.clone(), |v| v.name.clone())
        } else {
            return Ok(None);
        };
        if !inner.busy.lock().insert(name.clone()) {
            return Err(Status::aborted(format!(
                "an operation for volume {name} is already in progress"
            )));
        }
        Ok(Some(Busy {
            set: &inner.busy,
            name,
        }))
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.set.lock().remove(&self.name);
    }
}

/// The fault for this call, if any (the lock is let go at once: the call may wait).
fn next_fault(inner: &Inner, method: &str, req: &dyn Any) -> Option<FaultAction> {
    inner.faults.lock().next(method, parameters(req))
}

/// The `parameters` of the requests that have them, for faults with `match_parameters`.
fn parameters(req: &dyn Any) -> Option<&HashMap<String, String>> {
    if let Some(r) = req.downcast_ref::<CreateVolumeRequest>() {
        Some(&r.parameters)
    } else if let Some(r) = req.downcast_ref::<GetCapacityRequest>() {
        Some(&r.parameters)
    } else if let Some(r) = req.downcast_ref::<ValidateVolumeCapabilitiesRequest>() {
        Some(&r.parameters)
    } else {
        None
    }
}

/// Writes an injected `reply` over a successful answer (the faults file only accepts reply
/// fields of CreateVolume and GetCapacity).
fn rewrite(resp: &mut dyn Any, reply: &Reply) {
    if let Some(r) = resp.downcast_mut::<CreateVolumeResponse>() {
        reply.apply_to_volume(r.volume.get_or_insert_default());
    } else if let Some(r) = resp.downcast_mut::<GetCapacityResponse>() {
        reply.apply_to_capacity(r);
    }
}

#[tonic::async_trait]
impl Identity for MockDriver {
    async fn get_plugin_info(
        &self,
        request: Request<GetPluginInfoRequest>,
    ) -> Result<Response<GetPluginInfoResponse>, Status> {
        self.call("GetPluginInfo", request, |d, _| {
            Ok(handlers::plugin_info(&d.cfg))
        })
        .await
    }

    async fn get_plugin_capabilities(
        &self,
        request: Request<GetPluginCapabilitiesRequest>,
    ) -> Result<Response<GetPluginCapabilitiesResponse>, Status> {
        self.call("GetPluginCapabilities", request, |d, _| {
            Ok(handlers::plugin_capabilities(&d.cfg, &d.pools.lock()))
        })
        .await
    }

    async fn probe(
        &self,
        request: Request<ProbeRequest>,
    ) -> Result<Response<ProbeResponse>, Status> {
        self.call("Probe", request, |_, _| {
            Ok(ProbeResponse { ready: Some(true) })
        })
        .await
    }
}

#[tonic::async_trait]
impl Controller for MockDriver {
    async fn create_volume(
        &self,
        request: Request<CreateVolumeRequest>,
    ) -> Result<Response<CreateVolumeResponse>, Status> {
        self.call("CreateVolume", request, |d, r| {
            handlers::create_volume(&mut d.pools.lock(), &d.cfg, r)
        })
        .await
    }

    async fn delete_volume(
        &self,
        request: Request<DeleteVolumeRequest>,
    ) -> Result<Response<DeleteVolumeResponse>, Status> {
        self.call("DeleteVolume", request, |d, r| {
            handlers::delete_volume(&mut d.pools.lock(), r)
        })
        .await
    }

    async fn validate_volume_capabilities(
        &self,
        request: Request<ValidateVolumeCapabilitiesRequest>,
    ) -> Result<Response<ValidateVolumeCapabilitiesResponse>, Status> {
        self.call("ValidateVolumeCapabilities", request, |d, r| {
            handlers::validate_capabilities(&d.pools.lock(), &d.cfg, r)
        })
        .await
    }

    async fn list_volumes(
        &self,
        request: Request<ListVolumesRequest>,
    ) -> Result<Response<ListVolumesResponse>, Status> {
        self.call("ListVolumes", request, |d, r| {
            handlers::list_volumes(&d.pools.lock(), r)
        })
        .await
    }

    async fn get_capacity(
        &self,
        request: Request<GetCapacityRequest>,
    ) -> Result<Response<GetCapacityResponse>, Status> {
        self.call("GetCapacity", request, |d, r| {
            handlers::get_capacity(&d.pools.lock(), &d.cfg, r)
        })
        .await
    }

    async fn controller_get_capabilities(
        &self,
        request: Request<ControllerGetCapabilitiesRequest>,
    ) -> Result<Response<ControllerGetCapabilitiesResponse>, Status> {
        self.call("ControllerGetCapabilities", request, |d, _| {
            Ok(handlers::controller_capabilities(&d.cfg))
        })
        .await
    }

    async fn controller_modify_volume(
        &self,
        request: Request<ControllerModifyVolumeRequest>,
    ) -> Result<Response<ControllerModifyVolumeResponse>, Status> {
        self.call("ControllerModifyVolume", request, |d, r| {
            handlers::modify_volume(&mut d.pools.lock(), &d.cfg, r)
        })
        .await
    }
}

#[tonic::async_trait]
impl Node for MockDriver {
    async fn node_get_capabilities(
        &self,
        request: Request<NodeGetCapabilitiesRequest>,
    ) -> Result<Response<NodeGetCapabilitiesResponse>, Status> {
        self.call("NodeGetCapabilities", request, |_, _| {
            Ok(handlers::node_capabilities())
        })
        .await
    }

    async fn node_get_info(
        &self,
        request: Request<NodeGetInfoRequest>,
    ) -> Result<Response<NodeGetInfoResponse>, Status> {
        self.call("NodeGetInfo", request, |d, _| {
            Ok(handlers::node_info(&d.cfg))
        })
        .await
    }
}
