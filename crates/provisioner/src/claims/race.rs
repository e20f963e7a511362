//! Distributed provisioning: which instance handles a claim, and taking an Immediate claim that
//! no node has yet by writing our node into its `selected-node` annotation.
//!
//! Upstream lets every instance sleep a random 0–20 s and then race (update conflicts, and a
//! claim can wait 20 s for nothing). Here the instances agree on an order from what they all
//! publish ([`provisioning::distributed::claim_turn`]): the first takes the claim at once, the
//! others only if it has not after a wait that grows with their rank. Without published
//! capacity there is nothing to agree on, and upstream's random delay remains.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use controller_kit::workqueue::RateLimiter;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::runtime::reflector::ObjectRef;
use provisioning::claim::{annotation, requested_bytes};
use provisioning::distributed::{
    Leftover, NodeOwner, Published, Turn, after_own_failures, claim_turn, node_owner, reports,
};
use provisioning::names::ANN_SELECTED_NODE;
use provisioning::prepare::Prepared;

use super::{ClaimError, ClaimsController, SyncError, claim_name, update};
use crate::node::NodeDeployment;

/// What this instance remembers of the unclaimed claims it waits on (by UID).
#[derive(Default)]
pub struct Races {
    first_seen: HashMap<String, Instant>,
    /// The wait of this instance's place in each claim's order when last computed.
    turns: HashMap<String, Duration>,
    /// Upstream's jittered delays, for claims no order can be agreed on.
    lottery: Option<RateLimiter<String>>,
    drawn: HashMap<String, Duration>,
    /// Claims this instance took (or is taking) whose volume may not exist yet: the driver's
    /// GetCapacity does not count them, so the next take must.
    taken: HashMap<String, Taken>,
    /// Claims whose attempt here failed and sent them back: how often, and when last. Kept
    /// when the claim leaves the cache (another node took it: it may come back), for
    /// [`FAILURES_REMEMBERED`] after the last failure.
    failed: HashMap<String, (u32, Instant)>,
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

impl Races {
    /// How long this instance has waited on the claim.
    fn waited(&mut self, uid: &str, now: Instant) -> Duration {
        now - *self.first_seen.entry(uid.to_string()).or_insert(now)
    }

    /// How long this instance has waited on the claim at its current place in the order. A
    /// new place restarts the wait: when the first choice fills up or goes away, the places
    /// shift, and without the restart the new second would find its turn already due while
    /// the new first is taking the claim, and the two would collide.
    fn waited_for_turn(&mut self, uid: &str, wait: Duration, now: Instant) -> Duration {
        let before = self.turns.insert(uid.to_string(), wait);
        if restarts_wait(before, wait) {
            self.first_seen.insert(uid.to_string(), now);
        }
        self.waited(uid, now)
    }

    /// No node has room for the claim now: no place in the order. The time waited meanwhile
    /// (which times the explanation) does not count towards a turn once room appears, or this
    /// instance, ranked behind another, would take the claim at once and collide with it.
    fn no_turn(&mut self, uid: &str) {
        self.turns.insert(uid.to_string(), Duration::MAX);
    }

    /// Upstream's delay for a claim nobody ranks: drawn once per wait.
    fn draw(&mut self, uid: &str, node: &NodeDeployment) -> Duration {
        let lottery = self
            .lottery
            .get_or_insert_with(|| RateLimiter::with_jitter(node.base_delay, node.max_delay));
        *self
            .drawn
            .entry(uid.to_string())
            .or_insert_with(|| lottery.when(&uid.to_string()))
    }

    /// Forgets everything about the claim, except that this instance took it.
    fn forget_wait(&mut self, uid: &str) {
        self.first_seen.remove(uid);
        self.turns.remove(uid);
        self.drawn.remove(uid);
        if let Some(l) = &mut self.lottery {
            l.forget(&uid.to_string());
        }
    }

    pub fn forget(&mut self, uid: &str) {
        self.forget_wait(uid);
        self.taken.remove(uid);
    }

    /// The claim's attempt here failed and sent it back to be taken again.
    pub fn failed_here(&mut self, uid: &str, now: Instant) {
        self.failed
            .retain(|_, (_, at)| now.duration_since(*at) < FAILURES_REMEMBERED);
        let entry = self.failed.entry(uid.to_string()).or_insert((0, now));
        *entry = (entry.0.saturating_add(1), now);
    }

    /// How often the claim failed here lately.
    fn failures(&self, uid: &str, now: Instant) -> u32 {
        self.failed
            .get(uid)
            .filter(|(_, at)| now.duration_since(*at) < FAILURES_REMEMBERED)
            .map_or(0, |(n, _)| *n)
    }

