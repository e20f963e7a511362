//! Cloning protection across nodes: a source claim is held while a clone anywhere waits, and
//! let go by whichever instance sees the last clone go.

use crate::support::WAIT;
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::ResourceExt;
use serde_json::json;

use super::{
    Instance, capacity_objects, nodes_with_drivers, on, published_per_instance, start_nodes,
};
use crate::support::{self, Scenario, eventually};
use testenv::ControlPlane;

/// Two nodes whose drivers clone, without capacity tracking, and an Immediate class.
async fn cloning_nodes(prefix: &str) -> (Scenario, Vec<Instance>, String) {
    let (s, nodes) = nodes_with_drivers(
        prefix,
        &[("a", "10Gi"), ("b", "10Gi")],
        &[],
        &["--clone-volume"],
    )
    .await;
    let class = s.class("imm", "Immediate", json!({})).await;
    (s, nodes, class)
}

/// A source claim "src" on node a and its clone "copy" on node b; returns once b's instance
/// has protected the source (before its driver, which cannot reach a's volume, fails).
async fn clone_across_nodes(s: &Scenario, nodes: &[Instance], class: &str) {
    s.claim("src", class, "1Gi", on(&nodes[0].node)).await;
    s.wait_bound("src").await;
    let mut copy = on(&nodes[1].node);
    copy["spec"] = json!({"dataSource": {"kind": "PersistentVolumeClaim", "name": "src"}});
    s.claim("copy", class, "1Gi", copy).await;
    eventually("b to protect the source", WAIT, || async {
        let src = s.claims().get("src").await.ok()?;
        src.finalizers()
            .iter()
            .any(|f| f == provisioning::names::CLONE_SOURCE_FINALIZER)
            .then_some(())
    })
    .await;
}

/// Cloning protection across nodes: a source claim on node a stays while a clone that node b
/// took still waits, although a's instance does not cache b's claims (upstream's clone
/// controller sees every claim). It goes once the clone is gone.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_clone_waiting_on_another_node_holds_its_source() {
    let (s, nodes, class) = cloning_nodes("nd-clone").await;
    clone_across_nodes(&s, &nodes, &class).await;
    s.delete_claim("src").await;
    let event = s.wait_event("src", "WaitForClones", "copy").await;
    assert!(
        event
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("copy"),
        "{event:?}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        s.claims().get_opt("src").await.unwrap().is_some(),
        "the source went while its clone waited"
    );
    s.delete_claim("copy").await;
    support::wait_gone(&s.claims(), "src").await;
}

/// A clone source on node a that node b's clone protected is let go by b's instance once the
/// clone is gone, with a's instance down (a lost node): every instance keeps the claims that
/// hold our cloning-protection finalizer, as upstream's instances see every claim.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_clone_source_on_a_lost_node_is_released_by_another() {
    let (s, mut nodes, class) = cloning_nodes("nd-lost-src").await;
    clone_across_nodes(&s, &nodes, &class).await;
    nodes[0].prov.kill9();
    s.delete_claim("src").await;
    // The clone still waits (b's driver cannot reach a's volume): the source stays.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        s.claims().get_opt("src").await.unwrap().is_some(),
        "the source went while its clone waited"
    );
    // Only the source's node speaks for it: b, holding the source these 3 s, posted no
    // WaitForClones event (an idle recorder sends within milliseconds), nor after.
    let no_wait_event = || async {
        let events = s.our_event_reasons("src").await;
        assert!(!events.iter().any(|r| r == "WaitForClones"), "{events:?}");
    };
    no_wait_event().await;
    s.delete_claim("copy").await;
    support::wait_gone(&s.claims(), "src").await;
    no_wait_event().await;
}

/// A clone source bound without any node selected (a pre-bound, static PV) is cached by no
/// instance for itself; once a node's clone put our cloning-protection finalizer on it, the
/// instances keep it, so its deletion is not stuck on that finalizer.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_clone_source_bound_without_a_node_is_released() {
    use kube::api::PostParams;
    let (s, nodes, class) = cloning_nodes("nd-static").await;
    s.claim("orig", &class, "1Gi", on(&nodes[0].node)).await;
    let orig = s.wait_bound("orig").await;
    let orig_pv = s
        .volumes()
        .get(orig.spec.unwrap().volume_name.as_deref().unwrap())
        .await
        .unwrap();
    // The same volume once more, as a static PV pre-bound to "src" (Retain: never deleted).
    let spec = orig_pv.spec.unwrap();
    let static_pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": format!("{}-static", s.ns)},
        "spec": {
            "capacity": spec.capacity, "accessModes": spec.access_modes,
            "csi": spec.csi, "nodeAffinity": spec.node_affinity,
            "storageClassName": class, "persistentVolumeReclaimPolicy": "Retain",
            "claimRef": {"namespace": s.ns, "name": "src"},
        },
    }))
    .unwrap();
    s.volumes()
        .create(&PostParams::default(), &static_pv)
        .await
        .unwrap();
    let pv_name = static_pv.metadata.name.clone().unwrap();
    s.claim(
        "src",
        &class,
        "1Gi",
        json!({"spec": {"volumeName": pv_name}}),
    )
    .await;
    let src = s.wait_bound("src").await;
    assert!(
        !src.annotations()
            .contains_key("volume.kubernetes.io/selected-node")
    );
    let mut copy = on(&nodes[0].node);
    copy["spec"] = json!({"dataSource": {"kind": "PersistentVolumeClaim", "name": "src"}});
    s.claim("copy", &class, "1Gi", copy).await;
    s.wait_bound("copy").await;
    let held = s.claims().get("src").await.unwrap();
    assert!(
        held.finalizers()
            .iter()
            .any(|f| f == provisioning::names::CLONE_SOURCE_FINALIZER),
        "the clone protected its source: {:?}",
        held.finalizers()
    );
    s.delete_claim("src").await;
    support::wait_gone(&s.claims(), "src").await;
}

