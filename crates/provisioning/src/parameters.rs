//! StorageClass parameters: the reserved `csi.storage.k8s.io/` keys are for the provisioner and
//! never reach the driver; everything else is passed through.

use std::collections::BTreeMap;

use thiserror::Error;

use crate::names::{self, CSI_PARAMETER_PREFIX};
use crate::secrets::SecretKind;

pub use crate::names::RESERVED_PARAMETER_KEYS;

/// A key under the reserved prefix that the provisioner does not know (upstream's text).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("found unknown parameter key \"{0}\" with reserved namespace csi.storage.k8s.io/")]
pub struct UnknownReservedKey(pub String);

/// The parameters to send to the driver: `params` without the reserved keys.
///
/// The deprecated `csi*SecretName`/`csi*SecretNamespace` keys and the legacy `fstype` key are kept,
/// as upstream keeps them for backwards compatibility.
///
/// Differs from upstream: with several unknown reserved keys the error names the first in sorted
/// order (upstream names whichever Go's map iteration reaches first).
pub fn strip_reserved(
    params: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, UnknownReservedKey> {
    let mut kept = BTreeMap::new();
    for (key, value) in params {
        if key.starts_with(CSI_PARAMETER_PREFIX) {
            if !RESERVED_PARAMETER_KEYS.contains(&key.as_str()) {
                return Err(UnknownReservedKey(key.clone()));
            }
        } else {
            kept.insert(key.clone(), value.clone());
        }
    }
    Ok(kept)
}

/// Adds the `--extra-create-metadata` keys (claim name and namespace, PV name).
pub fn add_extra_create_metadata(
    params: &mut BTreeMap<String, String>,
    claim_name: &str,
    claim_namespace: &str,
    pv_name: &str,
) {
    params.insert(names::PARAM_PVC_NAME.into(), claim_name.into());
    params.insert(names::PARAM_PVC_NAMESPACE.into(), claim_namespace.into());
    params.insert(names::PARAM_PV_NAME.into(), pv_name.into());
}

/// Upstream's deprecation warnings for the deprecated keys present in `params`, for the shell to
/// log at warning level (legacy `fstype` in any case, and the `csi*Secret*` keys).
pub fn deprecation_warnings(params: &BTreeMap<String, String>) -> Vec<String> {
    let mut warnings = Vec::new();
    if params
        .keys()
        .any(|k| k.to_lowercase() == names::LEGACY_FSTYPE)
    {
        warnings.push(names::deprecation_warning(
            names::LEGACY_FSTYPE,
            names::PARAM_FSTYPE,
        ));
    }
    for kind in SecretKind::ALL {
        if let Some((name_key, namespace_key)) = kind.deprecated_keys() {
            for (old, new) in [
                (name_key, kind.name_key()),
                (namespace_key, kind.namespace_key()),
            ] {
                if params.contains_key(old) {
                    warnings.push(names::deprecation_warning(old, new));
                }
            }
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::map;
    use pretty_assertions::assert_eq;

    // TestStripPrefixedCSIParams.
    #[test]
    fn strip_table() {
        let all_known: Vec<(&str, &str)> =
            RESERVED_PARAMETER_KEYS.iter().map(|k| (*k, "v")).collect();
        let deprecated = [
            ("csiProvisionerSecretName", "a"),
            ("csiProvisionerSecretNamespace", "b"),
            ("csiControllerPublishSecretName", "c"),
            ("csiControllerPublishSecretNamespace", "d"),
            ("csiNodeStageSecretName", "e"),
            ("csiNodeStageSecretNamespace", "f"),
            ("csiNodePublishSecretName", "g"),
            ("csiNodePublishSecretNamespace", "h"),
        ];
        type Case = (
            &'static str,
            BTreeMap<String, String>,
            Result<BTreeMap<String, String>, UnknownReservedKey>,
        );
        let cases: Vec<Case> = vec![
            (
                "no prefix",
                map(&[("foo", "bar"), ("bim", "baz")]),
                Ok(map(&[("foo", "bar"), ("bim", "baz")])),
            ),
            (
                "one prefixed",
                map(&[(names::PARAM_FSTYPE, "ext4"), ("bim", "baz")]),
                Ok(map(&[("bim", "baz")])),
            ),
            (
                "prefix in value",
                map(&[("foo", "csi.storage.k8s.io/fstype"), ("bim", "baz")]),
                Ok(map(&[("foo", "csi.storage.k8s.io/fstype"), ("bim", "baz")])),
            ),
            ("all known prefixed", map(&all_known), Ok(BTreeMap::new())),
            (
                "all known deprecated params not stripped",
                map(&deprecated),
                Ok(map(&deprecated)),
            ),
            (
                "legacy fstype kept",
                map(&[("fsType", "xfs")]),
                Ok(map(&[("fsType", "xfs")])),
            ),
            (
                "unknown prefixed var",
                map(&[("csi.storage.k8s.io/bim", "baz")]),
                Err(UnknownReservedKey("csi.storage.k8s.io/bim".into())),
            ),
            (
                "extra metadata keys are reserved too",
                map(&[(names::PARAM_PVC_NAME, "x")]),
                Err(UnknownReservedKey(names::PARAM_PVC_NAME.into())),
            ),
            (
                "first unknown key in sorted order",
                map(&[
                    ("csi.storage.k8s.io/zzz", "1"),
                    ("csi.storage.k8s.io/aaa", "2"),
                ]),
                Err(UnknownReservedKey("csi.storage.k8s.io/aaa".into())),
            ),
            ("empty", BTreeMap::new(), Ok(BTreeMap::new())),
        ];
        for (name, params, want) in cases {
            assert_eq!(strip_reserved(&params), want, "{name}");
        }
    }

    #[test]
    fn unknown_key_message() {
        assert_eq!(
            UnknownReservedKey("csi.storage.k8s.io/bim".into()).to_string(),
            r#"found unknown parameter key "csi.storage.k8s.io/bim" with reserved namespace csi.storage.k8s.io/"#
        );
    }

    #[test]
    fn extra_create_metadata() {
        let mut params = map(&[("foo", "bar")]);
        add_extra_create_metadata(&mut params, "my-pvc", "default", "pvc-1");
        assert_eq!(
            params,
            map(&[
                ("foo", "bar"),
                ("csi.storage.k8s.io/pvc/name", "my-pvc"),
                ("csi.storage.k8s.io/pvc/namespace", "default"),
                ("csi.storage.k8s.io/pv/name", "pvc-1"),
            ])
        );
    }

    #[test]
    fn warnings_for_deprecated_keys() {
        let params = map(&[
            ("FsType", "xfs"),
            ("csiNodeStageSecretName", "s"),
            ("csiNodeStageSecretNamespace", "ns"),
            (names::PARAM_FSTYPE, "ext4"),
        ]);
        assert_eq!(
            deprecation_warnings(&params),
            vec![
                names::deprecation_warning("fstype", "csi.storage.k8s.io/fstype"),
                names::deprecation_warning(
                    "csiNodeStageSecretName",
                    "csi.storage.k8s.io/node-stage-secret-name"
                ),
                names::deprecation_warning(
                    "csiNodeStageSecretNamespace",
                    "csi.storage.k8s.io/node-stage-secret-namespace"
                ),
            ]
        );
        assert!(deprecation_warnings(&map(&[("foo", "bar")])).is_empty());
    }
}
