//! `kubernetes.io/azure-disk` ↔ `disk.csi.azure.com`.
//!
//! The handle is the disk URI; the in-tree source also needs the disk name, cut from the URI.
//! Only managed disks migrate. Caching mode and fsType travel as volume attributes
//! `cachingmode` and `fstype`, and the kind as `kind=Managed`.
//!
//! Only classes get their topology translated: upstream leaves the node affinity and labels of
//! Azure disk PVs alone in both directions.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    AzureDiskVolumeSource, CSIPersistentVolumeSource, PersistentVolume,
};
use k8s_openapi::api::storage::v1::StorageClass;

use super::{
    Plugin, TranslationError, go_lower, omit_empty, omit_false, pv_name, set_parameters, spec_mut,
    topology,
};

/// The driver's zone key.
pub(super) const TOPOLOGY_KEY: &str = "topology.disk.csi.azure.com/zone";
const MANAGED: &str = "Managed";
const ATTR_KIND: &str = "kind";
const ATTR_CACHING_MODE: &str = "cachingmode";
const ATTR_FSTYPE: &str = "fstype";
const MANAGED_MARKERS: [&str; 2] = ["/subscriptions/", "/resourceGroups/"];
/// The last marker of a managed disk URI; the `.` matches any character, as in upstream's
/// pattern.
const MANAGED_DISKS: (&str, &str) = ("/providers/Microsoft", "Compute/disks/");
const UNMANAGED_MARKERS: [&str; 2] = ["http", "://"];
const UNMANAGED_DISKS: &str = "/vhds/";

/// `zone`/`zones` → allowed topology on the driver's key; every other parameter passes
/// unchanged (`fstype` included: the driver reads it). In regions without availability zones
/// the in-tree zone is a number (`"0"`, `"1"`, ...) where the driver expects `""`, so numeric
/// values on the driver's key become empty.
pub(super) fn class_to_csi(class: &mut StorageClass) -> Result<(), TranslationError> {
    let (params, legacy) = topology::split_parameters(class, |_, key, value, params| {
        params.insert(key.to_string(), value.to_string());
    });
    topology::class_topology(class, legacy, TOPOLOGY_KEY)?;
    for value in class
        .allowed_topologies
        .iter_mut()
        .flatten()
        .flat_map(|t| t.match_label_expressions.iter_mut().flatten())
        .filter(|e| e.key == TOPOLOGY_KEY)
        .flat_map(|e| e.values.iter_mut())
    {
        if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
            value.clear();
        }
    }
    set_parameters(class, params);
    Ok(())
}

/// The in-tree source from `spec.csi`. Upstream always sets fsType, readOnly and kind here
/// (pointer fields, so empty and `false` are kept); attributes `cachingmode` and `fstype`
/// (any case) win when not empty.
pub(super) fn csi_to_in_tree(
    pv: &mut PersistentVolume,
    csi: CSIPersistentVolumeSource,
) -> Result<(), TranslationError> {
    let disk_name =
        disk_name(&csi.volume_handle).map_err(|reason| TranslationError::Malformed {
            pv: pv_name(pv),
            field: "spec.csi.volumeHandle",
            value: csi.volume_handle.clone(),
            reason,
        })?;
    let mut source = AzureDiskVolumeSource {
        disk_name,
        disk_uri: csi.volume_handle,
        fs_type: Some(csi.fs_type.unwrap_or_default()),
        read_only: Some(csi.read_only.unwrap_or(false)),
        kind: Some(MANAGED.to_string()),
        caching_mode: None,
    };
    for (key, value) in csi.volume_attributes.iter().flatten() {
        if value.is_empty() {
            continue;
        }
        match go_lower(key).as_str() {
            ATTR_CACHING_MODE => source.caching_mode = Some(value.clone()),
            ATTR_FSTYPE => source.fs_type = Some(value.clone()),
            _ => {}
        }
    }
    spec_mut(pv).azure_disk = Some(source);
    Ok(())
}

/// `spec.csi` from the in-tree source, which is removed.
pub(super) fn in_tree_to_csi(
    pv: &mut PersistentVolume,
) -> Result<CSIPersistentVolumeSource, TranslationError> {
    let source = spec_mut(pv).azure_disk.take().unwrap_or_default();
    if let Some(kind) = source.kind.filter(|k| !k.eq_ignore_ascii_case(MANAGED)) {
        return Err(TranslationError::UnsupportedAzureDiskKind {
            pv: pv_name(pv),
            kind,
        });
    }
    let mut attributes = BTreeMap::from([(ATTR_KIND.to_string(), MANAGED.to_string())]);
    if let Some(mode) = source.caching_mode {
        attributes.insert(ATTR_CACHING_MODE.to_string(), mode);
    }
    if let Some(fs_type) = &source.fs_type {
        attributes.insert(ATTR_FSTYPE.to_string(), fs_type.clone());
    }
    Ok(CSIPersistentVolumeSource {
        driver: Plugin::AzureDisk.driver().to_string(),
        volume_handle: source.disk_uri,
        read_only: omit_false(source.read_only),
        fs_type: omit_empty(source.fs_type),
        volume_attributes: Some(attributes),
        ..CSIPersistentVolumeSource::default()
    })
}

/// The disk name at the end of a disk URI: managed
/// `.../subscriptions/<id>/resourceGroups/<group>/providers/Microsoft.Compute/disks/<name>`,
/// or unmanaged (the URI starts with `http`, any case) `http...://<host>/vhds/<name>`.
///
/// This reproduces upstream's unanchored patterns: the match stays within one line, and the
/// name is everything after the last `disks/` (`vhds/`) marker that leaves a non-empty name.
pub(super) fn disk_name(uri: &str) -> Result<String, String> {
    let managed = !(uri.len() > 4 && uri.as_bytes()[..4].eq_ignore_ascii_case(b"http"));
    let found = uri.split('\n').find_map(|line| {
        if managed {
            name_after(line, MANAGED_MARKERS, |line, at| {
                let rest = line[at..].strip_prefix(MANAGED_DISKS.0)?;
                let wildcard = rest.chars().next()?;
                rest[wildcard.len_utf8()..].strip_prefix(MANAGED_DISKS.1)
            })
        } else {
            name_after(line, UNMANAGED_MARKERS, |line, at| {
                line[at..].strip_prefix(UNMANAGED_DISKS)
            })
        }
    });
    found.map(str::to_string).ok_or_else(|| {
        if managed {
            "want .../subscriptions/<id>/resourceGroups/<group>/providers/Microsoft.Compute/disks/<name>".into()
        } else {
            "want http(s)://<host>/vhds/<name>".into()
        }
    })
}

/// The non-empty text after the last final marker (`final_at` answers what follows a marker
/// starting at a byte offset, or `None`) that comes after both leading markers, in order.
fn name_after<'a>(
    line: &'a str,
    leading: [&str; 2],
    final_at: impl Fn(&'a str, usize) -> Option<&'a str>,
) -> Option<&'a str> {
    let first = line.find(leading[0])? + leading[0].len();
    let second = first + line[first..].find(leading[1])? + leading[1].len();
    line.char_indices()
        .rev()
        .map(|(at, _)| at)
        .take_while(|&at| at >= second)
        .filter_map(|at| final_at(line, at))
        .find(|name| !name.is_empty())
}
