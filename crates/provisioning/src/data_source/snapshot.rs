//! Restoring from a VolumeSnapshot: the fields of the snapshot API we read, and upstream's
//! checks (`getSnapshotSource`) in upstream's order.

use std::collections::BTreeMap;

use csi::v1::VolumeContentSource;
use csi::v1::volume_content_source::{SnapshotSource, Type};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use crate::claim;
use crate::names;
use crate::quantity::parse_quantity;

/// API group of the snapshot objects.
pub const API_GROUP: &str = "snapshot.storage.k8s.io";
/// API version of the snapshot objects we read.
pub const API_VERSION: &str = "v1";

/// The parts of a `VolumeSnapshot` the checks read.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshot {
    /// Name, namespace, UID, finalizers, deletion timestamp.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Set by the snapshot controller.
    #[serde(default)]
    pub status: Option<VolumeSnapshotStatus>,
}

/// `VolumeSnapshot.status`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotStatus {
    /// The VolumeSnapshotContent it is bound to.
    #[serde(default)]
    pub bound_volume_snapshot_content_name: Option<String>,
    /// Whether a volume can be restored from it.
    #[serde(default)]
    pub ready_to_use: Option<bool>,
    /// A quantity string (`1Gi`).
    #[serde(default)]
    pub restore_size: Option<String>,
}

/// The parts of a `VolumeSnapshotContent` the checks read.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotContent {
    /// Name and annotations.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Driver, snapshot reference, source volume mode.
    #[serde(default)]
    pub spec: VolumeSnapshotContentSpec,
    /// Set by csi-snapshotter.
    #[serde(default)]
    pub status: Option<VolumeSnapshotContentStatus>,
}

/// `VolumeSnapshotContent.spec`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotContentSpec {
    /// The CSI driver holding the snapshot.
    #[serde(default)]
    pub driver: String,
    /// The VolumeSnapshot it is bound to.
    #[serde(default)]
    pub volume_snapshot_ref: SnapshotRef,
    /// The mode of the volume the snapshot was taken from.
    #[serde(default)]
    pub source_volume_mode: Option<String>,
}

/// The content's `volumeSnapshotRef`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct SnapshotRef {
    /// Snapshot name.
    #[serde(default)]
    pub name: Option<String>,
    /// Snapshot namespace.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Snapshot UID.
    #[serde(default)]
    pub uid: Option<String>,
}

/// `VolumeSnapshotContent.status`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotContentStatus {
    /// The driver's snapshot id.
    #[serde(default)]
    pub snapshot_handle: Option<String>,
}

/// What the restore checks look at. `content` is `None` when its GET failed.
#[derive(Debug, Clone, Copy)]
pub struct RestoreInputs<'a> {
    /// The new claim.
    pub claim: &'a PersistentVolumeClaim,
    /// The name the claim's data source gives.
    pub name: &'a str,
    /// The snapshot the claim names.
    pub snapshot: &'a VolumeSnapshot,
    /// The content the snapshot is bound to.
    pub content: Option<&'a VolumeSnapshotContent>,
    /// The StorageClass's provisioner (the content must be for it).
    pub provisioner: &'a str,
    /// The StorageClass's name, for the message when it is not.
    pub class: &'a str,
    /// `--prevent-volume-mode-conversion`.
    pub prevent_volume_mode_conversion: bool,
}

/// What the checks found: the content source, and a warning to log when the claim asks for
/// more than the snapshot holds (the driver must expand).
#[derive(Debug, Clone, PartialEq)]
pub struct Restore {
    /// For the CreateVolumeRequest.
    pub content_source: VolumeContentSource,
    /// To log.
    pub warning: Option<String>,
}

/// Upstream's `getSnapshotSource` checks, in order; the error is the message upstream wraps
/// (see [`super::DataSource::error`]). `content: None` means the content the snapshot names
/// could not be read.
pub fn restore_source(inputs: &RestoreInputs<'_>) -> Result<Restore, String> {
    let RestoreInputs {
        claim,
        name,
        snapshot,
        ..
    } = *inputs;
    if snapshot.metadata.deletion_timestamp.is_some()
        && !has_finalizer(&snapshot.metadata, names::SNAPSHOT_SOURCE_FINALIZER)
    {
        // With our finalizer a restore started before the deletion: finish it.
        return Err(format!("snapshot {name} is being deleted"));
    }
    let not_bound = || format!("snapshot {name} not bound");
    let status = snapshot.status.as_ref();
    let Some(content_name) = status.and_then(|s| s.bound_volume_snapshot_content_name.as_deref())
    else {
        return Err(not_bound());
    };
    let Some(content) = inputs.content else {
        return Err(format!(
            "error getting snapshotcontent {content_name} for snapshot {name}"
        ));
    };
    let meta = &snapshot.metadata;
    let reference = &content.spec.volume_snapshot_ref;
    if reference.uid != meta.uid
        || reference.namespace != meta.namespace
        || reference.name != meta.name
    {
        return Err(format!(
            "snapshotcontent {content_name} for snapshot {name} is bound to a different snapshot"
        ));
    }
    if content.spec.driver != inputs.provisioner {
        return Err(format!(
            "snapshotcontent {content_name} for snapshot {name} is not handled by CSI driver of StorageClass {}",
            inputs.class
        ));
    }
    if status.and_then(|s| s.ready_to_use) != Some(true) {
        return Err(format!("snapshot {name} is not Ready"));
    }
    let Some(handle) = content
        .status
        .as_ref()
        .and_then(|s| s.snapshot_handle.as_deref())
    else {
        return Err(format!("snapshot handle {name} is not available"));
    };
    let warning = match status.and_then(|s| s.restore_size.as_deref()) {
        Some(size) => size_warning(claim, name, size)?,
        None => None,
    };
    if inputs.prevent_volume_mode_conversion {
        check_mode_conversion(claim, content_name, content)?;
    }
    Ok(Restore {
        content_source: VolumeContentSource {
            r#type: Some(Type::Snapshot(SnapshotSource {
                snapshot_id: handle.to_string(),
            })),
        },
        warning,
    })
}

