//! `cargo xtask msrv`: the workspace builds with the oldest Rust it declares (`rust-version`),
//! not only with the toolchain `rust-toolchain.toml` pins. clippy's `incompatible_msrv` catches
//! newer standard-library APIs; only the old compiler catches newer language features and
//! dependencies that need a newer Rust.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Installs the declared minimum toolchain if missing (minimal profile), then checks every
/// target of the workspace with it, in `<target>/msrv` so that its artefacts neither mix with
/// nor evict the pinned toolchain's.
pub fn check(root: &Path) -> Result<()> {
    let manifest_path = root.join("Cargo.toml");
    let manifest = std::fs::read_to_string(&manifest_path)
        .with_context(|| format!("reading {}", manifest_path.display()))?;
    let Some(version) = declared(&manifest) else {
        bail!(
            "{} declares no rust-version in [workspace.package]: add one (the oldest Rust the workspace builds with)",
            manifest_path.display()
        );
    };
    let toolchain = toolchain(&version);
    // Even for an installed toolchain `rustup toolchain install` asks the network first.
    if !installed(&toolchain)? {
        run(
            Command::new("rustup").args([
                "toolchain",
                "install",
                &toolchain,
                "--profile",
                "minimal",
            ]),
            &format!(
                "rustup toolchain install {toolchain} (it downloads from static.rust-lang.org)"
            ),
        )?;
    }
    let mut cargo = Command::new("rustup");
    cargo
        .args([
            "run",
            &toolchain,
            "cargo",
            "check",
            "--workspace",
            "--all-targets",
            "--locked",
        ])
        .env("CARGO_TARGET_DIR", testenv::target_dir().join("msrv"))
        // Set by the outer cargo for its own toolchain; the old one must use its own tools.
        .env_remove("RUSTC")
        .env_remove("RUSTDOC")
        .env_remove("CARGO")
        .env_remove("RUSTUP_TOOLCHAIN");
    run(
        &mut cargo,
        &format!(
            "cargo check with Rust {toolchain}, the workspace's rust-version: raise rust-version \
             in Cargo.toml (and docs/development.md) or avoid what needs a newer Rust"
        ),
    )
}

/// Whether rustup lists `toolchain` (`1.89.0-x86_64-unknown-linux-gnu` for `1.89.0`).
fn installed(toolchain: &str) -> Result<bool> {
    let out = Command::new("rustup")
        .args(["toolchain", "list"])
        .output()
        .context("rustup toolchain list: is rustup installed?")?;
    let prefix = format!("{toolchain}-");
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.starts_with(&prefix)))
}

fn run(cmd: &mut Command, what: &str) -> Result<()> {
    println!("xtask: {cmd:?}");
    let status = cmd.status().with_context(|| what.to_string())?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

/// The `rust-version` of the manifest's `[workspace.package]` table.
fn declared(manifest: &str) -> Option<String> {
    let mut in_table = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_table = line == "[workspace.package]";
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if in_table && key.trim() == "rust-version" {
            return Some(value.trim().trim_matches('"').to_string());
        }
    }
    None
}

/// The rustup toolchain of a `rust-version`: `1.89` means 1.89.0.
fn toolchain(version: &str) -> String {
    match version.split('.').count() {
        2 => format!("{version}.0"),
        _ => version.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_workspace_rust_version() {
        let manifest = "[package]\nrust-version = \"1.70\"\n\n[workspace.package]\n\
                        edition = \"2024\"\nrust-version = \"1.89\"\n[lints]\n";
        assert_eq!(declared(manifest).as_deref(), Some("1.89"));
        assert_eq!(declared("[package]\nrust-version = \"1.70\"\n"), None);
        assert_eq!(toolchain("1.89"), "1.89.0");
        assert_eq!(toolchain("1.89.1"), "1.89.1");
    }

    /// The real manifest declares one, so that `cargo xtask msrv` has something to check.
    #[test]
    fn the_workspace_declares_one() {
        let manifest = std::fs::read_to_string(testenv::workspace_root().join("Cargo.toml"))
            .expect("the workspace manifest");
        assert!(declared(&manifest).is_some());
    }
}
