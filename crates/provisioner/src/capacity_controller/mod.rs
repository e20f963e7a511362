//! The storage capacity controller: publishes one CSIStorageCapacity per (segment, class).
//!
//! STUB: interface fixed by the lead; implementation to be filled in (see the capacity task).

use std::time::Duration;

use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::{Node, VolumeNodeAffinity};
use k8s_openapi::api::storage::v1::{CSINode, CSIStorageCapacity, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::PartialObjectMeta;
use prometheus_client::registry::Registry;
use runtime::reflect::Change;
use tokio_util::sync::CancellationToken;

use crate::caches::Caches;

/// Settings from flags and environment.
#[derive(Clone, Debug)]
pub struct CapacityConfig {
    pub driver_name: String,
    /// `NAMESPACE`.
    pub namespace: String,
    /// `managed-by` label value.
    pub managed_by: String,
    /// Owner from `--capacity-ownerref-level`, already looked up.
    pub owner: Option<OwnerReference>,
    pub poll_interval: Duration,
    pub workers: usize,
    pub include_immediate: bool,
    pub retry_interval_start: Duration,
    pub retry_interval_max: Duration,
    /// `--timeout` for GetCapacity.
    pub timeout: Duration,
}

/// The capacity metrics (upstream's `csistoragecapacities_*` plus our staleness metrics),
/// created before the registry is served.
#[derive(Clone, Debug, Default)]
pub struct CapacityMetrics {}

impl CapacityMetrics {
    pub fn new() -> Self {
        CapacityMetrics {}
    }
    pub fn register(&self, _registry: &mut Registry) {}
}

/// The change streams the capacity controller consumes (it also reads the shared caches).
pub struct CapacityChanges {
    pub classes: BoxStream<'static, Change<StorageClass>>,
    pub csi_nodes: BoxStream<'static, Change<CSINode>>,
    pub nodes: BoxStream<'static, Change<PartialObjectMeta<Node>>>,
    pub capacities: BoxStream<'static, Change<CSIStorageCapacity>>,
}

/// How the provisioning controllers talk to the capacity controller.
#[derive(Clone, Debug)]
pub struct RefreshHandle {}

impl RefreshHandle {
    /// A volume of `class` was created or deleted: refresh the objects it affects now, ahead
    /// of periodic work (bursts coalesce per object).
    pub fn volume_changed(&self, _class: &str, _affinity: Option<&VolumeNodeAffinity>) {}
    /// Provisioning for `class` failed in a way that may have changed capacity.
    pub fn class_changed(&self, _class: &str) {}
    /// When no published segment of `class` can hold `requested` bytes, the message to put on
    /// a waiting claim; `None` when one can, or before the first full publication.
    pub fn explain(&self, _class: &str, _requested: i64) -> Option<String> {
        None
    }
    /// Bumped whenever published capacity changes, so waiting claims can be re-checked.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        tokio::sync::watch::channel(0).1
    }
}

/// The controller.
pub struct CapacityController {}

impl CapacityController {
    pub fn new(
        _config: CapacityConfig,
        _client: kube::Client,
        _csi: csi::Client,
        _caches: Caches,
        _metrics: CapacityMetrics,
        _queue_metrics: &runtime::workqueue::WorkQueueMetrics,
    ) -> (CapacityController, RefreshHandle) {
        (CapacityController {}, RefreshHandle {})
    }
    /// Runs until `cancel`.
    pub async fn run(self, _changes: CapacityChanges, _cancel: CancellationToken) {}
}

/// Resolves `--capacity-ownerref-level` from `POD_NAME` in `NAMESPACE` (-1 none, 0 the pod,
/// 1 its controller, 2 that one's controller, ...).
pub async fn lookup_owner(
    _client: &kube::Client,
    _namespace: &str,
    _pod: &str,
    _level: Option<u32>,
) -> Result<Option<OwnerReference>, kube::Error> {
    Ok(None)
}