/// A claim smaller than the snapshot is refused; a larger one only warned about.
fn size_warning(
    claim: &PersistentVolumeClaim,
    name: &str,
    restore_size: &str,
) -> Result<Option<String>, String> {
    let claim_name = claim.metadata.name.as_deref().unwrap_or_default();
    let Some(request) = claim::storage_request(claim) else {
        return Err(format!(
            "error getting capacity for PVC {claim_name} when creating snapshot {name}"
        ));
    };
    let requested = parse_quantity(request).map_err(|e| e.to_string())?;
    let snapshot_size = parse_quantity(restore_size)
        .map_err(|e| format!("invalid restoreSize {restore_size:?} of snapshot {name}: {e}"))?;
    if requested < snapshot_size {
        return Err(format!(
            "requested volume size {requested} is less than the size {snapshot_size} for the source snapshot {name}"
        ));
    }
    Ok((requested > snapshot_size).then(|| {
        format!(
            "requested volume size {requested} is greater than the size {snapshot_size} for the source snapshot {name}. Volume plugin needs to handle volume expansion."
        )
    }))
}

/// `--prevent-volume-mode-conversion`: a restore into another volume mode needs the content's
/// `allow-volume-mode-change` annotation set to a true boolean.
fn check_mode_conversion(
    claim: &PersistentVolumeClaim,
    content_name: &str,
    content: &VolumeSnapshotContent,
) -> Result<(), String> {
    let claim_mode = claim.spec.as_ref().and_then(|s| s.volume_mode.as_deref());
    let (Some(source_mode), Some(claim_mode)) =
        (content.spec.source_volume_mode.as_deref(), claim_mode)
    else {
        return Ok(());
    };
    if source_mode == claim_mode {
        return Ok(());
    }
    let ns = claim.metadata.namespace.as_deref().unwrap_or_default();
    let claim_name = claim.metadata.name.as_deref().unwrap_or_default();
    let prefix = format!(
        "requested volume {ns}/{claim_name} modifies the mode of the source volume but does not have permission to do so. "
    );
    let annotation = names::ANN_ALLOW_VOLUME_MODE_CHANGE;
    let annotations: BTreeMap<String, String> =
        content.metadata.annotations.clone().unwrap_or_default();
    let Some(value) = annotations.get(annotation) else {
        return Err(format!(
            "{prefix}{annotation} annotation is not present on snapshotcontent {content_name}"
        ));
    };
    match gofmt::parse_bool(value) {
        Ok(true) => Ok(()),
        Ok(false) => Err(format!(
            "{prefix}{annotation} is set to false on snapshotcontent {content_name}"
        )),
        Err(e) => Err(format!(
            "{prefix}failed to convert {annotation} annotation value to boolean with error: {e}"
        )),
    }
}

/// Whether `meta` lists `finalizer`.
pub fn has_finalizer(meta: &ObjectMeta, finalizer: &str) -> bool {
    meta.finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == finalizer))
}

/// The snapshots (`namespace`, `name`) a claim still waiting to be provisioned (phase
/// `Pending` or none) names through `dataSource` or `dataSourceRef` (which may point to another
/// namespace); none for any other claim.
pub fn wanted_by(claim: &PersistentVolumeClaim) -> Vec<(&str, &str)> {
    let phase = claim.status.as_ref().and_then(|s| s.phase.as_deref());
    if !matches!(phase, None | Some("") | Some("Pending")) {
        return Vec::new();
    }
    let own_ns = claim.metadata.namespace.as_deref().unwrap_or_default();
    let Some(spec) = claim.spec.as_ref() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(s) = &spec.data_source
        && is_snapshot(&s.kind, s.api_group.as_deref())
    {
        out.push((own_ns, s.name.as_str()));
    }
    if let Some(s) = &spec.data_source_ref
        && is_snapshot(&s.kind, s.api_group.as_deref())
    {
        let ns = s
            .namespace
            .as_deref()
            .filter(|n| !n.is_empty())
            .unwrap_or(own_ns);
        out.push((ns, s.name.as_str()));
    }
    out
}

/// A VolumeSnapshot reference: that kind, with no API group or the snapshot one (as
/// upstream's sweep; another group's `VolumeSnapshot` is a populator's).
fn is_snapshot(kind: &str, api_group: Option<&str>) -> bool {
    kind == names::SNAPSHOT_KIND && matches!(api_group, None | Some(API_GROUP))
}

/// The orphan sweep: of the snapshots holding our finalizer (`namespace`, `name`), those no
/// claim wants ([`wanted_by`]). Their finalizer can go: a restore that needed it either
/// finished or was given up.
pub fn unreferenced<'a>(
    protected: &'a [(String, String)],
    claims: &[&PersistentVolumeClaim],
) -> Vec<&'a (String, String)> {
    let wanted: std::collections::HashSet<(&str, &str)> =
        claims.iter().flat_map(|c| wanted_by(c)).collect();
    protected
        .iter()
        .filter(|(ns, name)| !wanted.contains(&(ns.as_str(), name.as_str())))
        .collect()
}
