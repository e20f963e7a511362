//! `kubernetes.io/portworx-volume` ↔ `pxd.portworx.com`.
//!
//! The handle is the Portworx volume ID. The in-tree plugin's auth secret (class parameters
//! and PV annotations `openstorage.io/auth-secret-name` / `-namespace`) becomes the CSI secrets.
//! No topology.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, PersistentVolume, PortworxVolumeSource, SecretReference,
};
use k8s_openapi::api::storage::v1::StorageClass;

use super::{Plugin, go_lower, non_empty, omit_empty, omit_false, set_parameters, spec_mut};
use crate::names::CSI_PARAMETER_PREFIX;

/// The in-tree plugin's secret name (class parameter, PV annotation).
pub(super) const AUTH_SECRET_NAME: &str = "openstorage.io/auth-secret-name";
/// The in-tree plugin's secret namespace.
pub(super) const AUTH_SECRET_NAMESPACE: &str = "openstorage.io/auth-secret-namespace";
/// The CSI operations that get the auth secret.
const SECRET_KINDS: [&str; 6] = [
    "provisioner",
    "controller-publish",
    "node-publish",
    "node-stage",
    "controller-expand",
    "node-expand",
];

/// The auth secret parameters (key in any case) become the name / namespace parameters of each
/// of [`SECRET_KINDS`]; everything else passes unchanged. No parameters at all stay as they
/// were.
pub(super) fn class_to_csi(class: &mut StorageClass) {
    let mut params = BTreeMap::new();
    for (key, value) in class.parameters.iter().flatten() {
        let suffix = match go_lower(key).as_str() {
            AUTH_SECRET_NAME => "name",
            AUTH_SECRET_NAMESPACE => "namespace",
            _ => {
                params.insert(key.clone(), value.clone());
                continue;
            }
        };
        for kind in SECRET_KINDS {
            params.insert(
                format!("{CSI_PARAMETER_PREFIX}{kind}-secret-{suffix}"),
                value.clone(),
            );
        }
    }
    set_parameters(class, params);
}

/// The in-tree source from `spec.csi`.
pub(super) fn csi_to_in_tree(pv: &mut PersistentVolume, csi: CSIPersistentVolumeSource) {
    spec_mut(pv).portworx_volume = Some(PortworxVolumeSource {
        volume_id: csi.volume_handle,
        fs_type: omit_empty(csi.fs_type),
        read_only: omit_false(csi.read_only),
    });
}

/// `spec.csi` from the in-tree source, which is removed. With both auth annotations present,
/// every CSI secret reference but the provisioner's points at that secret. `readOnly` is not
/// carried over, as upstream.
pub(super) fn in_tree_to_csi(pv: &mut PersistentVolume) -> CSIPersistentVolumeSource {
    let source = spec_mut(pv).portworx_volume.take().unwrap_or_default();
    let annotations = pv.metadata.annotations.as_ref();
    let secret = annotations.and_then(|a| {
        Some(SecretReference {
            name: non_empty(a.get(AUTH_SECRET_NAME)?),
            namespace: non_empty(a.get(AUTH_SECRET_NAMESPACE)?),
        })
    });
    CSIPersistentVolumeSource {
        driver: Plugin::Portworx.driver().to_string(),
        volume_handle: source.volume_id,
        fs_type: omit_empty(source.fs_type),
        controller_publish_secret_ref: secret.clone(),
        node_stage_secret_ref: secret.clone(),
        node_publish_secret_ref: secret.clone(),
        controller_expand_secret_ref: secret.clone(),
        node_expand_secret_ref: secret,
        ..CSIPersistentVolumeSource::default()
    }
}
