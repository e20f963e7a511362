//! Which file system type the volume gets (`csi.storage.k8s.io/fstype`, legacy `fstype`,
//! `--default-fstype`).

use std::collections::BTreeMap;

use thiserror::Error;

use crate::names;

/// Both the legacy and the prefixed key (or two spellings of the legacy key) are set (upstream's text).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "fstype specified in parameters with both \"fstype\" and \"csi.storage.k8s.io/fstype\" keys"
)]
pub struct FsTypeConflict;

/// The file system type for the claim's volume capability and the PV's `spec.csi.fsType`.
///
/// A key counts if it is `csi.storage.k8s.io/fstype` or lowercases to `fstype` (deprecated, and
/// still passed to the driver). More than one such key is an error. An empty or missing value
/// falls back to `default_fs_type` (`--default-fstype`, itself empty by default).
pub fn resolve_fs_type(
    params: &BTreeMap<String, String>,
    default_fs_type: &str,
) -> Result<String, FsTypeConflict> {
    let mut found = params
        .iter()
        .filter(|(k, _)| {
            k.as_str() == names::PARAM_FSTYPE || k.to_lowercase() == names::LEGACY_FSTYPE
        })
        .map(|(_, v)| v);
    let fs_type = found.next();
    if found.next().is_some() {
        return Err(FsTypeConflict);
    }
    Ok(match fs_type {
        Some(v) if !v.is_empty() => v.clone(),
        _ => default_fs_type.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::map;
    use pretty_assertions::assert_eq;

    #[test]
    fn resolution_table() {
        let cases = [
            ("nothing, no default", map(&[]), "", Ok("")),
            ("nothing, default", map(&[]), "ext4", Ok("ext4")),
            (
                "prefixed",
                map(&[(names::PARAM_FSTYPE, "xfs")]),
                "ext4",
                Ok("xfs"),
            ),
            ("legacy", map(&[("fstype", "xfs")]), "", Ok("xfs")),
            (
                "legacy mixed case",
                map(&[("fsType", "btrfs")]),
                "",
                Ok("btrfs"),
            ),
            (
                "legacy upper case",
                map(&[("FSTYPE", "ext3")]),
                "",
                Ok("ext3"),
            ),
            (
                "empty value uses default",
                map(&[(names::PARAM_FSTYPE, "")]),
                "ext4",
                Ok("ext4"),
            ),
            (
                "unrelated keys",
                map(&[("type", "ssd"), ("fs", "x")]),
                "",
                Ok(""),
            ),
            (
                "both keys",
                map(&[("fstype", "xfs"), (names::PARAM_FSTYPE, "ext4")]),
                "",
                Err(FsTypeConflict),
            ),
            (
                "two legacy spellings",
                map(&[("fstype", "xfs"), ("fsType", "xfs")]),
                "",
                Err(FsTypeConflict),
            ),
        ];
        for (name, params, default, want) in cases {
            assert_eq!(
                resolve_fs_type(&params, default)
                    .as_deref()
                    .map_err(Clone::clone),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn conflict_message() {
        assert_eq!(
            FsTypeConflict.to_string(),
            r#"fstype specified in parameters with both "fstype" and "csi.storage.k8s.io/fstype" keys"#
        );
    }
}
