//! `kubernetes.io/vsphere-volume` ↔ `csi.vsphere.vmware.com`.
//!
//! The in-tree source names a VMDK path (`[datastore] folder/disk.vmdk`), which is the CSI
//! handle of a migrated PV. A class gets `csimigration=true`, so the driver returns that path
//! as volume attribute `initialvolumefilepath`, from which the in-tree source is rebuilt. The
//! driver has its own zone and region keys, both translated.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, PersistentVolume, VsphereVirtualDiskVolumeSource,
};
use k8s_openapi::api::storage::v1::StorageClass;

use super::{Plugin, go_lower, non_empty_map, omit_empty, set_parameters, spec_mut, topology};
use crate::names::{LEGACY_FSTYPE, PARAM_FSTYPE};

/// The driver's zone key.
pub(super) const ZONE_KEY: &str = "topology.csi.vmware.com/zone";
/// The driver's region key.
pub(super) const REGION_KEY: &str = "topology.csi.vmware.com/region";
const STORAGE_POLICY_NAME: &str = "storagepolicyname";
const CSI_MIGRATION: &str = "csimigration";
const INITIAL_VOLUME_FILE_PATH: &str = "initialvolumefilepath";
/// In-tree parameters the driver takes under a `-migrationparam` suffix.
const MIGRATION_PARAMS: [&str; 8] = [
    "datastore",
    "diskformat",
    "hostfailurestotolerate",
    "forceprovisioning",
    "cachereservation",
    "diskstripes",
    "objectspacereservation",
    "iopslimit",
];

/// `fstype` → `csi.storage.k8s.io/fstype`, `storagepolicyname` kept, the parameters of
/// [`MIGRATION_PARAMS`] get the `-migrationparam` suffix (keys lowercased), anything else is
/// dropped (upstream logs it). `csimigration=true` is added; zone keys of `allowedTopologies`
/// become the driver's zone key.
pub(super) fn class_to_csi(class: &mut StorageClass) {
    let mut params = BTreeMap::new();
    for (key, value) in class.parameters.iter().flatten() {
        let lower = go_lower(key);
        let key = match lower.as_str() {
            LEGACY_FSTYPE => PARAM_FSTYPE.to_string(),
            STORAGE_POLICY_NAME => lower,
            l if MIGRATION_PARAMS.contains(&l) => format!("{l}-migrationparam"),
            _ => continue,
        };
        params.insert(key, value.clone());
    }
    params.insert(CSI_MIGRATION.to_string(), "true".to_string());
    if let Some(allowed) = class
        .allowed_topologies
        .as_deref()
        .filter(|a| !a.is_empty())
    {
        class.allowed_topologies = Some(topology::translate_allowed(allowed, ZONE_KEY));
    }
    set_parameters(class, params);
}

/// The in-tree source from `spec.csi`: the VMDK path from `initialvolumefilepath` (empty
/// without it). The driver's zone and region keys become the Kubernetes ones, and each label,
/// unless present, gets the first (sorted) value.
pub(super) fn csi_to_in_tree(pv: &mut PersistentVolume, csi: CSIPersistentVolumeSource) {
    let volume_path = csi
        .volume_attributes
        .as_ref()
        .and_then(|a| a.get(INITIAL_VOLUME_FILE_PATH))
        .cloned()
        .unwrap_or_default();
    let (zone_key, region_key) = topology::labels_in_use(pv);
    topology::rename_key(pv, ZONE_KEY, zone_key);
    topology::rename_key(pv, REGION_KEY, region_key);
    for key in [zone_key, region_key] {
        if let Some(first) = topology::values_of(pv, key).into_iter().next() {
            topology::set_label_if_absent(pv, key, first);
        }
    }
    spec_mut(pv).vsphere_volume = Some(VsphereVirtualDiskVolumeSource {
        volume_path,
        fs_type: omit_empty(csi.fs_type),
        ..VsphereVirtualDiskVolumeSource::default()
    });
}

/// `spec.csi` from the in-tree source, which is removed. The Kubernetes zone and region keys of
/// the affinity become the driver's; without them, the zone and region labels (one value each,
/// not split) become requirements.
pub(super) fn in_tree_to_csi(pv: &mut PersistentVolume) -> CSIPersistentVolumeSource {
    let source = spec_mut(pv).vsphere_volume.take().unwrap_or_default();
    let (zone_key, region_key) = topology::labels_in_use(pv);
    for (in_tree_key, csi_key) in [(zone_key, ZONE_KEY), (region_key, REGION_KEY)] {
        if !topology::values_of(pv, in_tree_key).is_empty() {
            topology::rename_key(pv, in_tree_key, csi_key);
        } else if let Some(value) = topology::label(pv, in_tree_key).map(str::to_string) {
            topology::add_requirement(pv, csi_key, [value.as_str()]);
        }
    }
    let attributes = source
        .storage_policy_name
        .filter(|p| !p.is_empty())
        .map(|p| (STORAGE_POLICY_NAME.to_string(), p));
    CSIPersistentVolumeSource {
        driver: Plugin::VSphere.driver().to_string(),
        volume_handle: source.volume_path,
        fs_type: omit_empty(source.fs_type),
        volume_attributes: non_empty_map(attributes.into_iter().collect()),
        ..CSIPersistentVolumeSource::default()
    }
}
