//! The delivery loop against a scripted sink (the real apiserver test is
//! `tests/events.rs`): create vs patch, fallback to create, retries and give-ups.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, ObjectReference};
use kube::core::Status;
use kube::core::response::StatusDetails;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::*;

#[derive(Debug, Clone, PartialEq)]
enum Call {
    Create { name: String, count: i32 },
    Patch { name: String, count: i32 },
}

/// Answers calls from a script of results (`None` = succeed, echoing the event back with a
/// resource version) and records every call with its time.
#[derive(Clone, Default)]
struct ScriptedSink {
    script: Arc<Mutex<VecDeque<Option<kube::Error>>>>,
    calls: Arc<Mutex<Vec<(Call, Instant)>>>,
    reasons: Arc<Mutex<Vec<String>>>,
}

impl ScriptedSink {
    fn fail_with(self, errors: impl IntoIterator<Item = Option<kube::Error>>) -> Self {
        self.script.lock().extend(errors);
        self
    }

    fn answer(&self, call: Call, event: &Event) -> Result<Event, kube::Error> {
        self.calls.lock().push((call, Instant::now()));
        self.reasons
            .lock()
            .push(event.reason.clone().unwrap_or_default());
        if let Some(Some(err)) = self.script.lock().pop_front() {
            return Err(err);
        }
        let mut written = event.clone();
        written.metadata.resource_version = Some("1".into());
        Ok(written)
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().iter().map(|(c, _)| c.clone()).collect()
    }
}

impl EventSink for ScriptedSink {
    async fn create(&self, event: &Event) -> Result<Event, kube::Error> {
        assert_eq!(
            event.metadata.resource_version, None,
            "creates carry no resourceVersion"
        );
        let call = Call::Create {
            name: event.metadata.name.clone().unwrap_or_default(),
            count: event.count.unwrap_or_default(),
        };
        self.answer(call, event)
    }

    async fn patch(&self, event: &Event, patch: &serde_json::Value) -> Result<Event, kube::Error> {
        let call = Call::Patch {
            name: event.metadata.name.clone().unwrap_or_default(),
            count: patch["count"].as_i64().unwrap_or_default() as i32,
        };
        self.answer(call, event)
    }
}

fn status(code: u16, reason: &str) -> kube::Error {
    kube::Error::Api(Status::failure("rejected", reason).with_code(code).boxed())
}

fn transport() -> kube::Error {
    kube::Error::Service("connection refused".into())
}

fn claim() -> ObjectReference {
    ObjectReference {
        kind: Some("PersistentVolumeClaim".into()),
        namespace: Some("ns".into()),
        name: Some("claim".into()),
        ..Default::default()
    }
}

#[test]
fn write_errors_are_classified_as_client_go_does() {
    let details: StatusDetails =
        serde_json::from_value(serde_json::json!({"causes": [{"reason": "NamespaceTerminating"}]}))
            .unwrap();
    let terminating = kube::Error::Api(
        Status::failure("namespace ns is being terminated", "Forbidden")
            .with_code(403)
            .with_details(details)
            .boxed(),
    );
    let cases = [
        (status(404, "NotFound"), Failure::NotFound),
        (
            status(409, "AlreadyExists"),
            Failure::Rejected { quiet: true },
        ),
        (terminating, Failure::Rejected { quiet: true }),
        (status(403, "Forbidden"), Failure::Rejected { quiet: false }),
        (status(422, "Invalid"), Failure::Rejected { quiet: false }),
        (
            status(500, "InternalError"),
            Failure::Rejected { quiet: false },
        ),
        (transport(), Failure::Transient),
    ];
    for (err, want) in cases {
        assert_eq!(classify(&err), want, "{err}");
    }
}

async fn run(sink: &ScriptedSink, n: usize) {
    let (recorder, task) = EventRecorder::with_sink(
        sink.clone(),
        "external-provisioner".into(),
        DeliveryConfig::default(),
    );
    for _ in 0..n {
        recorder.event(&claim(), EventType::Normal, "Provisioning", "start".into());
    }
    drop(recorder);
    task.await; // ends once the queue is drained and every recorder is gone
}

