//! Distributed provisioning: which instance handles a claim, and taking an Immediate claim that
//! no node has yet by writing our node into its `selected-node` annotation.
//!
//! Upstream lets every instance sleep a random 0–20 s and then race (update conflicts, and a
//! claim can wait 20 s for nothing). Here the instances agree on an order from what they all
//! publish ([`provisioning::distributed::claim_turn`]): the first takes the claim at once, the
//! others only if it has not after a wait that grows with their rank. Without published
//! capacity there is nothing to agree on, and upstream's random delay remains.

use std::time::{Duration, Instant};

use controller_kit::workqueue::RateLimiter;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::runtime::reflector::ObjectRef;
use provisioning::claim::{annotation, requested_bytes};
use provisioning::distributed::{Published, Turn, after_own_failures, claim_turn, reports};
use provisioning::names::ANN_SELECTED_NODE;
use provisioning::prepare::Prepared;

use super::{ClaimError, ClaimsController, SyncError, claim_name, update};
use crate::node::NodeDeployment;

/// What this instance remembers of one claim it waits on, took, or failed (in its
/// [`ClaimRecord`](super::record::ClaimRecord)).
#[derive(Default)]
pub struct Race {
    first_seen: Option<Instant>,
    /// The wait of this instance's place in the claim's order when last computed.
    turn: Option<Duration>,
    /// Upstream's jittered delay, for a claim no order can be agreed on.
    drawn: Option<Duration>,
    /// This instance took (or is taking) the claim and its volume may not exist yet: the
    /// driver's GetCapacity does not count it, so the next take must.
    taken: Option<Taken>,
    /// The attempts here that failed and sent the claim back: how often, and when last. Kept
    /// when the claim leaves the cache (another node took it: it may come back), for
    /// [`FAILURES_REMEMBERED`] after the last failure.
    failed: Option<(u32, Instant)>,
}

/// How long this instance remembers that a claim failed here.
const FAILURES_REMEMBERED: Duration = Duration::from_secs(30 * 60);

/// A claim this instance took or is taking.
struct Taken {
    claim: ObjectRef<PersistentVolumeClaim>,
    bytes: i64,
    /// Whether our `selected-node` write has landed (before that the cache cannot confirm it).
    written: bool,
}

impl Race {
    /// How long this instance has waited on the claim.
    fn waited(&mut self, now: Instant) -> Duration {
        now - *self.first_seen.get_or_insert(now)
    }

    /// How long this instance has waited on the claim at its current place in the order. A
    /// new place restarts the wait: when the first choice fills up or goes away, the places
    /// shift, and without the restart the new second would find its turn already due while
    /// the new first is taking the claim, and the two would collide.
    fn waited_for_turn(&mut self, wait: Duration, now: Instant) -> Duration {
        let before = self.turn.replace(wait);
        if restarts_wait(before, wait) {
            self.first_seen = Some(now);
        }
        self.waited(now)
    }

    /// No node has room for the claim now: no place in the order. The time waited meanwhile
    /// (which times the explanation) does not count towards a turn once room appears, or this
    /// instance, ranked behind another, would take the claim at once and collide with it.
    fn no_turn(&mut self) {
        self.turn = Some(Duration::MAX);
    }

    /// Upstream's delay for a claim nobody ranks: drawn once per wait.
    fn draw(&mut self, node: &NodeDeployment) -> Duration {
        *self.drawn.get_or_insert_with(|| {
            RateLimiter::with_jitter(node.base_delay, node.max_delay).when(&())
        })
    }

    /// Forgets the wait, but not that this instance took the claim.
    pub fn forget_wait(&mut self) {
        (self.first_seen, self.turn, self.drawn) = (None, None, None);
    }

    /// The claim's attempt here failed and sent it back to be taken again.
    pub fn failed_here(&mut self, now: Instant) {
        let before = self.failures(now);
        self.failed = Some((before.saturating_add(1), now));
    }

    /// How often the claim failed here lately.
    fn failures(&self, now: Instant) -> u32 {
        self.failed
            .filter(|(_, at)| now.duration_since(*at) < FAILURES_REMEMBERED)
            .map_or(0, |(n, _)| n)
    }

    /// Whether something of the race outlives the claim's record: recent failures here.
    pub fn outlives(&self, now: Instant) -> bool {
        self.failures(now) > 0
    }

    /// What is kept when the claim is forgotten (see [`Self::outlives`]).
    pub fn kept(&self, now: Instant) -> Option<Race> {
        self.outlives(now).then(|| Race {
            failed: self.failed,
            ..Race::default()
        })
    }

