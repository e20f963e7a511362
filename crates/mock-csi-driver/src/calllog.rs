//! The `--call-log` file: one JSON object per line and per call, written when the call ends.
//!
//! This is a test driver, so requests are recorded whole, secrets included: tests assert that
//! the provisioner passed them. The format is documented in the crate docs.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use jiff::Timestamp;
use parking_lot::Mutex;
use prost_reflect::{DescriptorPool, DynamicMessage, SerializeOptions};
use serde_json::{Value, json};
use thiserror::Error;
use tonic::Code;

use crate::codes::code_name;

/// Why the call log could not be set up.
#[derive(Debug, Error)]
pub enum CallLogError {
    #[error("cannot open call log {path}: {source}")]
    Open {
        path: String,
        source: std::io::Error,
    },
    #[error("the CSI descriptor set does not decode: {0}")]
    Descriptor(String),
}

/// Converts CSI messages to protobuf JSON through their descriptors.
#[derive(Debug, Clone)]
pub struct JsonCodec {
    pool: DescriptorPool,
    options: SerializeOptions,
}

impl JsonCodec {
    pub fn new() -> Result<Self, CallLogError> {
        let mut pool = DescriptorPool::decode(csi::FILE_DESCRIPTOR_SET)
            .map_err(|e| CallLogError::Descriptor(e.to_string()))?;
        pool.add_file_descriptor_proto(crate::node_cleanup::descriptor())
            .map_err(|e| CallLogError::Descriptor(e.to_string()))?;
        // Proto field names and plain JSON numbers: easier to assert on in tests than the
        // camelCase and string-encoded int64 of canonical protobuf JSON, and still accepted
        // by every protobuf JSON parser.
        let options = SerializeOptions::new()
            .use_proto_field_name(true)
            .stringify_64_bit_integers(false);
        Ok(Self { pool, options })
    }

    /// `message` as JSON, given its full protobuf name (e.g. `csi.v1.CreateVolumeRequest`).
    /// A message the descriptor does not know becomes a JSON string saying so, never a panic.
    pub fn to_json(&self, full_name: &str, message: &impl prost::Message) -> Value {
        let Some(desc) = self.pool.get_message_by_name(full_name) else {
            return Value::String(format!("<no descriptor for {full_name}>"));
        };
        let bytes = message.encode_to_vec();
        let result = DynamicMessage::decode(desc, bytes.as_slice())
            .map_err(|e| e.to_string())
            .and_then(|dynamic| {
                dynamic
                    .serialize_with_options(serde_json::value::Serializer, &self.options)
                    .map_err(|e| e.to_string())
            });
        result.unwrap_or_else(|e| Value::String(format!("<cannot encode {full_name}: {e}>")))
    }
}

/// One finished call, ready to be written.
#[derive(Debug, Clone, PartialEq)]
pub struct CallRecord {
    pub time: Timestamp,
    pub method: String,
    pub duration: Duration,
    pub request: Value,
    pub outcome: Result<Value, (Code, String)>,
}

/// The JSON line for a record (without the trailing newline).
pub fn render(record: &CallRecord) -> String {
    let mut line = json!({
        "time": format!("{:.3}", record.time),
        "method": record.method,
        "duration_ms": u64::try_from(record.duration.as_millis()).unwrap_or(u64::MAX),
        "request": record.request,
    });
    match &record.outcome {
        Ok(response) => line["response"] = response.clone(),
        Err((code, message)) => {
            line["error"] = json!({"code": code_name(*code), "message": message});
        }
    }
    line.to_string()
}

/// The open call log file.
#[derive(Debug)]
pub struct CallLog {
    file: Mutex<File>,
    codec: JsonCodec,
}

