//! The command line. Parsing is pure: argument strings in, [`Config`] or a clap error out.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Parser;
use csi::v1::volume_capability::access_mode::Mode;

use crate::handlers::DriverConfig;
use crate::spec::{PoolSpec, Segment, default_pool, parse_endpoint, parse_pool, parse_segment};
use quantity::parse_quantity;

/// Everything the binary needs to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub socket: PathBuf,
    pub driver: DriverConfig,
    /// Never empty: without `--pool` it holds [`default_pool`].
    pub pools: Vec<PoolSpec>,
    pub faults: Option<PathBuf>,
    pub call_log: Option<PathBuf>,
    /// Thin pools: CreateVolume may exceed a pool's free space.
    pub overcommit: bool,
    /// `--volume-id-format`.
    pub volume_id_format: Option<String>,
    /// `--socket-outage-ms`: how long SIGUSR1 takes the socket away.
    pub socket_outage: std::time::Duration,
}

/// A CSI driver for tests: in-memory pools per topology segment, fault injection, a call log.
#[derive(Debug, Parser)]
#[command(name = "mock-csi-driver", version)]
struct Args {
    /// Unix socket to serve on: unix:///path/to/csi.sock or /path/to/csi.sock.
    #[arg(long, value_name = "ENDPOINT", value_parser = endpoint_arg)]
    endpoint: PathBuf,
    /// CSI driver name returned by GetPluginInfo.
    #[arg(long, value_name = "NAME", default_value = "mock.csi.test", value_parser = driver_name_arg)]
    driver_name: String,
    /// Storage pool [KIND@]SEGMENT:SIZE, repeatable (default: one 1Pi pool, no topology).
    #[arg(long, value_name = "SPEC", value_parser = pool_arg)]
    pool: Vec<PoolSpec>,
    /// GetCapacity maximum_volume_size, reported verbatim (a quantity such as 10Gi).
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    max_volume_size: Option<i64>,
    /// Thin pools: CreateVolume places a volume in a matching pool even without room
    /// (GetCapacity then reports 0 free for that pool).
    #[arg(long)]
    overcommit: bool,
    /// Node id returned by NodeGetInfo.
    #[arg(long, value_name = "ID", default_value = "mock-node", value_parser = non_empty_arg)]
    node_id: String,
    /// Topology returned by NodeGetInfo: k=v[,k=v].
    #[arg(long, value_name = "k=v[,k=v]", value_parser = segment_arg)]
    node_topology: Option<Segment>,
    /// Without --node-topology, NodeGetInfo names an empty topology instead of none (a
    /// driver that sets the field but no segments).
    #[arg(long)]
    empty_node_topology: bool,
    /// JSON fault injection file, re-read when it changes.
    #[arg(long, value_name = "FILE")]
    faults: Option<PathBuf>,
    /// On SIGUSR1 the socket goes away for this long (connections dropped, file removed),
    /// then comes back with the same volumes, as a driver container restarting.
    #[arg(long, value_name = "MS", default_value_t = 20_000)]
    socket_outage_ms: u64,
    /// Append one JSON line per call to this file.
    #[arg(long, value_name = "FILE")]
    call_log: Option<PathBuf>,
    /// Advertise PUBLISH_UNPUBLISH_VOLUME.
    #[arg(long)]
    publish_unpublish: bool,
    /// Advertise SINGLE_NODE_MULTI_WRITER (and accept its access modes).
    #[arg(long)]
    single_node_multi_writer: bool,
    /// Advertise MODIFY_VOLUME; ControllerModifyVolume records the parameters.
    #[arg(long)]
    modify_volume: bool,
    /// Advertise CLONE_VOLUME: CreateVolume accepts an existing volume as content source
    /// (unknown source: NOT_FOUND) and echoes it in the response.
    #[arg(long)]
    clone_volume: bool,
    /// Broken on purpose: clones are made but CreateVolume answers without content_source
    /// (ListVolumes still shows it). Needs --clone-volume.
    #[arg(long, requires = "clone_volume")]
    omit_content_source: bool,
    /// Advertise CREATE_DELETE_SNAPSHOT: CreateVolume accepts any snapshot id as content
    /// source and echoes it (the mock takes no snapshots; tests make the objects by hand).
    #[arg(long)]
    restore_snapshots: bool,
    /// Do not advertise VOLUME_ACCESSIBILITY_CONSTRAINTS even if pools have segments.
    #[arg(long)]
    no_topology: bool,
    /// Do not advertise GET_CAPACITY (GetCapacity then answers UNIMPLEMENTED).
    #[arg(long)]
    no_capacity: bool,
    /// Refuse volumes with this CSI access mode (e.g. MULTI_NODE_MULTI_WRITER), repeatable.
    #[arg(long, value_name = "MODE", value_parser = access_mode_arg)]
    reject_access_mode: Vec<Mode>,
    /// Volume ids shaped like a cloud driver's, e.g. `projects/p/zones/{segment}/disks/{name}`
    /// (`{seq}`, `{name}`, `{segment}` are replaced; default `mock-vol-{seq}`).
    #[arg(long, value_name = "FORMAT")]
    volume_id_format: Option<String>,
}

