//! Cloning a claim: upstream's checks of the source claim and its PV (`getPVCSource`), and
//! which pending clones still hold a source claim's deletion (the cloning-protection finalizer).

use csi::v1::VolumeContentSource;
use csi::v1::volume_content_source::{Type, VolumeSource};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};

use crate::claim;
use crate::names;
use crate::quantity::parse_quantity;

/// Upstream's one message for every problem with the source's PV (details go to the log).
pub const SOURCE_NOT_BOUND: &str = "claim in dataSource not bound or invalid";

/// What the clone checks look at.
#[derive(Debug, Clone, Copy)]
pub struct CloneInputs<'a> {
    /// The new claim.
    pub claim: &'a PersistentVolumeClaim,
    /// The name the claim's data source gives.
    pub name: &'a str,
    /// The source claim, `None` when it does not exist.
    pub source: Option<&'a PersistentVolumeClaim>,
    /// The source claim's PV, `None` when it does not exist (or was not fetched).
    pub source_pv: Option<&'a PersistentVolume>,
    /// The StorageClass's provisioner (the source volume must be the same driver's).
    pub provisioner: &'a str,
}

/// A problem found by [`clone_source`]: the message for the event, and for PV problems the
/// detail upstream only logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloneRefusal {
    /// Upstream's error text.
    pub message: String,
    /// What exactly is wrong with the source PV (for the log).
    pub detail: Option<String>,
}

impl CloneRefusal {
    fn plain(message: String) -> Self {
        CloneRefusal {
            message,
            detail: None,
        }
    }

    fn pv(detail: String) -> Self {
        CloneRefusal {
            message: SOURCE_NOT_BOUND.to_string(),
            detail: Some(detail),
        }
    }
}

/// The source claim's checks that need no PV; `Ok` names the PV to fetch next.
pub fn source_volume_name<'a>(inputs: &CloneInputs<'a>) -> Result<&'a str, CloneRefusal> {
    let CloneInputs {
        claim,
        name,
        source,
        ..
    } = *inputs;
    let ns = claim.metadata.namespace.as_deref().unwrap_or_default();
    let Some(source) = source else {
        return Err(CloneRefusal::plain(format!(
            "error getting PVC {name} (namespace {}) from api server: persistentvolumeclaim {} not found",
            gofmt::quote(ns),
            gofmt::quote(name)
        )));
    };
    let phase = source
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default();
    if phase != "Bound" {
        return Err(CloneRefusal::plain(format!(
            "the PVC DataSource {name} must have a status of Bound.  Got {}",
            if phase.is_empty() { "no phase" } else { phase }
        )));
    }
    if source.metadata.deletion_timestamp.is_some() {
        return Err(CloneRefusal::plain(format!(
            "the PVC DataSource {name} is currently being deleted"
        )));
    }
    let source_name = source.metadata.name.as_deref().unwrap_or_default();
    let source_spec = source.spec.as_ref();
    if source_spec
        .and_then(|s| s.storage_class_name.as_ref())
        .is_none()
    {
        return Err(CloneRefusal::plain(format!(
            "the source PVC ({source_name}) storageclass cannot be empty"
        )));
    }
    if claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_ref())
        .is_none()
    {
        return Err(CloneRefusal::plain(format!(
            "the requested PVC ({}) storageclass cannot be empty",
            claim.metadata.name.as_deref().unwrap_or_default()
        )));
    }
    let requested = bytes(claim);
    let source_size = bytes(source);
    if requested < source_size {
        return Err(CloneRefusal::plain(format!(
            "error, new PVC request must be greater than or equal in size to the specified PVC data source, requested {requested} but source is {source_size}"
        )));
    }
    match source_spec.and_then(|s| s.volume_name.as_deref()) {
        Some(volume) if !volume.is_empty() => Ok(volume),
        _ => Err(CloneRefusal::plain(format!(
            "volume name is empty in source PVC {source_name}"
        ))),
    }
}

