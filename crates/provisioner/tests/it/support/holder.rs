//! What holds a claim while a volume of it may exist without a PV: our entry in the write-ahead
//! record (the default), or our creating-volume finalizer (`CSI_PROVISIONER_WRITE_AHEAD_RECORD=
//! false`, and every claim an earlier version left holding it). The no-leak tests run with each
//! and assert the same outcomes; only how the hold is seen differs (in the record's Lease, or on
//! the claim).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::Api;
use kube::runtime::watcher;
use provisioning::record::{self, Entry};

use super::{Scenario, WAIT, eventually, holds_finalizer};

/// What holds our claims.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder {
    Finalizer,
    Record,
}

impl Scenario {
    /// [`Scenario::start`] with claims held by `holder`.
    pub async fn start_held(
        prefix: &str,
        mock_args: &[&str],
        prov_args: &[&str],
        holder: Holder,
    ) -> Scenario {
        let mut s = Scenario::new(prefix).await;
        s.start_driver(mock_args);
        s.start_provisioner_held(prov_args, holder);
        s
    }

    /// The provisioner with claims held by `holder` (the record in the scenario's namespace).
    pub fn start_provisioner_held<S: AsRef<str>>(&mut self, args: &[S], holder: Holder) {
        let switch = match holder {
            Holder::Finalizer => "false",
            Holder::Record => "true",
        };
        self.start_provisioner_with_env(args, &[(csi_provisioner::write_ahead::SWITCH, switch)]);
    }

    /// The record's entries now (none before its first write).
    pub async fn record_entries(&self) -> Vec<Entry> {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.ns);
        let lease = record::lease_name(&self.driver, None);
        let Some(found) = api.get_opt(&lease).await.unwrap() else {
            return Vec::new();
        };
        let annotations: BTreeMap<String, String> = found.metadata.annotations.unwrap_or_default();
        let (entries, unreadable) = record::entries(&annotations);
        assert!(unreadable.is_empty(), "{unreadable:?}");
        entries
    }

    /// Whether `holder` holds `claim` (as just read) now.
    pub async fn held(&self, holder: Holder, claim: &PersistentVolumeClaim) -> bool {
        match holder {
            Holder::Finalizer => holds_finalizer(claim),
            Holder::Record => {
                let uid = claim.metadata.uid.as_deref();
                self.record_entries()
                    .await
                    .iter()
                    .any(|e| Some(e.uid.as_str()) == uid)
            }
        }
    }

    /// Waits until `holder` holds claim `name`; returns the claim as read then.
    pub async fn wait_held(&self, holder: Holder, name: &str) -> PersistentVolumeClaim {
        eventually(&format!("{name} to be held ({holder:?})"), WAIT, || async {
            let claim = self.claims().get(name).await.ok()?;
            self.held(holder, &claim).await.then_some(claim)
        })
        .await
    }

    /// Waits until nothing holds claim `claim` any more (its finalizer or entry is gone; the
    /// claim itself may be gone too).
    pub async fn wait_let_go(&self, holder: Holder, claim: &PersistentVolumeClaim) {
        let name = claim.metadata.name.clone().unwrap_or_default();
        eventually(
            &format!("{name} to be let go ({holder:?})"),
            WAIT,
            || async {
                let now = self.claims().get_opt(&name).await.ok()?;
                let same = now.filter(|c| c.metadata.uid == claim.metadata.uid);
                let held = match (holder, same) {
                    (Holder::Finalizer, Some(c)) => holds_finalizer(&c),
                    (Holder::Finalizer, None) => false,
                    (Holder::Record, _) => self.held(holder, claim).await,
                };
                (!held).then_some(())
            },
        )
        .await;
    }

    /// Set once any version of any claim in the namespace carries our creating-volume
    /// finalizer (a watch started before the claims sees every stored change): with the
    /// record, none ever should.
    pub fn watch_for_our_finalizer(&self) -> Arc<AtomicBool> {
        watch_for_our_finalizer(self.claims())
    }
}

/// [`Scenario::watch_for_our_finalizer`] over the claims of `api`.
pub fn watch_for_our_finalizer(api: Api<PersistentVolumeClaim>) -> Arc<AtomicBool> {
    let seen = Arc::new(AtomicBool::new(false));
    let flag = seen.clone();
    tokio::spawn(async move {
        let mut events = watcher::watcher(api, watcher::Config::default()).boxed();
        while let Some(Ok(e)) = events.next().await {
            if let watcher::Event::Apply(c) | watcher::Event::InitApply(c) = &e
                && holds_finalizer(c)
            {
                flag.store(true, Ordering::SeqCst);
            }
        }
    });
    seen
}

/// Counts the stored changes (created or modified) of Lease `name` in `api` from now on: one
/// watch event each.
pub fn count_lease_writes(api: Api<Lease>, name: &str) -> Arc<AtomicUsize> {
    let count = Arc::new(AtomicUsize::new(0));
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let seen = count.clone();
    tokio::spawn(async move {
        let mut events = watcher::watcher(api, config).boxed();
        while let Some(Ok(e)) = events.next().await {
            if let watcher::Event::Apply(_) = e {
                seen.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    count
}

/// With the record, no claim ever held our finalizer (`seen`: [`Scenario::watch_for_our_finalizer`]).
pub fn assert_no_finalizer_with_the_record(holder: Holder, seen: &AtomicBool) {
    if holder == Holder::Record {
        assert!(!seen.load(Ordering::SeqCst), "our finalizer was on a claim");
    }
}
