//! Releasing the volumes of a node that is gone for good (`csi-provisioner release-node`): the
//! seed README's manual recipe for local volumes, as pure decisions. Which PVs are pinned to the
//! node, and the claim to create again so that it gets a new volume elsewhere.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::names;

pub mod life;
pub mod record;

/// Annotations that tie a claim to its old volume or node; a re-created claim drops them.
const BINDING_ANNOTATIONS: [&str; 6] = [
    "pv.kubernetes.io/bind-completed",
    "pv.kubernetes.io/bound-by-controller",
    names::ANN_STORAGE_PROVISIONER,
    names::ANN_BETA_STORAGE_PROVISIONER,
    names::ANN_SELECTED_NODE,
    names::ANN_ALPHA_SELECTED_NODE,
];

/// Whether the PV can only be used on `node`: every required node selector term names `node`
/// as the only value of an `In` expression (a local volume). Volumes reachable from other nodes
/// too (a zone, several hosts) are not the lost node's alone and are never released.
pub fn pinned_to(pv: &PersistentVolume, node: &str) -> bool {
    let terms = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or_default();
    !terms.is_empty()
        && terms.iter().all(|term| {
            term.match_expressions
                .iter()
                .flatten()
                .any(|e| e.operator == "In" && e.values.as_deref() == Some(&[node.to_string()][..]))
        })
}

/// The PV's CSI driver, if it is a CSI volume.
pub fn driver_of(pv: &PersistentVolume) -> Option<&str> {
    Some(pv.spec.as_ref()?.csi.as_ref()?.driver.as_str())
}

/// The claim as the user wrote it, without what bound it to the lost volume and node: same
/// name, labels, other annotations, owners and spec, no `volumeName`, no status.
pub fn recreated(claim: &PersistentVolumeClaim) -> PersistentVolumeClaim {
    let annotations: BTreeMap<String, String> = claim
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| !BINDING_ANNOTATIONS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut spec = claim.spec.clone();
    if let Some(s) = spec.as_mut() {
        s.volume_name = None;
    }
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: claim.metadata.name.clone(),
            namespace: claim.metadata.namespace.clone(),
            labels: claim.metadata.labels.clone(),
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: claim.metadata.owner_references.clone(),
            ..Default::default()
        },
        spec,
        status: None,
    }
}

/// Whether `claim` is the one `pv` holds the volume of, so it must be created again once the PV
/// goes: the PV's `claimRef` names this incarnation (its UID) and the claim names the PV back. A
/// claim bound to another PV since (a matching static one, while the lost node's call was
/// slow) keeps its binding and its data: only the stale PV goes.
pub fn holds_volume_of(claim: &PersistentVolumeClaim, pv: &PersistentVolume) -> bool {
    let claim_ref_uid = pv
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .and_then(|r| r.uid.as_deref());
    let volume_name = claim.spec.as_ref().and_then(|s| s.volume_name.as_deref());
    claim_ref_uid.is_some()
        && claim.metadata.uid.as_deref() == claim_ref_uid
        && volume_name.is_some()
        && volume_name == pv.metadata.name.as_deref()
}

/// What releasing a lost node does to the claim of one of its pinned PVs (the PV itself is
/// force-deleted in every case).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PvClaimStep {
    /// No claim holds this PV's volume (none, another incarnation, bound elsewhere since):
    /// only the PV goes.
    PvOnly,
    /// The claim holds the volume and is alive: created again, without the volume.
    Recreate,
    /// The claim holds the volume but is being deleted (Terminating, e.g. held by
    /// pvc-protection while its pod is stuck on the lost node): the user wants it gone, so it is
    /// let go (our finalizers removed), never created again.
    LetGo,
}

/// The step for the claim `claim` (as read, `None` when absent) of the pinned PV `pv`.
pub fn pv_claim_step(claim: Option<&PersistentVolumeClaim>, pv: &PersistentVolume) -> PvClaimStep {
    match claim {
        Some(c) if holds_volume_of(c, pv) => match c.metadata.deletion_timestamp {
            Some(_) => PvClaimStep::LetGo,
            None => PvClaimStep::Recreate,
        },
        _ => PvClaimStep::PvOnly,
    }
}