    /// Bytes of the take if its volume may not exist yet. A take whose write is still on its
    /// way always counts; a written one counts while `still_ours(claim)` (the cached claim
    /// still names our node and has no PV), and is dropped once it does not.
    fn in_flight(&mut self, still_ours: impl Fn(&ObjectRef<PersistentVolumeClaim>) -> bool) -> i64 {
        if let Some(t) = &self.taken
            && t.written
            && !still_ours(&t.claim)
        {
            self.taken = None;
        }
        self.taken.as_ref().map_or(0, |t| t.bytes)
    }
}

impl ClaimsController {
    /// Distributed provisioning: the claim this node gave back while a volume of it may exist
    /// here is bound to its own PV on this node, which holds that volume: this node's
    /// finalizer goes ([`provisioning::distributed::Leftover::Drop`]).
    pub(super) async fn drop_node_finalizer(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Result<(), SyncError> {
        let Some(name) = self.node_finalizer() else {
            return Ok(());
        };
        let (client, claims) = (&self.ctx.client, &self.ctx.caches.claims);
        update::set_finalizer(client, claims, claim, &name, false)
            .await
            .map(drop)
            .map_err(|source| {
                ClaimError::ClaimWrite {
                    claim: claim_name(claim),
                    what: "remove this node's finalizer from",
                    source,
                }
                .into()
            })
    }

    /// A deleted claim that no node holds. Either no node ever took it, or the last one gave it
    /// up on the driver's final answer (`provisioning::attempt::after_failure`), which CSI makes
    /// the existing volume's id if there was one: no volume can exist, and a finalizer (one an
    /// earlier version or its retired admission policy left) only has to go. (A node that gave it up while a volume of it may
    /// exist holds it with its own finalizer, and one that still remembers such a call cleans
    /// up first: [`provisioning::claim_step::Step::CleanUpLeft`].)
    pub(super) async fn let_go(&self, claim: &PersistentVolumeClaim) -> Result<(), SyncError> {
        let uid = claim.metadata.uid.as_deref().unwrap_or_default();
        self.records.existing(uid, |r| {
            r.race.forget_wait();
            r.race.taken = None;
        });
        if provisioning::lifecycle::has_finalizer(claim) {
            self.remove_finalizer(claim).await?;
        }
        Ok(())
    }

    /// An unclaimed Immediate claim, not deleted nor bound: take it when it is our turn.
    pub(super) async fn race(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
    ) -> Result<(), SyncError> {
        let Some(node) = self.ctx.node.clone() else {
            return Ok(());
        };
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        let here = on_node(claim, &node.name);
        // As upstream, only allowed topologies that exclude this node keep it from taking the
        // claim; any other problem is reported on the claim by provisioning once it is taken.
        if restricted(class)
            && let Err(e) = self.topology_admits(&here, class)
        {
            klog::v!(4, claim = %claim_name(claim), node = %node.name, reason = %e, "AllowedTopologies exclude this node; not taking claim");
            return Ok(());
        }
        let plan = match self.prepare(&here, class, true) {
            Ok(Prepared::Provision(plan)) => Some(plan),
            Ok(Prepared::ExternalPopulator { .. }) => return Ok(()),
            // Taken anyway, as upstream: provisioning then reports the problem on the claim.
            Err(e) => {
                klog::v!(4, claim = %claim_name(claim), reason = %e, "Taking claim without the capacity pre-check");
                None
            }
        };
        let failures = self
            .records
            .existing(&uid, |r| r.race.failures(Instant::now()));
        let turn = after_own_failures(
            self.turn(claim, class, &node),
            failures.unwrap_or(0),
            turn_step(&node),
            node.max_delay,
        );
        let wait = match turn {
            Turn::Now => Duration::ZERO,
            Turn::After(d) => d,
            Turn::Unranked => self.records.with(&uid, |r| r.race.draw(&node)),
            Turn::NoRoom { report } => {
                self.records.with(&uid, |r| r.race.no_turn());
                return if report {
                    self.report_no_room(claim, class)
                } else {
                    Ok(())
                };
            }
        };
        let waited = self
            .records
            .with(&uid, |r| r.race.waited_for_turn(wait, Instant::now()));
        if waited < wait {
            return Err(SyncError::Turn(wait - waited));
        }
        // One pre-check at a time on this node, each counting the takes before it whose
        // volumes the driver does not report yet: a burst must not pass one pre-check many
        // times. The write itself goes out after the lock, so takes do not wait for each
        // other's round trip behind the rest of the API budget.
        {
            let _taking = self.taking.lock().await;
            let in_flight = self.in_flight(&node);
            klog::v!(4, claim = %claim_name(claim), in_flight, "Checking capacity before taking claim");
            if let Some(plan) = &plan
                && !self.capacity_allows(plan, in_flight).await
            {
                klog::v!(3, claim = %claim_name(claim), node = %node.name, "GetCapacity says the volume does not fit on this node; not taking the claim");
                // Asked again later: room may come with nothing to bring the claim back (no
                // capacity tracking to recheck waiting claims, or a take of ours that ended
                // without a volume).
                return Err(SyncError::Turn(node.max_delay));
            }
            let taking = Taken {
                claim: ObjectRef::from_obj(claim),
                bytes: requested_bytes(claim).unwrap_or(0),
                written: false,
            };
            self.records.with(&uid, |r| r.race.taken = Some(taking));
        }
        let written = update::modify_claim(&self.ctx.client, &self.ctx.caches.claims, claim, |c| {
            if annotation(c, ANN_SELECTED_NODE).is_some_and(|n| !n.is_empty()) {
                return false; // another instance was faster
            }
            c.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(ANN_SELECTED_NODE.to_string(), node.name.clone());
            true
        })
        .await;
        let ours = written.as_ref().ok().and_then(|stored| {
            stored
                .as_ref()
                .and_then(|c| annotation(c, ANN_SELECTED_NODE))
                .filter(|n| *n == node.name)
        });
        self.records.existing(&uid, |r| {
            r.race.forget_wait();
            match r.race.taken.as_mut() {
                Some(t) if ours.is_some() => t.written = true,
                _ => r.race.taken = None,
            }
        });
        if ours.is_some() {
            klog::v!(2, claim = %claim_name(claim), node = %node.name, waited = ?waited, "Took claim for this node");
        }
        written.map(drop).map_err(|source| {
            ClaimError::ClaimWrite {
                claim: claim_name(claim),
                what: "set selected-node on",
                source,
            }
            .into()
        })
    }

    /// This instance's place in the order for the claim.
    fn turn(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
        node: &NodeDeployment,
    ) -> Turn {
        let Some(objects) = self.peer_objects() else {
            return Turn::Unranked;
        };
        let uid = claim.metadata.uid.as_deref().unwrap_or_default();
        let class_name = class.metadata.name.as_deref().unwrap_or_default();
        let bytes = requested_bytes(claim).unwrap_or(0);
        let published = published(&objects);
        claim_turn(
            uid,
            &node.managed_by,
            class_name,
            bytes,
            &published,
            turn_step(node),
            node.max_delay,
        )
    }

    /// Every instance's CSIStorageCapacity objects of our driver (distributed provisioning
    /// with capacity tracking only).
    fn peer_objects(&self) -> Option<Vec<PeerObject>> {
        let store = self.ctx.caches.peers.as_ref()?;
        let bytes = |q: &Option<Quantity>| {
            q.as_ref()
                .and_then(|q| provisioning::quantity::parse_quantity(&q.0).ok())
        };
        Some(
            store
                .state()
                .iter()
                .filter_map(|o| {
                    let instance = o
                        .metadata
                        .labels
                        .as_ref()?
                        .get(capacity::MANAGED_BY_LABEL)?;
                    Some(PeerObject {
                        instance: instance.clone(),
                        class: o.storage_class_name.clone(),
                        capacity: bytes(&o.capacity),
                        maximum_volume_size: bytes(&o.maximum_volume_size),
                        segment: o
                            .node_topology
                            .as_ref()
                            .and_then(|t| t.match_labels.clone())
                            .unwrap_or_default(),
                    })
                })
                .collect(),
        )
    }

    /// Bytes of the claims this instance took whose volumes do not exist yet; claims that
    /// got their PV, went to another node or are gone are dropped from the count.
    fn in_flight(&self, node: &NodeDeployment) -> i64 {
        self.records.sum(|uid, r| {
            r.race.in_flight(|reference| {
                self.ctx.caches.claims.get(reference).is_some_and(|c| {
                    c.metadata.uid.as_deref() == Some(uid)
                        && annotation(&c, ANN_SELECTED_NODE) == Some(node.name.as_str())
                        && !self.pv_exists(&c)
                })
            })
        })
    }

    /// Upstream's `checkCapacity`: GetCapacity for this node with the request's parameters;
    /// the claim is taken unless no requisite term has room. A failing call does not stop
    /// it (provisioning then fails with an event).
    async fn capacity_allows(
        &self,
        plan: &provisioning::prepare::ProvisionPlan,
        in_flight: i64,
    ) -> bool {
        if plan.requested_bytes == 0 || !self.ctx.driver.capabilities.get_capacity {
            return true;
        }
        for request in provisioning::distributed::capacity_requests(plan) {
            match self.ctx.driver.client.get_capacity(request).await {
                Ok(r) if r.available_capacity.saturating_sub(in_flight) >= plan.requested_bytes => {
                    return true;
                }
                Ok(_) => {}
                Err(status) => {
                    klog::v!(3, error = %csi::status::go_error_string(&status), "GetCapacity before taking a claim failed; taking it anyway");
                    return true;
                }
            }
        }
        false
    }

    /// Beyond upstream: a claim of ours that no node's published capacity can hold gets one
    /// `NotEnoughCapacity` Warning, from one instance ([`provisioning::distributed::reports`]),
    /// worded as in central mode. For Immediate claims upstream says nothing at all ("no events
    /// are produced"); late-binding claims are explained as the central provisioner does.
    pub(super) fn report_no_room(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
    ) -> Result<(), SyncError> {
        let (Some(node), Some(objects)) = (&self.ctx.node, self.peer_objects()) else {
            return Ok(());
        };
        let waiting = class.provisioner == self.ctx.driver.name
            && claim.metadata.deletion_timestamp.is_none()
            && claim
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.as_deref())
                .is_none_or(str::is_empty)
            && annotation(claim, ANN_SELECTED_NODE).is_none_or(str::is_empty);
        let uid = claim.metadata.uid.as_deref().unwrap_or_default();
        let class_name = class.metadata.name.as_deref().unwrap_or_default();
        if !waiting || !reports(uid, &node.managed_by, class_name, &published(&objects)) {
            return Ok(());
        }
        // The other instances' objects reach each cache moments apart: judge from a settled
        // view, or the explanation names too few places and changes a moment later.
        let waited = self.records.with(uid, |r| r.race.waited(Instant::now()));
        if waited < EXPLAIN_AFTER {
            return Err(SyncError::Turn(EXPLAIN_AFTER - waited));
        }
        let readings: Vec<(capacity::Segment, capacity::Capacity)> = objects
            .into_iter()
            .filter(|o| o.class == class_name && o.capacity.or(o.maximum_volume_size).is_some())
            .map(|o| {
                let reading = capacity::Capacity {
                    available: o.capacity.unwrap_or(0),
                    maximum_volume_size: o.maximum_volume_size,
                };
                (o.segment, reading)
            })
            .collect();
        // Nothing published for the class (yet): nothing to explain from.
        let (false, Ok(requested)) = (readings.is_empty(), requested_bytes(claim)) else {
            return Ok(());
        };
        let Some(message) = capacity::explain::explain_exhaustion(class_name, requested, &readings)
        else {
            return Ok(());
        };
        self.explain(claim, message);
        Ok(())
    }
}

