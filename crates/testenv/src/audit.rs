//! The API server's own record of who wrote which claim: tests count a component's writes from
//! it instead of trusting the component's counters.
//!
//! Only writes to PersistentVolumeClaims are recorded (Metadata level, one JSON line when the
//! response is sent), which keeps the log small even under the benchmarks' bursts.

use std::path::Path;

use crate::Error;
use crate::error::IoContext;

/// The audit policy the test API server runs with.
pub const POLICY: &str = "\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  verbs: [create, update, patch, delete]
  resources:
  - group: \"\"
    resources: [persistentvolumeclaims]
- level: None
";

/// One recorded write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub verb: String,
    pub namespace: String,
    pub name: String,
    pub user_agent: String,
    /// The authenticated user (`system:serviceaccount:<ns>:<name>` for a ServiceAccount).
    pub user: String,
    pub code: Option<i64>,
}

/// The writes to claims in `namespace` recorded in `log` (missing log: none yet).
pub fn claim_writes(log: &Path, namespace: &str) -> Result<Vec<Write>, Error> {
    let text = match std::fs::read_to_string(log) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).ctx(|| format!("reading {}", log.display())),
    };
    Ok(parse(&text)
        .into_iter()
        .filter(|w| w.namespace == namespace)
        .collect())
}

/// Parses the JSON lines of an audit log (lines that are not events are skipped).
pub fn parse(text: &str) -> Vec<Write> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["stage"] == "ResponseComplete")
        .map(|e| Write {
            verb: e["verb"].as_str().unwrap_or_default().to_string(),
            namespace: e["objectRef"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            name: e["objectRef"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            user_agent: e["userAgent"].as_str().unwrap_or_default().to_string(),
            user: e["user"]["username"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            code: e["responseStatus"]["code"].as_i64(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_complete_events_only() {
        let log = r#"{"kind":"Event","stage":"ResponseComplete","verb":"update","objectRef":{"resource":"persistentvolumeclaims","namespace":"ns","name":"a"},"userAgent":"csi-provisioner/0.1.0","user":{"username":"system:serviceaccount:ns:sa"},"responseStatus":{"code":200}}
{"kind":"Event","stage":"Panic","verb":"update","objectRef":{"namespace":"ns","name":"b"}}
not json"#;
        assert_eq!(
            parse(log),
            [Write {
                verb: "update".into(),
                namespace: "ns".into(),
                name: "a".into(),
                user_agent: "csi-provisioner/0.1.0".into(),
                user: "system:serviceaccount:ns:sa".into(),
                code: Some(200),
            }]
        );
    }
}