/// Finalizers this project's provisioner puts on claims; release-node removes them from a
/// claim it lets go. kube-controller-manager's pvc-protection is not ours: it goes by itself
/// once no pod uses the claim (pod garbage collection removes the lost node's pods).
pub const OUR_CLAIM_FINALIZERS: [&str; 2] = [
    names::CREATING_VOLUME_FINALIZER,
    names::CLONE_SOURCE_FINALIZER,
];

/// The claim's finalizers without ours (and without the lost `node`'s own,
/// [`crate::distributed::node_finalizer`]), or `None` when it holds none of them (nothing to
/// write).
pub fn without_our_finalizers(claim: &PersistentVolumeClaim, node: &str) -> Option<Vec<String>> {
    let node_finalizer = crate::distributed::node_finalizer(node);
    without(claim, |f| {
        OUR_CLAIM_FINALIZERS.contains(&f) || f == node_finalizer
    })
}

/// The claim's finalizers without those `drop` picks, or `None` when it picks none.
fn without(claim: &PersistentVolumeClaim, drop: impl Fn(&str) -> bool) -> Option<Vec<String>> {
    let all = claim.metadata.finalizers.as_deref().unwrap_or_default();
    let kept: Vec<String> = all.iter().filter(|f| !drop(f)).cloned().collect();
    (kept.len() != all.len()).then_some(kept)
}

/// The finalizers `claim` keeps after `step` for the lost `node`, or `None` when its list does
/// not change. The lost node's own finalizer goes in every step: only that node's instance
/// would ever remove it, and any volume it stands for is on the lost node's disks, as the
/// pinned PVs' are. A claim let go also loses the creating-volume finalizer.
pub fn finalizers_after(
    claim: &PersistentVolumeClaim,
    node: &str,
    step: ClaimStep,
) -> Option<Vec<String>> {
    let node_finalizer = crate::distributed::node_finalizer(node);
    match step {
        ClaimStep::Keep => None,
        ClaimStep::Unselect | ClaimStep::Forget => without(claim, |f| f == node_finalizer),
        ClaimStep::LetGo => without(claim, |f| {
            f == names::CREATING_VOLUME_FINALIZER || f == node_finalizer
        }),
    }
}

/// What releasing a lost node does to a claim without a volume that the scheduler sent there:
/// no instance on that node will ever provision it or let it go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimStep {
    /// Not such a claim (another node's, bound, another driver's): left alone.
    Keep,
    /// Waiting: remove `selected-node`, so the scheduler picks a node again.
    Unselect,
    /// Deleted but held by our creating-volume finalizer or the lost node's own: remove them.
    /// Any volume of it would be on the lost node's disks, as the pinned PVs' are.
    LetGo,
    /// Sent elsewhere since (or bound, or deleted there) but still holding the lost node's own
    /// finalizer, for a volume that node may have made before giving the claim back: remove
    /// that finalizer alone.
    Forget,
}

