//! Whether the admission policy that keeps our creating-volume finalizer on the API server's
//! side (`csi-provisioner admission-policy`) is in force for our driver: watched (two watches,
//! idle when nothing changes), published to the claim controller through a watch channel
//! ([`PolicyInForce`], the one record of it), logged on every change, and exported as
//! `csi_provisioner_admission_policy_active` (the gauge only observes).
//!
//! With the policy our own finalizer writes find nothing to do, and without it they run as
//! before; only the release after a failed attempt asks (`provisioning::attempt::after_failure`),
//! since the policy would put the finalizer back in that same write. Without RBAC to read the
//! policy, the provisioner says so once and stops watching.

use futures::StreamExt;
use kube::api::DynamicObject;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::admission_policy::api_resource;
use crate::metrics::ControllerMetrics;

/// The claim controller's view of the policy: in force or not, as the watch last saw it
/// (not in force until it has seen otherwise).
#[derive(Clone, Debug)]
pub struct PolicyInForce(watch::Receiver<bool>);

impl PolicyInForce {
    pub fn get(&self) -> bool {
        *self.0.borrow()
    }
}

/// The writing end, owned by [`run`].
pub struct PolicyUpdates(watch::Sender<bool>);

/// A channel whose receiving end reads "not in force" until [`run`] says otherwise.
pub fn channel() -> (PolicyUpdates, PolicyInForce) {
    let (tx, rx) = watch::channel(false);
    (PolicyUpdates(tx), PolicyInForce(rx))
}

impl PolicyUpdates {
    fn set(&self, active: bool, metrics: &ControllerMetrics) {
        self.0.send_replace(active);
        metrics.set_admission_policy_active(active);
    }
}

/// What one watch has shown of the object named like our policy.
#[derive(Debug, Default, Clone)]
struct Seen {
    /// The object, as last seen (`None`: absent).
    current: Option<DynamicObject>,
    /// Objects of a relist in progress.
    relisting: Option<Option<DynamicObject>>,
}

impl Seen {
    fn apply(&mut self, event: Event<DynamicObject>) {
        match event {
            Event::Apply(o) => self.current = Some(o),
            Event::Delete(_) => self.current = None,
            Event::Init => self.relisting = Some(None),
            Event::InitApply(o) => self.relisting = Some(Some(o)),
            Event::InitDone => {
                if let Some(listed) = self.relisting.take() {
                    self.current = listed;
                }
            }
        }
    }
}

/// The policy is in force when it exists and a binding of our name points at it. Pure.
fn active(policy: &Seen, binding: &Seen, name: &str) -> bool {
    policy.current.is_some()
        && binding
            .current
            .as_ref()
            .and_then(|b| b.data["spec"]["policyName"].as_str().map(String::from))
            .is_some_and(|p| p == name)
}

/// The HTTP status of a watch's failure, if the API server answered.
fn status(e: &watcher::Error) -> Option<u16> {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => Some(s.code),
        _ => None,
    }
}

