//! Distributed provisioning (`--node-deployment`): one instance per node. Which instance
//! handles a claim, which PVs an instance may delete, and in which order instances claim an
//! Immediate claim that no scheduler placed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    NodeSelectorRequirement, PersistentVolumeClaim, VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;

use csi::v1::{GetCapacityRequest, Topology};

use crate::claim::annotation;
use crate::names;
use crate::prepare::ProvisionPlan;
use crate::topology::hash::fnv32;

/// Who handles a claim of our driver (upstream's `checkNode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeOwner {
    /// `selected-node` names this instance's node: provision it here.
    ThisNode,
    /// `selected-node` names another node: that node's instance handles it; stay silent.
    OtherNode,
    /// No node selected, an Immediate class and immediate binding on: the instances decide
    /// among themselves who sets `selected-node` ([`claim_turn`]).
    Unclaimed,
    /// No node selected and none of ours to pick (late binding: the scheduler picks; or
    /// `--node-deployment-immediate-binding=false`).
    NotYet,
}

/// Whether an instance of `driver` on `node` keeps a claim in its cache at all: claims whose
/// `selected-node` names it, claims still waiting for a node (unbound, none selected), and
/// clone sources that hold the cloning-protection finalizer and are this driver's to guard
/// ([`crate::data_source::clone::guards_source`]), whatever their node (whichever node cloned
/// them added it, and some instance must see the claim to take it off, also when the source's
/// own node is lost). Everything else (other nodes' claims, claims bound without any node
/// selected, other drivers' held sources) no step of this instance reads, so with local
/// storage each instance holds its own node's claims instead of the cluster's.
///
/// A claim holding this node's [`node_finalizer`] is kept whatever its node: a volume this
/// node made for it may exist, and only this instance can clean it up ([`leftover`]).
///
/// Differs from upstream: its instances cache every claim of the cluster.
pub fn concerns_node(claim: &PersistentVolumeClaim, node: &str, driver: &str) -> bool {
    if crate::data_source::snapshot::has_finalizer(&claim.metadata, names::CLONE_SOURCE_FINALIZER)
        && crate::data_source::clone::guards_source(claim, driver)
    {
        return true;
    }
    if crate::data_source::snapshot::has_finalizer(&claim.metadata, &node_finalizer(node)) {
        return true;
    }
    match annotation(claim, names::ANN_SELECTED_NODE).filter(|n| !n.is_empty()) {
        Some(selected) => selected == node,
        None => claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .is_none_or(str::is_empty),
    }
}

/// The finalizer by which the instance on `node` keeps a claim it gave back (rescheduled)
/// while a volume its driver may have made for it exists: the shared creating-volume
/// finalizer is released by whichever node provisions the claim in the end, which knows
/// nothing of this node's volume. Only this node's instance removes it, once that volume is
/// known not to exist (deleted, or its driver's answer shows none). Ours, not upstream's.
///
/// `creating-volume-on-NODE` under the creating-volume finalizer's domain; a node name too
/// long for a finalizer's 63-character name keeps its first 35 characters and gets an FNV-32
/// hash of the whole name, so it stays unique and recognisable.
pub fn node_finalizer(node: &str) -> String {
    const PREFIX: &str = "creating-volume-on-";
    let domain = names::CREATING_VOLUME_FINALIZER
        .split_once('/')
        .map_or(names::CREATING_VOLUME_FINALIZER, |(d, _)| d);
    if PREFIX.len() + node.len() <= 63 {
        return format!("{domain}/{PREFIX}{node}");
    }
    let head: String = node.chars().take(35).collect();
    format!("{domain}/{PREFIX}{head}-{:08x}", fnv32(node.as_bytes()))
}

/// What the instance on a node does about a claim that holds its [`node_finalizer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leftover {
    /// Nothing beyond the claim's usual handling (no such finalizer, or the claim is this
    /// node's again: its provisioning, clean-up and release drop the finalizer along with the
    /// creating-volume one).
    AsUsual,
    /// The claim is still in play elsewhere (waiting for a node, or being provisioned on
    /// another): keep the finalizer and the record, and handle the claim as usual.
    Hold,
    /// Deleted, or bound to a PV: clean up this node's volume (probe with the request sent
    /// last, delete what it returns), then drop the finalizer.
    CleanUp,
    /// Bound to its own PV on this node: that PV holds the volume; just drop the finalizer.
    Drop,
}

/// [`Leftover`] for a claim: whether it holds this node's finalizer (`holds`), names this node
/// in `selected-node` (`here`), still holds the creating-volume finalizer (`creating`), is
/// being deleted, is bound (`spec.volumeName` set), and has its own PV on this node (`own_pv`).
pub fn leftover(
    holds: bool,
    here: bool,
    creating: bool,
    deleted: bool,
    bound: bool,
    own_pv: bool,
) -> Leftover {
    match () {
        _ if !holds => Leftover::AsUsual,
        // This node's claim again: its own steps see to both finalizers.
        _ if here && creating => Leftover::AsUsual,
        _ if here && own_pv => Leftover::Drop,
        _ if deleted || bound => Leftover::CleanUp,
        _ if here => Leftover::AsUsual,
        _ => Leftover::Hold,
    }
}