/// All of upstream's clone checks; `Ok` is the content source naming the source volume.
pub fn clone_source(inputs: &CloneInputs<'_>) -> Result<VolumeContentSource, CloneRefusal> {
    let volume_name = source_volume_name(inputs)?;
    let source = inputs
        .source
        .unwrap_or_else(|| unreachable!("checked above"));
    let source_ref = format!(
        "{}/{}",
        source.metadata.namespace.as_deref().unwrap_or_default(),
        source.metadata.name.as_deref().unwrap_or_default()
    );
    let Some(pv) = inputs.source_pv else {
        return Err(CloneRefusal::pv(format!(
            "volume {volume_name} of claim {source_ref} not found"
        )));
    };
    let spec = pv.spec.as_ref();
    let Some(csi) = spec.and_then(|s| s.csi.as_ref()) else {
        return Err(CloneRefusal::pv(format!(
            "volume {volume_name} of claim {source_ref} is not a CSI volume"
        )));
    };
    if csi.driver != inputs.provisioner {
        return Err(CloneRefusal::pv(format!(
            "volume {volume_name} of claim {source_ref} is handled by driver {}, not {}",
            csi.driver, inputs.provisioner
        )));
    }
    let Some(claim_ref) = spec.and_then(|s| s.claim_ref.as_ref()) else {
        return Err(CloneRefusal::pv(format!(
            "volume {volume_name} of claim {source_ref} is not bound"
        )));
    };
    if claim_ref.uid != source.metadata.uid
        || claim_ref.namespace != source.metadata.namespace
        || claim_ref.name != source.metadata.name
    {
        return Err(CloneRefusal::pv(format!(
            "volume {volume_name} of claim {source_ref} is bound to another claim"
        )));
    }
    let phase = pv
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default();
    if phase != "Bound" {
        return Err(CloneRefusal::pv(format!(
            "volume {volume_name} of claim {source_ref} is {phase:?}, not \"Bound\""
        )));
    }
    let wants_block = inputs
        .claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_mode.as_deref())
        == Some(names::VOLUME_MODE_BLOCK);
    let source_block = spec
        .and_then(|s| s.volume_mode.as_deref())
        .unwrap_or("Filesystem")
        != "Filesystem";
    match (source_block, wants_block) {
        (true, false) => Err(CloneRefusal::plain(
            "the source PVC and destination PVCs must have the same volume mode for cloning.  Source is Block, but new PVC requested Filesystem".to_string(),
        )),
        (false, true) => Err(CloneRefusal::plain(
            "the source PVC and destination PVCs must have the same volume mode for cloning.  Source is Filesystem, but new PVC requested Block".to_string(),
        )),
        _ => Ok(VolumeContentSource {
            r#type: Some(Type::Volume(VolumeSource {
                volume_id: csi.volume_handle.clone(),
            })),
        }),
    }
}

/// The claim's storage request in bytes (0 when absent or unreadable, as Go's zero Quantity).
fn bytes(claim: &PersistentVolumeClaim) -> i64 {
    claim::storage_request(claim)
        .and_then(|q| parse_quantity(q).ok())
        .unwrap_or(0)
}

/// Whether the provisioner of `driver_name` looks after a held source's cloning protection. A
/// clone is filled only from a volume of its own driver, so a source whose storage-provisioner
/// annotation names another driver is that driver's to release; checking it here would cost
/// every `--node-deployment` instance a list of its namespace for nothing. A source bound to a
/// volume made beforehand has no annotation and may be ours.
pub fn guards_source(source: &PersistentVolumeClaim, driver_name: &str) -> bool {
    claim::provisioner_of(source).is_none() || claim::is_ours(source, driver_name)
}

/// The pending clones that hold `source`'s deletion: claims in its namespace whose
/// `spec.dataSource` names it and that are still `Pending` (upstream's cloning-protection
/// controller; `dataSourceRef`-only and cross-namespace clones do not count, as upstream).
/// Sorted names; empty means the finalizer may go.
pub fn pending_clones<'a>(
    source: &PersistentVolumeClaim,
    claims: impl IntoIterator<Item = &'a PersistentVolumeClaim>,
) -> Vec<String> {
    let namespace = source.metadata.namespace.as_deref();
    let name = source.metadata.name.as_deref().unwrap_or_default();
    let mut held: Vec<String> = claims
        .into_iter()
        .filter(|c| c.metadata.namespace.as_deref() == namespace)
        .filter(|c| {
            c.spec
                .as_ref()
                .and_then(|s| s.data_source.as_ref())
                .is_some_and(|d| d.kind == names::PVC_KIND && d.name == name)
        })
        .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending"))
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    held.sort();
    held
}
