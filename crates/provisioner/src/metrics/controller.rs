//! sig-storage-lib-external-provisioner's controller metrics (`metrics.New("controller")`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// client_golang's `DefBuckets`, which the library uses for both duration histograms.
pub const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

// Help texts as upstream prints them, minus the final full stop that `Registry::register`
// appends. The "succesfully" spelling is upstream's and is kept so the output matches.
const PROVISION_HELP: &str = "Total number of persistent volumes provisioned succesfully. Broken down by storage class name and source of the claim";
const PROVISION_FAILED_HELP: &str = "Total number of persistent volume provision failed attempts. Broken down by storage class name and source of the claim";
const PROVISION_DURATION_HELP: &str = "Latency in seconds to provision persistent volumes. Failed provisioning attempts are ignored. Broken down by storage class name and source of the claim";
const DELETE_HELP: &str =
    "Total number of persistent volumes deleted succesfully. Broken down by storage class name";
const DELETE_FAILED_HELP: &str =
    "Total number of persistent volume delete failed attempts. Broken down by storage class name";
/// Ours: how many claims the claim controller keeps per-claim memory for.
const REMEMBERED_HELP: &str = "Claims the claim controller keeps memory for (in-flight, failed or waiting claims; bounded by live claims)";
/// Ours: the write-ahead record's size.
const RECORD_HELP: &str = "Claims held by this instance's write-ahead record (CreateVolume in flight or a volume that may exist without a PV); it never holds more than --worker-threads";
const DELETE_DURATION_HELP: &str = "Latency in seconds to delete persistent volumes. Failed deletion attempts are ignored. Broken down by storage class name";

// Fields in alphabetical order, the order client_golang prints labels in.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClaimLabels {
    class: String,
    source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VolumeLabels {
    class: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    Histogram::new(DEFAULT_BUCKETS)
}

/// Upstream's library metrics (`controller_persistentvolumeclaim_provision_*`,
/// `controller_persistentvolume_delete_*`), labelled like upstream. Clones share the data.
#[derive(Clone, Debug)]
pub struct ControllerMetrics {
    provision: Family<ClaimLabels, Counter>,
    provision_failed: Family<ClaimLabels, Counter>,
    provision_duration: Histograms<ClaimLabels>,
    delete: Family<VolumeLabels, Counter>,
    delete_failed: Family<VolumeLabels, Counter>,
    delete_duration: Histograms<VolumeLabels>,
    remembered_claims: Gauge,
    record_entries: Gauge,
}

impl Default for ControllerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl ControllerMetrics {
    /// Empty families; nothing is exposed until [`register`](Self::register).
    pub fn new() -> Self {
        ControllerMetrics {
            provision: Family::default(),
            provision_failed: Family::default(),
            provision_duration: Family::new_with_constructor(duration_histogram),
            delete: Family::default(),
            delete_failed: Family::default(),
            delete_duration: Family::new_with_constructor(duration_histogram),
            remembered_claims: Gauge::default(),
            record_entries: Gauge::default(),
        }
    }

    /// Registers upstream's six families under its names (counters without `_total`, which
    /// the encoder appends), and our `csi_provisioner_claims_remembered` and
    /// `csi_provisioner_record_entries` gauges.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "controller_persistentvolumeclaim_provision",
            PROVISION_HELP,
            self.provision.clone(),
        );
        registry.register(
            "controller_persistentvolumeclaim_provision_failed",
            PROVISION_FAILED_HELP,
            self.provision_failed.clone(),
        );
        registry.register(
            "controller_persistentvolumeclaim_provision_duration_seconds",
            PROVISION_DURATION_HELP,
            self.provision_duration.clone(),
        );
        registry.register(
            "controller_persistentvolume_delete",
            DELETE_HELP,
            self.delete.clone(),
        );
        registry.register(
            "controller_persistentvolume_delete_failed",
            DELETE_FAILED_HELP,
            self.delete_failed.clone(),
        );
        registry.register(
            "controller_persistentvolume_delete_duration_seconds",
            DELETE_DURATION_HELP,
            self.delete_duration.clone(),
        );
        registry.register(
            "csi_provisioner_claims_remembered",
            REMEMBERED_HELP,
            self.remembered_claims.clone(),
        );
        registry.register(
            "csi_provisioner_record_entries",
            RECORD_HELP,
            self.record_entries.clone(),
        );
    }

    /// How many claims the claim controller remembers now.
    pub fn set_remembered_claims(&self, n: usize) {
        self.remembered_claims
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// How many claims the write-ahead record holds now.
    pub fn set_record_entries(&self, n: usize) {
        self.record_entries
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// A successful provisioning of a claim of `class` (`source` = data source kind or "").
    pub fn provision_succeeded(&self, class: &str, source: &str, seconds: f64) {
        let labels = claim_labels(class, source);
        self.provision.get_or_create(&labels).inc();
        self.provision_duration
            .get_or_create(&labels)
            .observe(seconds);
    }

    /// A failed provisioning attempt.
    pub fn provision_failed(&self, class: &str, source: &str) {
        self.provision_failed
            .get_or_create(&claim_labels(class, source))
            .inc();
    }

    /// A successful volume deletion of a PV of `class`.
    pub fn delete_succeeded(&self, class: &str, seconds: f64) {
        let labels = volume_labels(class);
        self.delete.get_or_create(&labels).inc();
        self.delete_duration.get_or_create(&labels).observe(seconds);
    }

    /// A failed deletion attempt.
    pub fn delete_failed(&self, class: &str) {
        self.delete_failed
            .get_or_create(&volume_labels(class))
            .inc();
    }
}

fn claim_labels(class: &str, source: &str) -> ClaimLabels {
    ClaimLabels {
        class: class.to_string(),
        source: source.to_string(),
    }
}

fn volume_labels(class: &str) -> VolumeLabels {
    VolumeLabels {
        class: class.to_string(),
    }
}