/// Whether a claim's wait starts again: this instance's place in the order changed, and it is
/// not first now (the first takes the claim at once anyway).
fn restarts_wait(before: Option<Duration>, now: Duration) -> bool {
    before.is_some_and(|b| b != now) && !now.is_zero()
}

/// How long a claim waits before this instance says that no node has room for it.
const EXPLAIN_AFTER: Duration = Duration::from_secs(2);

/// One CSIStorageCapacity object of any instance, as read from the peers cache.
struct PeerObject {
    instance: String,
    class: String,
    capacity: Option<i64>,
    maximum_volume_size: Option<i64>,
    segment: capacity::Segment,
}

fn published(objects: &[PeerObject]) -> Vec<Published<'_>> {
    objects
        .iter()
        .map(|o| Published {
            instance: &o.instance,
            class: &o.class,
            capacity: o.capacity,
            maximum_volume_size: o.maximum_volume_size,
        })
        .collect()
}

/// Whether the class limits where volumes may go (then a node it excludes never takes a claim).
/// Rank k waits k quarter base delays (5 s by default): long enough for the first choice's
/// write to arrive, short enough to cover a dead one.
fn turn_step(node: &NodeDeployment) -> Duration {
    node.base_delay / 4
}

fn restricted(class: &StorageClass) -> bool {
    class
        .allowed_topologies
        .as_ref()
        .is_some_and(|t| !t.is_empty())
}

