//! The events waiting for delivery. Bounded like client-go's broadcaster, with one difference:
//! an event that only says work has begun ("progress") is replaced by the next event about the
//! same object while it still waits behind other events. Under a burst the delivery lane runs
//! far behind, and without this a claim's "provisioning" notice and its outcome both wait; once
//! the queue is full the outcome, which comes later, is the one dropped. A progress event
//! recorded while delivery is idle waits behind nothing and is not replaced: it goes out as
//! soon as the delivery task runs, as client-go's would, even if its outcome is recorded
//! before that task gets a thread.
//!
//! Normal events have a smaller bound of their own (the client's burst, see
//! [`super::DeliveryConfig::normal_backlog`]). Events ride the background lane, so a queue of
//! Normal events longer than one burst means real work has held the whole budget for a while:
//! the Normal events recorded meanwhile are logged but not written ("shed"), which keeps a
//! burst of provisioning at one write per volume. Warnings keep the full bound.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Event, ObjectReference};
use parking_lot::Mutex;
use tokio::sync::Notify;

/// Which object an event is about: its UID, or kind/namespace/name when it has none.
type ObjectKey = (String, String, String);

fn object_key(involved: &ObjectReference) -> ObjectKey {
    match involved.uid.as_deref().filter(|u| !u.is_empty()) {
        Some(uid) => (String::new(), String::new(), uid.to_string()),
        None => (
            involved.kind.clone().unwrap_or_default(),
            involved.namespace.clone().unwrap_or_default(),
            involved.name.clone().unwrap_or_default(),
        ),
    }
}

/// What became of a pushed event.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Pushed {
    Queued {
        /// A waiting progress event about the same object was taken out for this one.
        replaced: bool,
    },
    /// The queue was full, or delivery had stopped: the event is dropped.
    Dropped,
    /// A Normal event while a full backlog of Normal events already waits: not written.
    Shed,
}

fn is_normal(event: &Event) -> bool {
    event.type_.as_deref() != Some("Warning")
}

/// The queue itself, without locking or waking: pure, so it is tested on its own.
#[derive(Debug)]
pub(crate) struct State {
    capacity: usize,
    normal_capacity: usize,
    /// How many of `waiting` are Normal.
    normal_waiting: usize,
    next: u64,
    waiting: BTreeMap<u64, Event>,
    /// The waiting progress event of each object, by its place in `waiting`.
    progress: HashMap<ObjectKey, u64>,
    /// The delivery task found nothing to send and waits: the next event pushed is sent next.
    idle: bool,
    closed: bool,
}

impl State {
    /// Holds at most `capacity` events, of which at most `normal_capacity` Normal ones.
    pub(crate) fn new(capacity: usize, normal_capacity: usize) -> Self {
        Self {
            capacity,
            normal_capacity: normal_capacity.min(capacity),
            normal_waiting: 0,
            next: 0,
            waiting: BTreeMap::new(),
            progress: HashMap::new(),
            idle: false,
            closed: false,
        }
    }

    pub(crate) fn push(&mut self, event: Event, progress: bool) -> Pushed {
        if self.closed {
            return Pushed::Dropped;
        }
        let key = object_key(&event.involved_object);
        let replaced = match self.progress.remove(&key) {
            Some(at) => self.take(at).is_some(),
            None => false,
        };
        if self.waiting.len() >= self.capacity {
            return Pushed::Dropped;
        }
        let normal = is_normal(&event);
        if normal && self.normal_waiting >= self.normal_capacity {
            return Pushed::Shed;
        }
        self.normal_waiting += usize::from(normal);
        let at = self.next;
        self.next += 1;
        self.waiting.insert(at, event);
        // With delivery idle this event is the next one sent: nothing waits before it.
        let sent_next = std::mem::take(&mut self.idle);
        if progress && !sent_next {
            self.progress.insert(key, at);
        }
        Pushed::Queued { replaced }
    }

    /// The next event to deliver; with none, the delivery task is idle until the next push.
    pub(crate) fn pop(&mut self) -> Option<Event> {
        let Some(&at) = self.waiting.keys().next() else {
            self.idle = true;
            return None;
        };
        let event = self.take(at)?;
        let key = object_key(&event.involved_object);
        if self.progress.get(&key) == Some(&at) {
            self.progress.remove(&key);
        }
        Some(event)
    }

    fn take(&mut self, at: u64) -> Option<Event> {
        let event = self.waiting.remove(&at)?;
        self.normal_waiting -= usize::from(is_normal(&event));
        Some(event)
    }
}

/// The queue shared by the recorders (pushing, never blocking) and the delivery task.
#[derive(Debug)]
pub(crate) struct Pending {
    state: Mutex<State>,
    ready: Notify,
}