#[tokio::test(start_paused = true)]
async fn repeats_become_patches_of_the_first_object() {
    let sink = ScriptedSink::default();
    run(&sink, 3).await;
    let calls = sink.calls();
    let Call::Create { name, count: 1 } = &calls[0] else {
        panic!("first call {calls:?}");
    };
    assert_eq!(
        calls[1..],
        [
            Call::Patch {
                name: name.clone(),
                count: 2
            },
            Call::Patch {
                name: name.clone(),
                count: 3
            },
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_patch_of_a_vanished_event_creates_it_again() {
    let sink = ScriptedSink::default().fail_with([None, Some(status(404, "NotFound"))]);
    run(&sink, 2).await;
    let calls = sink.calls();
    assert!(
        matches!(calls[1], Call::Patch { count: 2, .. }),
        "{calls:?}"
    );
    assert!(
        matches!(calls[2], Call::Create { count: 2, .. }),
        "{calls:?}"
    );
    assert_eq!(calls.len(), 3);
}

#[tokio::test(start_paused = true)]
async fn transient_failures_are_retried_every_ten_seconds() {
    let sink = ScriptedSink::default().fail_with([
        Some(transport()),
        Some(transport()),
        Some(transport()),
    ]);
    run(&sink, 1).await;
    let times: Vec<Instant> = sink.calls.lock().iter().map(|(_, at)| *at).collect();
    assert_eq!(times.len(), 4, "three failures, then success");
    // The first pause is a random part of 10 s, the later ones exactly 10 s.
    assert!(times[1] - times[0] <= Duration::from_secs(10));
    assert_eq!(times[2] - times[1], Duration::from_secs(10));
    assert_eq!(times[3] - times[2], Duration::from_secs(10));
}

#[tokio::test(start_paused = true)]
async fn an_event_is_dropped_after_twelve_tries() {
    let sink = ScriptedSink::default().fail_with((0..20).map(|_| Some(transport())));
    run(&sink, 1).await;
    assert_eq!(sink.calls().len(), 12);
}

#[tokio::test(start_paused = true)]
async fn rejected_events_are_not_retried() {
    for err in [
        status(403, "Forbidden"),
        status(409, "AlreadyExists"),
        status(404, "NotFound"),
    ] {
        let sink = ScriptedSink::default().fail_with([Some(err)]);
        run(&sink, 1).await;
        assert_eq!(sink.calls().len(), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn recording_never_blocks_and_counts_drops_when_full() {
    let sink = ScriptedSink::default();
    let (recorder, task) =
        EventRecorder::with_sink(sink.clone(), "c".into(), DeliveryConfig::default());
    // The delivery task is not running yet: the queue fills up.
    for i in 0..QUEUE_CAPACITY + 5 {
        recorder.event(
            &claim(),
            EventType::Warning,
            "ProvisioningFailed",
            format!("e{i}"),
        );
    }
    assert_eq!(recorder.dropped(), 5);
    drop(recorder);
    task.await;
    // QUEUE_CAPACITY distinct messages on one object: the spam filter lets 25 through.
    assert_eq!(sink.calls().len(), 25);
}

#[tokio::test(start_paused = true)]
async fn a_progress_event_still_waiting_gives_way_to_the_outcome() {
    let sink = ScriptedSink::default();
    let (recorder, task) =
        EventRecorder::with_sink(sink.clone(), "c".into(), DeliveryConfig::default());
    // Waiting (the delivery task is not running): the outcome takes the notice's place.
    recorder.progress(&claim(), EventType::Normal, "Provisioning", "start".into());
    recorder.event(
        &claim(),
        EventType::Normal,
        "ProvisioningSucceeded",
        "done".into(),
    );
    let task = tokio::spawn(task);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(*sink.reasons.lock(), ["ProvisioningSucceeded"]);
    // Recorded with delivery idle, it is sent even though its outcome comes before the
    // delivery task runs (nothing here yields in between).
    recorder.progress(&claim(), EventType::Normal, "Provisioning", "again".into());
    recorder.event(
        &claim(),
        EventType::Warning,
        "ProvisioningFailed",
        "no".into(),
    );
    drop(recorder);
    task.await.unwrap();
    assert_eq!(
        *sink.reasons.lock(),
        [
            "ProvisioningSucceeded",
            "Provisioning",
            "ProvisioningFailed"
        ]
    );
    let calls = sink.calls();
    assert!(
        calls
            .iter()
            .all(|c| matches!(c, Call::Create { count: 1, .. })),
        "{calls:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn normal_events_beyond_the_normal_backlog_are_shed_and_counted() {
    let sink = ScriptedSink::default();
    let config = DeliveryConfig {
        normal_backlog: 2,
        ..DeliveryConfig::default()
    };
    let (recorder, task) = EventRecorder::with_sink(sink.clone(), "c".into(), config);
    // The delivery task is not running yet: two Normal events wait, the rest are shed, and
    // warnings still queue.
    for i in 0..5 {
        recorder.event(&claim(), EventType::Normal, "Ok", format!("n{i}"));
        recorder.event(&claim(), EventType::Warning, "Bad", format!("w{i}"));
    }
    assert_eq!((recorder.shed(), recorder.dropped()), (3, 0));
    drop(recorder);
    task.await;
    let reasons = sink.reasons.lock().clone();
    let count = |r: &str| reasons.iter().filter(|x| *x == r).count();
    assert_eq!((count("Ok"), count("Bad")), (2, 5), "{reasons:?}");
}

#[test]
fn the_normal_backlog_is_one_client_burst() {
    assert_eq!(normal_backlog(Some(10)), 10);
    assert_eq!(normal_backlog(Some(200)), 200);
    assert_eq!(normal_backlog(Some(0)), 1, "at least one waits");
    assert_eq!(normal_backlog(Some(1_000_000)), QUEUE_CAPACITY);
    assert_eq!(normal_backlog(None), QUEUE_CAPACITY, "no client-side limit");
}
