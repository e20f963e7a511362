//! The capacity page test drives Debian's Chromium (headless). It is not on a fresh machine of
//! this kind: installed here with apt when missing, or the run stops saying how to get it.

use std::process::Command;

use anyhow::{Result, bail};

pub fn ensure() -> Result<()> {
    let present = || {
        Command::new("chromium")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if present() {
        return Ok(());
    }
    eprintln!("xtask: installing Debian's chromium for the capacity page test");
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|s| s.success())
    };
    let install = ["install", "-y", "--no-install-recommends", "chromium"];
    // A fresh machine may have no package lists yet.
    let installed = apt(&install) || (apt(&["update"]) && apt(&install));
    if !installed || !present() {
        bail!(
            "the capacity page test needs Debian's chromium and it could not be installed: \
             run `apt-get install chromium` as root, then `cargo xtask test` again"
        );
    }
    Ok(())
}
