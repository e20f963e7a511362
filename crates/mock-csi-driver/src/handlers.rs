//! Each RPC as a plain function from the request (and the pools) to a response or a status.
//! The gRPC services in `service.rs` only add faults, locking and the call log around these.

use std::collections::{BTreeMap, HashMap};

use csi::v1::controller_service_capability::rpc::Type as CtrlCap;
use csi::v1::plugin_capability::service::Type as PluginCap;
use csi::v1::validate_volume_capabilities_response::Confirmed;
use csi::v1::volume_capability::access_mode::Mode;
use csi::v1::*;
use tonic::{Code, Status};

use crate::pools::{CreateRequest, PoolError, Pools, Source, Volume};
use crate::spec::Segment;

/// Everything the driver answers from its flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverConfig {
    pub driver_name: String,
    pub max_volume_size: Option<i64>,
    pub node_id: String,
    pub node_topology: Segment,
    /// With no `node_topology`: NodeGetInfo names an empty topology rather than none.
    pub empty_node_topology: bool,
    pub publish_unpublish: bool,
    pub single_node_multi_writer: bool,
    pub modify_volume: bool,
    /// Advertise CLONE_VOLUME and accept a volume as CreateVolume's content source.
    pub clone_volume: bool,
    /// A broken driver: clones are made but CreateVolume answers without `content_source`.
    pub omit_content_source: bool,
    /// Advertise CREATE_DELETE_SNAPSHOT and accept any snapshot id as CreateVolume's content
    /// source (restores; the mock takes no snapshots itself).
    pub restore_snapshots: bool,
    pub no_topology: bool,
    pub no_capacity: bool,
    /// Access modes this driver refuses (INVALID_ARGUMENT), to test how a CO reports it.
    pub reject_access_modes: Vec<Mode>,
}

impl Default for DriverConfig {
    fn default() -> Self {
        Self {
            driver_name: "mock.csi.test".into(),
            max_volume_size: None,
            node_id: "mock-node".into(),
            node_topology: Segment::new(),
            empty_node_topology: false,
            publish_unpublish: false,
            single_node_multi_writer: false,
            modify_volume: false,
            clone_volume: false,
            omit_content_source: false,
            restore_snapshots: false,
            no_topology: false,
            no_capacity: false,
            reject_access_modes: Vec::new(),
        }
    }
}

/// The `kind` parameter that selects pools.
pub const KIND_PARAMETER: &str = "kind";

/// The gRPC status for a pool error.
pub fn pool_status(err: &PoolError) -> Status {
    let code = match err {
        PoolError::InvalidRange { .. }
        | PoolError::UnknownKind { .. }
        | PoolError::NegativeMaxEntries(_) => Code::InvalidArgument,
        PoolError::AlreadyExists { .. } | PoolError::SourceMismatch { .. } => Code::AlreadyExists,
        PoolError::NoMatchingPool { .. } | PoolError::Exhausted { .. } => Code::ResourceExhausted,
        PoolError::InvalidToken(_) => Code::Aborted,
        PoolError::NotFound(_) | PoolError::SourceNotFound(_) => Code::NotFound,
    };
    Status::new(code, err.to_string())
}

fn invalid(message: impl Into<String>) -> Status {
    Status::invalid_argument(message)
}

pub fn plugin_info(cfg: &DriverConfig) -> GetPluginInfoResponse {
    GetPluginInfoResponse {
        name: cfg.driver_name.clone(),
        vendor_version: env!("CARGO_PKG_VERSION").into(),
        manifest: HashMap::new(),
    }
}

/// Whether VOLUME_ACCESSIBILITY_CONSTRAINTS is advertised.
pub fn advertises_topology(cfg: &DriverConfig, pools: &Pools) -> bool {
    pools.has_topology() && !cfg.no_topology
}

