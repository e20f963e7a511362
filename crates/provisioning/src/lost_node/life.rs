//! Signs that a node whose Node object is gone is still running. A running kubelet does not
//! register its Node again until it restarts, so a `kubectl delete node` by mistake must not be
//! enough to force-release live local volumes. What counts, and why:
//!
//! - **Its kubelet's Lease** (`kube-node-lease/NODE`) renewed recently: the kubelet renews it
//!   every 10 s and creates it again when it is gone (garbage collection deletes it with its
//!   Node), so a live kubelet keeps it fresh. The strongest sign.
//! - **Pods bound to it still Running** and not being deleted: pod garbage collection deletes
//!   the pods of a Node that no longer exists within about a minute; pods that stay mean the
//!   Node was deleted just now or something keeps them. A pod being deleted is not a sign: that
//!   is a pod stuck on a dead node, which is what a release is for.
//! - **CSIStorageCapacity objects for its topology written recently** (created, or a
//!   `managedFields` time): a node-deployed provisioner on that node is still publishing. Only
//!   a write counts, never an object's mere presence (a survivor removes the objects of a
//!   deleted node only after a poll interval).
//!
//! Absence of signs proves nothing (a kubelet can be stopped while its disks live on), but each
//! sign is cheap to see and stops the common mistake.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// How recent a write must be to count: three default lease durations (40 s), so that a
/// kubelet that missed a few renewals, or a clock a little ahead, still counts as alive.
pub const RECENT: SignedDuration = SignedDuration::from_secs(120);

/// One sign of life, to show to the administrator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sign {
    /// The kubelet's Lease was renewed at this time.
    Lease(Timestamp),
    /// These pods (`namespace/name`) are bound to the node and Running.
    Pods(Vec<String>),
    /// This CSIStorageCapacity object (`namespace/name`) was written at this time.
    Capacity(String, Timestamp),
}

impl std::fmt::Display for Sign {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sign::Lease(at) => write!(
                f,
                "its kubelet renewed its Lease in kube-node-lease at {at}"
            ),
            Sign::Pods(pods) => {
                write!(f, "pods bound to it are still Running: {}", pods.join(", "))
            }
            Sign::Capacity(name, at) => {
                write!(
                    f,
                    "CSIStorageCapacity {name} for its topology was written at {at}"
                )
            }
        }
    }
}

/// Whether `at` is within [`RECENT`] of `now` (a time ahead of `now` counts: clock skew).
fn recent(at: Timestamp, now: Timestamp) -> bool {
    now.duration_since(at) < RECENT
}

/// The signs of life of `node` at `now`: its Lease in `kube-node-lease` (if any), the pods with
/// `spec.nodeName` = `node`, and every CSIStorageCapacity object (those of other nodes are
/// skipped here).
pub fn signs_of_life(
    node: &str,
    now: Timestamp,
    lease: Option<&Lease>,
    pods: &[Pod],
    capacities: &[CSIStorageCapacity],
) -> Vec<Sign> {
    let mut signs = Vec::new();
    let renewed = lease.and_then(|l| {
        let spec = l.spec.as_ref()?;
        let times = [spec.renew_time.as_ref(), spec.acquire_time.as_ref()];
        times.into_iter().flatten().map(|t| t.0).max()
    });
    if let Some(at) = renewed.filter(|at| recent(*at, now)) {
        signs.push(Sign::Lease(at));
    }
    let running: Vec<String> = pods
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .map(|p| namespaced(&p.metadata))
        .collect();
    if !running.is_empty() {
        signs.push(Sign::Pods(running));
    }
    for c in capacities.iter().filter(|c| for_node(c, node)) {
        let written = c
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter_map(|m| m.time.as_ref().map(|t| t.0))
            .chain(c.metadata.creation_timestamp.as_ref().map(|t| t.0))
            .max();
        if let Some(at) = written.filter(|at| recent(*at, now)) {
            signs.push(Sign::Capacity(namespaced(&c.metadata), at));
        }
    }
    signs
}

/// Whether the object's topology is the node's own: a label whose value is the node's name, as
/// a local driver's segment is (`topology.hostpath.csi/node: NODE`), the same test as
/// [`super::pinned_to`] makes of a PV.
fn for_node(c: &CSIStorageCapacity, node: &str) -> bool {
    let Some(topology) = c.node_topology.as_ref() else {
        return false;
    };
    let by_label = topology
        .match_labels
        .iter()
        .flatten()
        .any(|(_, v)| v == node);
    let by_expression = topology
        .match_expressions
        .iter()
        .flatten()
        .any(|e| e.operator == "In" && e.values.as_deref() == Some(&[node.to_string()][..]));
    by_label || by_expression
}