fn access_mode_arg(s: &str) -> Result<Mode, String> {
    Mode::from_str_name(s)
        .filter(|m| *m != Mode::Unknown)
        .ok_or_else(|| {
            format!("unknown CSI access mode {s:?}; expected e.g. MULTI_NODE_MULTI_WRITER")
        })
}

fn endpoint_arg(s: &str) -> Result<PathBuf, String> {
    parse_endpoint(s).map_err(|e| e.to_string())
}

fn pool_arg(s: &str) -> Result<PoolSpec, String> {
    parse_pool(s).map_err(|e| e.to_string())
}

fn segment_arg(s: &str) -> Result<Segment, String> {
    parse_segment(s).map_err(|e| e.to_string())
}

fn size_arg(s: &str) -> Result<i64, String> {
    parse_quantity(s).map_err(|e| crate::spec::size_problem(&e))
}

fn non_empty_arg(s: &str) -> Result<String, String> {
    if s.is_empty() {
        Err("must not be empty".into())
    } else {
        Ok(s.to_owned())
    }
}

/// CSI driver names: at most 63 characters, alphanumerics, '-', '.' and '_', starting and
/// ending with an alphanumeric.
fn driver_name_arg(s: &str) -> Result<String, String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
    let ends_ok = s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric());
    if s.len() <= 63 && ends_ok && s.chars().all(allowed) {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "{s:?} is not a CSI driver name (expected at most 63 alphanumerics, '-', '.', '_', \
             starting and ending alphanumeric, e.g. mock.csi.test)"
        ))
    }
}

/// Parses the full argument list (including the program name).
pub fn parse_args<I, T>(args: I) -> Result<Config, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let a = Args::try_parse_from(args)?;
    Ok(Config {
        socket: a.endpoint,
        driver: DriverConfig {
            driver_name: a.driver_name,
            max_volume_size: a.max_volume_size,
            node_id: a.node_id,
            node_topology: a.node_topology.unwrap_or_default(),
            empty_node_topology: a.empty_node_topology,
            publish_unpublish: a.publish_unpublish,
            single_node_multi_writer: a.single_node_multi_writer,
            reject_access_modes: a.reject_access_mode,
            modify_volume: a.modify_volume,
            clone_volume: a.clone_volume,
            omit_content_source: a.omit_content_source,
            restore_snapshots: a.restore_snapshots,
            no_topology: a.no_topology,
            no_capacity: a.no_capacity,
        },
        pools: if a.pool.is_empty() {
            vec![default_pool()]
        } else {
            a.pool
        },
        faults: a.faults,
        call_log: a.call_log,
        overcommit: a.overcommit,
        volume_id_format: a.volume_id_format,
        socket_outage: std::time::Duration::from_millis(a.socket_outage_ms),
    })
}

/// The one-line message printed for a usage error: clap's first paragraph joined into one
/// line, without its usage and help hints.
pub fn one_line(err: &clap::Error) -> String {
    let rendered = err.render().to_string();
    let line = rendered
        .lines()
        .map(str::trim)
        .skip_while(|l| l.is_empty())
        .take_while(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if line.is_empty() {
        "error: invalid command line".to_owned()
    } else {
        line
    }
}

#[cfg(test)]
mod tests;
