//! Third-party Go source kept outside the repository (modules the proxy refuses): checking it
//! is there at the pinned tag, hashing it for the cache key, and copying it to build from.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// Third-party source must be where the docs say, at the pinned tag (its ORIGIN.md names it).
pub fn third_party_present(name: &str, dir: &Path, version: &str) -> Result<()> {
    let origin = dir.join("ORIGIN.md");
    if !dir.join("go.mod").is_file() || !origin.is_file() {
        bail!(
            "{name} {version}: its unmodified source is expected in {} (with go.mod and \
             ORIGIN.md); the Go module proxy refuses this module, so it is not fetched",
            dir.display()
        );
    }
    let text =
        fs::read_to_string(&origin).with_context(|| format!("reading {}", origin.display()))?;
    if !text.contains(version) {
        bail!(
            "{}: ORIGIN.md does not name {version}, the version this build pins",
            dir.display()
        );
    }
    Ok(())
}

/// Every file's relative path and content, in a stable order: an edited copy of third-party
/// source gets a new cache entry.
pub fn tree_digest(dir: &Path) -> Result<Vec<u8>> {
    let mut files = Vec::new();
    walk(dir, Path::new(""), &mut files)?;
    files.sort();
    let mut out = Vec::new();
    for rel in files {
        out.extend_from_slice(rel.to_string_lossy().as_bytes());
        out.push(0);
        out.extend(fs::read(dir.join(&rel)).with_context(|| format!("reading {}", rel.display()))?);
        out.push(0);
    }
    Ok(out)
}

/// Relative paths of the regular files under `base/rel`.
fn walk(base: &Path, rel: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    let here = base.join(rel);
    for e in fs::read_dir(&here).with_context(|| format!("listing {}", here.display()))? {
        let e = e?;
        let path = rel.join(e.file_name());
        if e.file_type()?.is_dir() {
            walk(base, &path, files)?;
        } else {
            files.push(path);
        }
    }
    Ok(())
}

/// Copies a tree into a new, writable directory (the shared source is read-only).
pub fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    let mut files = Vec::new();
    walk(from, Path::new(""), &mut files)?;
    for rel in files {
        let dest = to.join(&rel);
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        fs::write(&dest, fs::read(from.join(&rel))?)
            .with_context(|| format!("writing {}", dest.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_third_party_source_says_where_it_is_expected() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("csi-driver-host-path");
        let msg = third_party_present("hp", &missing, "v1.18.0")
            .unwrap_err()
            .to_string();
        assert!(msg.contains(&missing.display().to_string()), "{msg}");
        fs::create_dir_all(&missing).unwrap();
        fs::write(missing.join("go.mod"), "module x\n").unwrap();
        fs::write(missing.join("ORIGIN.md"), "tag v1.17.0\n").unwrap();
        let msg = third_party_present("hp", &missing, "v1.18.0")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("does not name v1.18.0"), "{msg}");
        fs::write(missing.join("ORIGIN.md"), "tag v1.18.0\n").unwrap();
        third_party_present("hp", &missing, "v1.18.0").unwrap();
    }

    #[test]
    fn copies_are_complete_and_digests_follow_content() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        fs::create_dir_all(src.join("cmd/x")).unwrap();
        fs::write(src.join("go.mod"), "module x\n").unwrap();
        fs::write(src.join("cmd/x/main.go"), "package main\n").unwrap();
        let before = tree_digest(&src).unwrap();
        let copy = dir.path().join("copy");
        copy_tree(&src, &copy).unwrap();
        assert_eq!(tree_digest(&copy).unwrap(), before);
        fs::write(src.join("cmd/x/main.go"), "package main // edited\n").unwrap();
        assert_ne!(tree_digest(&src).unwrap(), before);
    }
}
