//! The capacity controller's metrics, all computed when scraped from the controller's state:
//! upstream's three `csistoragecapacities_*` gauges (no labels) and our per-object staleness
//! gauges. Series of keys that left the desired set disappear with them.

use std::sync::{Arc, Weak};

use capacity::segment::display;
use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use super::staleness::Freshness;

/// What the controller reports at one scrape.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Objects that should exist (desired keys).
    pub goal: usize,
    /// Desired keys that have an object.
    pub current: usize,
    /// Objects that will be deleted (obsolete or duplicate).
    pub obsolete: usize,
    /// Objects we do not manage that overlap ours (ours).
    pub conflicts: usize,
    pub freshness: Vec<Freshness>,
}

/// The controller state the collector reads.
pub(crate) trait Source: Send + Sync {
    fn snapshot(&self) -> Snapshot;
    /// The `/capacity` view.
    fn view(&self) -> capacity::view::View;
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KeyLabels {
    storageclass: String,
    segment: String,
}

/// The capacity metrics (upstream's `csistoragecapacities_*` plus our staleness metrics),
/// created before the registry is served. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct CapacityMetrics {
    collector: Arc<SnapshotCollector>,
}

impl CapacityMetrics {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers the collector. Until a controller runs, the three gauges read 0.
    pub fn register(&self, registry: &mut Registry) {
        registry.register_collector(Box::new(self.collector.clone()));
    }

    /// The capacity view of the running controller; `None` before it runs (or not leader).
    pub fn view(&self) -> Option<capacity::view::View> {
        let source = self
            .collector
            .source
            .lock()
            .as_ref()
            .and_then(Weak::upgrade)?;
        Some(source.view())
    }

    /// Makes the running controller the source of the values.
    pub(crate) fn set_source(&self, source: Weak<dyn Source>) {
        *self.collector.source.lock() = Some(source);
    }
}

#[derive(Default)]
struct SnapshotCollector {
    source: Mutex<Option<Weak<dyn Source>>>,
}

impl std::fmt::Debug for SnapshotCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotCollector").finish_non_exhaustive()
    }
}

const GAUGES: [(&str, &str); 3] = [
    (
        "csistoragecapacities_desired_goal",
        "Number of CSIStorageCapacity objects that should exist, one per topology segment and storage class",
    ),
    (
        "csistoragecapacities_desired_current",
        "Number of CSIStorageCapacity objects that should exist and do",
    ),
    (
        "csistoragecapacities_obsolete",
        "Number of existing CSIStorageCapacity objects that will be deleted (objects that only need an update are not counted)",
    ),
];

impl Collector for SnapshotCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let source = self.source.lock().as_ref().and_then(Weak::upgrade);
        let snapshot = source.map(|s| s.snapshot()).unwrap_or_default();
        let values = [snapshot.goal, snapshot.current, snapshot.obsolete];
        for ((name, help), value) in GAUGES.into_iter().zip(values) {
            let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX)).encode(metric)?;
        }
        let conflicts = encoder.encode_descriptor(
            "csistoragecapacity_foreign_overlapping",
            "CSIStorageCapacity objects in the provisioner's namespace, not managed by it, whose storage class and topology overlap its own objects (kube-scheduler uses either)",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(i64::try_from(snapshot.conflicts).unwrap_or(i64::MAX)).encode(conflicts)?;
        if snapshot.freshness.is_empty() {
            return Ok(());
        }
        let mut age = encoder.encode_descriptor(
            "csistoragecapacity_seconds_since_last_success",
            "Seconds since GetCapacity last answered for the object of this storage class and segment (since the object was wanted, if it never answered); the published value is that old",
            None,
            MetricType::Gauge,
        )?;
        for f in &snapshot.freshness {
            ConstGauge::new(f.seconds_since_success).encode(age.encode_family(&labels(f))?)?;
        }
        let mut failures = encoder.encode_descriptor(
            "csistoragecapacity_consecutive_failures",
            "GetCapacity failures in a row for the object of this storage class and segment (0 after a success)",
            None,
            MetricType::Gauge,
        )?;
        for f in &snapshot.freshness {
            ConstGauge::new(i64::from(f.consecutive_failures))
                .encode(failures.encode_family(&labels(f))?)?;
        }
        Ok(())
    }
}

fn labels(f: &Freshness) -> KeyLabels {
    KeyLabels {
        storageclass: f.key.class.clone(),
        segment: display(&f.key.segment),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capacity::Key;
    use prometheus_client::encoding::text::encode;

    struct Fixed(Snapshot);
    impl Source for Fixed {
        fn snapshot(&self) -> Snapshot {
            self.0.clone()
        }
        fn view(&self) -> capacity::view::View {
            capacity::view::View::default()
        }
    }

    fn scrape(metrics: &CapacityMetrics) -> String {
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut out = String::new();
        encode(&mut out, &registry).unwrap();
        out
    }

    #[test]
    fn zero_without_a_controller_then_the_snapshot() {
        let metrics = CapacityMetrics::new();
        let text = scrape(&metrics);
        for (name, _) in GAUGES {
            assert!(text.contains(&format!("\n{name} 0\n")), "{name}: {text}");
        }
        assert!(!text.contains("csistoragecapacity_seconds_since_last_success"));

        let source: Arc<dyn Source> = Arc::new(Fixed(Snapshot {
            goal: 3,
            current: 2,
            obsolete: 1,
            conflicts: 2,
            freshness: vec![Freshness {
                key: Key {
                    segment: [("topology.mock.csi/node".to_string(), "n1".to_string())].into(),
                    class: "fast".into(),
                },
                seconds_since_success: 12.5,
                consecutive_failures: 4,
            }],
        }));
        metrics.set_source(Arc::downgrade(&source));
        let text = scrape(&metrics);
        for line in [
            "csistoragecapacities_desired_goal 3",
            "csistoragecapacities_desired_current 2",
            "csistoragecapacities_obsolete 1",
            "csistoragecapacity_foreign_overlapping 2",
            "csistoragecapacity_seconds_since_last_success{storageclass=\"fast\",segment=\"topology.mock.csi/node=n1\"} 12.5",
            "csistoragecapacity_consecutive_failures{storageclass=\"fast\",segment=\"topology.mock.csi/node=n1\"} 4",
        ] {
            assert!(text.contains(line), "{line}: {text}");
        }
        drop(source);
        assert!(scrape(&metrics).contains("\ncsistoragecapacities_desired_goal 0\n"));
    }
}
