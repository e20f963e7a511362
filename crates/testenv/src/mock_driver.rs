//! The `mock-csi-driver` binary as a guarded child process.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::IoContext;
use crate::process::{Process, try_spawn};
use crate::{Error, paths, socket};

/// A running `mock-csi-driver` with its socket, call log and fault file in one directory.
#[derive(Debug)]
pub struct MockDriver {
    pub socket: PathBuf,
    pub call_log: PathBuf,
    pub faults: PathBuf,
    process: Process,
}

impl MockDriver {
    /// Starts the driver on `<dir>/csi.sock` with `--faults <dir>/faults.json` and
    /// `--call-log <dir>/calls.jsonl` plus `args`, and waits for the socket. Its log is
    /// `<dir>/mock-csi-driver.log`. Use one directory per driver.
    ///
    /// # Panics
    /// When the binary is missing or the socket does not appear.
    pub fn start(dir: &Path, args: &[&str]) -> MockDriver {
        Self::try_start(dir, args).unwrap_or_else(|e| panic!("mock-csi-driver: {e}"))
    }

    pub fn try_start(dir: &Path, args: &[&str]) -> Result<MockDriver, Error> {
        let binary = paths::try_workspace_binary("mock-csi-driver")?;
        fs::create_dir_all(dir).ctx(|| format!("creating {}", dir.display()))?;
        let socket = dir.join("csi.sock");
        let call_log = dir.join("calls.jsonl");
        let faults = dir.join("faults.json");
        socket::remove_stale_socket(&socket)?;
        let mut cmd = Command::new(binary);
        cmd.arg(format!("--endpoint=unix://{}", socket.display()))
            .arg(format!("--faults={}", faults.display()))
            .arg(format!("--call-log={}", call_log.display()))
            .args(args);
        let mut process = try_spawn("mock-csi-driver", cmd, dir)?;
        socket::wait_for_socket(&mut process, &socket)?;
        Ok(MockDriver {
            socket,
            call_log,
            faults,
            process,
        })
    }

    /// `unix://<socket>`, the form `--csi-address` and CSI clients take.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// Replaces the fault file atomically (the driver re-reads it on the next call).
    ///
    /// # Panics
    /// When the file cannot be written.
    pub fn set_faults(&self, json: serde_json::Value) {
        let tmp = self.faults.with_extension("json.tmp");
        let write = fs::write(&tmp, json.to_string()).and_then(|()| fs::rename(&tmp, &self.faults));
        if let Err(e) = write {
            panic!("writing {}: {e}", self.faults.display());
        }
    }

    /// Removes all faults.
    pub fn clear_faults(&self) {
        self.set_faults(serde_json::json!({}));
    }

    /// Every call logged so far, in order.
    ///
    /// # Panics
    /// When a complete line of the call log is not JSON.
    pub fn calls(&self) -> Vec<serde_json::Value> {
        match fs::read_to_string(&self.call_log) {
            Ok(text) => {
                parse_call_log(&text).unwrap_or_else(|e| panic!("{}: {e}", self.call_log.display()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => panic!("reading {}: {e}", self.call_log.display()),
        }
    }

    /// The logged calls of one RPC method (e.g. `"CreateVolume"`).
    pub fn calls_of(&self, method: &str) -> Vec<serde_json::Value> {
        self.calls()
            .into_iter()
            .filter(|c| c.get("method").and_then(|m| m.as_str()) == Some(method))
            .collect()
    }

    /// How many calls of `method` the driver answered without an error.
    pub fn succeeded(&self, method: &str) -> usize {
        self.calls_of(method)
            .iter()
            .filter(|c| c.get("error").is_none())
            .count()
    }

    pub fn process(&mut self) -> &mut Process {
        &mut self.process
    }

    /// SIGTERM, then SIGKILL after a grace period.
    pub fn kill(&mut self) {
        self.process.kill();
    }
}

/// Parses JSON lines; a final line without its newline is still being written and is skipped.
pub(crate) fn parse_call_log(text: &str) -> Result<Vec<serde_json::Value>, String> {
    let complete = match text.rfind('\n') {
        Some(end) => &text[..end],
        None => "",
    };
    complete
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("line {}: {e}", i + 1)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_log_parsing() {
        let cases: &[(&str, Result<usize, &str>)] = &[
            ("", Ok(0)),
            ("{\"method\":\"Probe\"}\n", Ok(1)),
            ("{\"method\":\"Probe\"}\n{\"method\":\"Create", Ok(1)),
            ("{\"a\":1}\n\n{\"b\":2}\n", Ok(2)),
            ("{\"a\":1}\nnot json\n", Err("line 2")),
        ];
        for (text, want) in cases {
            let got = parse_call_log(text);
            match (got, want) {
                (Ok(v), Ok(n)) => assert_eq!(v.len(), *n, "{text:?}"),
                (Err(e), Err(frag)) => assert!(e.contains(frag), "{text:?}: {e}"),
                (got, want) => panic!("{text:?}: got {got:?}, want {want:?}"),
            }
        }
    }
}
