//! Fault injection: a JSON file, re-read when it changes, that delays or fails chosen RPCs.
//!
//! The format is documented in the crate docs. Parsing and the per-call decision are pure; only
//! [`FaultFile::next`] touches the file system.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use serde::Deserialize;
use thiserror::Error;
use tonic::Code;

use crate::codes::parse_code;

/// The RPC names a faults file may use as keys.
pub const METHODS: [&str; 14] = [
    "GetPluginInfo",
    "GetPluginCapabilities",
    "Probe",
    "CreateVolume",
    "DeleteVolume",
    "ValidateVolumeCapabilities",
    "ListVolumes",
    "GetCapacity",
    "ControllerGetCapabilities",
    "ControllerModifyVolume",
    "NodeGetCapabilities",
    "NodeGetInfo",
    "NodeUnpublishVolume",
    "NodeUnstageVolume",
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFault {
    code: Option<String>,
    message: Option<String>,
    delay_ms: Option<u64>,
    times: Option<u64>,
}

/// One method's fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// `None` (or `OK`) means delay only, then handle normally.
    pub error: Option<(Code, String)>,
    pub delay: Duration,
    /// Applies to this many calls after the file changed; `None` means every call.
    pub times: Option<u64>,
}

/// What to do with one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultAction {
    pub delay: Duration,
    pub error: Option<(Code, String)>,
}

/// Why a faults file was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FaultError {
    #[error(
        "faults file is not valid JSON of the form {{\"CreateVolume\": {{\"code\": \"Unavailable\", \"message\": \"..\", \"delay_ms\": 0, \"times\": 1}}}}: {0}"
    )]
    Json(String),
    #[error("faults file names unknown method {0:?} (expected one of {METHODS:?})")]
    UnknownMethod(String),
    #[error(
        "faults file gives unknown code {code:?} for {method} (expected a Go gRPC code name such as Unavailable)"
    )]
    UnknownCode { method: String, code: String },
}

/// The parsed faults plus how many calls each has already hit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultState {
    faults: BTreeMap<String, Fault>,
    used: HashMap<String, u64>,
}

/// Parses the faults file contents; an empty or whitespace-only file means no faults.
pub fn parse_faults(text: &str) -> Result<FaultState, FaultError> {
    if text.trim().is_empty() {
        return Ok(FaultState::default());
    }
    let raw: BTreeMap<String, RawFault> =
        serde_json::from_str(text).map_err(|e| FaultError::Json(e.to_string()))?;
    let mut faults = BTreeMap::new();
    for (method, raw) in raw {
        if !METHODS.contains(&method.as_str()) {
            return Err(FaultError::UnknownMethod(method));
        }
        let code = match raw.code.as_deref() {
            None => None,
            Some(name) => Some(parse_code(name).ok_or_else(|| FaultError::UnknownCode {
                method: method.clone(),
                code: name.to_owned(),
            })?),
        };
        let error = code.filter(|c| *c != Code::Ok).map(|c| {
            let message = raw
                .message
                .clone()
                .unwrap_or_else(|| format!("injected fault for {method}"));
            (c, message)
        });
        let fault = Fault {
            error,
            delay: Duration::from_millis(raw.delay_ms.unwrap_or(0)),
            times: raw.times,
        };
        faults.insert(method, fault);
    }
    Ok(FaultState {
        faults,
        used: HashMap::new(),
    })
}

impl FaultState {
    /// The action for the next call of `method`, counting it against `times`.
    pub fn next(&mut self, method: &str) -> Option<FaultAction> {
        let fault = self.faults.get(method)?;
        let used = self.used.entry(method.to_owned()).or_insert(0);
        if fault.times.is_some_and(|times| *used >= times) {
            return None;
        }
        *used += 1;
        Some(FaultAction {
            delay: fault.delay,
            error: fault.error.clone(),
        })
    }
}

/// What identifies one version of the file; any change resets the counters.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

/// The faults file on disk and the state parsed from its current version.
#[derive(Debug, Default)]
pub struct FaultFile {
    path: Option<PathBuf>,
    /// `None` while the file is missing.
    stamp: Option<Stamp>,
    state: FaultState,
}

impl FaultFile {
    pub fn new(path: Option<PathBuf>) -> Self {
        Self {
            path,
            ..Self::default()
        }
    }

    /// Re-reads the file if it changed, then decides the fault for this call of `method`.
    pub fn next(&mut self, method: &str) -> Option<FaultAction> {
        self.refresh();
        self.state.next(method)
    }

    fn refresh(&mut self) {
        use std::os::unix::fs::MetadataExt;
        let Some(path) = &self.path else { return };
        let stamp = std::fs::metadata(path).ok().map(|m| Stamp {
            modified: m.modified().ok(),
            len: m.len(),
            inode: m.ino(),
        });
        if stamp == self.stamp {
            return;
        }
        self.stamp = stamp;
        if self.stamp.is_none() {
            self.state = FaultState::default();
            return;
        }
        let parsed = std::fs::read_to_string(path)
            .map_err(|e| FaultError::Json(e.to_string()))
            .and_then(|text| parse_faults(&text));
        match parsed {
            Ok(state) => {
                tracing::info!(path = %path.display(), faults = ?state.faults.keys().collect::<Vec<_>>(), "loaded faults file");
                self.state = state;
            }
            // Keep the previous faults: a test may be half-way through writing the file, and
            // the finished write changes the stamp again.
            Err(e) => tracing::warn!(path = %path.display(), error = %e, "ignoring faults file"),
        }
    }
}

#[cfg(test)]
mod tests;
