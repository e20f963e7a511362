//! The csi-lib-utils call histogram `csi_sidecar_operations_seconds`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tonic::Code;

use crate::status::go_code_name;

/// Metric name, exactly as the Go sidecars expose it.
pub const METRIC_NAME: &str = "csi_sidecar_operations_seconds";

/// Help text, exactly as the Go sidecars expose it (component-base adds the `[ALPHA]` prefix).
pub const METRIC_HELP: &str =
    "[ALPHA] Container Storage Interface operation duration with gRPC error code status total";

/// Histogram buckets in seconds, as in csi-lib-utils.
pub const BUCKETS: [f64; 13] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 25.0, 50.0, 120.0, 300.0, 600.0,
];

/// The `driver_name` label before the driver's name is known.
pub const UNKNOWN_DRIVER: &str = "unknown-driver";

/// Label pairs in alphabetical order: that is the label order the Go client prints. A list,
/// not a struct, because `migrated` is there only for migration drivers.
type CallLabels = Vec<(&'static str, String)>;

fn new_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// Durations of CSI calls by driver, method and gRPC status code. Clones share the same data,
/// so the binary can register one clone and hand another to [`crate::Client`].
///
/// The driver name starts as `unknown-driver`, as upstream; set it with
/// [`CallMetrics::set_driver_name`] (or [`crate::Client::set_driver_name`]) once
/// GetPluginInfo has answered. Calls made before that (Probe, GetPluginInfo) keep the
/// `unknown-driver` label, as they do upstream.
#[derive(Clone, Debug)]
pub struct CallMetrics {
    family: Family<CallLabels, Histogram, fn() -> Histogram>,
    driver_name: Arc<RwLock<String>>,
    /// Whether calls carry the `migrated` label (the driver replaces an in-tree plugin).
    migration: Arc<AtomicBool>,
}

impl Default for CallMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl CallMetrics {
    /// An empty histogram family with driver name `unknown-driver`.
    pub fn new() -> Self {
        Self {
            family: Family::new_with_constructor(new_histogram as fn() -> Histogram),
            driver_name: Arc::new(RwLock::new(UNKNOWN_DRIVER.to_string())),
            migration: Arc::default(),
        }
    }

    /// Adds the histogram to `registry` under [`METRIC_NAME`] with [`METRIC_HELP`], verbatim:
    /// it is registered as a collector because `Registry::register` would append a full stop to
    /// the help text.
    pub fn register(&self, registry: &mut Registry) {
        registry.register_collector(Box::new(self.clone()));
    }

    /// Sets the `driver_name` label for later calls; an empty name means `unknown-driver`.
    pub fn set_driver_name(&self, name: &str) {
        let value = if name.is_empty() {
            UNKNOWN_DRIVER
        } else {
            name
        };
        *self
            .driver_name
            .write()
            .unwrap_or_else(PoisonError::into_inner) = value.to_string();
    }

    /// The current `driver_name` label.
    pub fn driver_name(&self) -> String {
        self.driver_name
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// From now on every call carries `migrated="true"|"false"`, as csi-lib-utils' metrics
    /// manager does for a driver that replaces an in-tree plugin.
    pub fn enable_migration_label(&self) {
        self.migration.store(true, Ordering::Relaxed);
    }

    /// Records one finished call of the full gRPC `method` (e.g.
    /// `/csi.v1.Controller/CreateVolume`); `migrated` says whether it served an in-tree volume
    /// (shown only once [`CallMetrics::enable_migration_label`] was called).
    pub fn record(&self, method: &str, code: Code, elapsed: Duration, migrated: bool) {
        let mut labels: CallLabels = vec![
            ("driver_name", self.driver_name()),
            ("grpc_status_code", go_code_name(code).to_string()),
            ("method_name", method.to_string()),
        ];
        if self.migration.load(Ordering::Relaxed) {
            labels.push(("migrated", migrated.to_string()));
        }
        self.family
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }
}

impl Collector for CallMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let metric_type = self.family.metric_type();
        let metric = encoder.encode_descriptor(METRIC_NAME, METRIC_HELP, None, metric_type)?;
        self.family.encode(metric)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    fn scrape(metrics: &CallMetrics) -> String {
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut out = String::new();
        encode(&mut out, &registry).unwrap();
        out
    }

    #[test]
    fn exposition_matches_upstream_names_labels_and_buckets() {
        let metrics = CallMetrics::new();
        metrics.set_driver_name("hostpath.csi.k8s.io");
        metrics.record(
            "/csi.v1.Controller/ControllerGetCapabilities",
            Code::Ok,
            Duration::from_secs(20),
            false,
        );
        let out = scrape(&metrics);
        let labels = r#"driver_name="hostpath.csi.k8s.io",grpc_status_code="OK",method_name="/csi.v1.Controller/ControllerGetCapabilities""#;
        let mut want = vec![
            format!("# HELP {METRIC_NAME} {METRIC_HELP}"),
            format!("# TYPE {METRIC_NAME} histogram"),
            format!("{METRIC_NAME}_sum{{{labels}}} 20.0"),
            format!("{METRIC_NAME}_count{{{labels}}} 1"),
        ];
        for (le, count) in [
            ("0.1", 0),
            ("0.25", 0),
            ("0.5", 0),
            ("1.0", 0),
            ("2.5", 0),
            ("5.0", 0),
            ("10.0", 0),
            ("15.0", 0),
            ("25.0", 1),
            ("50.0", 1),
            ("120.0", 1),
            ("300.0", 1),
            ("600.0", 1),
            ("+Inf", 1),
        ] {
            // prometheus-client puts `le` first, Go last; scrapers do not care about label order.
            want.push(format!(
                "{METRIC_NAME}_bucket{{le=\"{le}\",{labels}}} {count}"
            ));
        }
        for line in want {
            assert!(
                out.lines().any(|l| l == line),
                "missing {line:?} in:\n{out}"
            );
        }
    }

    #[test]
    fn driver_name_defaults_to_unknown_and_clones_share_it() {
        let metrics = CallMetrics::new();
        let clone = metrics.clone();
        clone.record(
            "/csi.v1.Identity/Probe",
            Code::Unavailable,
            Duration::from_millis(1),
            false,
        );
        metrics.set_driver_name("d");
        clone.record(
            "/csi.v1.Identity/Probe",
            Code::Ok,
            Duration::from_millis(1),
            false,
        );
        metrics.set_driver_name("");
        assert_eq!(clone.driver_name(), UNKNOWN_DRIVER);
        let out = scrape(&metrics);
        assert!(out.contains(r#"{le="+Inf",driver_name="unknown-driver",grpc_status_code="Unavailable",method_name="/csi.v1.Identity/Probe"} 1"#), "{out}");
        assert!(out.contains(r#"{le="+Inf",driver_name="d",grpc_status_code="OK",method_name="/csi.v1.Identity/Probe"} 1"#), "{out}");
    }

    #[test]
    fn migration_drivers_label_every_call() {
        let metrics = CallMetrics::new();
        metrics.set_driver_name("pd.csi.storage.gke.io");
        let call = "/csi.v1.Controller/DeleteVolume";
        metrics.record(call, Code::Ok, Duration::from_millis(1), true);
        let out = scrape(&metrics);
        assert!(!out.contains("migrated"), "{out}");
        metrics.enable_migration_label();
        metrics.record(call, Code::Ok, Duration::from_millis(1), true);
        metrics.record(call, Code::Ok, Duration::from_millis(1), false);
        let out = scrape(&metrics);
        for migrated in ["true", "false"] {
            let want = format!(
                r#"{{le="+Inf",driver_name="pd.csi.storage.gke.io",grpc_status_code="OK",method_name="{call}",migrated="{migrated}"}} 1"#
            );
            assert!(out.contains(&want), "missing {want} in:\n{out}");
        }
    }
}
