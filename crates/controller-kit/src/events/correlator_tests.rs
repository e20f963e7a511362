use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use super::*;
use crate::events::{EventType, make_event};

fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).unwrap()
}

fn object(name: &str) -> ObjectReference {
    ObjectReference {
        kind: Some("PersistentVolumeClaim".into()),
        namespace: Some("ns".into()),
        name: Some(name.into()),
        uid: Some(format!("uid-{name}")),
        api_version: Some("v1".into()),
        ..Default::default()
    }
}

fn source(component: &str) -> EventSource {
    EventSource {
        component: Some(component.into()),
        host: None,
    }
}

fn event(obj: &str, reason: &str, message: &str, at: Timestamp) -> Event {
    make_event(
        &source("external-provisioner"),
        &object(obj),
        EventType::Warning,
        reason,
        message.into(),
        at,
    )
}

fn created(d: Decision) -> Event {
    match d {
        Decision::Create(e) => e,
        other => panic!("expected a create, got {other:?}"),
    }
}

fn patched(d: Decision) -> (Event, serde_json::Value) {
    match d {
        Decision::Patch { event, patch } => (event, patch),
        other => panic!("expected a patch, got {other:?}"),
    }
}

#[test]
fn a_repeated_event_patches_count_and_last_timestamp() {
    let mut c = EventCorrelator::default();
    let first = created(c.correlate(event("claim", "ProvisioningFailed", "boom", t(0)), t(0)));
    assert_eq!(first.count, Some(1));
    let (second, patch) =
        patched(c.correlate(event("claim", "ProvisioningFailed", "boom", t(5)), t(5)));
    assert_eq!(
        second.metadata.name, first.metadata.name,
        "patches the first object"
    );
    assert_eq!(second.count, Some(2));
    assert_eq!(second.first_timestamp, Some(Time(t(0))));
    assert_eq!(second.last_timestamp, Some(Time(t(5))));
    assert_eq!(
        patch,
        json!({"count": 2, "lastTimestamp": Time(t(5)), "message": "boom"}),
        "client-go's two-way merge patch carries exactly these fields"
    );
    let (third, _) = patched(c.correlate(event("claim", "ProvisioningFailed", "boom", t(9)), t(9)));
    assert_eq!(third.count, Some(3));
}

#[test]
fn the_servers_copy_is_used_for_the_next_patch() {
    let mut c = EventCorrelator::default();
    let mut first = created(c.correlate(event("claim", "Provisioning", "start", t(0)), t(0)));
    first.metadata.resource_version = Some("42".into());
    first.count = Some(7); // e.g. another writer bumped it
    c.update_state(&first);
    let (next, patch) = patched(c.correlate(event("claim", "Provisioning", "start", t(1)), t(1)));
    assert_eq!(next.metadata.resource_version.as_deref(), Some("42"));
    assert_eq!(next.count, Some(8));
    assert_eq!(patch["count"], 8);
}

#[test]
fn events_differing_in_any_identity_field_are_not_merged() {
    let base = event("claim", "Provisioning", "start", t(0));
    let mut other_source = base.clone();
    other_source.source = Some(source("csi.example.com_node_1234"));
    let mut other_type = base.clone();
    other_type.type_ = Some("Normal".into());
    let mut other_field = base.clone();
    other_field.involved_object.field_path = Some("spec".into());
    let variants = [
        event("other-claim", "Provisioning", "start", t(0)),
        event("claim", "ProvisioningSucceeded", "start", t(0)),
        event("claim", "Provisioning", "other message", t(0)),
        other_source,
        other_type,
        other_field,
    ];
    for variant in variants {
        let mut c = EventCorrelator::default();
        created(c.correlate(base.clone(), t(0)));
        let ev = created(c.correlate(variant.clone(), t(1)));
        assert_eq!(ev.count, Some(1), "{variant:?}");
    }
}

#[test]
fn the_tenth_distinct_message_is_aggregated() {
    let mut c = EventCorrelator::default();
    let mut names = Vec::new();
    for i in 0..9 {
        let ev = created(c.correlate(
            event("claim", "ProvisioningFailed", &format!("error {i}"), t(i)),
            t(i),
        ));
        assert_eq!(ev.message, Some(format!("error {i}")));
        names.push(ev.metadata.name.unwrap());
    }
    let combined =
        created(c.correlate(event("claim", "ProvisioningFailed", "error 9", t(9)), t(9)));
    assert_eq!(
        combined.message.as_deref(),
        Some("(combined from similar events): error 9")
    );
    assert_eq!(combined.count, Some(1));
    assert_eq!(combined.reason.as_deref(), Some("ProvisioningFailed"));
    assert_eq!(combined.type_.as_deref(), Some("Warning"));
    assert_eq!(combined.metadata.namespace.as_deref(), Some("ns"));
    assert_eq!(combined.metadata.name, Some(event_name("claim", t(9))));
    assert!(!names.contains(combined.metadata.name.as_ref().unwrap()));

    // Further new messages update the aggregate object.
    let (again, patch) = patched(c.correlate(
        event("claim", "ProvisioningFailed", "error 10", t(10)),
        t(10),
    ));
    assert_eq!(again.metadata.name, combined.metadata.name);
    assert_eq!(again.count, Some(2));
    assert_eq!(patch["message"], "(combined from similar events): error 10");

    // A message seen before the threshold still correlates with its own object.
    let (old, _) = patched(c.correlate(
        event("claim", "ProvisioningFailed", "error 3", t(11)),
        t(11),
    ));
    assert_eq!(old.metadata.name.as_ref(), Some(&names[3]));
    assert_eq!(old.count, Some(2));
}