    /// Bytes of the takes whose volumes may not exist yet. A take whose write is still on its
    /// way always counts; a written one counts while `still_ours(uid, claim)` (the cached claim
    /// still names our node and has no PV), and is dropped once it does not.
    fn in_flight(
        &mut self,
        still_ours: impl Fn(&str, &ObjectRef<PersistentVolumeClaim>) -> bool,
    ) -> i64 {
        self.taken
            .retain(|uid, t| !t.written || still_ours(uid, &t.claim));
        // Saturating: a request of exabytes parses to i64::MAX, and two of them would wrap.
        self.taken
            .values()
            .fold(0_i64, |sum, t| sum.saturating_add(t.bytes))
    }
}

/// What the node check says about a claim of our driver.
pub(super) enum NodeStep {
    /// Handle it here as usual.
    Continue,
    /// Another node's: nothing to do.
    Skip,
    /// Waiting for the scheduler to pick a node (or immediate binding is off): at most an
    /// explanation when no node has room.
    Wait,
    /// Unclaimed: try to take it.
    Race,
}

impl ClaimsController {
    /// Distributed provisioning: whether this instance handles the claim (always, without
    /// `--node-deployment`).
    pub(super) fn node_step(
        &self,
        claim: &PersistentVolumeClaim,
        class: Option<&StorageClass>,
    ) -> NodeStep {
        let (Some(node), Some(class)) = (&self.ctx.node, class) else {
            return NodeStep::Continue;
        };
        let owner = node_owner(claim, class, &node.name, node.immediate_binding);
        if matches!(owner, NodeOwner::ThisNode | NodeOwner::OtherNode) {
            // Taken: no more waiting (what it holds in flight is pruned by `in_flight`).
            self.races
                .lock()
                .forget_wait(claim.metadata.uid.as_deref().unwrap_or_default());
        }
        match owner {
            NodeOwner::ThisNode => NodeStep::Continue,
            NodeOwner::OtherNode => NodeStep::Skip,
            NodeOwner::NotYet => NodeStep::Wait,
            NodeOwner::Unclaimed => NodeStep::Race,
        }
    }

    /// Distributed provisioning: a claim that holds this node's own finalizer, which this node
    /// put on it when it gave the claim back while a volume of it may exist here
    /// ([`provisioning::distributed::leftover`]). `None`: handle the claim as usual.
    pub(super) async fn left_here(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Option<Result<(), SyncError>> {
        let node = self.ctx.node.as_ref()?;
        let holds = provisioning::data_source::snapshot::has_finalizer(
            &claim.metadata,
            &provisioning::distributed::node_finalizer(&node.name),
        );
        if !holds {
            return None;
        }
        let step = provisioning::distributed::leftover(
            holds,
            annotation(claim, ANN_SELECTED_NODE) == Some(node.name.as_str()),
            provisioning::lifecycle::has_finalizer(claim),
            claim.metadata.deletion_timestamp.is_some(),
            claim
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.as_deref())
                .is_some_and(|v| !v.is_empty()),
            self.pv_exists(claim),
        );
        klog::v!(5, claim = %claim_name(claim), step = ?step, "Claim held by this node's finalizer");
        match step {
            Leftover::AsUsual | Leftover::Hold => None,
            Leftover::CleanUp => Some(self.clean_up_left(claim, &node.name).await),
            Leftover::Drop => {
                let name = provisioning::distributed::node_finalizer(&node.name);
                let dropped = update::set_finalizer(
                    &self.ctx.client,
                    &self.ctx.caches.claims,
                    claim,
                    &name,
                    false,
                )
                .await;
                Some(dropped.map(drop).map_err(|source| {
                    ClaimError::ClaimWrite {
                        claim: claim_name(claim),
                        what: "remove this node's finalizer from",
                        source,
                    }
                    .into()
                }))
            }
        }
    }

