//! The `workqueue_*` metric families of Kubernetes component-base, labelled by queue name.
//!
//! One [`WorkQueueMetrics`] is shared by all queues of the process, as upstream's global
//! families are. Counters are registered without the `_total` suffix because
//! prometheus-client appends it. The two "in flight" gauges are computed when scraped
//! (upstream refreshes them every 500 ms from a goroutine); that needs no background task and
//! is exact at scrape time.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// component-base's `ExponentialBuckets(10e-9, 10, 10)`: 10 ns to 10 s, written out so the
/// bucket bounds print without floating-point noise.
pub const DURATION_BUCKETS: [f64; 10] = [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0];

/// The `name` label every workqueue metric carries.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct QueueLabel {
    /// The queue's name, e.g. `claims`.
    pub name: String,
}

/// Labels of `csi_provisioner_sync_errors_total`: the queue and the kind of error.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct ErrorLabels {
    /// The handler's error kind ([`super::Failure::kind`]).
    pub kind: String,
    /// The queue's name.
    pub name: String,
}

type HistogramFamily = Family<QueueLabel, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// A queue as the scrape-time collector sees it.
pub(crate) trait InFlight: Send + Sync {
    /// The queue's name label.
    fn queue_name(&self) -> &str;
    /// Moves delayed keys whose time has come into the queue, then returns the seconds of
    /// work in progress (summed over keys being processed) and the longest single one.
    fn refresh(&self) -> (f64, f64);
}

/// The shared workqueue metric families. Cheap to clone.
#[derive(Clone, Debug)]
pub struct WorkQueueMetrics {
    depth: Family<QueueLabel, Gauge>,
    adds: Family<QueueLabel, Counter>,
    queue_duration: HistogramFamily,
    work_duration: HistogramFamily,
    retries: Family<QueueLabel, Counter>,
    errors: Family<ErrorLabels, Counter>,
    in_flight: Arc<InFlightCollector>,
}

impl Default for WorkQueueMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkQueueMetrics {
    /// Creates the families; nothing is exposed until [`register`](Self::register) is called.
    pub fn new() -> Self {
        Self {
            depth: Family::default(),
            adds: Family::default(),
            queue_duration: Family::new_with_constructor(duration_histogram),
            work_duration: Family::new_with_constructor(duration_histogram),
            retries: Family::default(),
            errors: Family::default(),
            in_flight: Arc::new(InFlightCollector::default()),
        }
    }

    /// Registers component-base's seven families (their help texts; the registry adds the
    /// final full stop) and ours, `csi_provisioner_sync_errors_total`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "workqueue_depth",
            "Current depth of workqueue",
            self.depth.clone(),
        );
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            self.adds.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            self.queue_duration.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            self.work_duration.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            self.retries.clone(),
        );
        registry.register_collector(Box::new(self.in_flight.clone()));
        registry.register(
            "csi_provisioner_sync_errors",
            "Failed syncs that will be retried, by work queue and kind of error",
            self.errors.clone(),
        );
    }

    /// The handles of one queue: label lookups happen once, not per operation.
    pub(crate) fn for_queue(&self, name: &str) -> QueueMetrics {
        let label = QueueLabel {
            name: name.to_string(),
        };
        QueueMetrics {
            depth: self.depth.get_or_create_owned(&label),
            adds: self.adds.get_or_create_owned(&label),
            queue_duration: self.queue_duration.get_or_create_owned(&label),
            work_duration: self.work_duration.get_or_create_owned(&label),
            retries: self.retries.get_or_create_owned(&label),
            errors: Some((self.errors.clone(), label.name)),
        }
    }

    /// Exports zero-valued series of queue `name` before the queue exists. client-go creates
    /// them with a queue, and upstream builds its queues before leader election, so a standby
    /// has them too; ours builds them on becoming leader. They stay after the queue is gone.
    pub fn announce(&self, name: &str) {
        let _ = self.for_queue(name);
        self.in_flight.announced.lock().insert(name.to_string());
    }

    pub(crate) fn track(&self, queue: Weak<dyn InFlight>) {
        self.in_flight.queues.lock().push(queue);
    }
}

/// One queue's metric handles. The default (unregistered) handles count into nothing
/// anyone reads, which keeps the queue code free of `Option` checks.
#[derive(Clone, Debug)]
pub(crate) struct QueueMetrics {
    pub depth: Gauge,
    pub adds: Counter,
    pub queue_duration: Histogram,
    pub work_duration: Histogram,
    pub retries: Counter,
    /// The shared errors family and this queue's name (`None`: not exported).
    pub errors: Option<(Family<ErrorLabels, Counter>, String)>,
}

impl QueueMetrics {
    /// Counts a failed sync of `kind`.
    pub fn error(&self, kind: &str) {
        if let Some((family, name)) = &self.errors {
            let labels = ErrorLabels {
                kind: kind.to_string(),
                name: name.clone(),
            };
            family.get_or_create(&labels).inc();
        }
    }
}

impl Default for QueueMetrics {
    fn default() -> Self {
        Self {
            depth: Gauge::default(),
            adds: Counter::default(),
            queue_duration: duration_histogram(),
            work_duration: duration_histogram(),
            retries: Counter::default(),
            errors: None,
        }
    }
}

/// Computes `workqueue_unfinished_work_seconds` and
/// `workqueue_longest_running_processor_seconds` at scrape time.
#[derive(Default)]
struct InFlightCollector {
    queues: Mutex<Vec<Weak<dyn InFlight>>>,
    /// Queue names whose gauges read 0 while no such queue lives ([`WorkQueueMetrics::announce`]).
    announced: Mutex<std::collections::BTreeSet<String>>,
}

impl std::fmt::Debug for InFlightCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InFlightCollector").finish_non_exhaustive()
    }
}

impl Collector for InFlightCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // Two queues may share a name (upstream has two `claims` queues): sum the work,
        // take the longest processor.
        let mut per_name: BTreeMap<String, (f64, f64)> = self
            .announced
            .lock()
            .iter()
            .map(|name| (name.clone(), (0.0, 0.0)))
            .collect();
        let live: Vec<Arc<dyn InFlight>> = {
            let mut queues = self.queues.lock();
            queues.retain(|q| q.strong_count() > 0);
            queues.iter().filter_map(Weak::upgrade).collect()
        };
        for queue in live {
            let (unfinished, longest) = queue.refresh();
            let entry = per_name.entry(queue.queue_name().to_string()).or_default();
            entry.0 += unfinished;
            entry.1 = entry.1.max(longest);
        }
        let families = [
            (
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has done that is in progress and hasn't been observed by \
                 work_duration. Large values indicate stuck threads. One can deduce the number of \
                 stuck threads by observing the rate at which this increases.",
                0,
            ),
            (
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running.",
                1,
            ),
        ];
        for (name, help, field) in families {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (queue, values) in &per_name {
                let value = if field == 0 { values.0 } else { values.1 };
                let label = QueueLabel {
                    name: queue.clone(),
                };
                ConstGauge::new(value).encode(metric.encode_family(&label)?)?;
            }
        }
        Ok(())
    }
}
