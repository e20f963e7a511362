//! client-go's event correlator (`tools/record/events_cache.go`), pure: the caller passes
//! `now` and gets back what to send. Three steps, in client-go's order:
//!
//! 1. Aggregation: events with the same source, object, type and reason but a different
//!    message are counted per 10-minute window; from the 10th distinct message on they are
//!    folded into one event whose message starts with "(combined from similar events): ".
//! 2. Deduplication: an event seen before (same source, object, type, reason, message) becomes
//!    a PATCH of the existing object with `count + 1` and a new `lastTimestamp`.
//! 3. Spam filter: per source and object, a token bucket (burst 25, one token per 5 minutes);
//!    events beyond it are skipped. As upstream, step 2 has already counted them, so the next
//!    event that passes carries the full count.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use super::lru::Lru;
use crate::bucket::TokenBucket;

/// The prefix client-go gives aggregated messages.
pub const AGGREGATE_PREFIX: &str = "(combined from similar events): ";

/// client-go's correlator defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct CorrelatorConfig {
    /// Entries per cache (`maxLruCacheEntries`).
    pub lru_size: usize,
    /// Distinct messages that trigger aggregation (`defaultAggregateMaxEvents`).
    pub aggregate_max_events: usize,
    /// Window of the aggregation count, reset when no similar event came for this long.
    pub aggregate_interval: Duration,
    /// Spam filter burst (`defaultSpamBurst`).
    pub spam_burst: u32,
    /// Spam filter refill per second (`defaultSpamQPS`).
    pub spam_qps: f64,
}

impl Default for CorrelatorConfig {
    fn default() -> Self {
        Self {
            lru_size: 4096,
            aggregate_max_events: 10,
            aggregate_interval: Duration::from_secs(600),
            spam_burst: 25,
            spam_qps: 1.0 / 300.0,
        }
    }
}

/// What to do with an event.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Dropped by the spam filter.
    Skip,
    /// POST this new Event.
    Create(Event),
    /// Strategic-merge PATCH `patch` onto the existing Event named in `event` (which carries
    /// the full new state, so it can be created instead if the old one is gone).
    Patch {
        event: Event,
        patch: serde_json::Value,
    },
}

#[derive(Debug, Clone)]
struct AggregateRecord {
    /// Hashes of the distinct messages seen in the window, at most
    /// `aggregate_max_events - 1` (only told apart, never read back; see `lru.rs` on hashes).
    messages: Vec<u64>,
    last: Timestamp,
}

#[derive(Debug, Clone)]
struct EventLog {
    count: i32,
    first_timestamp: Option<Time>,
    name: Option<String>,
    resource_version: Option<String>,
}

/// Correlation state for one event sink.
#[derive(Debug)]
pub struct EventCorrelator {
    config: CorrelatorConfig,
    aggregates: Lru<AggregateRecord>,
    logs: Lru<EventLog>,
    spam: Lru<TokenBucket>,
    hasher: std::collections::hash_map::RandomState,
}

impl Default for EventCorrelator {
    fn default() -> Self {
        Self::new(CorrelatorConfig::default())
    }
}

impl EventCorrelator {
    pub fn new(config: CorrelatorConfig) -> Self {
        Self {
            aggregates: Lru::new(config.lru_size),
            logs: Lru::new(config.lru_size),
            spam: Lru::new(config.lru_size),
            hasher: Default::default(),
            config,
        }
    }

    /// Decides how to record `event` (as built by the recorder) at time `now`.
    pub fn correlate(&mut self, event: Event, now: Timestamp) -> Decision {
        let (event, key) = self.aggregate(event, now);
        let (event, patch) = self.observe(event, key);
        if !self.spam_allows(&event, now) {
            return Decision::Skip;
        }
        match patch {
            Some(patch) => Decision::Patch { event, patch },
            None => Decision::Create(event),
        }
    }

    /// Remembers the server's copy of an event just written, so the next repeat patches it.
    pub fn update_state(&mut self, written: &Event) {
        self.logs.put(&event_key(written), log_of(written));
    }