/// Whether the instance on `node` (`None`: central mode) posts a held clone source's
/// `WaitForClones` event. Every node instance watches a held source (any may have to let it
/// go, also when the source's node is lost), but only the source's own node speaks, so the
/// event is not repeated by every node; a source without a node is everyone's.
pub fn speaks_for_clone_source(claim: &PersistentVolumeClaim, node: Option<&str>) -> bool {
    let Some(node) = node else {
        return true;
    };
    annotation(claim, names::ANN_SELECTED_NODE)
        .filter(|n| !n.is_empty())
        .is_none_or(|selected| selected == node)
}

/// Upstream's `checkNode`: only the GA `selected-node` annotation counts, and an empty value
/// means none. A class without a binding mode is Immediate (the API server's default).
pub fn node_owner(
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
    node: &str,
    immediate_binding: bool,
) -> NodeOwner {
    match annotation(claim, names::ANN_SELECTED_NODE).filter(|n| !n.is_empty()) {
        Some(selected) if selected == node => NodeOwner::ThisNode,
        Some(_) => NodeOwner::OtherNode,
        None => {
            let late = class.volume_binding_mode.as_deref() == Some(names::WAIT_FOR_FIRST_CONSUMER);
            if !late && immediate_binding {
                NodeOwner::Unclaimed
            } else {
                NodeOwner::NotYet
            }
        }
    }
}

/// Upstream's `VolumeIsAccessible`: whether a PV's node affinity admits a node with
/// `topology` (the driver's NodeGetInfo segments). No affinity, or a driver that reported no
/// topology at all (`None`), admits everything; otherwise one required term must match, and
/// an empty topology (reported, but without segments) is a node without labels. `node_name`
/// is this node's, for `matchFields` terms.
pub fn volume_is_accessible(
    affinity: Option<&VolumeNodeAffinity>,
    topology: Option<&BTreeMap<String, String>>,
    node_name: &str,
) -> bool {
    let Some(required) = affinity.and_then(|a| a.required.as_ref()) else {
        return true;
    };
    let Some(topology) = topology else {
        return true;
    };
    required.node_selector_terms.iter().any(|term| {
        // An empty term selects nothing (as Kubernetes' node affinity).
        let expressions = term.match_expressions.as_deref().unwrap_or_default();
        let fields = term.match_fields.as_deref().unwrap_or_default();
        (!expressions.is_empty() || !fields.is_empty())
            && expressions.iter().all(|r| requirement_matches(r, topology))
            && fields.iter().all(|r| field_matches(r, node_name))
    })
}

/// A `matchFields` requirement (never written by a provisioner; a hand-made PV may carry
/// one): as the scheduler, `metadata.name` is the only field, compared with `In`/`NotIn`.
/// Upstream matches a nameless node, for which every field term holds, so every instance
/// deletes such a volume through its own driver; here only the named node's instance does.
fn field_matches(r: &NodeSelectorRequirement, node_name: &str) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let named = values.iter().any(|v| v == node_name);
    match (r.key.as_str(), r.operator.as_str()) {
        ("metadata.name", "In") => named,
        ("metadata.name", "NotIn") => !named,
        _ => false,
    }
}

/// One node selector requirement against a label set, as Kubernetes' label selectors do.
fn requirement_matches(r: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let value = labels.get(&r.key);
    let number = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(have), Some(bound)) = (
                value.and_then(|v| number(v)),
                values.first().and_then(|v| number(v)),
            ) else {
                return false;
            };
            if r.operator == "Gt" {
                have > bound
            } else {
                have < bound
            }
        }
        _ => false,
    }
}

/// What one instance published for one class (one of its CSIStorageCapacity objects).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published<'a> {
    /// The instance's `managed-by` label value (`external-provisioner-<node>`).
    pub instance: &'a str,
    /// The StorageClass the object is for.
    pub class: &'a str,
    /// `capacity` in bytes; `None` when the object has none.
    pub capacity: Option<i64>,
    /// `maximumVolumeSize` in bytes, when set.
    pub maximum_volume_size: Option<i64>,
}

impl Published<'_> {
    /// Whether a volume of `bytes` fits, as the scheduler reads the object.
    fn fits(&self, bytes: i64) -> bool {
        self.capacity.is_some_and(|c| c >= bytes)
            && self.maximum_volume_size.is_none_or(|m| m >= bytes)
    }
}

/// When this instance may set `selected-node` on an unclaimed Immediate claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Turn {
    /// First in the order: claim it now.
    Now,
    /// Later in the order: claim it only if nobody did after this wait.
    After(Duration),
    /// Our own object for the class says the volume does not fit here: never claim it.
    NoRoom {
        /// Whether no instance has room and this one reports that (one instance, not all).
        report: bool,
    },
    /// Nothing is published (capacity tracking off): no order can be agreed on, so fall back
    /// to upstream's random delay.
    Unranked,
}

