//! Where the workspace, its target directory and the test binaries live.

use std::path::{Path, PathBuf};

use crate::Error;

pub(crate) const GO_HINT: &str = "run `cargo xtask test` (or `cargo xtask testenv build`)";
pub(crate) const CARGO_HINT: &str = "run `cargo build --workspace --bins`";

/// The workspace root (this crate lives in `<root>/crates/testenv`).
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| manifest.to_path_buf())
}

/// Cargo's target directory: `CARGO_TARGET_DIR` when set (as cargo itself does), else
/// `<workspace>/target`.
pub fn target_dir() -> PathBuf {
    resolve_target_dir(
        &workspace_root(),
        std::env::var_os("CARGO_TARGET_DIR").as_deref(),
    )
}

fn resolve_target_dir(root: &Path, env: Option<&std::ffi::OsStr>) -> PathBuf {
    match env {
        Some(dir) if !dir.is_empty() => root.join(dir),
        _ => root.join("target"),
    }
}

fn resolve_bin_dir(target: &Path, env: Option<&std::ffi::OsStr>) -> PathBuf {
    match env {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => target.join("testenv-bin"),
    }
}

/// The directory of Go-built binaries: `TESTENV_BIN`, else `<target>/testenv-bin`, without
/// checking that it exists.
pub fn bin_dir_unchecked() -> PathBuf {
    resolve_bin_dir(&target_dir(), std::env::var_os("TESTENV_BIN").as_deref())
}

/// The directory of Go-built binaries (kube-apiserver, csi-sanity, ...).
///
/// # Panics
/// When the directory does not exist, with a message saying how to build it.
pub fn bin_dir() -> PathBuf {
    let dir = bin_dir_unchecked();
    if !dir.is_dir() {
        panic!("testenv binaries not found at {}: {GO_HINT}", dir.display());
    }
    dir
}

/// A Go-built binary from [`bin_dir`], or an error naming the path and the fix.
pub fn try_go_binary(name: &str) -> Result<PathBuf, Error> {
    let path = bin_dir_unchecked().join(name);
    // `exists` follows the symlink, so a dangling link into a pruned cache counts as missing.
    if path.exists() {
        Ok(path)
    } else {
        Err(Error::MissingBinary {
            what: name.to_string(),
            path,
            hint: GO_HINT,
        })
    }
}

/// A Go-built binary from [`bin_dir`].
///
/// # Panics
/// When it is missing, with a message saying how to build it.
pub fn go_binary(name: &str) -> PathBuf {
    try_go_binary(name).unwrap_or_else(|e| panic!("{e}"))
}

/// One of this workspace's own binaries, from `<target>/debug`, or an error naming the fix.
pub fn try_workspace_binary(name: &str) -> Result<PathBuf, Error> {
    let path = target_dir().join("debug").join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::MissingBinary {
            what: name.to_string(),
            path,
            hint: CARGO_HINT,
        })
    }
}

/// One of this workspace's own binaries (`csi-provisioner`, `mock-csi-driver`).
///
/// # Panics
/// When it has not been built, with a message saying how to build it.
pub fn workspace_binary(name: &str) -> PathBuf {
    try_workspace_binary(name).unwrap_or_else(|e| panic!("{e}"))
}

/// The etcd binary shipped by the `etcd-bin-vendored-linux-amd64` crate.
pub fn etcd_binary() -> PathBuf {
    match etcd_bin_vendored_linux_amd64::etcd_bin_path() {
        Ok(p) => p.to_path_buf(),
        Err(never) => match never {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn target_dir_resolution() {
        let root = Path::new("/ws");
        let cases: &[(Option<&str>, &str)] = &[
            (None, "/ws/target"),
            (Some(""), "/ws/target"),
            (Some("out"), "/ws/out"),
            (Some("/abs/t"), "/abs/t"),
        ];
        for (env, want) in cases {
            let got = resolve_target_dir(root, env.map(OsStr::new));
            assert_eq!(got, PathBuf::from(want), "CARGO_TARGET_DIR={env:?}");
        }
    }

    #[test]
    fn bin_dir_resolution() {
        let target = Path::new("/ws/target");
        let cases: &[(Option<&str>, &str)] = &[
            (None, "/ws/target/testenv-bin"),
            (Some(""), "/ws/target/testenv-bin"),
            (Some("/opt/bin"), "/opt/bin"),
        ];
        for (env, want) in cases {
            let got = resolve_bin_dir(target, env.map(OsStr::new));
            assert_eq!(got, PathBuf::from(want), "TESTENV_BIN={env:?}");
        }
    }

    #[test]
    fn workspace_root_holds_the_workspace_manifest() {
        assert!(workspace_root().join("Cargo.toml").is_file());
        assert!(workspace_root().join("crates/testenv").is_dir());
    }

    #[test]
    fn etcd_binary_is_vendored() {
        assert!(etcd_binary().is_file(), "{}", etcd_binary().display());
    }

    #[test]
    fn missing_binaries_name_the_fix() {
        let err = try_workspace_binary("no-such-binary-xyz").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("no-such-binary-xyz"), "{msg}");
        assert!(msg.contains("cargo build --workspace --bins"), "{msg}");
    }
}
