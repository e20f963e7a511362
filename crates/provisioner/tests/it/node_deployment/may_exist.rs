//! A node gives a claim back (ResourceExhausted) after an earlier CreateVolume of its own ended
//! without an answer: the volume that call made must not leak, whether the claim is deleted
//! while no node holds it or provisioned on another node. Each runs with the claim held by
//! our finalizers and again by the node's write-ahead record.

use crate::support::WAIT;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::{Instance, nodes_held, on};
use crate::support::{self, Holder, Scenario, eventually, volumes_of};

/// This node's own finalizer, as `provisioning::distributed::node_finalizer` writes it.
fn node_finalizer(node: &str) -> String {
    format!("external-provisioner.volume.kubernetes.io/creating-volume-on-{node}")
}

/// Whether `node` holds `claim` now (its own finalizer on the claim as the API server has it,
/// or its record's entry).
async fn node_holds(
    s: &Scenario,
    holder: Holder,
    node: &str,
    claim: &PersistentVolumeClaim,
) -> bool {
    match holder {
        Holder::Finalizer => {
            let name = claim.metadata.name.as_deref().unwrap_or_default();
            let Ok(Some(now)) = s.claims().get_opt(name).await else {
                return false;
            };
            now.metadata.uid == claim.metadata.uid
                && now.finalizers().contains(&node_finalizer(node))
        }
        Holder::Record => {
            let leases: Api<Lease> = Api::namespaced(s.client.clone(), &s.ns);
            let lease = provisioning::record::lease_name(&s.driver, Some(node));
            let Ok(Some(found)) = leases.get_opt(&lease).await else {
                return false;
            };
            let annotations = found.metadata.annotations.unwrap_or_default();
            let (entries, _) = provisioning::record::entries(&annotations);
            entries
                .iter()
                .any(|e| Some(&e.uid) == claim.metadata.uid.as_ref())
        }
    }
}

/// Two nodes; node a's first CreateVolume outlives the provisioner's 2 s timeout (the driver
/// makes the volume, the answer is lost), and its next one is refused with ResourceExhausted
/// (a driver that checks free space before the name); the one after that (the clean-up's
/// probe) takes 1.5 s (under the 2 s timeout). Returns once a has given the late-binding claim "c" back: no node
/// selected, a holding it, a's volume in a's pool.
async fn given_back_with_a_volume(
    prefix: &str,
    holder: Holder,
) -> (Scenario, Vec<Instance>, PersistentVolumeClaim) {
    let (s, nodes) = nodes_held(
        prefix,
        &[("a", "100Gi"), ("b", "100Gi")],
        &["--timeout=2s", "--retry-interval-start=500ms"],
        holder,
    )
    .await;
    // a's clean-up probe is slow: by the time it answers, a PV of the claim may exist on b,
    // which must not stop a from deleting its own volume.
    nodes[0].mock.set_faults(json!({"CreateVolume": [
        {"delay_ms": 4000, "times": 1},
        {"code": "ResourceExhausted", "message": "no room on this node", "times": 1},
        {"delay_ms": 1500, "times": 1},
    ]}));
    let late = s.class("late", "WaitForFirstConsumer", json!({})).await;
    // As the scheduler would pick node a for a pod (none here, so nothing picks again).
    s.claim("c", &late, "1Gi", on(&nodes[0].node)).await;
    s.wait_event("c", "ProvisioningFailed", "no room on this node")
        .await;
    let given = eventually("a to give the claim back, holding it", WAIT, || async {
        let c = s.claims().get("c").await.ok()?;
        let selected = c
            .annotations()
            .contains_key("volume.kubernetes.io/selected-node");
        (!selected && node_holds(&s, holder, &nodes[0].node, &c).await).then_some(c)
    })
    .await;
    assert_eq!(
        support::holds_finalizer(&given),
        holder == Holder::Finalizer,
        "{:?}",
        given.finalizers()
    );
    assert_eq!(
        volumes_of(&nodes[0].mock).await.len(),
        1,
        "the timed-out call made a volume on a"
    );
    assert_eq!(nodes[0].mock.calls_of("DeleteVolume").len(), 0);
    (s, nodes, given)
}

/// Deleted while no node holds it: node a finds its volume again (the request it sent last)
/// and deletes it before the claim goes.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn with_the_finalizer_a_claim_given_back_while_its_volume_may_exist_is_cleaned_up_when_deleted()
 {
    given_back_then_deleted(Holder::Finalizer).await;
}

/// The same with the record: the claim goes at once, a cleans up from its entry.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_claim_given_back_while_its_volume_may_exist_is_cleaned_up_when_deleted() {
    given_back_then_deleted(Holder::Record).await;
}

async fn given_back_then_deleted(holder: Holder) {
    let (s, nodes, given) = given_back_with_a_volume("nd-leak-del", holder).await;
    s.delete_claim("c").await;
    support::wait_gone(&s.claims(), "c").await;
    eventually("a to let the claim go", WAIT, || async {
        (!node_holds(&s, holder, &nodes[0].node, &given).await).then_some(())
    })
    .await;
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
async fn with_the_finalizer_a_claim_given_back_and_provisioned_elsewhere_gets_the_first_nodes_volume_deleted()
 {
    given_back_then_moved(Holder::Finalizer).await;
}

/// The same with the records: a cleans up from its entry (once the claim is b's, a's cache no
/// longer holds it), b's entry goes with its PV.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_claim_given_back_and_provisioned_elsewhere_gets_the_first_nodes_volume_deleted() {
    given_back_then_moved(Holder::Record).await;
}

async fn given_back_then_moved(holder: Holder) {
    let (s, nodes, given) = given_back_with_a_volume("nd-leak-moved", holder).await;
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
    let settled = eventually("a to clean up and let go", WAIT, || async {
        let c = s.claims().get("c").await.ok()?;
        let a_holds = node_holds(&s, holder, &nodes[0].node, &given).await;
        let b_holds = node_holds(&s, holder, &nodes[1].node, &given).await;
        (!a_holds && !b_holds && !support::holds_finalizer(&c)).then_some(c)
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
