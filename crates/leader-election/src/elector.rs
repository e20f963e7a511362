//! The elector: acquire with jittered retries, renew until the deadline is missed, release on
//! cancel. The Lease calls and their bookkeeping live in `attempt.rs`.

use std::future::Future;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ObjectReference;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio::time::{Instant, sleep, sleep_until, timeout, timeout_at};
use tokio_util::sync::CancellationToken;

use crate::config::{ConfigError, JITTER_FACTOR, LeaderElectionConfig};
use crate::decide::jittered;
use crate::health::{HealthCheck, Observation, SharedObservation};
use crate::metrics::Metrics;
use crate::record::LeaseRecord;
use crate::store::{KubeLeases, LeaseStore};

/// How [`LeaderElector::run`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// We led and then failed to renew within the renew deadline. Upstream exits with status 1
    /// here (`klog.FlushAndExit`); the binary should do the same.
    Lost,
    /// Cancelled before we ever led.
    CancelledWhileStandby,
    /// Cancelled while leading, after the leading task finished. `released` says whether the
    /// Lease was handed over (only attempted with `release_on_cancel`).
    CancelledWhileLeading { released: bool },
}

/// A leader-election event on the Lease, as client-go's `LeaseLock.RecordEvent` emits it:
/// type `Normal`, reason `LeaderElection`, message `"<identity> became leader"` or
/// `"<identity> stopped leading"`.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaderEvent {
    pub lease: ObjectReference,
    pub event_type: &'static str,
    pub reason: &'static str,
    pub message: String,
}

/// Receives [`LeaderEvent`]s; the binary plugs its core/v1 event recorder in here.
pub type EventHook = Arc<dyn Fn(LeaderEvent) + Send + Sync>;

/// One candidate for one Lease.
pub struct LeaderElector<S: LeaseStore = KubeLeases> {
    pub(crate) cfg: LeaderElectionConfig,
    pub(crate) store: S,
    /// The record as last read or written, and the local time it last changed.
    pub(crate) observed: Option<LeaseRecord>,
    pub(crate) observed_at: Instant,
    /// The Lease as last returned by the server: its resourceVersion guards our next PUT.
    pub(crate) cached: Option<Lease>,
    pub(crate) reported_leader: String,
    pub(crate) observation: SharedObservation,
    pub(crate) leading_tx: watch::Sender<bool>,
    pub(crate) metrics: Metrics,
    pub(crate) event_hook: Option<EventHook>,
}

impl LeaderElector<KubeLeases> {
    /// An elector for `cfg.namespace/cfg.lock_name` on the API server. Give it its own client
    /// (as upstream does) so that throttling of the main client cannot starve renewals.
    pub fn new(client: kube::Client, cfg: LeaderElectionConfig) -> Result<Self, ConfigError> {
        let store = KubeLeases::new(client, &cfg.namespace, &cfg.lock_name);
        Self::with_store(store, cfg)
    }
}

impl<S: LeaseStore> LeaderElector<S> {
    /// An elector over any [`LeaseStore`].
    pub fn with_store(store: S, cfg: LeaderElectionConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let metrics = Metrics::default();
        // client-go reports "not leading" as soon as the elector exists.
        metrics.set_leading(&cfg.name, false);
        let now = Instant::now();
        Ok(Self {
            store,
            observed: None,
            observed_at: now,
            cached: None,
            reported_leader: String::new(),
            observation: Arc::new(Mutex::new(Observation {
                believes_leader: false,
                observed_at: now,
            })),
            leading_tx: watch::Sender::new(false),
            metrics,
            event_hook: None,
            cfg,
        })
    }

    /// Sends "became leader" / "stopped leading" events to `hook`.
    pub fn with_event_hook(mut self, hook: EventHook) -> Self {
        self.event_hook = Some(hook);
        self
    }

    /// Registers `leader_election_master_status` and `leader_election_slowpath_total`.
    pub fn register_metrics(&self, registry: &mut Registry) {
        self.metrics.register(registry);
    }

    /// The `/healthz/leader-election` check; stays valid after `run` consumes the elector.
    pub fn health_check(&self) -> HealthCheck {
        HealthCheck {
            observation: self.observation.clone(),
            lease_duration: self.cfg.lease_duration,
            name: self.cfg.name.clone(),
        }
    }

