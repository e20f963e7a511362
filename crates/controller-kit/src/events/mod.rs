//! A core/v1 Event recorder with client-go's `tools/record` behaviour.
//!
//! The stock RBAC of the sidecar grants `events` in the core group only, so kube's own
//! recorder (events.k8s.io/v1) cannot be used. Controllers call [`EventRecorder::event`], which
//! never blocks; a background task correlates events ([`EventCorrelator`]) and creates or
//! patches them, retrying transient failures. Unlike client-go, a progress event
//! ([`EventRecorder::progress`]) still waiting for delivery is replaced by the next event about
//! its object, and Normal events beyond one client burst of backlog are logged, not written.

mod correlator;
mod lru;
mod queue;
mod recorder;

pub use correlator::{AGGREGATE_PREFIX, CorrelatorConfig, Decision, EventCorrelator, event_name};
pub use recorder::{DeliveryConfig, EventRecorder, QUEUE_CAPACITY, normal_backlog};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

/// The event types the API accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    /// The `type` field value.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// The Event client-go's `makeEvent` builds: named `<object>.<hex nanos>`, in the object's
/// namespace or `default` for cluster-scoped objects such as PVs, count 1.
pub fn make_event(
    source: &EventSource,
    involved: &ObjectReference,
    type_: EventType,
    reason: &str,
    message: String,
    now: Timestamp,
) -> Event {
    let namespace = involved
        .namespace
        .clone()
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| "default".to_string());
    Event {
        metadata: ObjectMeta {
            name: Some(event_name(
                involved.name.as_deref().unwrap_or_default(),
                now,
            )),
            namespace: Some(namespace),
            ..Default::default()
        },
        involved_object: involved.clone(),
        reason: Some(reason.to_string()),
        message: Some(message),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        type_: Some(type_.as_str().to_string()),
        source: Some(source.clone()),
        // As client-go's generateEvent: the source again, in the fields
        // `events.k8s.io/v1` readers look at.
        reporting_component: source.component.clone(),
        reporting_instance: source.host.clone(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(namespace: Option<&str>) -> ObjectReference {
        ObjectReference {
            kind: Some("PersistentVolume".into()),
            name: Some("pvc-1234".into()),
            namespace: namespace.map(String::from),
            uid: Some("u-1".into()),
            api_version: Some("v1".into()),
            ..Default::default()
        }
    }

    #[test]
    fn events_are_named_after_the_object_and_time_in_hex_nanoseconds() {
        let at = Timestamp::from_nanosecond(0x1876_5432_10ab_cdef).unwrap();
        let source = EventSource {
            component: Some("external-provisioner".into()),
            host: None,
        };
        let ev = make_event(
            &source,
            &reference(Some("ns")),
            EventType::Warning,
            "ProvisioningFailed",
            "boom".into(),
            at,
        );
        assert_eq!(
            ev.metadata.name.as_deref(),
            Some("pvc-1234.1876543210abcdef")
        );
        assert_eq!(ev.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(ev.type_.as_deref(), Some("Warning"));
        assert_eq!(ev.reason.as_deref(), Some("ProvisioningFailed"));
        assert_eq!(ev.message.as_deref(), Some("boom"));
        assert_eq!(ev.count, Some(1));
        assert_eq!(ev.first_timestamp, Some(Time(at)));
        assert_eq!(ev.last_timestamp, Some(Time(at)));
        assert_eq!(ev.source, Some(source));
        assert_eq!(ev.involved_object, reference(Some("ns")));
        assert_eq!(
            (ev.reporting_component.as_deref(), ev.reporting_instance),
            (Some("external-provisioner"), None),
            "client-go repeats the source as the reporting controller and instance"
        );
    }

    #[test]
    fn cluster_scoped_objects_get_events_in_default() {
        for ns in [None, Some("")] {
            let ev = make_event(
                &EventSource::default(),
                &reference(ns),
                EventType::Normal,
                "VolumeDeleted",
                String::new(),
                Timestamp::UNIX_EPOCH,
            );
            assert_eq!(ev.metadata.namespace.as_deref(), Some("default"), "{ns:?}");
        }
    }
}
