//! CSI volume capabilities for a claim: one per access mode, Block or Mount.

use csi::v1::VolumeCapability;
use csi::v1::volume_capability::access_mode::Mode;
use csi::v1::volume_capability::{AccessMode, AccessType, BlockVolume, MountVolume};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use thiserror::Error;

use crate::claim;

/// An access mode this provisioner does not know (csi-lib-utils' text).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unsupported AccessMode combination: [{0}]")]
pub struct UnsupportedAccessMode(pub String);

/// The CSI access mode for one PVC access mode.
///
/// Drivers with the `SINGLE_NODE_MULTI_WRITER` controller capability get the finer single-node
/// modes: `ReadWriteOnce` → `SINGLE_NODE_MULTI_WRITER`, `ReadWriteOncePod` →
/// `SINGLE_NODE_SINGLE_WRITER`; without it both are `SINGLE_NODE_WRITER`.
pub fn csi_access_mode(
    pvc_access_mode: &str,
    single_node_multi_writer: bool,
) -> Result<Mode, UnsupportedAccessMode> {
    Ok(match (pvc_access_mode, single_node_multi_writer) {
        ("ReadWriteOnce", false) | ("ReadWriteOncePod", false) => Mode::SingleNodeWriter,
        ("ReadWriteOnce", true) => Mode::SingleNodeMultiWriter,
        ("ReadWriteOncePod", true) => Mode::SingleNodeSingleWriter,
        ("ReadOnlyMany", _) => Mode::MultiNodeReaderOnly,
        ("ReadWriteMany", _) => Mode::MultiNodeMultiWriter,
        (other, _) => return Err(UnsupportedAccessMode(other.to_string())),
    })
}

/// One capability per entry of `access_modes`, in order (duplicates included, as upstream).
///
/// Block claims get `Block{}`; others `Mount{fs_type, mount_flags}` with the StorageClass's
/// `mountOptions` as mount flags. No access modes means no capabilities (the API server requires
/// at least one on a claim).
pub fn volume_capabilities(
    access_modes: &[String],
    block: bool,
    fs_type: &str,
    mount_flags: &[String],
    single_node_multi_writer: bool,
) -> Result<Vec<VolumeCapability>, UnsupportedAccessMode> {
    access_modes
        .iter()
        .map(|mode| {
            let mode = csi_access_mode(mode, single_node_multi_writer)?;
            let access_type = if block {
                AccessType::Block(BlockVolume {})
            } else {
                AccessType::Mount(MountVolume {
                    fs_type: fs_type.to_string(),
                    mount_flags: mount_flags.to_vec(),
                    volume_mount_group: String::new(),
                })
            };
            Ok(VolumeCapability {
                access_mode: Some(AccessMode { mode: mode as i32 }),
                access_type: Some(access_type),
            })
        })
        .collect()
}

