//! `kubernetes.io/gce-pd` ↔ `pd.csi.storage.gke.io`.
//!
//! The CSI handle is `projects/<project>/zones/<zone>/disks/<name>` or, for regional disks,
//! `projects/<project>/regions/<region>/disks/<name>`. The in-tree source only has the disk
//! name, so the project is `UNSPECIFIED` and the zone comes from the PV's zone label (also
//! `UNSPECIFIED` without one); the attacher repairs the handle from the node ID later.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, GCEPersistentDiskVolumeSource, PersistentVolume,
};
use k8s_openapi::api::storage::v1::StorageClass;

use super::{
    Plugin, TranslationError, omit_empty, omit_false, parse_partition, pv_name, set_parameters,
    spec_mut, topology,
};
use crate::names::{LEGACY_FSTYPE, PARAM_FSTYPE};

/// The driver's zone key.
pub(super) const TOPOLOGY_KEY: &str = "topology.gke.io/zone";
/// Stands for the project (and the zone) the in-tree source does not know.
pub(super) const UNSPECIFIED: &str = "UNSPECIFIED";

/// `fstype` → `csi.storage.k8s.io/fstype`; `zone`/`zones` → allowed topology on the driver's
/// key; other parameters pass unchanged.
pub(super) fn class_to_csi(class: &mut StorageClass) -> Result<(), TranslationError> {
    let (params, legacy) = topology::split_parameters(class, |lower, key, value, params| {
        let key = if lower == LEGACY_FSTYPE {
            PARAM_FSTYPE
        } else {
            key
        };
        params.insert(key.to_string(), value.to_string());
    });
    topology::class_topology(class, legacy, TOPOLOGY_KEY)?;
    set_parameters(class, params);
    Ok(())
}

/// The in-tree source from `spec.csi`: the disk name is the handle's sixth `/`-separated part.
pub(super) fn csi_to_in_tree(
    pv: &mut PersistentVolume,
    csi: CSIPersistentVolumeSource,
) -> Result<(), TranslationError> {
    let pd_name = csi
        .volume_handle
        .split('/')
        .nth(5)
        .ok_or_else(|| TranslationError::Malformed {
            pv: pv_name(pv),
            field: "spec.csi.volumeHandle",
            value: csi.volume_handle.clone(),
            reason: "want projects/<project>/zones/<zone>/disks/<name> or projects/<project>/regions/<region>/disks/<name>".into(),
        })?
        .to_string();
    let partition = match csi
        .volume_attributes
        .as_ref()
        .and_then(|a| a.get("partition"))
    {
        Some(p) if !p.is_empty() => parse_partition(pv, p)?,
        _ => None,
    };
    topology::csi_to_in_tree(pv, TOPOLOGY_KEY);
    topology::add_regions(pv, region_of)?;
    spec_mut(pv).gce_persistent_disk = Some(GCEPersistentDiskVolumeSource {
        pd_name,
        fs_type: omit_empty(csi.fs_type),
        read_only: omit_false(csi.read_only),
        partition,
    });
    Ok(())
}

/// `spec.csi` from the in-tree source, which is removed. One zone in the zone label (beta label
/// first) gives a zonal handle, several (`a__b`) a regional one.
pub(super) fn in_tree_to_csi(
    pv: &mut PersistentVolume,
) -> Result<CSIPersistentVolumeSource, TranslationError> {
    let source = spec_mut(pv).gce_persistent_disk.take().unwrap_or_default();
    let zones_label = match topology::label(pv, topology::BETA_ZONE) {
        Some(beta) if !beta.is_empty() => beta,
        _ => topology::label(pv, topology::ZONE).unwrap_or_default(),
    };
    let zones: Vec<String> = zones_label
        .split(topology::MULTI_ZONE_SEPARATOR)
        .map(str::to_string)
        .collect();
    let handle = match zones.as_slice() {
        [zone] if !zone.is_empty() => zonal_handle(zone, &source.pd_name),
        [_] => zonal_handle(UNSPECIFIED, &source.pd_name),
        _ => {
            let region = region_of(&zones).map_err(|reason| TranslationError::Region {
                pv: pv_name(pv),
                zones: zones.clone(),
                reason,
            })?;
            format!(
                "projects/{UNSPECIFIED}/regions/{region}/disks/{}",
                source.pd_name
            )
        }
    };
    let partition = match source.partition.unwrap_or(0) {
        0 => String::new(),
        p => p.to_string(),
    };
    topology::in_tree_to_csi(pv, TOPOLOGY_KEY);
    let spec = spec_mut(pv);
    spec.access_modes = spec
        .access_modes
        .take()
        .map(backward_compatible_access_modes);
    Ok(CSIPersistentVolumeSource {
        driver: Plugin::GcePd.driver().to_string(),
        volume_handle: handle,
        read_only: omit_false(source.read_only),
        fs_type: omit_empty(source.fs_type),
        volume_attributes: Some(BTreeMap::from([("partition".to_string(), partition)])),
        ..CSIPersistentVolumeSource::default()
    })
}

fn zonal_handle(zone: &str, pd_name: &str) -> String {
    format!("projects/{UNSPECIFIED}/zones/{zone}/disks/{pd_name}")
}

/// The in-tree plugin never enforced access modes and attached every disk read-write to one
/// node; the CSI driver and attacher refuse ReadWriteMany and ReadWriteOnce+ReadOnlyMany. So:
/// ReadWriteMany counts as ReadWriteOnce, ReadWriteOnce wins over ReadOnlyMany, ReadOnlyMany
/// alone stays, anything else becomes ReadWriteOnce.
pub(super) fn backward_compatible_access_modes(modes: Vec<String>) -> Vec<String> {
    let seen: BTreeSet<&str> = modes
        .iter()
        .map(|m| match m.as_str() {
            "ReadWriteMany" => "ReadWriteOnce",
            m => m,
        })
        .collect();
    let mode = if seen.contains("ReadOnlyMany") && !seen.contains("ReadWriteOnce") {
        "ReadOnlyMany"
    } else {
        "ReadWriteOnce"
    };
    vec![mode.to_string()]
}

/// The GCE region of zones `<locale>-<region>-<zone>` (exactly three `-`-separated parts): the
/// first two parts, the same for every zone.
pub(super) fn region_of(zones: &[String]) -> Result<String, String> {
    if zones.is_empty() {
        return Err("no zones specified".into());
    }
    let mut regions = BTreeSet::new();
    for zone in zones {
        match zone.split('-').collect::<Vec<_>>().as_slice() {
            [locale, region, _] => regions.insert(format!("{locale}-{region}")),
            _ => {
                return Err(format!(
                    "zone {zone:?} is not of the form <locale>-<region>-<zone>"
                ));
            }
        };
    }
    match regions.len() {
        1 => Ok(regions.pop_first().unwrap_or_default()),
        _ => Err(format!("they span the regions {regions:?}")),
    }
}