/// Capacity tracking for the Immediate class, polled often enough for the test to change it.
const PUBLISHING: &[&str] = &[
    "--enable-capacity",
    "--capacity-ownerref-level=-1",
    "--capacity-poll-interval=2s",
    "--capacity-for-immediate-binding",
];

/// A change of published capacity re-checks the claims that wait for a node, and only them:
/// not the deleting source a waiting clone holds, whose check lists its namespace (an instance
/// caches its node's claims only). The source is looked at again when the clone changes. And
/// an instance of another driver, which sees the held source too, leaves it to ours: starting,
/// it re-checks every claim it caches.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_capacity_change_leaves_a_waiting_clones_source_alone() {
    let s = Scenario::new("nd-recheck").await;
    let nodes = start_nodes(&s, &[("a", "10Gi")], PUBLISHING, &["--clone-volume"]).await;
    let a = &nodes[0];
    let class = s.class("imm", "Immediate", json!({})).await;
    published_per_instance(&s, 1).await;
    s.claim("src", &class, "1Gi", on(&a.node)).await;
    s.wait_bound("src").await;
    // The clone is taken, protects its source, fails and is sent back: it waits unplaced,
    // with this node stepping back from it for longer than the test runs.
    let refuse = json!({"code": "ResourceExhausted", "message": "no room for clones"});
    a.mock.set_faults(json!({"CreateVolume": refuse}));
    let copy = json!({"spec": {"dataSource": {"kind": "PersistentVolumeClaim", "name": "src"}}});
    s.claim("copy", &class, "1Gi", copy).await;
    eventually("the clone to fail and come back", WAIT, || async {
        let copy = s.claims().get("copy").await.ok()?;
        let unplaced = !copy
            .annotations()
            .contains_key("volume.kubernetes.io/selected-node");
        (a.mock.calls_of("CreateVolume").len() == 2 && unplaced).then_some(())
    })
    .await;
    let src = s.claims().get("src").await.unwrap();
    assert!(
        src.finalizers()
            .iter()
            .any(|f| f == provisioning::names::CLONE_SOURCE_FINALIZER),
        "{:?}",
        src.finalizers()
    );
    s.delete_claim("src").await;
    s.wait_event("src", "WaitForClones", "copy").await;
    let our_lists = || {
        testenv::audit::claim_lists(&ControlPlane::shared().audit_log(), &s.ns)
            .unwrap()
            .into_iter()
            .filter(|l| l.user_agent.starts_with("csi-provisioner/"))
            .count()
    };
    // The audit log is written as responses go out.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = our_lists();
    assert!(before >= 1, "the held source's check lists its namespace");
    let other = Scenario::new("nd-recheck-other").await;
    other.class("imm", "Immediate", json!({})).await;
    let _other = start_nodes(&other, &[("b", "10Gi")], PUBLISHING, &["--clone-volume"]).await;
    published_per_instance(&other, 1).await;
    for gi in [9_i64, 8, 7] {
        a.mock.set_faults(json!({
            "CreateVolume": refuse,
            "GetCapacity": {"reply": {"available_capacity": gi << 30}},
        }));
        let shown = format!("{gi}Gi");
        eventually("the new capacity to be published", WAIT, || async {
            capacity_objects(&s)
                .await
                .iter()
                .any(|o| o.capacity.as_ref().map(|q| q.0.as_str()) == Some(shown.as_str()))
                .then_some(())
        })
        .await;
        // The recheck waits out a second of further changes.
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    assert_eq!(
        our_lists() - before,
        0,
        "three capacity changes, or another driver's instance, listed the namespace again"
    );
    assert_eq!(
        a.mock.calls_of("CreateVolume").len(),
        2,
        "the node stepped back from the clone"
    );
    // The clone goes: its change releases the source.
    s.delete_claim("copy").await;
    support::wait_gone(&s.claims(), "src").await;
}
