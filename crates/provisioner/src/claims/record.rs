//! What the claim controller remembers about each claim: one [`ClaimRecord`] per claim UID, in
//! one store with one [`Records::forget`]. Nothing here is needed for correctness after a
//! restart (the claim's finalizer is); it saves CSI and API calls.

use std::collections::HashMap;
use std::time::Instant;

use csi::v1::{CreateVolumeRequest, TopologyRequirement};
use k8s_openapi::api::core::v1::PersistentVolume;
use parking_lot::Mutex;
use provisioning::attempt::VolumeState;
use provisioning::retry::Hold;
use tokio::task::AbortHandle;

use super::race::Race;

/// Every claim's record, keyed by claim UID.
#[derive(Default)]
pub struct Records {
    claims: Mutex<HashMap<String, ClaimRecord>>,
}

/// A finalizer release under way.
struct Release {
    lane: Lane,
    /// Its task, once spawned: a faster release aborts it.
    task: Option<AbortHandle>,
}

/// Which API budget a finalizer release spends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Lane {
    /// Only tokens the hot path leaves free: nothing waits for a bound claim's release.
    Background,
    /// The main budget: a deleted claim's deletion waits for it.
    Foreground,
}

/// Everything remembered about one claim.
#[derive(Default)]
pub struct ClaimRecord {
    /// What this process knows about the claim's volume (`None`: no record yet; see
    /// [`VolumeState::initial`]).
    volume: Option<VolumeState>,
    /// The CreateVolume request sent last, while a volume may exist without a PV: a clean-up
    /// probe repeats it exactly, and its secrets serve DeleteVolume. Never logged.
    last_request: Option<CreateVolumeRequest>,
    /// A PV built for a created volume whose save failed: saved again on every sync until it
    /// lands, whatever happens to the StorageClass (upstream's unsaved-PV queue).
    pub(super) unsaved_pv: Option<PersistentVolume>,
    /// Topology computed on the first attempt for this selected node, reused on retries so a
    /// retried CreateVolume asks for the same placement (upstream's fix for leaked volumes).
    topology: Option<(Option<String>, Option<TopologyRequirement>)>,
    /// When the latest attempt started, for the provisioning duration metric.
    started: Option<Instant>,
    /// The capacity explanation last put on the claim, so it is posted once.
    explained: Option<String>,
    /// The failed attempt's hold on the next one.
    hold: Option<Hold>,
    /// Finalizer releases that failed in a row: the backoff of the next (a release runs on its
    /// own task, after the sync that started it was counted a success).
    release_failures: u32,
    /// The finalizer release under way, and on which lane (one task per lane at a time).
    release: Option<Release>,
    /// A deleting clone source: the pending clones last reported in an event.
    pub(super) clone_hold: Option<Vec<String>>,
    /// The last attempt found its snapshot missing or not ready.
    pub(super) awaiting_snapshot: bool,
    /// The snapshot as our adding the source-protection finalizer left it, so that its
    /// removal after the restore needs no read when the watch lags behind.
    pub(super) protected_snapshot: Option<kube::api::DynamicObject>,
    /// Distributed provisioning: this instance's wait on the claim, and its take of it.
    pub(super) race: Race,
    /// Forgotten but for what outlives the claim ([`Race::outlives`]): not counted.
    forgotten: bool,
}

impl ClaimRecord {
    /// What [`provisioning::claim_step::next_step`] needs of the record.
    pub fn facts(&self) -> provisioning::claim_step::RecordFacts {
        provisioning::claim_step::RecordFacts {
            volume: self.volume.clone(),
            unsaved_pv: self.unsaved_pv.is_some(),
            clone_hold: self.clone_hold.is_some(),
            // Filled in by the claim controller, which holds the entries.
            recorded: false,
        }
    }

    /// The request is kept only while a volume may exist without a PV (the earlier one when
    /// none is given), and a PV to save only while the created volume is ours.
    fn record(&mut self, state: VolumeState, request: Option<CreateVolumeRequest>) {
        self.last_request = match state {
            // No request: the call's own made nothing, and the earlier one's still may have.
            VolumeState::MayExist | VolumeState::Created(_) => request.or(self.last_request.take()),
            _ => None,
        };
        if !matches!(state, VolumeState::Created(_)) {
            self.unsaved_pv = None;
        }
        self.volume = Some(state);
    }
}