pub fn plugin_capabilities(cfg: &DriverConfig, pools: &Pools) -> GetPluginCapabilitiesResponse {
    let mut types = vec![PluginCap::ControllerService];
    if advertises_topology(cfg, pools) {
        types.push(PluginCap::VolumeAccessibilityConstraints);
    }
    let capabilities = types
        .into_iter()
        .map(|t| PluginCapability {
            r#type: Some(plugin_capability::Type::Service(
                plugin_capability::Service { r#type: t.into() },
            )),
        })
        .collect();
    GetPluginCapabilitiesResponse { capabilities }
}

pub fn controller_capabilities(cfg: &DriverConfig) -> ControllerGetCapabilitiesResponse {
    let optional = [
        (!cfg.no_capacity, CtrlCap::GetCapacity),
        (cfg.publish_unpublish, CtrlCap::PublishUnpublishVolume),
        (cfg.single_node_multi_writer, CtrlCap::SingleNodeMultiWriter),
        (cfg.modify_volume, CtrlCap::ModifyVolume),
        (cfg.clone_volume, CtrlCap::CloneVolume),
        (cfg.restore_snapshots, CtrlCap::CreateDeleteSnapshot),
    ];
    let types = [CtrlCap::CreateDeleteVolume, CtrlCap::ListVolumes]
        .into_iter()
        .chain(optional.into_iter().filter(|(on, _)| *on).map(|(_, t)| t));
    let capabilities = types
        .map(|t| ControllerServiceCapability {
            r#type: Some(controller_service_capability::Type::Rpc(
                controller_service_capability::Rpc { r#type: t.into() },
            )),
        })
        .collect();
    ControllerGetCapabilitiesResponse { capabilities }
}

pub fn node_info(cfg: &DriverConfig) -> NodeGetInfoResponse {
    NodeGetInfoResponse {
        node_id: cfg.node_id.clone(),
        max_volumes_per_node: 0,
        accessible_topology: (!cfg.node_topology.is_empty() || cfg.empty_node_topology)
            .then(|| topology(&cfg.node_topology)),
    }
}

pub fn node_capabilities() -> NodeGetCapabilitiesResponse {
    NodeGetCapabilitiesResponse {
        capabilities: Vec::new(),
    }
}

/// Why a volume capability is not supported, or `Ok` if it is.
pub fn check_capability(cap: &VolumeCapability, cfg: &DriverConfig) -> Result<(), String> {
    if cap.access_type.is_none() {
        return Err("volume capability has no access type (block or mount)".into());
    }
    let mode = cap
        .access_mode
        .as_ref()
        .ok_or("volume capability has no access mode")?
        .mode;
    match Mode::try_from(mode) {
        Ok(Mode::Unknown) | Err(_) => Err(format!("access mode {mode} is not a known mode")),
        Ok(m @ (Mode::SingleNodeSingleWriter | Mode::SingleNodeMultiWriter))
            if !cfg.single_node_multi_writer =>
        {
            Err(format!(
                "access mode {} needs SINGLE_NODE_MULTI_WRITER (--single-node-multi-writer)",
                m.as_str_name()
            ))
        }
        Ok(m) if cfg.reject_access_modes.contains(&m) => Err(format!(
            "access mode {} is not supported by this driver",
            m.as_str_name()
        )),
        Ok(_) => Ok(()),
    }
}

fn check_capabilities(caps: &[VolumeCapability], cfg: &DriverConfig) -> Result<(), Status> {
    if caps.is_empty() {
        return Err(invalid("volume_capabilities must not be empty"));
    }
    caps.iter()
        .try_for_each(|c| check_capability(c, cfg))
        .map_err(invalid)
}

fn topology(segment: &Segment) -> Topology {
    Topology {
        segments: segment
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }
}