    /// A deleted claim that no node holds. Either no node ever took it, or the last one gave it
    /// up on the driver's final answer (`provisioning::attempt::after_failure`), which CSI makes
    /// the existing volume's id if there was one: no volume can exist, and a finalizer (the
    /// admission policy's) only has to go. A node that gave it up while a volume of it may
    /// exist holds it with its own finalizer ([`Self::left_here`]); should this node still
    /// remember such a call without that finalizer, it cleans up before letting go.
    pub(super) async fn let_go_unclaimed(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Result<(), SyncError> {
        let uid = claim.metadata.uid.as_deref().unwrap_or_default();
        if let Some(node) = &self.ctx.node
            && self.memory.volume_may_exist(uid, false)
        {
            return self.clean_up_left(claim, &node.name).await;
        }
        self.races.lock().forget(uid);
        if provisioning::lifecycle::has_finalizer(claim) {
            self.remove_finalizer(claim).await?;
        }
        Ok(())
    }

    /// An unclaimed Immediate claim: release a finalizer nothing needs, or take the claim when
    /// it is our turn.
    pub(super) async fn race(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
    ) -> Result<(), SyncError> {
        let Some(node) = self.ctx.node.clone() else {
            return Ok(());
        };
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        if claim.metadata.deletion_timestamp.is_some() {
            return self.let_go_unclaimed(claim).await;
        }
        if claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .is_some_and(|v| !v.is_empty())
        {
            return Ok(());
        }
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
        let failures = self.races.lock().failures(&uid, Instant::now());
        let turn = after_own_failures(
            self.turn(claim, class, &node),
            failures,
            turn_step(&node),
            node.max_delay,
        );
        let wait = match turn {
            Turn::Now => Duration::ZERO,
            Turn::After(d) => d,
            Turn::Unranked => self.races.lock().draw(&uid, &node),
            Turn::NoRoom { report } => {
                self.races.lock().no_turn(&uid);
                return if report {
                    self.report_no_room(claim, class)
                } else {
                    Ok(())
                };
            }
        };
        let waited = self
            .races
            .lock()
            .waited_for_turn(&uid, wait, Instant::now());
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
            self.races.lock().taken.insert(uid.clone(), taking);
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
        let mut races = self.races.lock();
        races.forget_wait(&uid);
        let ours = written.as_ref().ok().and_then(|stored| {
            stored
                .as_ref()
                .and_then(|c| annotation(c, ANN_SELECTED_NODE))
                .filter(|n| *n == node.name)
        });
        match races.taken.get_mut(&uid) {
            Some(t) if ours.is_some() => t.written = true,
            _ => {
                races.taken.remove(&uid);
            }
        }
        if ours.is_some() {
            klog::v!(2, claim = %claim_name(claim), node = %node.name, waited = ?waited, "Took claim for this node");
        }
        drop(races);
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
        self.races.lock().in_flight(|uid, reference| {
            self.ctx.caches.claims.get(reference).is_some_and(|c| {
                c.metadata.uid.as_deref() == Some(uid)
                    && annotation(&c, ANN_SELECTED_NODE) == Some(node.name.as_str())
                    && !self.pv_exists(&c)
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
        let waited = self.races.lock().waited(uid, Instant::now());
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

    #[test]
    fn failures_here_outlive_the_claim_leaving_the_cache_but_not_their_time() {
        let mut races = Races::default();
        let t0 = Instant::now();
        races.failed_here("u", t0);
        races.failed_here("u", t0 + Duration::from_secs(1));
        assert_eq!(races.failures("u", t0 + Duration::from_secs(2)), 2);
        races.forget("u");
        assert_eq!(races.failures("u", t0 + Duration::from_secs(2)), 2, "kept");
        let later = t0 + Duration::from_secs(1) + FAILURES_REMEMBERED;
        assert_eq!(races.failures("u", later), 0, "expired");
        races.failed_here("v", later);
        assert!(
            !races.failed.contains_key("u"),
            "pruned on the next failure"
        );
    }

    #[test]
    fn a_wait_without_room_does_not_count_towards_a_turn() {
        let mut races = Races::default();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        races.no_turn("u");
        assert_eq!(
            races.waited("u", t0),
            s(0),
            "the explanation's timer starts"
        );
        races.no_turn("u");
        assert_eq!(races.waited("u", t0 + s(60)), s(60));
        // Room appears, this instance second in the order: its wait starts now.
        assert_eq!(races.waited_for_turn("u", s(2), t0 + s(60)), s(0));
        assert_eq!(races.waited_for_turn("u", s(2), t0 + s(62)), s(2));
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
        let mut races = Races::default();
        let take = |name: &str, bytes, written| Taken {
            claim: ObjectRef::new(name).within("ns"),
            bytes,
            written,
        };
        races.taken.insert("sent".into(), take("a", 1, false));
        races.taken.insert("landed".into(), take("b", 10, true));
        races.taken.insert("bound".into(), take("c", 100, true));
        // Only "landed" is still ours in the cache; "sent" is not in the cache yet at all.
        let still_ours = |uid: &str, _: &ObjectRef<PersistentVolumeClaim>| uid == "landed";
        assert_eq!(races.in_flight(still_ours), 11);
        assert!(!races.taken.contains_key("bound"), "a judged take leaves");
        assert!(races.taken.contains_key("sent"), "a take on its way stays");
        races.forget("sent");
        assert_eq!(races.in_flight(|_, _| false), 0);
        // Requests of exabytes (each parsed to i64::MAX) saturate instead of wrapping.
        races.taken.insert("x".into(), take("x", i64::MAX, false));
        races.taken.insert("y".into(), take("y", i64::MAX, false));
        assert_eq!(races.in_flight(|_, _| false), i64::MAX);
    }

    #[test]
    fn waits_restart_from_the_shift() {
        let mut races = Races::default();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(races.waited_for_turn("u", s(10), t0), s(0));
        assert_eq!(races.waited_for_turn("u", s(10), t0 + s(3)), s(3));
        // Third became second at 3 s: its 5 s wait counts from then, not from 0.
        assert_eq!(races.waited_for_turn("u", s(5), t0 + s(3)), s(0));
        assert_eq!(races.waited_for_turn("u", s(5), t0 + s(6)), s(3));
    }
}