impl Records {
    /// `f` over the claim's record, made if there is none.
    pub fn with<R>(&self, uid: &str, f: impl FnOnce(&mut ClaimRecord) -> R) -> R {
        let mut claims = self.claims.lock();
        let record = claims.entry(uid.to_string()).or_default();
        record.forgotten = false;
        f(record)
    }

    /// `f` over the claim's record if there is one (none is made).
    pub fn existing<R>(&self, uid: &str, f: impl FnOnce(&mut ClaimRecord) -> R) -> Option<R> {
        self.claims.lock().get_mut(uid).map(f)
    }

    /// The sum of `f` over every record (with its claim's UID). Saturating: a request of
    /// exabytes parses to i64::MAX, and two of them would wrap.
    pub fn sum(&self, mut f: impl FnMut(&str, &mut ClaimRecord) -> i64) -> i64 {
        let mut claims = self.claims.lock();
        claims
            .iter_mut()
            .fold(0_i64, |sum, (uid, r)| sum.saturating_add(f(uid, r)))
    }

    /// Drops every record whose claim was forgotten and whose kept part is over.
    pub fn prune(&self, now: Instant) {
        self.claims
            .lock()
            .retain(|_, r| !r.forgotten || r.race.outlives(now));
    }

    /// Whether a release on `lane` may start now: none is under way for this claim, or only a
    /// background one that may wait long for free tokens while the claim's deletion waits.
    /// That background release is aborted: its copy of the claim predates the deletion, so
    /// sending it would only cost a conflict and a re-read.
    pub fn start_release(&self, uid: &str, lane: Lane) -> bool {
        self.with(uid, |r| {
            if let Some(current) = &r.release {
                if current.lane >= lane {
                    return false;
                }
                if let Some(task) = &current.task {
                    task.abort();
                }
            }
            r.release = Some(Release { lane, task: None });
            true
        })
    }

    /// The task of the release [`start_release`](Self::start_release) allowed on `lane`; it is
    /// aborted at once if a faster release superseded it meanwhile.
    pub fn track_release(&self, uid: &str, lane: Lane, task: AbortHandle) {
        let mut claims = self.claims.lock();
        match claims.get_mut(uid).and_then(|r| r.release.as_mut()) {
            Some(current) if current.lane == lane && current.task.is_none() => {
                current.task = Some(task);
            }
            Some(current) if current.lane > lane => task.abort(),
            // Finished already (or a newer release of the same lane owns the entry).
            _ => {}
        }
    }

    /// Aborts a background release that has not finished: the claim changed (it was deleted),
    /// so the copy it would send is stale. A later sync starts a new release when it is time.
    pub fn abort_background_release(&self, uid: &str) {
        self.existing(uid, |r| {
            if let Some(current) = &r.release
                && current.lane == Lane::Background
            {
                if let Some(task) = &current.task {
                    task.abort();
                }
                r.release = None;
            }
        });
    }

    /// A release of the claim's finalizer failed: returns how many failed in a row before this
    /// one (the exponent of its backoff). A success forgets the claim, and the count with it.
    pub fn release_failed(&self, uid: &str) -> u32 {
        self.with(uid, |m| {
            let before = m.release_failures;
            m.release_failures = before.saturating_add(1);
            before
        })
    }

    /// A release on `lane` ended (a later one on a faster lane keeps its entry).
    pub fn end_release(&self, uid: &str, lane: Lane) {
        self.existing(uid, |r| {
            if r.release.as_ref().is_some_and(|r| r.lane == lane) {
                r.release = None;
            }
        });
    }

    /// Drops everything remembered for a claim (deleted, or settled with its PV), but for the
    /// failures of this node's attempts, which outlive it for a while ([`Race::outlives`]).
    pub fn forget(&self, uid: &str) {
        let mut claims = self.claims.lock();
        if let Some(record) = claims.remove(uid)
            && let Some(race) = record.race.kept(Instant::now())
        {
            let forgotten = true;
            claims.insert(
                uid.to_string(),
                ClaimRecord {
                    race,
                    forgotten,
                    ..Default::default()
                },
            );
        }
    }

    /// How many claims have a record: bounded by the live claims of our driver.
    pub fn len(&self) -> usize {
        self.claims.lock().values().filter(|r| !r.forgotten).count()
    }

    /// What is known about the claim's volume; `earlier_attempt` (an earlier process may have
    /// called CreateVolume) decides for a claim this process has no record of.
    pub fn volume_state(&self, uid: &str, earlier_attempt: bool) -> VolumeState {
        self.claims
            .lock()
            .get(uid)
            .and_then(|m| m.volume.clone())
            .unwrap_or_else(|| VolumeState::initial(earlier_attempt))
    }