fn namespaced(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: &str = "2026-01-01T12:00:00Z";

    fn at(secs_before: i64) -> String {
        let now: Timestamp = NOW.parse().unwrap();
        (now - SignedDuration::from_secs(secs_before)).to_string()
    }

    fn lease(renewed: Option<i64>, acquired: Option<i64>) -> Lease {
        serde_json::from_value(
            json!({"metadata": {"name": "n1", "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40,
                     "renewTime": renewed.map(at), "acquireTime": acquired.map(at)}}),
        )
        .unwrap()
    }

    fn pod(name: &str, node: &str, phase: &str, deleted: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns",
                         "deletionTimestamp": deleted.then(|| at(600))},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": phase}}))
        .unwrap()
    }

    fn capacity(
        name: &str,
        labels: serde_json::Value,
        created: i64,
        written: &[i64],
    ) -> CSIStorageCapacity {
        let fields: Vec<_> = written
            .iter()
            .map(|s| json!({"manager": "csi-provisioner", "operation": "Update", "time": at(*s)}))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "creationTimestamp": at(created),
                         "managedFields": fields},
            "storageClassName": "fast",
            "nodeTopology": {"matchLabels": labels}}))
        .unwrap()
    }

    /// (what, the Lease, pods, capacity objects, the signs seen).
    type Case = (
        &'static str,
        Option<Lease>,
        Vec<Pod>,
        Vec<CSIStorageCapacity>,
        Vec<Sign>,
    );

    #[test]
    fn signs_table() {
        let now: Timestamp = NOW.parse().unwrap();
        let ts = |s: i64| -> Timestamp { at(s).parse().unwrap() };
        let mine = json!({"topology.hostpath.csi/node": "n1"});
        let other = json!({"topology.hostpath.csi/node": "n2"});
        let cases: Vec<Case> = vec![
            ("nothing at all", None, vec![], vec![], vec![]),
            (
                "lease renewed 10s ago",
                Some(lease(Some(10), Some(9000))),
                vec![],
                vec![],
                vec![Sign::Lease(ts(10))],
            ),
            (
                "lease renewed 10 minutes ago",
                Some(lease(Some(600), Some(9000))),
                vec![],
                vec![],
                vec![],
            ),
            (
                "lease just acquired, never renewed",
                Some(lease(None, Some(5))),
                vec![],
                vec![],
                vec![Sign::Lease(ts(5))],
            ),
            (
                "lease renewed ahead of our clock",
                Some(lease(Some(-30), None)),
                vec![],
                vec![],
                vec![Sign::Lease(ts(-30))],
            ),
            (
                "lease without times",
                Some(lease(None, None)),
                vec![],
                vec![],
                vec![],
            ),
            (
                "running pod on the node; others are not signs",
                None,
                vec![
                    pod("web", "n1", "Running", false),
                    pod("stuck", "n1", "Running", true),
                    pod("done", "n1", "Succeeded", false),
                    pod("pending", "n1", "Pending", false),
                    pod("elsewhere", "n2", "Running", false),
                ],
                vec![],
                vec![Sign::Pods(vec!["ns/web".into()])],
            ),
            (
                "capacity written recently, for this node only",
                None,
                vec![],
                vec![
                    capacity("fresh", mine.clone(), 9000, &[9000, 30]),
                    capacity("new", mine.clone(), 20, &[]),
                    capacity("old", mine.clone(), 9000, &[600]),
                    capacity("theirs", other, 1, &[1]),
                ],
                vec![
                    Sign::Capacity("ns/fresh".into(), ts(30)),
                    Sign::Capacity("ns/new".into(), ts(20)),
                ],
            ),
        ];
        for (what, lease, pods, caps, want) in cases {
            assert_eq!(
                signs_of_life("n1", now, lease.as_ref(), &pods, &caps),
                want,
                "{what}"
            );
        }
    }

    #[test]
    fn capacity_by_expression_is_the_nodes_too() {
        let c: CSIStorageCapacity = serde_json::from_value(json!({
            "metadata": {"name": "e", "namespace": "ns", "creationTimestamp": at(1)},
            "storageClassName": "fast",
            "nodeTopology": {"matchExpressions": [{"key": "k", "operator": "In", "values": ["n1"]}]}}))
        .unwrap();
        assert!(for_node(&c, "n1"));
        assert!(!for_node(&c, "n2"));
        let no_topology: CSIStorageCapacity =
            serde_json::from_value(json!({"metadata": {"name": "x"}, "storageClassName": "fast"}))
                .unwrap();
        assert!(!for_node(&no_topology, "n1"));
    }
}