/// The step for `claim` when `node` is lost (`driver`: only claims of that driver).
pub fn claim_step(claim: &PersistentVolumeClaim, node: &str, driver: Option<&str>) -> ClaimStep {
    let annotation = |key: &str| crate::claim::annotation(claim, key);
    let bound = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .is_some_and(|v| !v.is_empty());
    let provisioner = annotation(names::ANN_STORAGE_PROVISIONER)
        .or_else(|| annotation(names::ANN_BETA_STORAGE_PROVISIONER));
    let holds = |name: &str| crate::data_source::snapshot::has_finalizer(&claim.metadata, name);
    let nodes_own = holds(&crate::distributed::node_finalizer(node));
    if driver.is_some_and(|d| provisioner != Some(d)) {
        return ClaimStep::Keep;
    }
    if annotation(names::ANN_SELECTED_NODE) != Some(node) || bound {
        return match nodes_own {
            true => ClaimStep::Forget,
            false => ClaimStep::Keep,
        };
    }
    let held = holds(names::CREATING_VOLUME_FINALIZER) || nodes_own;
    match (claim.metadata.deletion_timestamp.is_some(), held) {
        (false, _) => ClaimStep::Unselect,
        (true, true) => ClaimStep::LetGo,
        (true, false) => ClaimStep::Keep,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pv(terms: serde_json::Value) -> PersistentVolume {
        serde_json::from_value(json!({"metadata": {"name": "pv"}, "spec": {
            "csi": {"driver": "d", "volumeHandle": "h"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": terms}}}}))
        .unwrap()
    }

    #[test]
    fn only_the_claim_bound_to_the_pv_is_created_again() {
        let pv: PersistentVolume = serde_json::from_value(json!({"metadata": {"name": "pv"},
            "spec": {"claimRef": {"namespace": "ns", "name": "c", "uid": "u1"}}}))
        .unwrap();
        let claim = |uid: &str, volume: Option<&str>| -> PersistentVolumeClaim {
            serde_json::from_value(json!({
                "metadata": {"name": "c", "namespace": "ns", "uid": uid},
                "spec": {"volumeName": volume}}))
            .unwrap()
        };
        assert!(holds_volume_of(&claim("u1", Some("pv")), &pv));
        // Bound to a static PV since: its data is on that PV.
        assert!(!holds_volume_of(&claim("u1", Some("static")), &pv));
        // Not bound yet (the PV was saved, the binder has not bound it).
        assert!(!holds_volume_of(&claim("u1", None), &pv));
        // Deleted and created again by its owner: a new claim.
        assert!(!holds_volume_of(&claim("u2", Some("pv")), &pv));
        let no_uid: PersistentVolume = serde_json::from_value(json!({"metadata": {"name": "pv"},
            "spec": {"claimRef": {"namespace": "ns", "name": "c"}}}))
        .unwrap();
        let no_claim_uid: PersistentVolumeClaim = serde_json::from_value(
            json!({"metadata": {"name": "c"}, "spec": {"volumeName": "pv"}}),
        )
        .unwrap();
        assert!(!holds_volume_of(&no_claim_uid, &no_uid));
    }

    #[test]
    fn a_terminating_claim_is_let_go_never_created_again() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let pv: PersistentVolume = serde_json::from_value(json!({"metadata": {"name": "pv"},
            "spec": {"claimRef": {"namespace": "ns", "name": "c", "uid": "u1"}}}))
        .unwrap();
        let claim = |uid: &str, volume: &str, deleted: bool| {
            let mut c: PersistentVolumeClaim = serde_json::from_value(json!({
                "metadata": {"name": "c", "namespace": "ns", "uid": uid},
                "spec": {"volumeName": volume}}))
            .unwrap();
            if deleted {
                c.metadata.deletion_timestamp =
                    Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
            }
            c
        };
        let cases = [
            (Some(claim("u1", "pv", false)), PvClaimStep::Recreate),
            (Some(claim("u1", "pv", true)), PvClaimStep::LetGo),
            // Not this PV's claim (any more): only the PV goes, deleted or not.
            (Some(claim("u1", "static", true)), PvClaimStep::PvOnly),
            (Some(claim("u1", "static", false)), PvClaimStep::PvOnly),
            (Some(claim("u2", "pv", false)), PvClaimStep::PvOnly),
            (Some(claim("u2", "pv", true)), PvClaimStep::PvOnly),
            (None, PvClaimStep::PvOnly),
        ];
        for (i, (c, want)) in cases.into_iter().enumerate() {
            assert_eq!(pv_claim_step(c.as_ref(), &pv), want, "case {i}");
        }
    }

    #[test]
    fn only_our_finalizers_are_removed() {
        let claim = |finalizers: &[&str]| {
            let mut c = PersistentVolumeClaim::default();
            c.metadata.finalizers = Some(finalizers.iter().map(|f| f.to_string()).collect());
            c
        };
        let protection = names::PVC_PROTECTION_FINALIZER;
        let cases: [(&[&str], Option<Vec<&str>>); 5] = [
            (&[protection], None),
            (&[], None),
            (
                &[protection, names::CREATING_VOLUME_FINALIZER],
                Some(vec![protection]),
            ),
            (
                &[names::CLONE_SOURCE_FINALIZER, "other/x"],
                Some(vec!["other/x"]),
            ),
            (&[names::CREATING_VOLUME_FINALIZER], Some(vec![])),
        ];
        for (have, want) in cases {
            let want = want.map(|w| w.into_iter().map(String::from).collect::<Vec<_>>());
            assert_eq!(
                without_our_finalizers(&claim(have), "lost"),
                want,
                "{have:?}"
            );
        }
        assert_eq!(
            without_our_finalizers(&PersistentVolumeClaim::default(), "lost"),
            None
        );
        let lost = crate::distributed::node_finalizer("lost");
        let other = crate::distributed::node_finalizer("other");
        assert_eq!(
            without_our_finalizers(&claim(&[&lost, &other, protection]), "lost"),
            Some(vec![other.clone(), protection.to_string()]),
            "only the lost node's own finalizer goes, not another node's"
        );
    }

    #[test]
    fn only_volumes_of_that_node_alone_are_pinned() {
        let on = |key: &str, values: &[&str]| json!({"matchExpressions": [{"key": key, "operator": "In", "values": values}]});
        let cases = [
            (json!([on("topology.hostpath.csi/node", &["n1"])]), true),
            (json!([on("kubernetes.io/hostname", &["n1"])]), true),
            (json!([on("topology.hostpath.csi/node", &["n2"])]), false),
            (json!([on("node", &["n1", "n2"])]), false),
            (json!([on("node", &["n1"]), on("node", &["n2"])]), false),
            (json!([on("zone", &["a"])]), false),
            (json!([]), false),
        ];
        for (i, (terms, want)) in cases.into_iter().enumerate() {
            assert_eq!(pinned_to(&pv(terms), "n1"), want, "case {i}");
        }
        let no_affinity: PersistentVolume =
            serde_json::from_value(json!({"metadata": {"name": "pv"}, "spec": {}})).unwrap();
        assert!(!pinned_to(&no_affinity, "n1"));
        assert_eq!(driver_of(&pv(json!([]))), Some("d"));
    }

    #[test]
    fn a_recreated_claim_forgets_its_volume_and_node() {
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": "ns", "uid": "u1", "resourceVersion": "9",
                "labels": {"app": "db"},
                "annotations": {"pv.kubernetes.io/bind-completed": "yes",
                    "pv.kubernetes.io/bound-by-controller": "yes",
                    "volume.kubernetes.io/storage-provisioner": "d",
                    "volume.kubernetes.io/selected-node": "n1",
                    "team": "storage"},
                "finalizers": ["kubernetes.io/pvc-protection"]},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                "volumeName": "pvc-u1", "resources": {"requests": {"storage": "5Gi"}}},
            "status": {"phase": "Lost"}
        }))
        .unwrap();
        let fresh = serde_json::to_value(recreated(&claim)).unwrap();
        assert_eq!(
            fresh,
            json!({
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data", "namespace": "ns", "labels": {"app": "db"},
                    "annotations": {"team": "storage"}},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                    "resources": {"requests": {"storage": "5Gi"}}}
            })
        );
    }

    #[test]
    fn claims_sent_to_the_lost_node() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let claim = |node: &str, provisioner: &str, bound: bool, deleted: bool, held: bool| {
            let mut c = PersistentVolumeClaim::default();
            c.metadata.annotations = Some(BTreeMap::from([
                (names::ANN_SELECTED_NODE.to_string(), node.to_string()),
                (
                    names::ANN_STORAGE_PROVISIONER.to_string(),
                    provisioner.to_string(),
                ),
            ]));
            c.spec = Some(Default::default());
            if bound {
                c.spec.as_mut().unwrap().volume_name = Some("pv".into());
            }
            if deleted {
                c.metadata.deletion_timestamp = Some(Time(Default::default()));
            }
            if held {
                c.metadata.finalizers = Some(vec![names::CREATING_VOLUME_FINALIZER.into()]);
            }
            c
        };
        let cases = [
            (
                claim("lost", "d", false, false, false),
                Some("d"),
                ClaimStep::Unselect,
            ),
            (
                claim("lost", "d", false, false, true),
                None,
                ClaimStep::Unselect,
            ),
            (
                claim("lost", "d", false, true, true),
                Some("d"),
                ClaimStep::LetGo,
            ),
            (
                claim("lost", "d", false, true, false),
                Some("d"),
                ClaimStep::Keep,
            ),
            (
                claim("lost", "d", true, false, false),
                Some("d"),
                ClaimStep::Keep,
            ),
            (
                claim("other", "d", false, false, false),
                Some("d"),
                ClaimStep::Keep,
            ),
            (
                claim("lost", "e", false, false, false),
                Some("d"),
                ClaimStep::Keep,
            ),
        ];
        for (c, driver, want) in cases {
            assert_eq!(claim_step(&c, "lost", driver), want, "{c:?}");
        }
    }

    /// The lost node's own finalizer goes from every claim that holds it, wherever the claim
    /// went since; another node's stays, and so does the creating-volume finalizer of a claim
    /// that is not being let go.
    #[test]
    fn the_lost_nodes_own_finalizer_goes_from_every_claim() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let lost = crate::distributed::node_finalizer("lost");
        let other = crate::distributed::node_finalizer("other");
        let creating = names::CREATING_VOLUME_FINALIZER;
        let claim = |node: &str, bound: bool, deleted: bool, finalizers: &[&str]| {
            let mut c = PersistentVolumeClaim::default();
            c.metadata.annotations = Some(BTreeMap::from([
                (names::ANN_SELECTED_NODE.to_string(), node.to_string()),
                (names::ANN_STORAGE_PROVISIONER.to_string(), "d".to_string()),
            ]));
            c.spec = Some(Default::default());
            if bound {
                c.spec.as_mut().unwrap().volume_name = Some("pv".into());
            }
            if deleted {
                c.metadata.deletion_timestamp = Some(Time(Default::default()));
            }
            c.metadata.finalizers = Some(finalizers.iter().map(|f| f.to_string()).collect());
            c
        };
        let cases: [(PersistentVolumeClaim, ClaimStep, Option<Vec<&str>>); 7] = [
            // Given back and waiting on another node: only the lost node's own goes.
            (
                claim("other", false, false, &[creating, &lost]),
                ClaimStep::Forget,
                Some(vec![creating]),
            ),
            // Bound elsewhere since.
            (
                claim("other", true, false, &[&lost, &other]),
                ClaimStep::Forget,
                Some(vec![&other]),
            ),
            // Deleted after it moved on: the creating-volume one is the other node's to drop.
            (
                claim("other", false, true, &[creating, &lost]),
                ClaimStep::Forget,
                Some(vec![creating]),
            ),
            // Waiting on the lost node itself: unselected, and its finalizer goes too.
            (
                claim("lost", false, false, &[creating, &lost]),
                ClaimStep::Unselect,
                Some(vec![creating]),
            ),
            (
                claim("lost", false, false, &[creating]),
                ClaimStep::Unselect,
                None,
            ),
            // Deleted on the lost node, held by its own finalizer alone.
            (
                claim("lost", false, true, &[&lost]),
                ClaimStep::LetGo,
                Some(vec![]),
            ),
            (
                claim("other", false, false, &[&other]),
                ClaimStep::Keep,
                None,
            ),
        ];
        for (c, step, kept) in cases {
            assert_eq!(claim_step(&c, "lost", Some("d")), step, "{c:?}");
            let kept = kept.map(|k| k.into_iter().map(String::from).collect::<Vec<_>>());
            assert_eq!(finalizers_after(&c, "lost", step), kept, "{c:?}");
        }
    }
}