/// Watches until `cancel`.
pub async fn run(
    client: Client,
    driver: String,
    updates: PolicyUpdates,
    metrics: ControllerMetrics,
    cancel: CancellationToken,
) {
    let name = provisioning::admission::policy_name(&driver);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let policies: Api<DynamicObject> = Api::all_with(client.clone(), &api_resource(false));
    let bindings: Api<DynamicObject> = Api::all_with(client, &api_resource(true));
    let mut policy_events = watcher::watcher(policies, config.clone())
        .default_backoff()
        .boxed();
    let mut binding_events = watcher::watcher(bindings, config).default_backoff().boxed();
    let (mut policy, mut binding) = (Seen::default(), Seen::default());
    let mut shown: Option<bool> = None;
    loop {
        let event = tokio::select! {
            () = cancel.cancelled() => return,
            e = policy_events.next() => e.map(|e| (true, e)),
            e = binding_events.next() => e.map(|e| (false, e)),
        };
        let Some((is_policy, event)) = event else {
            // The watches never end by themselves; wait for shutdown like every task (without
            // the other watch: see below).
            drop((policy_events, binding_events));
            cancel.cancelled().await;
            return;
        };
        match event {
            Ok(event) if is_policy => policy.apply(event),
            Ok(event) => binding.apply(event),
            Err(e) if matches!(status(&e), Some(403 | 404)) => {
                if status(&e) == Some(404) {
                    // Before Kubernetes 1.36 the v1 API is not served: no policy is in force.
                    tracing::info!(policy = %name, err = %e,
                        "This API server does not serve admissionregistration.k8s.io/v1 MutatingAdmissionPolicies; the provisioner writes the creating-volume finalizer itself. Not watching");
                } else {
                    tracing::warn!(policy = %name, err = %e,
                        "Cannot read MutatingAdmissionPolicies: grant get, list and watch on mutatingadmissionpolicies and mutatingadmissionpolicybindings (deploy/kubernetes/rbac.yaml does) to see whether the creating-volume finalizer is kept by the API server. Not watching");
                }
                updates.set(false, &metrics);
                // Drop both watches before waiting: the other one's request may be waiting in
                // the client's line for a token, and a waiter never polled again would hold
                // the head of the line, so no request of this client would ever be sent.
                drop((policy_events, binding_events));
                cancel.cancelled().await;
                return;
            }
            Err(e) => {
                klog::v!(2, policy = %name, err = %e, "Watching the admission policy failed; retrying");
                continue;
            }
        }
        let now = active(&policy, &binding, &name);
        if shown != Some(now) {
            shown = Some(now);
            updates.set(now, &metrics);
            if now {
                tracing::info!(policy = %name, "The creating-volume finalizer is kept by the API server (MutatingAdmissionPolicy in force): no claim writes for it");
            } else {
                tracing::info!(policy = %name, "No MutatingAdmissionPolicy keeps the creating-volume finalizer: the provisioner adds and removes it itself (csi-provisioner admission-policy prints one)");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(policy_name: Option<&str>) -> DynamicObject {
        let mut o = DynamicObject::new("x", &api_resource(true));
        if let Some(p) = policy_name {
            o.data = serde_json::json!({"spec": {"policyName": p}});
        }
        o
    }

    #[test]
    fn active_needs_the_policy_and_a_binding_to_it() {
        let seen = |o: Option<DynamicObject>| Seen {
            current: o,
            relisting: None,
        };
        let cases = [
            (None, None, false),
            (Some(object(None)), None, false),
            (None, Some(object(Some("p"))), false),
            (Some(object(None)), Some(object(Some("other"))), false),
            (Some(object(None)), Some(object(Some("p"))), true),
        ];
        for (p, b, want) in cases {
            assert_eq!(
                active(&seen(p.clone()), &seen(b.clone()), "p"),
                want,
                "{p:?} {b:?}"
            );
        }
    }

    #[test]
    fn the_claim_side_reads_what_the_watch_last_set() {
        let (updates, in_force) = channel();
        assert!(!in_force.get(), "not in force before the watch has seen it");
        let metrics = ControllerMetrics::default();
        updates.set(true, &metrics);
        assert!(in_force.get() && in_force.clone().get());
        updates.set(false, &metrics);
        assert!(!in_force.get());
    }

    #[test]
    fn a_relist_replaces_what_was_seen_when_it_ends() {
        let mut s = Seen::default();
        s.apply(Event::Apply(object(None)));
        s.apply(Event::Init);
        assert!(s.current.is_some(), "kept until the relist ends");
        s.apply(Event::InitDone);
        assert!(s.current.is_none(), "the relist found nothing");
        s.apply(Event::Init);
        s.apply(Event::InitApply(object(None)));
        s.apply(Event::InitDone);
        assert!(s.current.is_some());
        s.apply(Event::Delete(object(None)));
        assert!(s.current.is_none());
    }
}
