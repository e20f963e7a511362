//! Fault injection: a JSON file, re-read when it changes, that delays or fails chosen RPCs, or
//! rewrites a successful answer into nonsense.
//!
//! The format is documented in the crate docs. Parsing and the per-call decision are pure; only
//! [`FaultFile::next`] touches the file system.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use csi::v1::{GetCapacityResponse, Topology, Volume};
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

/// The `reply` fields each method's answer has.
const REPLY_FIELDS: [(&str, &[&str]); 2] = [
    (
        "CreateVolume",
        &[
            "volume_id",
            "capacity_bytes",
            "accessible_topology",
            "volume_context",
        ],
    ),
    (
        "GetCapacity",
        &["available_capacity", "maximum_volume_size"],
    ),
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFault {
    code: Option<String>,
    message: Option<String>,
    delay_ms: Option<u64>,
    delay_max_ms: Option<u64>,
    probability: Option<f64>,
    times: Option<u64>,
    match_parameters: Option<BTreeMap<String, String>>,
    reply: Option<Reply>,
}

/// What a fault writes over a successful answer: a driver that says something other than
/// what it did. Absent fields keep the real value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reply {
    /// CreateVolume: `volume.volume_id`.
    pub volume_id: Option<String>,
    /// CreateVolume: `volume.capacity_bytes`.
    pub capacity_bytes: Option<i64>,
    /// CreateVolume: `volume.accessible_topology`, replaced as a whole.
    pub accessible_topology: Option<Vec<BTreeMap<String, String>>>,
    /// CreateVolume: keys added to (or replaced in) `volume.volume_context`.
    pub volume_context: Option<BTreeMap<String, String>>,
    /// GetCapacity: `available_capacity`.
    pub available_capacity: Option<i64>,
    /// GetCapacity: `maximum_volume_size`.
    pub maximum_volume_size: Option<i64>,
}

impl Reply {
    /// The names of the fields that are set.
    fn fields(&self) -> Vec<&'static str> {
        [
            ("volume_id", self.volume_id.is_some()),
            ("capacity_bytes", self.capacity_bytes.is_some()),
            ("accessible_topology", self.accessible_topology.is_some()),
            ("volume_context", self.volume_context.is_some()),
            ("available_capacity", self.available_capacity.is_some()),
            ("maximum_volume_size", self.maximum_volume_size.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect()
    }

    /// Rewrites CreateVolume's volume.
    pub fn apply_to_volume(&self, volume: &mut Volume) {
        if let Some(id) = &self.volume_id {
            volume.volume_id.clone_from(id);
        }
        if let Some(bytes) = self.capacity_bytes {
            volume.capacity_bytes = bytes;
        }
        if let Some(topology) = &self.accessible_topology {
            volume.accessible_topology = topology
                .iter()
                .map(|segments| Topology {
                    segments: segments.clone().into_iter().collect(),
                })
                .collect();
        }
        if let Some(context) = &self.volume_context {
            volume.volume_context.extend(context.clone());
        }
    }

    /// Rewrites GetCapacity's answer.
    pub fn apply_to_capacity(&self, response: &mut GetCapacityResponse) {
        if let Some(available) = self.available_capacity {
            response.available_capacity = available;
        }
        if let Some(maximum) = self.maximum_volume_size {
            response.maximum_volume_size = Some(maximum);
        }
    }
}

/// One method's fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// `None` (or `OK`) means delay only, then handle normally.
    pub error: Option<(Code, String)>,
    pub delay: Duration,
    /// With a maximum, each call waits a uniformly random time in `delay..=delay_max`.
    pub delay_max: Option<Duration>,
    /// Applies to this share of the matching calls, in parts per million (`None`: all); a call
    /// it skips goes on to the next entry and does not count against `times`.
    pub chance_ppm: Option<u32>,
    /// Applies to this many matching calls after the file changed; `None` means every call.
    pub times: Option<u64>,
    /// Applies only to calls whose request `parameters` hold all of these.
    pub match_parameters: BTreeMap<String, String>,
    /// Rewrites the successful answer.
    pub reply: Option<Reply>,
}

impl Fault {
    fn matches(&self, parameters: Option<&HashMap<String, String>>) -> bool {
        self.match_parameters.iter().all(|(k, v)| {
            parameters
                .and_then(|p| p.get(k))
                .is_some_and(|got| got == v)
        })
    }
}

/// What to do with one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultAction {
    pub delay: Duration,
    pub error: Option<(Code, String)>,
    /// Applied to the answer when the call succeeds.
    pub reply: Option<Reply>,
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
    #[error(
        "faults file rewrites {field:?} of {method}'s reply, which has no such field (replies: {REPLY_FIELDS:?})"
    )]
    ReplyField { method: String, field: String },
    #[error(
        "faults file both fails {method} (code) and rewrites its reply; a failed call has no reply"
    )]
    ReplyAndError { method: String },
    #[error("faults file gives {method} a probability of {value}; it must be from 0 to 1")]
    Probability { method: String, value: String },
    #[error("faults file gives {method} a delay_max_ms below its delay_ms")]
    DelayRange { method: String },
}

