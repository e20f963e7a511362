//! `kubernetes.io/cinder` ↔ `cinder.csi.openstack.org`.
//!
//! The handle is the Cinder volume ID. The zone key is translated, but no region is derived:
//! an OpenStack region cannot be told from a zone name.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, CinderPersistentVolumeSource, PersistentVolume,
};
use k8s_openapi::api::storage::v1::StorageClass;

use super::{Plugin, go_lower, omit_empty, omit_false, set_parameters, spec_mut, topology};
use crate::names::{LEGACY_FSTYPE, PARAM_FSTYPE};

/// The driver's zone key.
pub(super) const TOPOLOGY_KEY: &str = "topology.cinder.csi.openstack.org/zone";

/// `fstype` → `csi.storage.k8s.io/fstype`; every other parameter passes unchanged (the driver
/// understands them all, `availability` included, which therefore does not become topology);
/// zone keys of `allowedTopologies` become the driver's.
pub(super) fn class_to_csi(class: &mut StorageClass) {
    let params: BTreeMap<String, String> = class
        .parameters
        .iter()
        .flatten()
        .map(|(key, value)| {
            let key = if go_lower(key) == LEGACY_FSTYPE {
                PARAM_FSTYPE.to_string()
            } else {
                key.clone()
            };
            (key, value.clone())
        })
        .collect();
    if let Some(allowed) = class
        .allowed_topologies
        .as_deref()
        .filter(|a| !a.is_empty())
    {
        class.allowed_topologies = Some(topology::translate_allowed(allowed, TOPOLOGY_KEY));
    }
    set_parameters(class, params);
}

/// The in-tree source from `spec.csi`; the zone key becomes the Kubernetes one.
pub(super) fn csi_to_in_tree(pv: &mut PersistentVolume, csi: CSIPersistentVolumeSource) {
    topology::csi_to_in_tree(pv, TOPOLOGY_KEY);
    spec_mut(pv).cinder = Some(CinderPersistentVolumeSource {
        volume_id: csi.volume_handle,
        fs_type: omit_empty(csi.fs_type),
        read_only: omit_false(csi.read_only),
        secret_ref: None,
    });
}

/// `spec.csi` from the in-tree source, which is removed (its `secretRef` is not carried over,
/// as upstream).
pub(super) fn in_tree_to_csi(pv: &mut PersistentVolume) -> CSIPersistentVolumeSource {
    let source = spec_mut(pv).cinder.take().unwrap_or_default();
    topology::in_tree_to_csi(pv, TOPOLOGY_KEY);
    CSIPersistentVolumeSource {
        driver: Plugin::Cinder.driver().to_string(),
        volume_handle: source.volume_id,
        read_only: omit_false(source.read_only),
        fs_type: omit_empty(source.fs_type),
        ..CSIPersistentVolumeSource::default()
    }
}