/// [`volume_capabilities`] for a claim and its StorageClass.
pub fn claim_volume_capabilities(
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
    fs_type: &str,
    single_node_multi_writer: bool,
) -> Result<Vec<VolumeCapability>, UnsupportedAccessMode> {
    volume_capabilities(
        claim::access_modes(claim),
        claim::is_block(claim),
        fs_type,
        class.mount_options.as_deref().unwrap_or_default(),
        single_node_multi_writer,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{DRIVER, claim, class, spec_mut, strings};
    use pretty_assertions::assert_eq;

    #[test]
    fn access_mode_table() {
        let cases = [
            ("ReadWriteOnce", false, Ok(Mode::SingleNodeWriter)),
            ("ReadWriteOnce", true, Ok(Mode::SingleNodeMultiWriter)),
            ("ReadWriteOncePod", false, Ok(Mode::SingleNodeWriter)),
            ("ReadWriteOncePod", true, Ok(Mode::SingleNodeSingleWriter)),
            ("ReadOnlyMany", false, Ok(Mode::MultiNodeReaderOnly)),
            ("ReadOnlyMany", true, Ok(Mode::MultiNodeReaderOnly)),
            ("ReadWriteMany", false, Ok(Mode::MultiNodeMultiWriter)),
            ("ReadWriteMany", true, Ok(Mode::MultiNodeMultiWriter)),
            (
                "readwriteonce",
                false,
                Err(UnsupportedAccessMode("readwriteonce".into())),
            ),
            ("", true, Err(UnsupportedAccessMode(String::new()))),
        ];
        for (mode, snmw, want) in cases {
            assert_eq!(csi_access_mode(mode, snmw), want, "{mode} {snmw}");
        }
        assert_eq!(
            UnsupportedAccessMode("Foo".into()).to_string(),
            "unsupported AccessMode combination: [Foo]"
        );
    }

    fn mount(mode: Mode, fs: &str, flags: &[&str]) -> VolumeCapability {
        VolumeCapability {
            access_mode: Some(AccessMode { mode: mode as i32 }),
            access_type: Some(AccessType::Mount(MountVolume {
                fs_type: fs.into(),
                mount_flags: strings(flags),
                volume_mount_group: String::new(),
            })),
        }
    }

    fn block(mode: Mode) -> VolumeCapability {
        VolumeCapability {
            access_mode: Some(AccessMode { mode: mode as i32 }),
            access_type: Some(AccessType::Block(BlockVolume {})),
        }
    }

    // The access-mode and volume-mode rows of upstream's provisionTestcases.
    #[test]
    fn capabilities_table() {
        let rwx_rox = strings(&["ReadWriteMany", "ReadOnlyMany"]);
        let cases = [
            (
                "RWO",
                strings(&["ReadWriteOnce"]),
                false,
                false,
                vec![mount(Mode::SingleNodeWriter, "ext4", &["ro"])],
            ),
            (
                "RWO with SNMW",
                strings(&["ReadWriteOnce"]),
                false,
                true,
                vec![mount(Mode::SingleNodeMultiWriter, "ext4", &["ro"])],
            ),
            (
                "RWOP with SNMW",
                strings(&["ReadWriteOncePod"]),
                false,
                true,
                vec![mount(Mode::SingleNodeSingleWriter, "ext4", &["ro"])],
            ),
            (
                "ROX",
                strings(&["ReadOnlyMany"]),
                false,
                false,
                vec![mount(Mode::MultiNodeReaderOnly, "ext4", &["ro"])],
            ),
            (
                "multiple access modes",
                rwx_rox.clone(),
                false,
                false,
                vec![
                    mount(Mode::MultiNodeMultiWriter, "ext4", &["ro"]),
                    mount(Mode::MultiNodeReaderOnly, "ext4", &["ro"]),
                ],
            ),
            (
                "block",
                rwx_rox,
                true,
                false,
                vec![
                    block(Mode::MultiNodeMultiWriter),
                    block(Mode::MultiNodeReaderOnly),
                ],
            ),
            ("no access modes", vec![], false, false, vec![]),
        ];
        for (name, modes, is_block, snmw, want) in cases {
            let got = volume_capabilities(&modes, is_block, "ext4", &strings(&["ro"]), snmw);
            assert_eq!(got, Ok(want), "{name}");
        }
        assert_eq!(
            volume_capabilities(&strings(&["ReadWriteOnce", "Bogus"]), false, "", &[], false),
            Err(UnsupportedAccessMode("Bogus".into()))
        );
    }

    #[test]
    fn from_claim_and_class() {
        let mut sc = class(DRIVER);
        sc.mount_options = Some(strings(&["noatime"]));
        assert_eq!(
            claim_volume_capabilities(&claim(), &sc, "xfs", false),
            Ok(vec![mount(Mode::SingleNodeWriter, "xfs", &["noatime"])])
        );
        let mut block_claim = claim();
        spec_mut(&mut block_claim).volume_mode = Some("Block".into());
        assert_eq!(
            claim_volume_capabilities(&block_claim, &class(DRIVER), "xfs", false),
            Ok(vec![block(Mode::SingleNodeWriter)])
        );
    }
}
