//! One `tryAcquireOrRenew`, the release, and the bookkeeping around them: the thin I/O shell
//! around [`crate::decide`].

use std::sync::PoisonError;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::ObjectMeta;
use tokio::time::{Instant, timeout};

use crate::decide::{Decision, Now, decide, may_renew_without_reading, release_record};
use crate::elector::{LeaderElector, LeaderEvent};
use crate::record::{LeaseRecord, micro_now};
use crate::store::LeaseStore;

impl<S: LeaseStore> LeaderElector<S> {
    /// client-go's `tryAcquireOrRenew`: `true` if we hold the Lease afterwards.
    pub(crate) async fn try_acquire_or_renew(&mut self) -> bool {
        let now = Now {
            instant: Instant::now(),
            wall: micro_now(),
        };
        let me = self.cfg.identity.clone();
        let secs = self.cfg.lease_duration_seconds();

        // Fast path: a valid leader writes without reading first.
        if let (Some(observed), Some(cached)) = (&self.observed, &self.cached)
            && may_renew_without_reading(observed, self.observed_at, &me, now.instant)
            && let Decision::Renew(record) =
                decide(Some(observed), self.observed_at, &me, now, secs)
        {
            let lease = self.with_record(cached, &record);
            match self.store.update(&lease).await {
                Ok(written) => {
                    self.accept_write(written, record);
                    return true;
                }
                Err(e) => tracing::error!(
                    lease = %self.cfg.describe(),
                    "Failed to update lock optimistically: {e}, falling back to slow path"
                ),
            }
        }

        let current = match self.store.get().await {
            Ok(current) => current,
            Err(e) => {
                tracing::error!(lease = %self.cfg.describe(), "error retrieving resource lock: {e}");
                return false;
            }
        };
        let record = current
            .as_ref()
            .map(|l| LeaseRecord::from_spec(l.spec.as_ref()));
        if let Some(record) = &record
            && self.observed.as_ref() != Some(record)
        {
            // Seen when the read returned, as client-go: a slow read must not shorten the
            // holder's time. `now` (from before the read) stays what the record is judged at.
            self.set_observed(record.clone(), Instant::now());
        }
        if current.is_some() {
            self.cached = current;
        }

        match decide(record.as_ref(), self.observed_at, &me, now, secs) {
            Decision::Wait { holder, .. } => {
                klog::v!(4, lease = %self.cfg.describe(), "lock is held by {holder} and has not yet expired");
                false
            }
            Decision::Create(record) => match self.store.create(&self.new_lease(&record)).await {
                Ok(written) => {
                    self.accept_write(written, record);
                    true
                }
                Err(e) => {
                    tracing::error!(lease = %self.cfg.describe(), "error initially creating leader election record: {e}");
                    false
                }
            },
            Decision::Renew(record) => {
                self.metrics.slow_path(&self.cfg.name);
                self.write(record).await
            }
            Decision::TakeOver(record) => self.write(record).await,
        }
    }

    /// client-go's `release`: hand the Lease over if we hold it. `true` if it is not ours
    /// afterwards. Bounded by the renew deadline.
    pub(crate) async fn release(&mut self) -> bool {
        let Some(observed) = &self.observed else {
            return true;
        };
        let Some(record) = release_record(observed, &self.cfg.identity, micro_now()) else {
            return true;
        };
        let deadline = self.cfg.renew_deadline;
        match timeout(deadline, self.write(record)).await {
            Ok(true) => {
                tracing::info!(lease = %self.cfg.describe(), "released leader lease");
                true
            }
            _ => {
                tracing::error!(lease = %self.cfg.describe(), "Failed to release lock");
                false
            }
        }
    }

    /// PUTs `record` over the cached Lease (its resourceVersion makes a race fail with 409).
    async fn write(&mut self, record: LeaseRecord) -> bool {
        let Some(cached) = &self.cached else {
            return false;
        };
        let lease = self.with_record(cached, &record);
        match self.store.update(&lease).await {
            Ok(written) => {
                self.accept_write(written, record);
                true
            }
            Err(e) => {
                tracing::error!(lease = %self.cfg.describe(), "Failed to update lock: {e}");
                false
            }
        }
    }

    fn accept_write(&mut self, written: Lease, record: LeaseRecord) {
        self.cached = Some(written);
        self.set_observed(record, Instant::now());
    }

    pub(crate) fn set_observed(&mut self, record: LeaseRecord, at: Instant) {
        let believes_leader = record.holder_identity == self.cfg.identity;
        self.observed = Some(record);
        self.observed_at = at;
        let mut obs = self
            .observation
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        obs.believes_leader = believes_leader;
        obs.observed_at = at;
    }

    /// Logs a change of holder once (client-go's `OnNewLeader`, logged by csi-lib-utils at v3).
    pub(crate) fn maybe_report_transition(&mut self) {
        let holder = self
            .observed
            .as_ref()
            .map(|r| r.holder_identity.as_str())
            .unwrap_or("");
        if holder == self.reported_leader {
            return;
        }
        self.reported_leader = holder.to_string();
        klog::v!(3, leader = %self.reported_leader, "New leader detected");
    }

    pub(crate) fn record_event(&self, what: &str) {
        let (Some(hook), Some(lease)) = (&self.event_hook, &self.cached) else {
            return;
        };
        hook(LeaderEvent {
            lease: ObjectReference {
                api_version: Some("coordination.k8s.io/v1".into()),
                kind: Some("Lease".into()),
                name: lease.metadata.name.clone(),
                namespace: lease.metadata.namespace.clone(),
                uid: lease.metadata.uid.clone(),
                resource_version: lease.metadata.resource_version.clone(),
                field_path: None,
            },
            event_type: "Normal",
            reason: "LeaderElection",
            message: format!("{} {what}", self.cfg.identity),
        });
    }

    /// The Lease we create: our labels and the record.
    fn new_lease(&self, record: &LeaseRecord) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(self.cfg.lock_name.clone()),
                namespace: Some(self.cfg.namespace.clone()),
                labels: (!self.cfg.labels.is_empty()).then(|| self.cfg.labels.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(record.to_spec()),
        }
    }

    /// `cached` with the record as its spec and our labels re-applied over any others.
    fn with_record(&self, cached: &Lease, record: &LeaseRecord) -> Lease {
        let mut lease = cached.clone();
        lease.spec = Some(record.to_spec());
        if !self.cfg.labels.is_empty() {
            let labels = lease.metadata.labels.get_or_insert_with(Default::default);
            for (k, v) in &self.cfg.labels {
                labels.insert(k.clone(), v.clone());
            }
        }
        lease
    }
}
