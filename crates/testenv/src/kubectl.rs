//! kubectl, as users run it against the control plane (built with the other Go binaries).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs the testenv's `kubectl` with `args` against `kubeconfig`, feeding it `stdin`.
/// `Err` carries its output when it exits non-zero.
///
/// # Panics
/// When kubectl has not been built (with the command that builds it), or cannot be started.
pub fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
    let program = crate::paths::go_binary("kubectl");
    let mut child = Command::new(&program)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()));
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .expect("writing kubectl's stdin");
    }
    let out = child.wait_with_output().expect("waiting for kubectl");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(format!("{stdout}{}", String::from_utf8_lossy(&out.stderr)))
    }
}