    /// Records the state after an attempt, with the request it sent while a volume may exist.
    pub fn set_volume_state(
        &self,
        uid: &str,
        state: VolumeState,
        request: Option<CreateVolumeRequest>,
    ) {
        self.with(uid, |m| m.record(state, request))
    }

    /// The claim's state, recorded as [`VolumeState::initial`] if this process has no record
    /// yet (so a finalizer added next does not make it look like an earlier process's).
    pub fn volume_state_recorded(&self, uid: &str, earlier_attempt: bool) -> VolumeState {
        self.with(uid, |m| {
            m.volume
                .get_or_insert_with(|| VolumeState::initial(earlier_attempt))
                .clone()
        })
    }

    /// The request a clean-up probe repeats, and whose secrets DeleteVolume uses.
    pub fn last_request(&self, uid: &str) -> Option<CreateVolumeRequest> {
        self.claims
            .lock()
            .get(uid)
            .and_then(|m| m.last_request.clone())
    }

    /// The hold a failed attempt put on the next one.
    pub fn hold(&self, uid: &str) -> Option<Hold> {
        self.claims.lock().get(uid).and_then(|m| m.hold.clone())
    }

    pub fn set_hold(&self, uid: &str, hold: Option<Hold>) {
        match hold {
            None => drop(self.existing(uid, |m| m.hold = None)),
            hold => self.with(uid, |m| m.hold = hold),
        }
    }

    /// The cached topology for this selected node, if any.
    pub fn topology(
        &self,
        uid: &str,
        selected_node: Option<&str>,
    ) -> Option<Option<TopologyRequirement>> {
        let claims = self.claims.lock();
        let (node, req) = claims.get(uid)?.topology.as_ref()?;
        (node.as_deref() == selected_node).then(|| req.clone())
    }

    pub fn remember_topology(
        &self,
        uid: &str,
        selected_node: Option<&str>,
        req: Option<TopologyRequirement>,
    ) {
        self.with(uid, |m| {
            m.topology = Some((selected_node.map(String::from), req))
        });
    }

    pub fn forget_topology(&self, uid: &str) {
        self.with(uid, |m| m.topology = None);
    }

    /// A provisioning attempt starts now: the duration metric times the successful attempt
    /// alone, as upstream's (failed attempts and the waits between them are left out).
    pub fn attempt_started(&self, uid: &str) -> Instant {
        let now = Instant::now();
        self.with(uid, |m| m.started = Some(now));
        now
    }

    /// When the latest attempt started (now if none is remembered).
    pub fn started(&self, uid: &str) -> Instant {
        self.with(uid, |m| *m.started.get_or_insert_with(Instant::now))
    }

