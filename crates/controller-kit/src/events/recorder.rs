//! The recorder handle and its delivery task: the only I/O of the event pipeline.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};

use super::correlator::{Decision, EventCorrelator};
use super::queue::{Pending, Pushed};
use super::{EventType, make_event};

/// Events queued for delivery before new ones are dropped (client-go's `maxQueuedEvents`: its
/// broadcaster forwards each event at once to the watcher that writes it to the API server,
/// whose channel of that length is where events wait).
pub const QUEUE_CAPACITY: usize = 1000;

/// Delivery retries, client-go's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryConfig {
    /// Attempts per event before it is dropped (`maxTriesPerEvent`).
    pub max_tries: u32,
    /// Pause between attempts; the first pause is a random fraction of it so that many
    /// clients do not retry in lockstep after an apiserver outage.
    pub retry_sleep: Duration,
    /// Normal events allowed to wait for delivery; further ones are logged, not written.
    /// [`QUEUE_CAPACITY`] (the default) makes them wait as client-go's do. See
    /// [`normal_backlog`].
    pub normal_backlog: usize,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        Self {
            max_tries: 12,
            retry_sleep: Duration::from_secs(10),
            normal_backlog: QUEUE_CAPACITY,
        }
    }
}

/// The Normal backlog for events written through a client whose token bucket holds `burst`
/// (`None`: no client-side limit). More Normal events waiting than one burst could send
/// means real work has held the whole budget for a while: writing them later only adds a
/// request per object after the fact, and under a burst of claims would double the cost of
/// provisioning (issue 16). Small batches, and every idle provisioner, keep all their events.
pub fn normal_backlog(burst: Option<u32>) -> usize {
    burst.map_or(QUEUE_CAPACITY, |b| {
        usize::try_from(b)
            .unwrap_or(usize::MAX)
            .clamp(1, QUEUE_CAPACITY)
    })
}

/// Records core/v1 Events. Cheap to clone; delivery stops once every clone is dropped and
/// the queue is drained.
#[derive(Debug, Clone)]
pub struct EventRecorder {
    queue: Arc<Sender>,
    source: EventSource,
    dropped: Arc<AtomicU64>,
    shed: Arc<AtomicU64>,
}

/// The recorders' shared end of the queue: when the last recorder goes, it closes the queue.
#[derive(Debug)]
struct Sender(Arc<Pending>);

impl Drop for Sender {
    fn drop(&mut self) {
        self.0.close();
    }
}

impl EventRecorder {
    /// A recorder whose events carry `source.component = source_component`, and the task that
    /// delivers them through `client`. Spawn the task; it ends when all recorders are gone.
    pub fn new(
        client: Client,
        source_component: String,
    ) -> (EventRecorder, impl Future<Output = ()> + Send + 'static) {
        Self::with_config(client, source_component, DeliveryConfig::default())
    }

    /// As [`EventRecorder::new`], with `config` instead of client-go's defaults.
    pub fn with_config(
        client: Client,
        source_component: String,
        config: DeliveryConfig,
    ) -> (EventRecorder, impl Future<Output = ()> + Send + 'static) {
        Self::with_sink(KubeSink { client }, source_component, config)
    }

    pub(crate) fn with_sink<S: EventSink>(
        sink: S,
        source_component: String,
        config: DeliveryConfig,
    ) -> (EventRecorder, impl Future<Output = ()> + Send + 'static) {
        let pending = Arc::new(Pending::new(QUEUE_CAPACITY, config.normal_backlog));
        let recorder = EventRecorder {
            queue: Arc::new(Sender(pending.clone())),
            source: EventSource {
                component: Some(source_component),
                host: None,
            },
            dropped: Arc::default(),
            shed: Arc::default(),
        };
        (recorder, deliver_all(pending, sink, config))
    }

    /// Records an event about `involved`. Never blocks: when the delivery queue is full the
    /// event is dropped, logged and counted.
    pub fn event(
        &self,
        involved: &ObjectReference,
        type_: EventType,
        reason: &str,
        message: String,
    ) {
        self.record(involved, type_, reason, message, false);
    }

    /// Records an event that only says work on `involved` has begun. While it waits for
    /// delivery, the next event about the same object (its outcome) takes its place: a notice
    /// that is already out of date is not worth an API request, and under a burst it would
    /// otherwise crowd outcomes out of the queue.
    pub fn progress(
        &self,
        involved: &ObjectReference,
        type_: EventType,
        reason: &str,
        message: String,
    ) {
        self.record(involved, type_, reason, message, true);
    }