    fn aggregate(&mut self, event: Event, now: Timestamp) -> (Event, String) {
        let event_key = event_key(&event);
        let aggregate_key = aggregate_key(&event);
        let message = event.message.clone().unwrap_or_default();
        let interval = self.config.aggregate_interval;
        let fresh = || AggregateRecord {
            messages: Vec::new(),
            last: now,
        };
        // A window ends when no similar event came for `interval` (a clock going backwards
        // keeps it, as in client-go).
        let mut record = match self.aggregates.get_mut(&aggregate_key) {
            Some(r) if now.duration_since(r.last).as_secs_f64() <= interval.as_secs_f64() => {
                r.clone()
            }
            _ => fresh(),
        };
        let seen = std::hash::BuildHasher::hash_one(&self.hasher, &message);
        if !record.messages.contains(&seen) {
            record.messages.push(seen);
        }
        record.last = now;
        let distinct = record.messages.len();
        if distinct >= self.config.aggregate_max_events {
            // client-go drops an arbitrary message to stay under the limit; we drop this one,
            // which keeps the choice deterministic.
            record.messages.retain(|m| *m != seen);
        }
        self.aggregates.put(&aggregate_key, record);
        if distinct < self.config.aggregate_max_events {
            return (event, event_key);
        }
        let combined = Event {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(event_name(
                    &event.involved_object.name.clone().unwrap_or_default(),
                    now,
                )),
                namespace: event.metadata.namespace.clone(),
                ..Default::default()
            },
            count: Some(1),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            message: Some(format!("{AGGREGATE_PREFIX}{message}")),
            involved_object: event.involved_object,
            type_: event.type_,
            reason: event.reason,
            source: event.source,
            ..Default::default()
        };
        (combined, aggregate_key)
    }

    fn observe(&mut self, mut event: Event, key: String) -> (Event, Option<serde_json::Value>) {
        let mut patch = None;
        if let Some(last) = self.logs.get_mut(&key).filter(|l| l.count > 0).cloned() {
            event.metadata.name = last.name;
            event.metadata.resource_version = last.resource_version;
            event.first_timestamp = last.first_timestamp;
            event.count = Some(last.count.saturating_add(1));
            patch = Some(json!({
                "count": event.count,
                "lastTimestamp": event.last_timestamp,
                "message": event.message,
            }));
        }
        self.logs.put(&key, log_of(&event));
        (event, patch)
    }

    fn spam_allows(&mut self, event: &Event, now: Timestamp) -> bool {
        let key = spam_key(event);
        let at = Duration::try_from(now.as_duration()).unwrap_or_default();
        let (qps, burst) = (self.config.spam_qps, self.config.spam_burst);
        if let Some(bucket) = self.spam.get_mut(&key) {
            return bucket.try_take(at);
        }
        let mut bucket = TokenBucket::new(qps, burst, at);
        let allowed = bucket.try_take(at);
        self.spam.put(&key, bucket);
        allowed
    }
}

fn log_of(event: &Event) -> EventLog {
    EventLog {
        count: event.count.unwrap_or(0),
        first_timestamp: event.first_timestamp.clone(),
        name: event.metadata.name.clone(),
        resource_version: event.metadata.resource_version.clone(),
    }
}

/// `<object name>.<unix nanoseconds in hex>`, client-go's event naming.
pub fn event_name(object_name: &str, at: Timestamp) -> String {
    format!("{object_name}.{:x}", at.as_nanosecond())
}

/// Joins key parts with a separator no Kubernetes name or reason contains, so that distinct
/// field combinations never collide (client-go joins with nothing).
fn join(parts: &[Option<&str>]) -> String {
    parts
        .iter()
        .map(|p| p.unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\u{0}")
}

fn source_parts(event: &Event) -> [Option<&str>; 2] {
    let source = event.source.as_ref();
    [
        source.and_then(|s| s.component.as_deref()),
        source.and_then(|s| s.host.as_deref()),
    ]
}

/// Source + object (with field path) + type + reason + message: identical events.
fn event_key(event: &Event) -> String {
    let o = &event.involved_object;
    let [component, host] = source_parts(event);
    join(&[
        component,
        host,
        o.kind.as_deref(),
        o.namespace.as_deref(),
        o.name.as_deref(),
        o.field_path.as_deref(),
        o.uid.as_deref(),
        o.api_version.as_deref(),
        event.type_.as_deref(),
        event.reason.as_deref(),
        event.message.as_deref(),
    ])
}

/// Source + object + type + reason + reporting controller/instance: similar events.
fn aggregate_key(event: &Event) -> String {
    let o = &event.involved_object;
    let [component, host] = source_parts(event);
    join(&[
        component,
        host,
        o.kind.as_deref(),
        o.namespace.as_deref(),
        o.name.as_deref(),
        o.uid.as_deref(),
        o.api_version.as_deref(),
        event.type_.as_deref(),
        event.reason.as_deref(),
        event.reporting_component.as_deref(),
        event.reporting_instance.as_deref(),
    ])
}

/// Source + object: the spam filter's unit.
fn spam_key(event: &Event) -> String {
    let o = &event.involved_object;
    let [component, host] = source_parts(event);
    join(&[
        component,
        host,
        o.kind.as_deref(),
        o.namespace.as_deref(),
        o.name.as_deref(),
        o.uid.as_deref(),
        o.api_version.as_deref(),
    ])
}

#[cfg(test)]
#[path = "correlator_tests.rs"]
mod tests;
