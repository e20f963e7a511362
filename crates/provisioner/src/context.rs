//! What every controller shares: clients, the driver, caches, events, metrics. Each
//! controller's flags come as its own config (`ClaimsConfig`, `CapacityConfig`), not here.

use std::sync::Arc;

use controller_kit::events::EventRecorder;
use kube::Client;

use crate::caches::Caches;
use crate::capacity_controller::RefreshHandle;
use crate::driver::Driver;
use crate::metrics::ControllerMetrics;
use crate::node::NodeDeployment;

/// Shared, cheaply clonable state of the running provisioner.
#[derive(Clone)]
pub struct Context {
    /// Main API client (`--kube-api-qps/burst`).
    pub client: Client,
    /// The background lane of the same budget, for writes that can wait.
    pub background_client: Client,
    pub driver: Driver,
    /// `storage.kubernetes.io/csiProvisionerIdentity` of this instance.
    pub identity: String,
    /// Distributed provisioning (`--node-deployment`): this instance's node.
    pub node: Option<Arc<NodeDeployment>>,
    pub caches: Caches,
    /// Events of the provisioning controller (source: `<driver>_<host>_<uuid>`, as upstream).
    pub recorder: EventRecorder,
    /// Events of upstream's csiProvisioner itself (source: `external-provisioner`).
    pub populator_recorder: EventRecorder,
    pub metrics: ControllerMetrics,
    /// Tells the capacity controller which objects a volume change made stale.
    pub capacity: Option<RefreshHandle>,
    /// The VolumeAttributesClass gate after start-up discovery (upstream turns it off when the
    /// API server lacks storage.k8s.io/v1 VolumeAttributesClass and it was not set explicitly).
    pub volume_attributes_class: bool,
}
