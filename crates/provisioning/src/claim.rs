//! Which claims this provisioner handles, and the claim fields every later step reads.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PersistentVolumeClaimSpec};
use k8s_openapi::api::storage::v1::StorageClass;

use crate::names;
use crate::quantity::{QuantityError, parse_quantity};

/// What to do with a claim seen by the claim controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShouldProvision {
    /// `spec.volumeName` is set: the claim is bound or being bound. Ignore it.
    AlreadyBound,
    /// The storage-provisioner annotation names another provisioner (or is absent). Ignore it.
    NotOurs,
    /// The claim's StorageClass does not exist (yet). Retry with backoff: the class may appear.
    ClassMissing,
    /// `WaitForFirstConsumer` class and no `volume.kubernetes.io/selected-node` yet. Ignore it
    /// until the scheduler selects a node.
    WaitForNode,
    /// The StorageClass names another provisioner (changed after the claim was annotated).
    /// Stop silently, like upstream's `errStopProvision`.
    ClassForOtherProvisioner,
    /// Provision a volume for it.
    Provision,
}

/// The claim's spec, or an empty one.
fn spec(claim: &PersistentVolumeClaim) -> Option<&PersistentVolumeClaimSpec> {
    claim.spec.as_ref()
}

/// An annotation's value; present-but-empty counts as present.
pub fn annotation<'a>(claim: &'a PersistentVolumeClaim, key: &str) -> Option<&'a str> {
    claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// The provisioner the claim asks for: the GA annotation, else the beta one.
pub fn provisioner_of(claim: &PersistentVolumeClaim) -> Option<&str> {
    annotation(claim, names::ANN_STORAGE_PROVISIONER)
        .or_else(|| annotation(claim, names::ANN_BETA_STORAGE_PROVISIONER))
}

/// The node picked by the scheduler: the GA annotation, else the alpha one (may be empty).
pub fn selected_node(claim: &PersistentVolumeClaim) -> Option<&str> {
    annotation(claim, names::ANN_SELECTED_NODE)
        .or_else(|| annotation(claim, names::ANN_ALPHA_SELECTED_NODE))
}

/// Whether the claim waits for the scheduler to pick a node: not being deleted, not bound,
/// no `selected-node`.
pub fn waits_for_node(claim: &PersistentVolumeClaim) -> bool {
    claim.metadata.deletion_timestamp.is_none() && unplaced(claim)
}

/// Not bound, and no `selected-node`.
fn unplaced(claim: &PersistentVolumeClaim) -> bool {
    spec(claim)
        .and_then(|s| s.volume_name.as_deref())
        .is_none_or(str::is_empty)
        && selected_node(claim).is_none()
}

/// Whether a change of published capacity is a reason to look at the claim again: an unbound
/// claim without a node. In central mode only a late-binding one (its `NotEnoughCapacity`
/// explanation may change); an Immediate claim is provisioned whatever is published, so
/// looking again would only repeat a failed attempt's events and writes. With
/// `--node-deployment` (`distributed`) an Immediate one too: which instance takes it, and
/// whether one can, follows what the instances publish.
pub fn rechecked_on_capacity(
    claim: &PersistentVolumeClaim,
    class: Option<&StorageClass>,
    distributed: bool,
) -> bool {
    let late = || {
        class.is_some_and(|c| {
            c.volume_binding_mode.as_deref() == Some(names::WAIT_FOR_FIRST_CONSUMER)
        })
    };
    unplaced(claim) && (distributed || late())
}

/// The claim's StorageClass name like `GetPersistentVolumeClaimClass`: the legacy
/// `volume.beta.kubernetes.io/storage-class` annotation wins over `spec.storageClassName`.
pub fn class_name(claim: &PersistentVolumeClaim) -> Option<&str> {
    annotation(claim, names::ANN_BETA_STORAGE_CLASS)
        .or_else(|| spec(claim).and_then(|s| s.storage_class_name.as_deref()))
}