#[test]
fn aggregation_window_resets_after_ten_quiet_minutes() {
    // (gap between events in seconds, whether the 10th distinct message is aggregated)
    for (gap, aggregated) in [(0, true), (66, true), (600, true), (601, false)] {
        let mut c = EventCorrelator::default();
        // Nine messages at t=0, then the tenth after `gap`: only a quiet spell longer than
        // 600 s since the last similar event opens a new window.
        for i in 0..9 {
            c.correlate(
                event("claim", "ProvisioningFailed", &format!("e{i}"), t(0)),
                t(0),
            );
        }
        let ev = created(c.correlate(event("claim", "ProvisioningFailed", "e9", t(gap)), t(gap)));
        let is_combined = ev.message.unwrap().starts_with(AGGREGATE_PREFIX);
        assert_eq!(is_combined, aggregated, "gap {gap}");
    }
}

#[test]
fn aggregation_window_slides_with_each_similar_event() {
    let mut c = EventCorrelator::default();
    // One new message every 500 s: never 600 s of quiet, so the 10th is aggregated at 4500 s.
    for i in 0..9 {
        let at = t(500 * i);
        c.correlate(
            event("claim", "ProvisioningFailed", &format!("e{i}"), at),
            at,
        );
    }
    let ev = created(c.correlate(event("claim", "ProvisioningFailed", "e9", t(4500)), t(4500)));
    assert!(ev.message.unwrap().starts_with(AGGREGATE_PREFIX));
}

#[test]
fn spam_filter_allows_a_burst_of_25_then_one_per_five_minutes() {
    let mut c = EventCorrelator::default();
    let mut outcomes = Vec::new();
    for i in 0..27 {
        let d = c.correlate(event("claim", "ProvisioningFailed", "boom", t(0)), t(0));
        outcomes.push((i, !matches!(d, Decision::Skip)));
    }
    let sent = outcomes.iter().filter(|(_, sent)| *sent).count();
    assert_eq!(sent, 25);
    assert!(!outcomes[25].1 && !outcomes[26].1);

    // Another object has its own bucket.
    assert!(!matches!(
        c.correlate(event("other", "ProvisioningFailed", "boom", t(0)), t(0)),
        Decision::Skip
    ));

    assert_eq!(
        c.correlate(event("claim", "ProvisioningFailed", "boom", t(299)), t(299)),
        Decision::Skip
    );
    // After 300 s one token is back; the skipped events were still counted.
    let (ev, _) =
        patched(c.correlate(event("claim", "ProvisioningFailed", "boom", t(300)), t(300)));
    assert_eq!(ev.count, Some(29));
    assert_eq!(
        c.correlate(event("claim", "ProvisioningFailed", "boom", t(301)), t(301)),
        Decision::Skip
    );
}

#[test]
fn spam_filter_is_per_object_across_reasons_and_messages() {
    let mut c = EventCorrelator::default();
    for i in 0..25 {
        let reason = if i % 2 == 0 {
            "Provisioning"
        } else {
            "ProvisioningFailed"
        };
        assert!(!matches!(
            c.correlate(event("claim", reason, &format!("m{i}"), t(0)), t(0)),
            Decision::Skip
        ));
    }
    assert_eq!(
        c.correlate(event("claim", "Other", "x", t(0)), t(0)),
        Decision::Skip
    );
}

#[test]
fn caches_are_bounded_by_lru_size() {
    let config = CorrelatorConfig {
        lru_size: 2,
        ..Default::default()
    };
    let mut c = EventCorrelator::new(config);
    created(c.correlate(event("a", "R", "m", t(0)), t(0)));
    created(c.correlate(event("b", "R", "m", t(0)), t(0)));
    created(c.correlate(event("c", "R", "m", t(0)), t(0)));
    // "a" was evicted: its repeat is a new object again, "c" is still known.
    created(c.correlate(event("a", "R", "m", t(1)), t(1)));
    patched(c.correlate(event("c", "R", "m", t(1)), t(1)));
}

#[test]
fn event_names_use_hex_nanoseconds() {
    let at = Timestamp::UNIX_EPOCH + SignedDuration::from_nanos(255);
    assert_eq!(event_name("pvc-1", at), "pvc-1.ff");
    assert_eq!(
        event_name("pv", t(0)),
        format!("pv.{:x}", 1_800_000_000_000_000_000i128)
    );
}
