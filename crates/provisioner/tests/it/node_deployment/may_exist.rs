//! A node gives a claim back (ResourceExhausted) after an earlier CreateVolume of its own ended
//! without an answer: the volume that call made must not leak, whether the claim is deleted
//! while no node holds it or provisioned on another node.

use crate::support::WAIT;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::{Instance, nodes_with, on};
use crate::support::{self, Scenario, eventually, volumes_of};

/// This node's own finalizer, as `provisioning::distributed::node_finalizer` writes it.
fn node_finalizer(node: &str) -> String {
    format!("external-provisioner.volume.kubernetes.io/creating-volume-on-{node}")
}

/// Two nodes; node a's first CreateVolume outlives the provisioner's 2 s timeout (the driver
/// makes the volume, the answer is lost), and its next one is refused with ResourceExhausted
/// (a driver that checks free space before the name). Returns once a has given the late-binding
/// claim "c" back: no node selected, a's own finalizer on it, a's volume in a's pool.
async fn given_back_with_a_volume(prefix: &str) -> (Scenario, Vec<Instance>) {
    let (s, nodes) = nodes_with(
        prefix,
        &[("a", "100Gi"), ("b", "100Gi")],
        &["--timeout=2s", "--retry-interval-start=500ms"],
    )
    .await;
    nodes[0].mock.set_faults(json!({"CreateVolume": [
        {"delay_ms": 4000, "times": 1},
        {"code": "ResourceExhausted", "message": "no room on this node", "times": 1},
    ]}));
    let late = s.class("late", "WaitForFirstConsumer", json!({})).await;
    // As the scheduler would pick node a for a pod (none here, so nothing picks again).
    s.claim("c", &late, "1Gi", on(&nodes[0].node)).await;
    s.wait_event("c", "ProvisioningFailed", "no room on this node")
        .await;
    let mine = node_finalizer(&nodes[0].node);
    let given = eventually(
        "a to give the claim back, held by its finalizer",
        WAIT,
        || async {
            let c = s.claims().get("c").await.ok()?;
            let selected = c
                .annotations()
                .contains_key("volume.kubernetes.io/selected-node");
            (!selected && c.finalizers().contains(&mine)).then_some(c)
        },
    )
    .await;
    assert!(support::holds_finalizer(&given), "{:?}", given.finalizers());
    assert_eq!(
        volumes_of(&nodes[0].mock).await.len(),
        1,
        "the timed-out call made a volume on a"
    );
    assert_eq!(nodes[0].mock.calls_of("DeleteVolume").len(), 0);
    (s, nodes)
}

/// Deleted while no node holds it: node a finds its volume again (the request it sent last)
/// and deletes it before the claim goes.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_claim_given_back_while_its_volume_may_exist_is_cleaned_up_when_deleted() {
    let (s, nodes) = given_back_with_a_volume("nd-leak-del").await;
    s.delete_claim("c").await;
    support::wait_gone(&s.claims(), "c").await;
    assert_eq!(
        nodes[0].mock.succeeded("DeleteVolume"),
        1,
        "a deletes the volume its timed-out call made"
    );
    assert_eq!(volumes_of(&nodes[0].mock).await, Vec::<String>::new());
    // Timed out, refused, then the clean-up's probe (the busy-volume refusals aside).
    assert_eq!(nodes[0].mock.succeeded("CreateVolume"), 2);
    assert_eq!(nodes[1].mock.calls_of("CreateVolume").len(), 0);
    assert_eq!(nodes[1].mock.calls_of("DeleteVolume").len(), 0);
}

/// Provisioned on node b in the end: b releases the creating-volume finalizer as usual, and a,
/// which still holds the claim by its own finalizer, deletes its volume and lets go once the
/// claim is bound to b's PV.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_claim_given_back_and_provisioned_elsewhere_gets_the_first_nodes_volume_deleted() {
    let (s, nodes) = given_back_with_a_volume("nd-leak-moved").await;
    // The scheduler picks b.
    s.claims()
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(on(&nodes[1].node)),
        )
        .await
        .unwrap();
    s.wait_bound("c").await;
    let mine = node_finalizer(&nodes[0].node);
    let settled = eventually("a to clean up and let go", WAIT, || async {
        let c = s.claims().get("c").await.ok()?;
        (!c.finalizers().contains(&mine) && !support::holds_finalizer(&c)).then_some(c)
    })
    .await;
    assert_eq!(
        settled
            .annotations()
            .get("volume.kubernetes.io/selected-node"),
        Some(&nodes[1].node)
    );
    assert_eq!(nodes[0].mock.succeeded("DeleteVolume"), 1);
    assert_eq!(volumes_of(&nodes[0].mock).await, Vec::<String>::new());
    assert_eq!(
        volumes_of(&nodes[1].mock).await.len(),
        1,
        "b's volume stays"
    );
    assert_eq!(nodes[1].mock.succeeded("CreateVolume"), 1);
    assert_eq!(nodes[1].mock.calls_of("DeleteVolume").len(), 0);
    let pv = s.bound_pv("c").await;
    let phase = s.volumes().get(&pv).await.unwrap().status.unwrap().phase;
    assert_eq!(phase.as_deref(), Some("Bound"));
}