/// The `class` and `source` labels of the claim's provisioning metrics, as upstream's
/// `updateProvisionStats`: `spec.storageClassName` alone (not the beta annotation) and the
/// kind of `spec.dataSource`, each empty when unset.
pub fn metric_labels(claim: &PersistentVolumeClaim) -> (&str, &str) {
    let spec = spec(claim);
    (
        spec.and_then(|s| s.storage_class_name.as_deref())
            .unwrap_or_default(),
        spec.and_then(|s| s.data_source.as_ref())
            .map_or("", |d| d.kind.as_str()),
    )
}

/// Whether the claim asks for a raw block volume.
pub fn is_block(claim: &PersistentVolumeClaim) -> bool {
    spec(claim).and_then(|s| s.volume_mode.as_deref()) == Some(names::VOLUME_MODE_BLOCK)
}

/// The claim's access modes in order (`[]` when unset).
pub fn access_modes(claim: &PersistentVolumeClaim) -> &[String] {
    spec(claim)
        .and_then(|s| s.access_modes.as_deref())
        .unwrap_or_default()
}

/// The raw `spec.resources.requests.storage` string, if any.
pub fn storage_request(claim: &PersistentVolumeClaim) -> Option<&str> {
    spec(claim)
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get(names::RESOURCE_STORAGE))
        .map(|q| q.0.as_str())
}

/// Bytes the claim requests (`0` without a storage request), rounded up like Go's `Value()`.
pub fn requested_bytes(claim: &PersistentVolumeClaim) -> Result<i64, QuantityError> {
    storage_request(claim).map_or(Ok(0), parse_quantity)
}

/// The claim's `spec.volumeAttributesClassName` when set and non-empty.
pub fn volume_attributes_class(claim: &PersistentVolumeClaim) -> Option<&str> {
    spec(claim)
        .and_then(|s| s.volume_attributes_class_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// Whether the claim asks our driver for a volume: its storage-provisioner annotation names the
/// driver, or names the in-tree plugin the driver replaces while `pv.kubernetes.io/migrated-to`
/// names the driver (upstream's `ShouldProvision` plus the library's known provisioners).
pub fn is_ours(claim: &PersistentVolumeClaim, driver_name: &str) -> bool {
    let migrated = || annotation(claim, names::ANN_MIGRATED_TO) == Some(driver_name);
    match provisioner_of(claim) {
        Some(p) if p == driver_name => true,
        Some(p) => Some(p) == crate::migration::in_tree_name(driver_name) && migrated(),
        None => false,
    }
}

/// Whether the claim is ours to provision now, in upstream's order of checks (the library's
/// `shouldProvision` plus the class check at the start of `provisionClaimOperation`).
///
/// `class` is the StorageClass named by [`class_name`], looked up by the caller.
///
/// CSI migration: when `driver_name` replaces an in-tree plugin (for example `ebs.csi.aws.com`
/// and `kubernetes.io/aws-ebs`), a claim naming the in-tree plugin is ours when
/// kube-controller-manager has marked it `pv.kubernetes.io/migrated-to: <driver>` (see
/// [`is_ours`]), and a class naming the in-tree plugin is ours too (upstream's
/// `AdditionalProvisionerNames`).
pub fn should_provision(
    claim: &PersistentVolumeClaim,
    class: Option<&StorageClass>,
    driver_name: &str,
) -> ShouldProvision {
    if spec(claim)
        .and_then(|s| s.volume_name.as_deref())
        .is_some_and(|v| !v.is_empty())
    {
        return ShouldProvision::AlreadyBound;
    }
    if !is_ours(claim, driver_name) {
        return ShouldProvision::NotOurs;
    }
    let in_tree = crate::migration::in_tree_name(driver_name);
    let known = |p: &str| p == driver_name || Some(p) == in_tree;
    let Some(class) = class else {
        return ShouldProvision::ClassMissing;
    };
    let late_binding = class.volume_binding_mode.as_deref() == Some(names::WAIT_FOR_FIRST_CONSUMER);
    // The library looks only at the GA annotation here, and an empty value means "not yet".
    let node_selected = annotation(claim, names::ANN_SELECTED_NODE).is_some_and(|n| !n.is_empty());
    if late_binding && !node_selected {
        return ShouldProvision::WaitForNode;
    }
    if !known(&class.provisioner) {
        return ShouldProvision::ClassForOtherProvisioner;
    }
    ShouldProvision::Provision
}

#[cfg(test)]
mod tests;