impl Pending {
    pub(crate) fn new(capacity: usize, normal_capacity: usize) -> Self {
        Self {
            state: Mutex::new(State::new(capacity, normal_capacity)),
            ready: Notify::new(),
        }
    }

    pub(crate) fn push(&self, event: Event, progress: bool) -> Pushed {
        let pushed = self.state.lock().push(event, progress);
        if matches!(pushed, Pushed::Queued { .. }) {
            self.ready.notify_one();
        }
        pushed
    }

    /// No more pushes: delivery ends once the queue is empty.
    pub(crate) fn close(&self) {
        self.state.lock().closed = true;
        self.ready.notify_one();
    }

    /// The next event, waiting for one; `None` once closed and drained.
    pub(crate) async fn pop(&self) -> Option<Event> {
        loop {
            // Registered before looking, so a push between the look and the wait still wakes us.
            let notified = self.ready.notified();
            {
                let mut state = self.state.lock();
                if let Some(event) = state.pop() {
                    return Some(event);
                }
                if state.closed {
                    return None;
                }
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn event(uid: &str, reason: &str) -> Event {
        Event {
            metadata: ObjectMeta {
                name: Some(format!("{uid}-{reason}")),
                ..Default::default()
            },
            involved_object: ObjectReference {
                kind: Some("PersistentVolumeClaim".into()),
                namespace: Some("ns".into()),
                name: Some(format!("claim-{uid}")),
                uid: Some(uid.into()),
                ..Default::default()
            },
            reason: Some(reason.into()),
            ..Default::default()
        }
    }

    fn drain(state: &mut State) -> Vec<String> {
        std::iter::from_fn(|| state.pop())
            .map(|e| e.metadata.name.unwrap_or_default())
            .collect()
    }

    #[test]
    fn a_waiting_progress_event_is_replaced_by_the_next_about_its_object() {
        let mut q = State::new(10, 10);
        assert_eq!(
            q.push(event("a", "Provisioning"), true),
            Pushed::Queued { replaced: false }
        );
        q.push(event("b", "Provisioning"), true);
        assert_eq!(
            q.push(event("a", "ProvisioningSucceeded"), false),
            Pushed::Queued { replaced: true }
        );
        assert_eq!(drain(&mut q), ["b-Provisioning", "a-ProvisioningSucceeded"]);
    }

    #[test]
    fn other_events_are_never_replaced() {
        let mut q = State::new(10, 10);
        q.push(event("a", "ProvisioningFailed"), false);
        q.push(event("a", "Provisioning"), true);
        q.push(event("a", "ProvisioningSucceeded"), false);
        q.push(event("a", "Other"), false);
        assert_eq!(
            drain(&mut q),
            ["a-ProvisioningFailed", "a-ProvisioningSucceeded", "a-Other"]
        );
    }

    #[test]
    fn a_delivered_progress_event_is_not_looked_for_again() {
        let mut q = State::new(10, 10);
        q.push(event("a", "Provisioning"), true);
        assert_eq!(drain(&mut q), ["a-Provisioning"]);
        // Its outcome, and a later attempt's progress, queue as usual.
        assert_eq!(
            q.push(event("a", "ProvisioningFailed"), false),
            Pushed::Queued { replaced: false }
        );
        q.push(event("a", "Provisioning"), true);
        q.push(event("b", "Provisioning"), true);
        assert_eq!(
            q.push(event("a", "Provisioning"), true),
            Pushed::Queued { replaced: true }
        );
        assert_eq!(
            drain(&mut q),
            ["a-ProvisioningFailed", "b-Provisioning", "a-Provisioning"]
        );
    }

    #[test]
    fn a_full_queue_drops_new_events_but_takes_an_outcome_once_its_progress_event_goes() {
        let mut q = State::new(2, 2);
        q.push(event("a", "Provisioning"), true);
        q.push(event("b", "Provisioning"), true);
        assert_eq!(q.push(event("c", "Provisioning"), true), Pushed::Dropped);
        assert_eq!(
            q.push(event("a", "ProvisioningSucceeded"), false),
            Pushed::Queued { replaced: true }
        );
        assert_eq!(q.waiting.len(), 2);
        assert_eq!(drain(&mut q), ["b-Provisioning", "a-ProvisioningSucceeded"]);
    }

    #[test]
    fn objects_without_uid_are_told_apart_by_kind_namespace_and_name() {
        let mut q = State::new(10, 10);
        let mut first = event("", "Provisioning");
        first.involved_object.name = Some("x".into());
        let mut other = event("", "Provisioning");
        other.involved_object.name = Some("y".into());
        let mut outcome = event("", "ProvisioningSucceeded");
        outcome.involved_object.name = Some("x".into());
        q.push(first, true);
        q.push(other, true);
        assert_eq!(q.push(outcome, false), Pushed::Queued { replaced: true });
        let left: Vec<_> = std::iter::from_fn(|| q.pop())
            .map(|e| (e.involved_object.name.unwrap(), e.reason.unwrap()))
            .collect();
        assert_eq!(
            left,
            [
                ("y".to_string(), "Provisioning".to_string()),
                ("x".to_string(), "ProvisioningSucceeded".to_string()),
            ]
        );
    }

    #[test]
    fn a_progress_event_recorded_while_delivery_is_idle_is_sent_next() {
        let mut q = State::new(10, 10);
        assert_eq!(q.pop().map(|e| e.metadata.name), None, "delivery now idle");
        q.push(event("a", "Provisioning"), true);
        // Its outcome before the delivery task ran: both go out, as client-go's would.
        assert_eq!(
            q.push(event("a", "ProvisioningFailed"), false),
            Pushed::Queued { replaced: false }
        );
        // Behind those two, the next claim's notice waits and gives way.
        q.push(event("b", "Provisioning"), true);
        q.push(event("b", "ProvisioningFailed"), false);
        assert_eq!(
            drain(&mut q),
            [
                "a-Provisioning",
                "a-ProvisioningFailed",
                "b-ProvisioningFailed"
            ]
        );
    }

    #[test]
    fn only_the_first_event_after_idle_is_sent_next() {
        let mut q = State::new(10, 10);
        assert!(q.pop().is_none());
        q.push(event("x", "Other"), false);
        q.push(event("a", "Provisioning"), true);
        q.push(event("a", "ProvisioningSucceeded"), false);
        assert_eq!(drain(&mut q), ["x-Other", "a-ProvisioningSucceeded"]);
    }

    fn warning(uid: &str, reason: &str) -> Event {
        Event {
            type_: Some("Warning".into()),
            ..event(uid, reason)
        }
    }

    #[test]
    fn beyond_the_normal_backlog_normal_events_are_shed_and_warnings_still_queue() {
        let mut q = State::new(10, 2);
        q.push(event("a", "Provisioning"), true);
        q.push(event("b", "Provisioning"), true);
        assert_eq!(q.push(event("c", "Provisioning"), true), Pushed::Shed);
        assert_eq!(
            q.push(event("c", "ProvisioningSucceeded"), false),
            Pushed::Shed
        );
        assert_eq!(
            q.push(warning("d", "ProvisioningFailed"), false),
            Pushed::Queued { replaced: false }
        );
        assert_eq!(
            drain(&mut q),
            ["a-Provisioning", "b-Provisioning", "d-ProvisioningFailed"]
        );
    }

    #[test]
    fn at_the_normal_backlog_an_outcome_still_takes_its_progress_events_place() {
        let mut q = State::new(10, 2);
        q.push(event("a", "Provisioning"), true);
        q.push(event("b", "Provisioning"), true);
        assert_eq!(
            q.push(event("a", "ProvisioningSucceeded"), false),
            Pushed::Queued { replaced: true }
        );
        // A warning in a progress event's place frees a Normal slot.
        assert_eq!(
            q.push(warning("b", "ProvisioningFailed"), false),
            Pushed::Queued { replaced: true }
        );
        assert_eq!(
            q.push(event("c", "ProvisioningSucceeded"), false),
            Pushed::Queued { replaced: false }
        );
        assert_eq!(q.push(event("e", "Other"), false), Pushed::Shed);
        assert_eq!(
            drain(&mut q),
            [
                "a-ProvisioningSucceeded",
                "b-ProvisioningFailed",
                "c-ProvisioningSucceeded"
            ]
        );
    }

    #[test]
    fn a_delivered_normal_event_frees_its_slot() {
        let mut q = State::new(10, 1);
        q.push(event("a", "Other"), false);
        assert_eq!(q.push(event("b", "Other"), false), Pushed::Shed);
        assert_eq!(drain(&mut q), ["a-Other"]);
        assert_eq!(
            q.push(event("b", "Other"), false),
            Pushed::Queued { replaced: false }
        );
        assert_eq!(drain(&mut q), ["b-Other"]);
    }

    #[test]
    fn a_closed_queue_takes_nothing_more() {
        let mut q = State::new(10, 10);
        q.push(event("a", "Provisioning"), true);
        q.closed = true;
        assert_eq!(q.push(event("b", "Other"), false), Pushed::Dropped);
        assert_eq!(drain(&mut q), ["a-Provisioning"]);
    }
}
