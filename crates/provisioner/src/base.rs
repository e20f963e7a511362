//! What start-up hands to the controllers once it is done (before leader election).

use std::sync::Arc;

use controller_kit::workqueue::WorkQueueMetrics;
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
    pub(crate) capacity_client: Client,
    pub(crate) driver: Driver,
    pub(crate) identity: String,
    /// Distributed provisioning: this instance's node.
    pub(crate) node: Option<Arc<NodeDeployment>>,
    pub(crate) volume_attributes_class: bool,
    pub(crate) queue_metrics: WorkQueueMetrics,
    pub(crate) controller_metrics: ControllerMetrics,
    pub(crate) capacity_metrics: CapacityMetrics,
}
