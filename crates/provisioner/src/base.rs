//! What start-up hands to the controllers once it is done (before leader election).

use std::sync::Arc;

use controller_kit::client::Budget;
use controller_kit::workqueue::WorkQueueMetrics;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Client;

use crate::capacity_controller::CapacityMetrics;
use crate::driver::Driver;
use crate::metrics::ControllerMetrics;
use crate::node::NodeDeployment;

/// Everything set up before leader election.
pub(crate) struct Base {
    pub(crate) opts: Arc<cli::Options>,
    pub(crate) client: Client,
    pub(crate) background_client: Client,
    /// The write-ahead record's client, and the budget it takes its turns from (shared with
    /// `client`): see `controller_kit::client::ThrottleLayer::prepaid`.
    pub(crate) prepaid: (Client, Budget),
    pub(crate) capacity_client: Client,
    pub(crate) driver: Driver,
    pub(crate) identity: String,
    /// Distributed provisioning: this instance's node.
    pub(crate) node: Option<Arc<NodeDeployment>>,
    pub(crate) volume_attributes_class: bool,
    /// Capacity tracking: the owner of our CSIStorageCapacity objects, resolved before leader
    /// election as upstream does, so a bad `POD_NAME` or RBAC fails every replica at once.
    pub(crate) capacity_owner: Option<OwnerReference>,
    pub(crate) queue_metrics: WorkQueueMetrics,
    pub(crate) controller_metrics: ControllerMetrics,
    pub(crate) capacity_metrics: CapacityMetrics,
}