impl CallLog {
    /// Opens `path` for appending, creating it if needed.
    pub fn open(path: &Path) -> Result<Self, CallLogError> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| CallLogError::Open {
                path: path.display().to_string(),
                source,
            })?;
        Ok(Self {
            file: Mutex::new(file),
            codec: JsonCodec::new()?,
        })
    }

    pub fn codec(&self) -> &JsonCodec {
        &self.codec
    }

    /// Appends one line. A failed write is reported on stderr; the call itself still succeeds.
    pub fn write(&self, record: &CallRecord) {
        let mut line = render(record);
        line.push('\n');
        // One write per line on an O_APPEND file keeps lines whole; the lock keeps them ordered.
        let mut file = self.file.lock();
        if let Err(e) = file.write_all(line.as_bytes()).and_then(|()| file.flush()) {
            tracing::warn!(error = %e, method = %record.method, "cannot write call log");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use csi::v1::{CreateVolumeRequest, GetCapacityResponse};

    #[test]
    fn messages_become_proto_json_with_secrets() {
        let codec = JsonCodec::new().unwrap();
        let req = CreateVolumeRequest {
            name: "pvc-1".into(),
            secrets: [("password".to_owned(), "hunter2".to_owned())].into(),
            ..Default::default()
        };
        let got = codec.to_json("csi.v1.CreateVolumeRequest", &req);
        assert_eq!(
            got,
            json!({"name": "pvc-1", "secrets": {"password": "hunter2"}})
        );

        let resp = GetCapacityResponse {
            available_capacity: 5 << 40,
            maximum_volume_size: Some(7),
            minimum_volume_size: None,
        };
        let got = codec.to_json("csi.v1.GetCapacityResponse", &resp);
        assert_eq!(
            got,
            json!({"available_capacity": 5_i64 << 40, "maximum_volume_size": 7})
        );
    }

    #[test]
    fn unknown_message_name_is_reported_in_place() {
        let codec = JsonCodec::new().unwrap();
        let got = codec.to_json("csi.v1.Nope", &CreateVolumeRequest::default());
        assert_eq!(got, json!("<no descriptor for csi.v1.Nope>"));
    }

    #[test]
    fn renders_response_and_error_lines() {
        let time: Timestamp = "2025-01-02T03:04:05.678901Z".parse().unwrap();
        let mut record = CallRecord {
            time,
            method: "GetCapacity".into(),
            duration: Duration::from_millis(12),
            request: json!({}),
            outcome: Ok(json!({"available_capacity": 1})),
        };
        let line: Value = serde_json::from_str(&render(&record)).unwrap();
        assert_eq!(
            line,
            json!({"time": "2025-01-02T03:04:05.678Z", "method": "GetCapacity", "duration_ms": 12,
                   "request": {}, "response": {"available_capacity": 1}})
        );

        record.outcome = Err((Code::ResourceExhausted, "full".into()));
        let line: Value = serde_json::from_str(&render(&record)).unwrap();
        assert_eq!(
            line["error"],
            json!({"code": "ResourceExhausted", "message": "full"})
        );
        assert!(line.get("response").is_none());
    }

    #[test]
    fn appends_one_line_per_call() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("calls.jsonl");
        std::fs::write(&path, "earlier\n").unwrap();
        let log = CallLog::open(&path).unwrap();
        let record = CallRecord {
            time: Timestamp::UNIX_EPOCH,
            method: "Probe".into(),
            duration: Duration::ZERO,
            request: json!({}),
            outcome: Ok(json!({"ready": true})),
        };
        log.write(&record);
        log.write(&record);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0], "earlier");
        assert_eq!(lines[1], render(&record));
        assert_eq!(lines[2], lines[1]);
    }

    /// The hand-written node clean-up messages are in the codec's descriptor pool.
    #[test]
    fn node_cleanup_messages_are_encoded_with_their_field_names() {
        let codec = JsonCodec::new().unwrap();
        let req = crate::node_cleanup::NodeUnpublishVolumeRequest {
            volume_id: "mock-vol-0".into(),
            target_path: "/t".into(),
        };
        let got = codec.to_json("csi.v1.NodeUnpublishVolumeRequest", &req);
        assert_eq!(
            got,
            serde_json::json!({"volume_id": "mock-vol-0", "target_path": "/t"})
        );
    }
}