/// The parsed faults plus how many calls each has already hit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultState {
    /// Per method, in file order: the first matching fault with calls left applies.
    faults: BTreeMap<String, Vec<Fault>>,
    used: HashMap<(String, usize), u64>,
}

/// Parses the faults file contents; an empty or whitespace-only file means no faults.
pub fn parse_faults(text: &str) -> Result<FaultState, FaultError> {
    if text.trim().is_empty() {
        return Ok(FaultState::default());
    }
    let json = |e: serde_json::Error| FaultError::Json(e.to_string());
    let raw: BTreeMap<String, serde_json::Value> = serde_json::from_str(text).map_err(json)?;
    let mut faults = BTreeMap::new();
    for (method, value) in raw {
        if !METHODS.contains(&method.as_str()) {
            return Err(FaultError::UnknownMethod(method));
        }
        // One fault, or a list of them (each usually with `match_parameters`).
        let list: Vec<RawFault> = match value {
            serde_json::Value::Array(_) => serde_json::from_value(value).map_err(json)?,
            _ => vec![serde_json::from_value(value).map_err(json)?],
        };
        let list = list
            .into_iter()
            .map(|raw| fault(&method, raw))
            .collect::<Result<Vec<_>, _>>()?;
        faults.insert(method, list);
    }
    Ok(FaultState {
        faults,
        used: HashMap::new(),
    })
}

fn fault(method: &str, raw: RawFault) -> Result<Fault, FaultError> {
    let code = match raw.code.as_deref() {
        None => None,
        Some(name) => Some(parse_code(name).ok_or_else(|| FaultError::UnknownCode {
            method: method.to_owned(),
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
    if let Some(reply) = &raw.reply {
        if error.is_some() {
            return Err(FaultError::ReplyAndError {
                method: method.to_owned(),
            });
        }
        let allowed = REPLY_FIELDS
            .iter()
            .find(|(m, _)| *m == method)
            .map_or(&[][..], |(_, fields)| *fields);
        if let Some(field) = reply.fields().into_iter().find(|f| !allowed.contains(f)) {
            return Err(FaultError::ReplyField {
                method: method.to_owned(),
                field: field.to_owned(),
            });
        }
    }
    let chance_ppm = match raw.probability {
        None => None,
        Some(p) if (0.0..=1.0).contains(&p) => Some((p * 1e6).round() as u32),
        Some(value) => {
            return Err(FaultError::Probability {
                method: method.to_owned(),
                value: value.to_string(),
            });
        }
    };
    let delay = Duration::from_millis(raw.delay_ms.unwrap_or(0));
    let delay_max = raw.delay_max_ms.map(Duration::from_millis);
    if delay_max.is_some_and(|max| max < delay) {
        return Err(FaultError::DelayRange {
            method: method.to_owned(),
        });
    }
    Ok(Fault {
        error,
        delay,
        delay_max,
        chance_ppm,
        times: raw.times,
        match_parameters: raw.match_parameters.unwrap_or_default(),
        reply: raw.reply,
    })
}

impl FaultState {
    /// The action for the next call of `method` whose request carries `parameters` (`None`
    /// for requests without any), counting it against that fault's `times`.
    pub fn next(
        &mut self,
        method: &str,
        parameters: Option<&HashMap<String, String>>,
    ) -> Option<FaultAction> {
        self.next_with(method, parameters, &mut || rand::random::<f64>())
    }

    /// [`FaultState::next`] with the dice given: `dice()` returns a number in `[0, 1)` for
    /// each probability and each random delay.
    pub fn next_with(
        &mut self,
        method: &str,
        parameters: Option<&HashMap<String, String>>,
        dice: &mut dyn FnMut() -> f64,
    ) -> Option<FaultAction> {
        let list = self.faults.get(method)?;
        for (index, fault) in list.iter().enumerate() {
            if !fault.matches(parameters) {
                continue;
            }
            let used = self.used.entry((method.to_owned(), index)).or_insert(0);
            if fault.times.is_some_and(|times| *used >= times) {
                continue;
            }
            if fault
                .chance_ppm
                .is_some_and(|ppm| dice() * 1e6 >= f64::from(ppm))
            {
                continue;
            }
            *used += 1;
            let delay = match fault.delay_max {
                Some(max) => fault.delay + (max - fault.delay).mul_f64(dice()),
                None => fault.delay,
            };
            return Some(FaultAction {
                delay,
                error: fault.error.clone(),
                reply: fault.reply.clone(),
            });
        }
        None
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

    /// Re-reads the file if it changed, then decides the fault for this call of `method`
    /// (see [`FaultState::next`]).
    pub fn next(
        &mut self,
        method: &str,
        parameters: Option<&HashMap<String, String>>,
    ) -> Option<FaultAction> {
        self.refresh();
        self.state.next(method, parameters)
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