fn segment(topology: &Topology) -> Segment {
    topology
        .segments
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn kind_of(parameters: &HashMap<String, String>) -> String {
    parameters.get(KIND_PARAMETER).cloned().unwrap_or_default()
}

fn to_hash(map: BTreeMap<String, String>) -> HashMap<String, String> {
    map.into_iter().collect()
}

/// The content source naming volume `id`.
pub fn volume_source(id: &str) -> VolumeContentSource {
    VolumeContentSource {
        r#type: Some(volume_content_source::Type::Volume(
            volume_content_source::VolumeSource {
                volume_id: id.to_owned(),
            },
        )),
    }
}

/// The content source naming what `source` names.
pub fn content_source(source: &Source) -> VolumeContentSource {
    match source {
        Source::Volume(id) => volume_source(id),
        Source::Snapshot(id) => VolumeContentSource {
            r#type: Some(volume_content_source::Type::Snapshot(
                volume_content_source::SnapshotSource {
                    snapshot_id: id.to_owned(),
                },
            )),
        },
    }
}

/// The CSI form of a volume. A clone or restore carries its source (also in ListVolumes, so
/// tests can see where a volume came from).
pub fn csi_volume(v: &Volume) -> csi::v1::Volume {
    csi::v1::Volume {
        capacity_bytes: v.capacity,
        volume_id: v.id.clone(),
        volume_context: to_hash(v.context()),
        content_source: v.source.as_ref().map(content_source),
        accessible_topology: if v.segment.is_empty() {
            Vec::new()
        } else {
            vec![topology(&v.segment)]
        },
    }
}

/// The pool request for a CreateVolume call, after the checks the CSI spec asks for.
pub fn create_request(
    req: &CreateVolumeRequest,
    cfg: &DriverConfig,
) -> Result<CreateRequest, Status> {
    if req.name.is_empty() {
        return Err(invalid("name must not be empty"));
    }
    check_capabilities(&req.volume_capabilities, cfg)?;
    let source = fill_source(req.volume_content_source.as_ref(), cfg)?;
    let range = req.capacity_range.unwrap_or_default();
    let reqs = req.accessibility_requirements.clone().unwrap_or_default();
    Ok(CreateRequest {
        name: req.name.clone(),
        kind: kind_of(&req.parameters),
        required_bytes: range.required_bytes,
        limit_bytes: range.limit_bytes,
        preferred: reqs.preferred.iter().map(segment).collect(),
        requisite: reqs.requisite.iter().map(segment).collect(),
        mutable_parameters: req.mutable_parameters.clone().into_iter().collect(),
        source,
    })
}

/// What to fill the volume from, if anything; the errors a driver without the capability
/// gives.
fn fill_source(
    source: Option<&VolumeContentSource>,
    cfg: &DriverConfig,
) -> Result<Option<Source>, Status> {
    use volume_content_source::Type;
    let Some(source) = source else {
        return Ok(None);
    };
    match &source.r#type {
        None => Err(invalid(
            "volume_content_source has no type (snapshot or volume)",
        )),
        Some(Type::Snapshot(_)) if !cfg.restore_snapshots => Err(invalid(
            "snapshots are not supported (no CREATE_DELETE_SNAPSHOT: --restore-snapshots)",
        )),
        Some(Type::Snapshot(s)) if s.snapshot_id.is_empty() => Err(invalid(
            "volume_content_source.snapshot.snapshot_id must not be empty",
        )),
        Some(Type::Snapshot(s)) => Ok(Some(Source::Snapshot(s.snapshot_id.clone()))),
        Some(Type::Volume(_)) if !cfg.clone_volume => Err(invalid(
            "cloning is not supported (CLONE_VOLUME is off: --clone-volume)",
        )),
        Some(Type::Volume(v)) if v.volume_id.is_empty() => Err(invalid(
            "volume_content_source.volume.volume_id must not be empty",
        )),
        Some(Type::Volume(v)) => Ok(Some(Source::Volume(v.volume_id.clone()))),
    }
}

