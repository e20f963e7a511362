//! Reading the mock driver's call log (one JSON object per line and call).

use std::path::Path;

use serde_json::Value;

/// The parts of a logged call the benchmarks use.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub method: String,
    /// When the call arrived.
    pub start: jiff::Timestamp,
    pub duration_ms: u64,
    /// gRPC code name of a failed call (`ResourceExhausted`), `None` on success.
    pub error: Option<String>,
    /// `request.name` (the volume name of CreateVolume), if any.
    pub name: Option<String>,
    /// `response.volume.volume_id` of a successful CreateVolume.
    pub volume_id: Option<String>,
    /// What a GetCapacity asked about: its topology and parameters, as one comparable string
    /// (one per CSIStorageCapacity object when the classes differ in a parameter).
    pub capacity_key: Option<String>,
}

impl Call {
    /// When the call returned.
    pub fn end(&self) -> jiff::Timestamp {
        let d = jiff::SignedDuration::from_millis(self.duration_ms as i64);
        self.start.checked_add(d).unwrap_or(self.start)
    }
}

/// Parses complete lines; a half-written last line and lines that do not fit are skipped.
pub fn parse(text: &str) -> Vec<Call> {
    let complete = match text.rfind('\n') {
        Some(end) => &text[..end],
        None => "",
    };
    complete.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Call> {
    let v: Value = serde_json::from_str(line).ok()?;
    Some(Call {
        method: v.get("method")?.as_str()?.to_string(),
        start: v.get("time")?.as_str()?.parse().ok()?,
        duration_ms: v.get("duration_ms").and_then(Value::as_u64).unwrap_or(0),
        error: v
            .get("error")
            .and_then(|e| e.get("code"))
            .and_then(Value::as_str)
            .map(str::to_string),
        name: v
            .get("request")
            .and_then(|r| r.get("name"))
            .and_then(Value::as_str)
            .map(str::to_string),
        volume_id: v
            .get("response")
            .and_then(|r| r.get("volume"))
            .and_then(|r| r.get("volume_id"))
            .and_then(Value::as_str)
            .map(str::to_string),
        capacity_key: (v.get("method")?.as_str()? == "GetCapacity").then(|| {
            let r = v.get("request");
            let part = |k: &str| r.and_then(|r| r.get(k)).cloned().unwrap_or(Value::Null);
            format!("{} {}", part("accessible_topology"), part("parameters"))
        }),
    })
}

/// Reads the whole log; a missing file is an empty log.
pub fn read(path: &Path) -> Vec<Call> {
    std::fs::read_to_string(path)
        .map(|t| parse(&t))
        .unwrap_or_default()
}

/// Reads a growing call log incrementally: each call returns only the lines completed since
/// the last one (cheap enough to poll every few milliseconds).
#[derive(Debug)]
pub struct Tail {
    path: std::path::PathBuf,
    offset: u64,
    partial: String,
}

impl Tail {
    pub fn new(path: &Path) -> Tail {
        Tail {
            path: path.to_path_buf(),
            offset: 0,
            partial: String::new(),
        }
    }

    pub fn read_new(&mut self) -> Vec<Call> {
        use std::io::{Read, Seek, SeekFrom};
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return Vec::new();
        };
        let mut buf = Vec::new();
        if f.seek(SeekFrom::Start(self.offset)).is_err() || f.read_to_end(&mut buf).is_err() {
            return Vec::new();
        }
        self.offset += buf.len() as u64;
        self.partial.push_str(&String::from_utf8_lossy(&buf));
        let calls = parse(&self.partial);
        // Keep the unfinished last line for the next read.
        let keep = self.partial.rfind('\n').map_or(0, |i| i + 1);
        self.partial.drain(..keep);
        calls
    }
}

/// Calls of `method` that failed with `code`.
pub fn count_errors(calls: &[Call], method: &str, code: &str) -> usize {
    calls
        .iter()
        .filter(|c| c.method == method && c.error.as_deref() == Some(code))
        .count()
}

pub fn count(calls: &[Call], method: &str) -> usize {
    calls.iter().filter(|c| c.method == method).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = concat!(
        r#"{"time":"2026-01-01T00:00:01.000Z","method":"CreateVolume","duration_ms":5,"request":{"name":"pvc-a"},"error":{"code":"ResourceExhausted","message":"full"}}"#,
        "\n",
        r#"{"time":"2026-01-01T00:00:02.000Z","method":"CreateVolume","duration_ms":7,"request":{"name":"pvc-a"},"response":{}}"#,
        "\n",
        r#"{"time":"2026-01-01T00:00:03.000Z","method":"GetCapacity","duration_ms":0,"request":{}}"#,
        "\n",
        "not json\n",
        r#"{"time":"2026-01-01T00:00:03.500Z","method":"GetCapacity","duration_ms":0,"request":{"accessible_topology":{"segments":{"k":"n1"}},"parameters":{"c":"a"}}}"#,
        "\n",
        r#"{"time":"2026-01-01T00:00:04.000Z","method":"CreateVol"#,
    );

    #[test]
    fn parses_complete_lines() {
        let calls = parse(LOG);
        assert_eq!(calls.len(), 4);
        assert_eq!(calls[0].error.as_deref(), Some("ResourceExhausted"));
        assert_eq!(calls[1].name.as_deref(), Some("pvc-a"));
        assert_eq!(calls[1].capacity_key, None);
        assert_eq!(calls[2].name, None);
        assert_eq!(calls[2].capacity_key.as_deref(), Some("null null"));
        assert_eq!(
            calls[3].capacity_key.as_deref(),
            Some(r#"{"segments":{"k":"n1"}} {"c":"a"}"#)
        );
    }

    #[test]
    fn counts_and_end_times() {
        let calls = parse(LOG);
        assert_eq!(count_errors(&calls, "CreateVolume", "ResourceExhausted"), 1);
        assert_eq!(count_errors(&calls, "CreateVolume", "Internal"), 0);
        assert_eq!(count(&calls, "GetCapacity"), 2);
        let want: jiff::Timestamp = "2026-01-01T00:00:02.007Z".parse().unwrap();
        assert_eq!(calls[1].end(), want);
    }

    #[test]
    fn tail_returns_each_line_once() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("calls.jsonl");
        let mut tail = Tail::new(&path);
        assert!(tail.read_new().is_empty());
        let lines: Vec<&str> = LOG.split_inclusive('\n').collect();
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(lines[0].as_bytes()).unwrap();
        // Half of the second line: not complete yet.
        let (head, rest) = lines[1].split_at(20);
        f.write_all(head.as_bytes()).unwrap();
        assert_eq!(tail.read_new().len(), 1);
        assert!(tail.read_new().is_empty());
        f.write_all(rest.as_bytes()).unwrap();
        let got = tail.read_new();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].name.as_deref(), Some("pvc-a"));
        assert!(got[0].error.is_none());
    }

    #[test]
    fn missing_log_is_empty() {
        assert!(read(Path::new("/nonexistent/calls.jsonl")).is_empty());
    }
}