/// The claim as if our node were selected: what provisioning here would ask for.
pub(super) fn on_node(claim: &PersistentVolumeClaim, node: &str) -> PersistentVolumeClaim {
    let mut here = claim.clone();
    here.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ANN_SELECTED_NODE.to_string(), node.to_string());
    here
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claims::record::Records;

    #[test]
    fn failures_here_outlive_the_claim_leaving_the_cache_but_not_their_time() {
        let mut race = Race::default();
        let t0 = Instant::now();
        race.failed_here(t0);
        race.failed_here(t0 + Duration::from_secs(1));
        assert_eq!(race.failures(t0 + Duration::from_secs(2)), 2);
        let kept = race.kept(t0 + Duration::from_secs(2)).expect("kept");
        assert_eq!(kept.failures(t0 + Duration::from_secs(2)), 2, "kept");
        let later = t0 + Duration::from_secs(1) + FAILURES_REMEMBERED;
        assert_eq!(race.failures(later), 0, "expired");
        assert!(race.kept(later).is_none());
        // In the store: a forgotten claim keeps its failures, uncounted, until they expire.
        let records = Records::default();
        records.with("u", |r| r.race.failed_here(Instant::now()));
        records.forget("u");
        assert_eq!(records.len(), 0);
        assert_eq!(
            records.existing("u", |r| r.race.failures(Instant::now())),
            Some(1)
        );
        records.prune(Instant::now() + FAILURES_REMEMBERED);
        assert!(
            records.existing("u", |_| ()).is_none(),
            "pruned once expired"
        );
    }

    #[test]
    fn a_wait_without_room_does_not_count_towards_a_turn() {
        let mut race = Race::default();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        race.no_turn();
        assert_eq!(race.waited(t0), s(0), "the explanation's timer starts");
        race.no_turn();
        assert_eq!(race.waited(t0 + s(60)), s(60));
        // Room appears, this instance second in the order: its wait starts now.
        assert_eq!(race.waited_for_turn(s(2), t0 + s(60)), s(0));
        assert_eq!(race.waited_for_turn(s(2), t0 + s(62)), s(2));
    }

    #[test]
    fn a_new_place_restarts_the_wait_unless_first() {
        let s = Duration::from_secs;
        let cases = [
            (None, s(5), false, "first look"),
            (Some(s(5)), s(5), false, "same place"),
            (Some(s(10)), s(5), true, "moved up to second"),
            (Some(s(5)), s(10), true, "moved down"),
            (Some(s(5)), s(0), false, "now first: take at once"),
            (Some(s(0)), s(5), true, "no longer first"),
        ];
        for (before, now, want, what) in cases {
            assert_eq!(restarts_wait(before, now), want, "{what}");
        }
    }

    #[test]
    fn takes_on_their_way_count_until_the_cache_can_judge_them() {
        let take = |name: &str, bytes, written| Race {
            taken: Some(Taken {
                claim: ObjectRef::new(name).within("ns"),
                bytes,
                written,
            }),
            ..Race::default()
        };
        let (mut sent, mut landed, mut bound) = (
            take("a", 1, false),
            take("b", 10, true),
            take("c", 100, true),
        );
        // Only "b" is still ours in the cache; "a" is not in the cache yet at all.
        let still_ours = |r: &ObjectRef<PersistentVolumeClaim>| r.name == "b";
        let counted = [&mut sent, &mut landed, &mut bound].map(|r| r.in_flight(still_ours));
        assert_eq!(counted, [1, 10, 0]);
        assert!(bound.taken.is_none(), "a judged take leaves");
        assert!(sent.taken.is_some(), "a take on its way stays");
        sent.forget_wait();
        assert_eq!(
            sent.in_flight(|_| false),
            1,
            "forgetting the wait keeps the take"
        );
        // Requests of exabytes (each parsed to i64::MAX) saturate instead of wrapping.
        let records = Records::default();
        for uid in ["x", "y"] {
            records.with(uid, |r| r.race = take(uid, i64::MAX, false));
        }
        assert_eq!(records.sum(|_, r| r.race.in_flight(|_| false)), i64::MAX);
    }

    #[test]
    fn waits_restart_from_the_shift() {
        let mut race = Race::default();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(race.waited_for_turn(s(10), t0), s(0));
        assert_eq!(race.waited_for_turn(s(10), t0 + s(3)), s(3));
        // Third became second at 3 s: its 5 s wait counts from then, not from 0.
        assert_eq!(race.waited_for_turn(s(5), t0 + s(3)), s(0));
        assert_eq!(race.waited_for_turn(s(5), t0 + s(6)), s(3));
    }
}