/// The order in which instances claim an unclaimed Immediate claim, computed alike by every
/// instance from what all of them published, instead of upstream's random 0–20 s lottery.
///
/// Candidates are the instances whose object for the claim's class holds `bytes` (or, when
/// nobody publishes objects for that class, every instance that publishes any object); an
/// instance that is not a candidate itself comes after them all. They are ordered by a hash of (claim UID, instance), so claims spread evenly; the
/// first claims at once and the k-th waits `k × step` (at most `max`), which covers a dead
/// first choice without a race among the living.
pub fn claim_turn(
    uid: &str,
    own: &str,
    class: &str,
    bytes: i64,
    published: &[Published<'_>],
    step: Duration,
    max: Duration,
) -> Turn {
    if published.is_empty() {
        return Turn::Unranked;
    }
    let for_class: Vec<&Published<'_>> = published.iter().filter(|p| p.class == class).collect();
    let candidates: BTreeSet<&str> = if for_class.is_empty() {
        published.iter().map(|p| p.instance).collect()
    } else {
        let ours: Vec<_> = for_class.iter().filter(|p| p.instance == own).collect();
        if !ours.is_empty() && !ours.iter().any(|p| p.fits(bytes)) {
            let anyone = for_class.iter().any(|p| p.fits(bytes));
            let report = !anyone && reports(uid, own, class, published);
            return Turn::NoRoom { report };
        }
        for_class
            .iter()
            .filter(|p| p.fits(bytes))
            .map(|p| p.instance)
            .collect()
    };
    // An instance the others do not see among the candidates (it publishes nothing that
    // counts yet) goes after all of them, so that every instance agrees on who is first.
    let order = ranked(uid, candidates);
    let rank = order.iter().position(|i| *i == own).unwrap_or(order.len());
    if rank == 0 {
        Turn::Now
    } else {
        Turn::After(step.saturating_mul(rank as u32).min(max))
    }
}

/// The turn of an instance whose own attempts at the claim failed `failures` times and sent it
/// back: it steps behind every candidate (whose waits end by `max`), further with each
/// failure, so a claim a node cannot hold goes to one that can. Upstream gets there by chance
/// (every instance draws a new random delay); a fixed order alone would hand the claim to the
/// failing node again at once, for ever. Alone, the failing node retries after the same wait,
/// which is then its backoff.
pub fn after_own_failures(turn: Turn, failures: u32, step: Duration, max: Duration) -> Turn {
    if failures == 0 {
        return turn;
    }
    match turn {
        Turn::Now | Turn::After(_) | Turn::Unranked => {
            Turn::After(max.saturating_add(step.saturating_mul(failures)))
        }
        no_room @ Turn::NoRoom { .. } => no_room,
    }
}

/// Whether this instance is the one that tells a claim of `class` that nothing fits: the first
/// by the claim's order among the instances publishing for the class (and us), so exactly one
/// instance reports, whichever instances are up.
pub fn reports(uid: &str, own: &str, class: &str, published: &[Published<'_>]) -> bool {
    let instances: BTreeSet<&str> = published
        .iter()
        .filter(|p| p.class == class)
        .map(|p| p.instance)
        .chain([own])
        .collect();
    ranked(uid, instances).first() == Some(&own)
}

/// Upstream's `checkCapacity` requests for a claim about to be taken by this node: the
/// request's capabilities and parameters, once per requisite term (once without topology
/// when there is none).
pub fn capacity_requests(plan: &ProvisionPlan) -> Vec<GetCapacityRequest> {
    let request = |topology: Option<Topology>| GetCapacityRequest {
        volume_capabilities: plan.capabilities.clone(),
        parameters: plan.parameters.clone().into_iter().collect(),
        accessible_topology: topology,
    };
    match &plan.accessibility_requirements {
        Some(req) if !req.requisite.is_empty() => req
            .requisite
            .iter()
            .cloned()
            .map(Some)
            .map(request)
            .collect(),
        _ => vec![request(None)],
    }
}

/// Instances ordered by the hash of (instance, claim UID); ties by name.
///
/// Instance names differ only at their end (`…-node-1`, `…-node-2`), and FNV mixes a byte
/// into the bytes after it only: with the name last, the order would hardly depend on the
/// claim, and one instance would be first for most claims. Hence the name first, and a final
/// avalanche step (MurmurHash3's `fmix32`) over the result.
fn ranked<'a>(uid: &str, instances: BTreeSet<&'a str>) -> Vec<&'a str> {
    let mut out: Vec<&str> = instances.into_iter().collect();
    out.sort_by_key(|i| (mix(fnv32(format!("{i}/{uid}").as_bytes())), *i));
    out
}

/// MurmurHash3's 32-bit finaliser: every input bit affects every output bit.
fn mix(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