    fn record(
        &self,
        involved: &ObjectReference,
        type_: EventType,
        reason: &str,
        message: String,
        progress: bool,
    ) {
        let event = make_event(
            &self.source,
            involved,
            type_,
            reason,
            message,
            Timestamp::now(),
        );
        // The sidecar logs every event it records at info level, as client-go's broadcaster
        // logger does.
        klog::v!(
            0,
            kind = involved.kind.as_deref().unwrap_or_default(),
            namespace = involved.namespace.as_deref().unwrap_or_default(),
            name = involved.name.as_deref().unwrap_or_default(),
            r#type = type_.as_str(),
            reason,
            message = event.message.as_deref().unwrap_or_default(),
            "Event occurred"
        );
        let name = event.metadata.name.clone().unwrap_or_default();
        match self.queue.0.push(event, progress) {
            Pushed::Queued { replaced: false } => {}
            Pushed::Queued { replaced: true } => {
                klog::v!(5, event = %name, reason, "A waiting progress event about the same object was replaced by this one");
            }
            Pushed::Dropped => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    event = %name,
                    reason,
                    "Unable to record event: too many queued events, dropped event"
                );
            }
            Pushed::Shed => {
                self.shed.fetch_add(1, Ordering::Relaxed);
                // Expected under a burst, once per event: the line logged above (the event's
                // message, type and reason) is its record.
                klog::v!(4, event = %name, reason, "Normal event not written: a full backlog of Normal events waits for the API budget");
            }
        }
    }

    /// Events dropped because the queue was full (or delivery had stopped).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Normal events not written because the Normal backlog was full.
    pub fn shed(&self) -> u64 {
        self.shed.load(Ordering::Relaxed)
    }
}

/// Where events are written. The real one is the apiserver; tests substitute their own.
pub(crate) trait EventSink: Send + Sync + 'static {
    fn create(&self, event: &Event) -> impl Future<Output = Result<Event, kube::Error>> + Send;
    fn patch(
        &self,
        event: &Event,
        patch: &serde_json::Value,
    ) -> impl Future<Output = Result<Event, kube::Error>> + Send;
}

struct KubeSink {
    client: Client,
}

impl KubeSink {
    fn api(&self, event: &Event) -> Api<Event> {
        let ns = event.metadata.namespace.as_deref().unwrap_or("default");
        Api::namespaced(self.client.clone(), ns)
    }
}

impl EventSink for KubeSink {
    async fn create(&self, event: &Event) -> Result<Event, kube::Error> {
        self.api(event).create(&PostParams::default(), event).await
    }

    async fn patch(&self, event: &Event, patch: &serde_json::Value) -> Result<Event, kube::Error> {
        let name = event.metadata.name.as_deref().unwrap_or_default();
        self.api(event)
            .patch(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
    }
}

async fn deliver_all<S: EventSink>(pending: Arc<Pending>, sink: S, config: DeliveryConfig) {
    let mut correlator = EventCorrelator::default();
    while let Some(event) = pending.pop().await {
        let decision = correlator.correlate(event, Timestamp::now());
        deliver(&sink, &mut correlator, decision, &config).await;
    }
}

/// How a failed write is handled, after client-go's `recordEvent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The patched event is gone: create it instead.
    NotFound,
    /// The server refused it for good. `quiet` for the expected cases (already exists,
    /// namespace terminating), logged at -v=5 only.
    Rejected { quiet: bool },
    /// Network or server trouble: try again later.
    Transient,
}

/// Classifies a write error. Pure.
pub(crate) fn classify(err: &kube::Error) -> Failure {
    match err {
        kube::Error::Api(status) if status.is_not_found() => Failure::NotFound,
        kube::Error::Api(status) => {
            let terminating = status
                .details
                .as_ref()
                .is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating"));
            Failure::Rejected {
                quiet: status.is_already_exists() || terminating,
            }
        }
        // The request could not be built; it would be built the same way next time.
        kube::Error::BuildRequest(_) | kube::Error::HttpError(_) => {
            Failure::Rejected { quiet: false }
        }
        _ => Failure::Transient,
    }
}

/// Writes one correlated event, retrying transient failures.
pub(crate) async fn deliver<S: EventSink>(
    sink: &S,
    correlator: &mut EventCorrelator,
    decision: Decision,
    config: &DeliveryConfig,
) {
    let (mut event, patch) = match decision {
        Decision::Skip => return,
        Decision::Create(event) => (event, None),
        Decision::Patch { event, patch } => (event, Some(patch)),
    };
    let name = event.metadata.name.clone().unwrap_or_default();
    for attempt in 1..=config.max_tries.max(1) {
        let mut result = match &patch {
            Some(p) => Some(sink.patch(&event, p).await),
            None => None,
        };
        let patch_missing = matches!(&result, Some(Err(e)) if classify(e) == Failure::NotFound);
        if result.is_none() || patch_missing {
            event.metadata.resource_version = None;
            result = Some(sink.create(&event).await);
        }
        let err = match result {
            Some(Ok(written)) => {
                correlator.update_state(&written);
                return;
            }
            Some(Err(err)) => err,
            None => return,
        };
        match classify(&err) {
            Failure::Rejected { quiet: true } => {
                klog::v!(5, event = %name, error = %err, "Server rejected event (will not retry!)");
                return;
            }
            Failure::Rejected { quiet: false } | Failure::NotFound => {
                tracing::error!(event = %name, error = %err, "Server rejected event (will not retry!)");
                return;
            }
            Failure::Transient => {
                tracing::error!(event = %name, error = %err, "Unable to write event (may retry after sleeping)");
            }
        }
        if attempt == config.max_tries {
            break;
        }
        let pause = if attempt == 1 {
            config.retry_sleep.mul_f64(rand::random::<f64>())
        } else {
            config.retry_sleep
        };
        tokio::time::sleep(pause).await;
    }
    tracing::error!(event = %name, "Unable to write event (retry limit exceeded!)");
}

#[cfg(test)]
#[path = "recorder_tests.rs"]
mod tests;
