//! The API server's own record of who wrote or listed which claims: tests count a component's
//! requests from it instead of trusting the component's counters.
//!
//! Only writes and lists of PersistentVolumeClaims are recorded (Metadata level, one JSON line
//! when the response is sent), which keeps the log small even under the benchmarks' bursts.

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
  verbs: [create, update, patch, delete, list]
  resources:
  - group: \"\"
    resources: [persistentvolumeclaims]
- level: None
";

/// The verbs that change a claim (the policy also records `list`).
const WRITE_VERBS: [&str; 4] = ["create", "update", "patch", "delete"];

/// One recorded request: a write, or a list (`name` empty).
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
    Ok(recorded(log, namespace)?
        .into_iter()
        .filter(|w| WRITE_VERBS.contains(&w.verb.as_str()))
        .collect())
}

/// The lists of the claims in `namespace` (not cluster-wide ones) recorded in `log`.
pub fn claim_lists(log: &Path, namespace: &str) -> Result<Vec<Write>, Error> {
    Ok(recorded(log, namespace)?
        .into_iter()
        .filter(|w| w.verb == "list")
        .collect())
}

fn recorded(log: &Path, namespace: &str) -> Result<Vec<Write>, Error> {
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

    #[test]
    fn writes_and_lists_are_told_apart() {
        let line = |verb: &str, ns: &str| {
            format!(
                r#"{{"stage":"ResponseComplete","verb":"{verb}","objectRef":{{"namespace":"{ns}"}}}}"#
            )
        };
        let dir = std::env::temp_dir().join(format!("audit-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("audit.log");
        let lines = [
            line("update", "ns"),
            line("list", "ns"),
            line("list", "other"),
            line("delete", "ns"),
        ];
        std::fs::write(&log, lines.join("\n")).unwrap();
        let verbs = |w: Vec<Write>| w.into_iter().map(|w| w.verb).collect::<Vec<_>>();
        assert_eq!(
            verbs(claim_writes(&log, "ns").unwrap()),
            ["update", "delete"]
        );
        assert_eq!(verbs(claim_lists(&log, "ns").unwrap()), ["list"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