pub fn create_volume(
    pools: &mut Pools,
    cfg: &DriverConfig,
    req: &CreateVolumeRequest,
) -> Result<CreateVolumeResponse, Status> {
    let request = create_request(req, cfg)?;
    let (volume, _) = pools.create(&request).map_err(|e| pool_status(&e))?;
    let mut volume = csi_volume(&volume);
    if cfg.omit_content_source {
        volume.content_source = None;
    }
    Ok(CreateVolumeResponse {
        volume: Some(volume),
    })
}

pub fn delete_volume(
    pools: &mut Pools,
    req: &DeleteVolumeRequest,
) -> Result<DeleteVolumeResponse, Status> {
    if req.volume_id.is_empty() {
        return Err(invalid("volume_id must not be empty"));
    }
    // Unknown ids succeed: deletion is idempotent in CSI.
    pools.delete(&req.volume_id);
    Ok(DeleteVolumeResponse {})
}

pub fn validate_capabilities(
    pools: &Pools,
    cfg: &DriverConfig,
    req: &ValidateVolumeCapabilitiesRequest,
) -> Result<ValidateVolumeCapabilitiesResponse, Status> {
    if req.volume_id.is_empty() {
        return Err(invalid("volume_id must not be empty"));
    }
    if req.volume_capabilities.is_empty() {
        return Err(invalid("volume_capabilities must not be empty"));
    }
    if pools.get(&req.volume_id).is_none() {
        return Err(pool_status(&PoolError::NotFound(req.volume_id.clone())));
    }
    let unsupported = req
        .volume_capabilities
        .iter()
        .find_map(|c| check_capability(c, cfg).err());
    Ok(match unsupported {
        Some(message) => ValidateVolumeCapabilitiesResponse {
            confirmed: None,
            message,
        },
        None => ValidateVolumeCapabilitiesResponse {
            confirmed: Some(Confirmed {
                volume_context: req.volume_context.clone(),
                volume_capabilities: req.volume_capabilities.clone(),
                parameters: req.parameters.clone(),
                mutable_parameters: req.mutable_parameters.clone(),
            }),
            message: String::new(),
        },
    })
}

pub fn list_volumes(
    pools: &Pools,
    req: &ListVolumesRequest,
) -> Result<ListVolumesResponse, Status> {
    let (page, next) = pools
        .list(req.max_entries, &req.starting_token)
        .map_err(|e| pool_status(&e))?;
    Ok(ListVolumesResponse {
        entries: page
            .into_iter()
            .map(|v| list_volumes_response::Entry {
                volume: Some(csi_volume(v)),
                status: None,
            })
            .collect(),
        next_token: next.unwrap_or_default(),
    })
}

pub fn get_capacity(
    pools: &Pools,
    cfg: &DriverConfig,
    req: &GetCapacityRequest,
) -> Result<GetCapacityResponse, Status> {
    if cfg.no_capacity {
        return Err(Status::unimplemented("GET_CAPACITY is off (--no-capacity)"));
    }
    let kind = kind_of(&req.parameters);
    let wanted = req.accessible_topology.as_ref().map(segment);
    Ok(GetCapacityResponse {
        available_capacity: pools.capacity(&kind, wanted.as_ref()),
        maximum_volume_size: cfg.max_volume_size,
        minimum_volume_size: None,
    })
}

pub fn modify_volume(
    pools: &mut Pools,
    cfg: &DriverConfig,
    req: &ControllerModifyVolumeRequest,
) -> Result<ControllerModifyVolumeResponse, Status> {
    if !cfg.modify_volume {
        return Err(Status::unimplemented(
            "MODIFY_VOLUME is off (--modify-volume)",
        ));
    }
    if req.volume_id.is_empty() {
        return Err(invalid("volume_id must not be empty"));
    }
    let params = req.mutable_parameters.clone().into_iter().collect();
    pools
        .modify(&req.volume_id, params)
        .map_err(|e| pool_status(&e))?;
    Ok(ControllerModifyVolumeResponse {})
}

#[cfg(test)]
mod tests;
