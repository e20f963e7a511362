//! The real Go `csi-sanity` (csi-test v5.5.0) against a driver socket.

use std::path::Path;
use std::process::Command;

use crate::error::IoContext;
use crate::{Error, paths};

/// What one csi-sanity run printed and how it ended.
#[derive(Debug)]
pub struct SanityRun {
    pub success: bool,
    pub output: String,
    /// Ginkgo's `Ran N of M Specs ... N Passed | 0 Failed ...` line, if it got that far.
    pub summary: String,
}

impl SanityRun {
    /// True when it passed and ran at least one spec (a filter that skips everything passes).
    pub fn passed_something(&self) -> bool {
        self.success && !self.summary.is_empty() && !self.summary.contains(" 0 Passed")
    }
}

/// Runs csi-sanity against `socket` with mount and staging directories under `dir` and
/// `--ginkgo.skip=<skip>` when given.
pub fn run_csi_sanity(socket: &Path, dir: &Path, skip: Option<&str>) -> Result<SanityRun, Error> {
    let binary = paths::try_go_binary("csi-sanity")?;
    let mut cmd = Command::new(binary);
    cmd.arg(format!("--csi.endpoint={}", socket.display()))
        .arg(format!("--csi.mountdir={}", dir.join("mount").display()))
        .arg(format!(
            "--csi.stagingdir={}",
            dir.join("staging").display()
        ))
        .arg("--ginkgo.no-color");
    if let Some(skip) = skip {
        cmd.arg(format!("--ginkgo.skip={skip}"));
    }
    let out = cmd.output().ctx(|| "running csi-sanity".to_string())?;
    let output = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = output
        .lines()
        .find(|l| l.contains("Passed") && l.contains("Failed"))
        .unwrap_or_default()
        .to_string();
    Ok(SanityRun {
        success: out.status.success(),
        output,
        summary,
    })
}