    /// Whether `message` differs from the explanation already posted (and records it).
    pub fn explain_once(&self, uid: &str, message: &str) -> bool {
        self.with(uid, |m| {
            if m.explained.as_deref() == Some(message) {
                false
            } else {
                m.explained = Some(message.to_string());
                true
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topology_is_reused_only_for_the_same_node() {
        let m = Records::default();
        let req = TopologyRequirement::default();
        m.remember_topology("u", Some("n1"), Some(req.clone()));
        assert_eq!(m.topology("u", Some("n1")), Some(Some(req)));
        assert_eq!(m.topology("u", Some("n2")), None);
        m.forget_topology("u");
        assert_eq!(m.topology("u", Some("n1")), None);
    }

    #[test]
    fn explanations_are_posted_once_per_message() {
        let m = Records::default();
        assert!(m.explain_once("u", "a"));
        assert!(!m.explain_once("u", "a"));
        assert!(m.explain_once("u", "b"));
    }

    #[test]
    fn failed_releases_count_up_until_the_claim_is_forgotten() {
        let m = Records::default();
        assert_eq!(
            [
                m.release_failed("u"),
                m.release_failed("u"),
                m.release_failed("v")
            ],
            [0, 1, 0]
        );
        m.forget("u");
        assert_eq!(
            m.release_failed("u"),
            0,
            "a success starts again at the first step"
        );
    }

    #[test]
    fn one_release_at_a_time_per_claim_and_lane() {
        use Lane::*;
        let m = Records::default();
        assert!(m.start_release("u", Background));
        assert!(!m.start_release("u", Background));
        assert!(m.start_release("v", Background));
        m.end_release("u", Background);
        assert!(m.start_release("u", Background));
        // The claim is deleted while its background release waits: the foreground one starts.
        assert!(m.start_release("u", Foreground));
        assert!(!m.start_release("u", Foreground));
        assert!(!m.start_release("u", Background));
        // The background task finishing does not clear the foreground entry.
        m.end_release("u", Background);
        assert!(!m.start_release("u", Foreground));
        m.end_release("u", Foreground);
        assert!(m.start_release("u", Foreground));
    }

    #[tokio::test]
    async fn a_deleted_claims_release_aborts_the_waiting_background_one() {
        use Lane::*;
        let m = Records::default();
        assert!(m.start_release("u", Background));
        // Stands for a request waiting for a free token.
        let waiting = tokio::spawn(std::future::pending::<()>());
        m.track_release("u", Background, waiting.abort_handle());
        assert!(m.start_release("u", Foreground));
        let err = waiting
            .await
            .expect_err("the background release must be aborted");
        assert!(err.is_cancelled(), "{err}");
        // A background task tracked only after the foreground one started is aborted too.
        assert!(m.start_release("v", Background));
        assert!(m.start_release("v", Foreground));
        let late = tokio::spawn(std::future::pending::<()>());
        m.track_release("v", Background, late.abort_handle());
        assert!(late.await.expect_err("aborted").is_cancelled());
        // Waiting for pvc-protection aborts a background release, and only that.
        assert!(m.start_release("w", Background));
        let bg = tokio::spawn(std::future::pending::<()>());
        m.track_release("w", Background, bg.abort_handle());
        m.abort_background_release("w");
        assert!(bg.await.expect_err("aborted").is_cancelled());
        assert!(m.start_release("w", Background), "the entry is gone");
        assert!(m.start_release("w", Foreground));
        m.abort_background_release("w");
        assert!(
            !m.start_release("w", Foreground),
            "a foreground release stays"
        );
        // The foreground release itself is never aborted by tracking.
        let fg = tokio::spawn(async { 7 });
        m.track_release("v", Foreground, fg.abort_handle());
        assert_eq!(fg.await.unwrap(), 7);
    }

    #[test]
    fn forget_drops_everything() {
        let m = Records::default();
        m.set_volume_state("u", VolumeState::Created("vol-1".into()), None);
        assert_eq!(m.len(), 1);
        m.forget("u");
        assert_eq!(m.volume_state("u", true), VolumeState::Unknown);
        assert_eq!(m.volume_state("u", false), VolumeState::None);
        assert_eq!(m.len(), 0);
        // Clearing a hold never creates an entry.
        m.set_hold("u", None);
        assert_eq!(m.len(), 0);
    }

    #[test]
    fn the_first_state_is_recorded_without_losing_a_kept_request() {
        let m = Records::default();
        assert_eq!(m.volume_state_recorded("u", false), VolumeState::None);
        // The finalizer goes on now: still None, not an earlier process's Unknown.
        assert_eq!(m.volume_state("u", true), VolumeState::None);
        let request = CreateVolumeRequest {
            name: "pvc-v".into(),
            ..Default::default()
        };
        m.set_volume_state("v", VolumeState::MayExist, Some(request.clone()));
        assert_eq!(m.volume_state_recorded("v", true), VolumeState::MayExist);
        assert_eq!(m.last_request("v"), Some(request));
    }

    #[test]
    fn a_pv_is_kept_for_saving_only_while_its_volume_is_ours() {
        let m = Records::default();
        m.set_volume_state("u", VolumeState::Created("vol".into()), None);
        m.with("u", |r| r.unsaved_pv = Some(PersistentVolume::default()));
        assert!(m.existing("u", |r| r.unsaved_pv.is_some()).unwrap());
        m.set_volume_state("u", VolumeState::Collision, None);
        assert!(m.existing("u", |r| r.unsaved_pv.is_none()).unwrap());
    }

    #[test]
    fn the_request_is_kept_only_while_a_volume_may_exist() {
        let m = Records::default();
        let request = CreateVolumeRequest {
            name: "pvc-u".into(),
            ..Default::default()
        };
        m.set_volume_state("u", VolumeState::MayExist, Some(request.clone()));
        assert_eq!(m.last_request("u"), Some(request.clone()));
        // A later call that made nothing leaves the earlier request in place.
        m.set_volume_state("u", VolumeState::MayExist, None);
        assert_eq!(m.last_request("u"), Some(request.clone()));
        m.set_volume_state("u", VolumeState::None, Some(request));
        assert_eq!(m.last_request("u"), None);
    }
}
