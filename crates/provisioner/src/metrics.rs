//! The metrics registry of the binary and the provisioning controller's own metrics.
//!
//! STUB: interface fixed by the lead; implementation to be filled in (see the HTTP/metrics task).

use prometheus_client::registry::Registry;

/// Upstream's library metrics (`controller_persistentvolumeclaim_provision_*`,
/// `controller_persistentvolume_delete_*`), labelled like upstream.
#[derive(Clone, Debug, Default)]
pub struct ControllerMetrics {}

impl ControllerMetrics {
    pub fn new() -> Self {
        ControllerMetrics {}
    }
    pub fn register(&self, _registry: &mut Registry) {}
    /// A successful provisioning of a claim of `class` (`source` = data source kind or "").
    pub fn provision_succeeded(&self, _class: &str, _source: &str, _seconds: f64) {}
    /// A failed provisioning attempt.
    pub fn provision_failed(&self, _class: &str, _source: &str) {}
    /// A successful volume deletion of a PV of `class`.
    pub fn delete_succeeded(&self, _class: &str, _seconds: f64) {}
    /// A failed deletion attempt.
    pub fn delete_failed(&self, _class: &str) {}
}

/// Registers process metrics (`process_cpu_seconds_total`, `process_resident_memory_bytes`, ...).
pub fn register_process_metrics(_registry: &mut Registry) {}
