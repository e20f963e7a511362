//! csi-driver-host-path's `hostpathplugin` (built by `cargo xtask testenv build` from the
//! third-party source) as a guarded child process, with readers for its ground truth: the
//! state file and the gRPC calls it logs.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;

use crate::error::IoContext;
use crate::process::{Process, try_spawn};
use crate::{Error, paths, socket};

/// The topology key the plugin reports (`TopologyKeyNode` in its source).
pub const HOSTPATH_TOPOLOGY_KEY: &str = "topology.hostpath.csi/node";

/// One volume in the plugin's `state.json` (the fields tests look at).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct HostpathVolume {
    pub vol_name: String,
    #[serde(rename = "VolID")]
    pub vol_id: String,
    pub vol_size: i64,
    /// 0 = mount, 1 = block.
    pub vol_access_type: i32,
    /// The `kind` it was created for (`--capacity=<kind>=...`).
    pub kind: String,
    /// Where the volume's data lives (a directory for mount volumes).
    #[serde(default)]
    pub vol_path: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct State {
    #[serde(default)]
    volumes: Option<Vec<HostpathVolume>>,
}

/// A running `hostpathplugin` serving one node: socket `<dir>/csi.sock`, state in
/// `<dir>/state/state.json`, log `<dir>/hostpathplugin.log` (`--v=5`, so every gRPC call is
/// logged as one JSON line).
#[derive(Debug)]
pub struct HostpathPlugin {
    pub socket: PathBuf,
    pub state_dir: PathBuf,
    pub node_id: String,
    process: Process,
}

impl HostpathPlugin {
    /// Starts the plugin as driver `driver` on node `node_id` with `args` added (e.g.
    /// `--capacity=fast=10Gi`), and waits for its socket. Use one directory per plugin.
    ///
    /// # Panics
    /// When the binary is missing or the socket does not appear.
    pub fn start(dir: &Path, driver: &str, node_id: &str, args: &[&str]) -> HostpathPlugin {
        Self::try_start(dir, driver, node_id, args)
            .unwrap_or_else(|e| panic!("hostpathplugin: {e}"))
    }

    pub fn try_start(
        dir: &Path,
        driver: &str,
        node_id: &str,
        args: &[&str],
    ) -> Result<HostpathPlugin, Error> {
        let binary = paths::try_go_binary("hostpathplugin")?;
        let state_dir = dir.join("state");
        fs::create_dir_all(&state_dir).ctx(|| format!("creating {}", state_dir.display()))?;
        let socket = dir.join("csi.sock");
        socket::remove_stale_socket(&socket)?;
        let mut cmd = Command::new(binary);
        cmd.arg(format!("--endpoint=unix://{}", socket.display()))
            .arg(format!("--drivername={driver}"))
            .arg(format!("--nodeid={node_id}"))
            .arg(format!("--statedir={}", state_dir.display()))
            .arg("--v=5")
            .args(args);
        let mut process = try_spawn("hostpathplugin", cmd, dir)?;
        socket::wait_for_socket(&mut process, &socket)?;
        Ok(HostpathPlugin {
            socket,
            state_dir,
            node_id: node_id.to_string(),
            process,
        })
    }

    /// `unix://<socket>`, the form `--csi-address` and CSI clients take.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// The volumes in the plugin's state file now (none before the first one is created).
    ///
    /// # Panics
    /// When the file exists but cannot be read, or stays unparsable for two seconds.
    pub fn volumes(&self) -> Vec<HostpathVolume> {
        read_hostpath_volumes(&self.state_dir).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Every gRPC call the plugin logged, in order: `{"Method", "Request", "Response",
    /// "Error", ...}` as the plugin wrote them.
    pub fn calls(&self) -> Vec<serde_json::Value> {
        // The whole log: `log_tail` reads only its end.
        parse_calls(&fs::read_to_string(self.process.log_path()).unwrap_or_default())
    }

    /// The logged calls of one method, by its last path element (e.g. `"CreateVolume"`).
    pub fn calls_of(&self, method: &str) -> Vec<serde_json::Value> {
        let suffix = format!("/{method}");
        self.calls()
            .into_iter()
            .filter(|c| c["Method"].as_str().is_some_and(|m| m.ends_with(&suffix)))
            .collect()
    }

    pub fn log_path(&self) -> &Path {
        self.process.log_path()
    }

    pub fn process(&mut self) -> &mut Process {
        &mut self.process
    }
}

/// The volumes in the state file of a plugin started with `--statedir=<state_dir>` (none
/// before the first one is created).
pub fn read_hostpath_volumes(state_dir: &Path) -> Result<Vec<HostpathVolume>, Error> {
    let path = state_dir.join("state.json");
    // The plugin rewrites the file in place (truncate, then write), so a read can land
    // between the two and see it empty or cut short: read again until it parses.
    let mut attempts = 0;
    loop {
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(format!("reading {}", path.display()), e)),
        };
        match parse_state(&text) {
            Ok(volumes) => return Ok(volumes),
            Err(_) if attempts < 100 => {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => {
                return Err(Error::NotReady(format!(
                    "{} stays unparsable: {e}",
                    path.display()
                )));
            }
        }
    }
}

fn parse_state(text: &str) -> Result<Vec<HostpathVolume>, serde_json::Error> {
    let state: State = serde_json::from_str(text)?;
    Ok(state.volumes.unwrap_or_default())
}

/// The JSON object at the end of each klog line that carries one (`{"Method":...}`).
fn parse_calls(log: &str) -> Vec<serde_json::Value> {
    log.lines()
        .filter_map(|l| l.find("{\"Method\":").map(|i| &l[i..]))
        .filter_map(|json| serde_json::from_str(json).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_file_parsing() {
        let text = r#"{"Volumes":[{"VolName":"pvc-1","VolID":"abc","VolSize":1073741824,
            "VolPath":"/x","VolAccessType":1,"ParentVolID":"","ParentSnapID":"",
            "Ephemeral":false,"NodeID":"n1","Kind":"fast","ReadOnlyAttach":false,
            "Attached":false,"Staged":null,"Published":null}],"Snapshots":null}"#;
        let vols = parse_state(text).unwrap();
        assert_eq!(vols.len(), 1);
        assert_eq!(vols[0].vol_id, "abc");
        assert_eq!(vols[0].vol_access_type, 1);
        assert_eq!(vols[0].kind, "fast");
        assert_eq!(vols[0].vol_path, "/x");
        assert!(parse_state(r#"{"Volumes":null}"#).unwrap().is_empty());
        assert!(parse_state("{").is_err());
    }

    #[test]
    fn call_log_parsing() {
        let log = "I1125 02:00:00.000 1 server.go:102] GRPC request: {}\n\
            I1125 02:00:00.001 1 server.go:152] {\"Method\":\"/csi.v1.Controller/CreateVolume\",\"Error\":\"\"}\n\
            I1125 02:00:00.002 1 server.go:152] {\"Method\":\"/csi.v1.Identity/Probe\",\"Err\n";
        let calls = parse_calls(log);
        assert_eq!(calls.len(), 1, "{calls:?}");
        assert_eq!(calls[0]["Method"], "/csi.v1.Controller/CreateVolume");
    }
}