    /// `true` while we lead (between acquiring and losing, or finishing after cancel).
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.leading_tx.subscribe()
    }

    /// Campaigns until we lead, then runs `leading` on its own task with a token that is
    /// cancelled when leadership ends, and keeps renewing.
    ///
    /// - Renewal fails for `renew_deadline`: the token is cancelled, the task aborted, and
    ///   [`Outcome::Lost`] returned at once; the caller should exit.
    /// - `cancel` fires while leading: the task's token is cancelled and we *keep renewing*
    ///   until the task returns (so its shutdown still runs under the lease), then release if
    ///   configured and return [`Outcome::CancelledWhileLeading`].
    /// - If `leading` returns early we keep the lease, as client-go does.
    /// - A panic in `leading` is re-raised here, like a crashing controller in Go.
    pub async fn run<F, Fut>(mut self, cancel: CancellationToken, leading: F) -> Outcome
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        if !self.acquire(&cancel).await {
            return Outcome::CancelledWhileStandby;
        }
        let token = cancel.child_token();
        let mut task = tokio::spawn(leading(token.clone()));
        let mut task_done = false;
        loop {
            if !self.renew_round().await {
                self.end_leading();
                token.cancel();
                task.abort();
                tracing::error!(lease = %self.cfg.describe(), "Stopped leading: failed to renew lease");
                return Outcome::Lost;
            }
            klog::v!(5, lease = %self.cfg.describe(), "successfully renewed lease");
            let pause = sleep(self.cfg.retry_period);
            tokio::pin!(pause);
            // Wake early only for what can end the loop: cancellation or the task finishing.
            while !(cancel.is_cancelled() && task_done) {
                tokio::select! {
                    () = &mut pause => break,
                    // `token` is a child of `cancel`, so it is cancelled along with it.
                    () = cancel.cancelled(), if !cancel.is_cancelled() => {}
                    joined = &mut task, if !task_done => {
                        task_done = true;
                        if let Err(e) = joined
                            && e.is_panic()
                        {
                            std::panic::resume_unwind(e.into_panic());
                        }
                    }
                }
            }
            if cancel.is_cancelled() && task_done {
                break;
            }
        }
        self.end_leading();
        let released = self.cfg.release_on_cancel && self.release().await;
        Outcome::CancelledWhileLeading { released }
    }

    /// Tries immediately, then every `retry_period` with jitter, until we lead (`true`) or
    /// `cancel` fires (`false`).
    async fn acquire(&mut self, cancel: &CancellationToken) -> bool {
        let desc = self.cfg.describe();
        tracing::info!(lease = %desc, "attempting to acquire leader lease...");
        loop {
            // Bounded like a renewal so that one hung request cannot stall the campaign.
            let attempt = timeout(self.cfg.renew_deadline, self.try_acquire_or_renew());
            let acquired = tokio::select! {
                () = cancel.cancelled() => return false,
                r = attempt => r.unwrap_or(false),
            };
            self.maybe_report_transition();
            if acquired {
                break;
            }
            klog::v!(4, lease = %desc, "failed to acquire lease");
            let pause = jittered(self.cfg.retry_period, JITTER_FACTOR, rand::random::<f64>());
            tokio::select! {
                () = cancel.cancelled() => return false,
                () = sleep(pause) => {}
            }
        }
        self.record_event("became leader");
        self.metrics.set_leading(&self.cfg.name, true);
        self.leading_tx.send_replace(true);
        tracing::info!(lease = %desc, "successfully acquired lease");
        true
    }

    /// One renewal round: try now, then every `retry_period`, until success (`true`) or the
    /// renew deadline measured from the start of the round (`false`).
    async fn renew_round(&mut self) -> bool {
        let deadline = Instant::now() + self.cfg.renew_deadline;
        loop {
            let renewed = timeout_at(deadline, self.try_acquire_or_renew())
                .await
                .unwrap_or(false);
            self.maybe_report_transition();
            if renewed {
                return true;
            }
            let next = Instant::now() + self.cfg.retry_period;
            if next >= deadline {
                sleep_until(deadline).await;
                return false;
            }
            sleep_until(next).await;
        }
    }

    fn end_leading(&mut self) {
        self.metrics.set_leading(&self.cfg.name, false);
        self.leading_tx.send_replace(false);
        self.record_event("stopped leading");
    }
}
