//! Distributed provisioning (`--node-deployment`) on the real control plane: one mock driver
//! and one `csi-provisioner` per fake node, each driver holding only its node's pool, as a
//! local-storage driver's DaemonSet runs.
//!
//! Run with `cargo xtask test` (needs the control plane binaries).

mod clones;
mod may_exist;
mod release_node;

use crate::support;
use crate::support::WAIT;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::support::{Holder, NODE_KEY, Scenario, create_pod, eventually, pod_node};
use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use testenv::{ControlPlane, MockDriver, Provisioner};

/// One node's driver and provisioner.
struct Instance {
    node: String,
    mock: MockDriver,
    prov: Provisioner,
}

/// Each node holds as many of `pvs` as its driver `created` volumes.
fn assert_pvs_where_volumes_are(nodes: &[Instance], pvs: &[PersistentVolume], created: &[usize]) {
    for (i, inst) in nodes.iter().enumerate() {
        let here = pvs.iter().filter(|pv| pv_node(pv) == inst.node).count();
        assert_eq!(
            here, created[i],
            "PVs of {} vs its driver's volumes",
            inst.node
        );
    }
}

/// `instance`'s node is lost for good: its provisioner dies (kill -9) and its Node goes.
async fn lose_node(s: &Scenario, instance: &mut Instance) {
    instance.prov.kill9();
    Api::<k8s_openapi::api::core::v1::Node>::all(s.client.clone())
        .delete(&instance.node, &DeleteParams::default())
        .await
        .unwrap();
}

/// [`nodes_with`] with capacity tracking (objects owned by nobody, polled every 2 s).
async fn distributed(
    prefix: &str,
    pools: &[(&str, &str)],
    prov_args: &[&str],
) -> (Scenario, Vec<Instance>) {
    let mut args = vec![
        "--enable-capacity",
        "--capacity-ownerref-level=-1",
        "--capacity-poll-interval=2s",
    ];
    args.extend_from_slice(prov_args);
    nodes_with(prefix, pools, &args).await
}

/// [`nodes_with`] whose drivers also get `driver_args`.
async fn nodes_with_drivers(
    prefix: &str,
    pools: &[(&str, &str)],
    prov_args: &[&str],
    driver_args: &[&str],
) -> (Scenario, Vec<Instance>) {
    let s = Scenario::new(prefix).await;
    let instances = start_nodes(&s, pools, prov_args, driver_args).await;
    (s, instances)
}

/// Nodes with a pool each (`(short name, size)`), their Node + CSINode, a CSIDriver with
/// storage capacity, and a driver + `--node-deployment` provisioner (plus `prov_args`) per
/// node.
async fn nodes_with(
    prefix: &str,
    pools: &[(&str, &str)],
    prov_args: &[&str],
) -> (Scenario, Vec<Instance>) {
    nodes_held(prefix, pools, prov_args, Holder::Finalizer).await
}

/// [`nodes_with`] with claims held by `holder` (each node's record in the scenario's
/// namespace).
async fn nodes_held(
    prefix: &str,
    pools: &[(&str, &str)],
    prov_args: &[&str],
    holder: Holder,
) -> (Scenario, Vec<Instance>) {
    let s = Scenario::new(prefix).await;
    let instances = start_nodes_held(&s, pools, prov_args, &[], holder).await;
    (s, instances)
}

async fn start_nodes(
    s: &Scenario,
    pools: &[(&str, &str)],
    prov_args: &[&str],
    driver_args: &[&str],
) -> Vec<Instance> {
    start_nodes_held(s, pools, prov_args, driver_args, Holder::Finalizer).await
}

async fn start_nodes_held(
    s: &Scenario,
    pools: &[(&str, &str)],
    prov_args: &[&str],
    driver_args: &[&str],
    holder: Holder,
) -> Vec<Instance> {
    testenv::try_create_csi_driver(&s.client, &s.driver, true)
        .await
        .unwrap();
    let short: Vec<&str> = pools.iter().map(|(n, _)| *n).collect();
    let names = s.node_names(&short);
    s.create_nodes(&names).await;
    let mut instances = Vec::new();
    for (node, (_, size)) in names.iter().zip(pools) {
        let mut mock_args = vec![
            format!("--pool={NODE_KEY}={node}:{size}"),
            format!("--node-topology={NODE_KEY}={node}"),
        ];
        mock_args.extend(driver_args.iter().map(|a| a.to_string()));
        instances.push(start_instance_held(s, node, &mock_args, prov_args, holder));
    }
    instances
}

/// A mock driver (its name and `--node-id` set here, then `mock_args`) and a
/// `--node-deployment` provisioner (plus `prov_args`) for `node`.
fn start_instance(s: &Scenario, node: &str, mock_args: &[String], prov_args: &[&str]) -> Instance {
    start_instance_held(s, node, mock_args, prov_args, Holder::Finalizer)
}

fn start_instance_held(
    s: &Scenario,
    node: &str,
    mock_args: &[String],
    prov_args: &[&str],
    holder: Holder,
) -> Instance {
    let dir = s.dir.join(node.rsplit('-').next().unwrap());
    std::fs::create_dir_all(&dir).unwrap();
    let mut all = vec![
        format!("--driver-name={}", s.driver),
        format!("--node-id={node}"),
    ];
    all.extend(mock_args.iter().cloned());
    let mock = MockDriver::start(&dir, &all.iter().map(String::as_str).collect::<Vec<_>>());
    let mut args = vec!["--node-deployment", "-v=5"];
    args.extend_from_slice(prov_args);
    let switch = match holder {
        Holder::Finalizer => "false",
        Holder::Record => "true",
    };
    let env = [
        ("NAMESPACE", s.ns.as_str()),
        ("POD_NAMESPACE", s.ns.as_str()),
        ("NODE_NAME", node),
        (csi_provisioner::write_ahead::SWITCH, switch),
    ];
    let prov = Provisioner::start(
        &dir,
        "csi-provisioner",
        ControlPlane::shared().kubeconfig(),
        &mock.socket,
        &args,
        &env,
    );
    Instance {
        node: node.to_string(),
        mock,
        prov,
    }
}

/// Our driver's CSIStorageCapacity objects in the scenario's namespace.
async fn capacity_objects(s: &Scenario) -> Vec<CSIStorageCapacity> {
    let api: Api<CSIStorageCapacity> = Api::namespaced(s.client.clone(), &s.ns);
    api.list(&ListParams::default().labels(&format!("csi.storage.k8s.io/drivername={}", s.driver)))
        .await
        .unwrap()
        .items
}

/// `managed-by` → (class, capacity) of every object, once each instance published its own.
async fn published_per_instance(s: &Scenario, want: usize) -> BTreeMap<String, Vec<String>> {
    eventually("every instance to publish its capacity", WAIT, || async {
        let objects = capacity_objects(s).await;
        let mut by: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for o in &objects {
            let managed = o.labels().get("csi.storage.k8s.io/managed-by").cloned();
            by.entry(managed.unwrap_or_default())
                .or_default()
                .push(format!(
                    "{}={}",
                    o.storage_class_name,
                    o.capacity.as_ref().map_or("-", |q| q.0.as_str())
                ));
        }
        (by.len() == want && by.values().all(|v| !v.is_empty())).then_some(by)
    })
    .await
}

/// The node a PV's affinity names.
fn pv_node(pv: &PersistentVolume) -> String {
    let term = &pv
        .spec
        .as_ref()
        .unwrap()
        .node_affinity
        .as_ref()
        .unwrap()
        .required
        .as_ref()
        .unwrap()
        .node_selector_terms[0];
    term.match_expressions.as_ref().unwrap()[0]
        .values
        .as_ref()
        .unwrap()[0]
        .clone()
}

/// The scenario's PVs.
async fn our_pvs(s: &Scenario) -> Vec<PersistentVolume> {
    let pvs = s.volumes().list(&ListParams::default()).await.unwrap();
    pvs.items
        .into_iter()
        .filter(|pv| {
            pv.spec
                .as_ref()
                .and_then(|sp| sp.csi.as_ref())
                .is_some_and(|c| c.driver == s.driver)
        })
        .collect()
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn late_binding_lands_on_the_node_with_room_and_only_its_driver_creates() {
    let (s, nodes) = distributed(
        "nd-wffc",
        &[("a", "10Gi"), ("b", "10Gi"), ("c", "100Gi")],
        &[],
    )
    .await;
    let class = s.class("wffc", "WaitForFirstConsumer", json!({})).await;
    // One object per node, each labelled with its own instance (and nobody else's).
    let published = published_per_instance(&s, 3).await;
    let want: BTreeSet<String> = nodes
        .iter()
        .map(|i| format!("external-provisioner-{}", i.node))
        .collect();
    assert_eq!(published.keys().cloned().collect::<BTreeSet<_>>(), want);
    for objects in published.values() {
        assert_eq!(
            objects.len(),
            1,
            "one object per node and class: {published:?}"
        );
    }

    s.claim("big", &class, "50Gi", json!({})).await;
    create_pod(&s, "app", "big", json!({})).await;
    let placed = pod_node(&s, "app").await;
    assert_eq!(placed, nodes[2].node, "the pod must land where 50Gi fit");
    let claim = s.wait_bound("big").await;
    let pv = s
        .volumes()
        .get(claim.spec.unwrap().volume_name.as_deref().unwrap())
        .await
        .unwrap();
    assert_eq!(pv_node(&pv), nodes[2].node);
    let creates: Vec<usize> = nodes
        .iter()
        .map(|i| i.mock.calls_of("CreateVolume").len())
        .collect();
    assert_eq!(creates, [0, 0, 1], "only the chosen node's driver is asked");
    // The other nodes' instances stay silent: one instance's events only.
    s.wait_event("big", "ProvisioningSucceeded", "").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let reasons = s.our_event_reasons("big").await;
    // At most one: a progress event still waiting when its outcome comes is not sent.
    assert!(
        reasons.iter().filter(|r| *r == "Provisioning").count() <= 1,
        "{reasons:?}"
    );
    assert_eq!(
        reasons
            .iter()
            .filter(|r| *r == "ProvisioningSucceeded")
            .count(),
        1,
        "{reasons:?}"
    );
    assert!(
        !reasons.iter().any(|r| r == "ProvisioningFailed"),
        "{reasons:?}"
    );

    // A claim no node can hold waits, explained once by one of the instances.
    s.claim("huge", &class, "500Gi", json!({})).await;
    create_pod(&s, "waits", "huge", json!({})).await;
    let event = s
        .wait_event("huge", "NotEnoughCapacity", "needs 500Gi")
        .await;
    let message = event.message.unwrap_or_default();
    assert!(
        message.contains(&nodes[2].node),
        "names the largest node: {message}"
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    let explained = s
        .events_for("huge")
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("NotEnoughCapacity"))
        .map(|e| e.count.unwrap_or(1))
        .sum::<i32>();
    assert_eq!(explained, 1);
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn immediate_claims_are_taken_once_each_by_nodes_with_room_and_deleted_there() {
    // Node c is too small for any claim: it must never take one.
    let (s, nodes) = distributed(
        "nd-imm",
        &[("a", "100Gi"), ("b", "100Gi"), ("c", "1Gi")],
        &["--capacity-for-immediate-binding"],
    )
    .await;
    let class = s.class("imm", "Immediate", json!({})).await;
    published_per_instance(&s, 3).await;
    let n = 20;
    for i in 0..n {
        s.claim(&format!("c{i}"), &class, "2Gi", json!({})).await;
    }
    for i in 0..n {
        s.wait_bound(&format!("c{i}")).await;
    }
    let pvs = our_pvs(&s).await;
    assert_eq!(pvs.len(), n);
    // Exactly one successful CreateVolume per claim across all drivers, each on the node
    // its PV names.
    let created: Vec<usize> = nodes
        .iter()
        .map(|i| i.mock.succeeded("CreateVolume"))
        .collect();
    assert_eq!(created.iter().sum::<usize>(), n, "{created:?}");
    assert_eq!(created[2], 0, "the full node took a claim: {created:?}");
    let calls: Vec<usize> = nodes
        .iter()
        .map(|i| i.mock.calls_of("CreateVolume").len())
        .collect();
    assert_eq!(calls, created, "no failed CreateVolume anywhere");
    assert_pvs_where_volumes_are(&nodes, &pvs, &created);
    // Both nodes with room got claims: the order spreads them.
    assert!(created[0] > 0 && created[1] > 0, "{created:?}");

    // Deletion: each volume is deleted by its own node's instance, nobody else asks.
    for i in 0..n {
        s.delete_claim(&format!("c{i}")).await;
    }
    eventually("every PV to be gone", Duration::from_secs(120), || async {
        our_pvs(&s).await.is_empty().then_some(())
    })
    .await;
    let deletes: Vec<usize> = nodes
        .iter()
        .map(|i| i.mock.calls_of("DeleteVolume").len())
        .collect();
    assert_eq!(
        deletes, created,
        "DeleteVolume calls per node must match its volumes"
    );
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn an_immediate_claim_no_node_can_hold_is_explained_once() {
    let (s, nodes) = distributed(
        "nd-full",
        &[("a", "10Gi"), ("b", "10Gi"), ("c", "10Gi")],
        &["--capacity-for-immediate-binding"],
    )
    .await;
    let class = s.class("imm", "Immediate", json!({})).await;
    published_per_instance(&s, 3).await;
    s.claim("huge", &class, "50Gi", json!({})).await;
    let event = s
        .wait_event("huge", "NotEnoughCapacity", "needs 50Gi")
        .await;
    let message = event.message.unwrap_or_default();
    assert!(
        message.contains("largest published capacity is 10Gi"),
        "{message}"
    );
    // Several capacity polls later: still one event (one instance reports, once), no node.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let events: Vec<_> = s
        .events_for("huge")
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("NotEnoughCapacity"))
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].count.unwrap_or(1), 1, "{events:?}");
    let claim = s.claims().get("huge").await.unwrap();
    assert!(
        !claim
            .annotations()
            .contains_key("volume.kubernetes.io/selected-node"),
        "no node may take it"
    );
    // Nor did one take it for a moment and give it back: no driver was asked, and nothing failed.
    let calls: usize = nodes
        .iter()
        .map(|n| n.mock.calls_of("CreateVolume").len())
        .sum();
    assert_eq!(calls, 0, "CreateVolume calls on the nodes");
    let failed = s
        .events_for("huge")
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("ProvisioningFailed"))
        .count();
    assert_eq!(failed, 0, "ProvisioningFailed events");
}

/// A claim that waited while no node had room is taken once room appears, at once (the
/// instances recheck waiting claims when a peer's object changes, not at their next poll) and
/// by one node only (the node ranked second finds it taken when its turn comes).
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn when_room_appears_a_claim_that_waited_is_taken_by_one_node() {
    // Objects are published once (a 10 min poll): the test sets what both show, so room
    // appears on both at the same moment. The drivers' pools have room all along, so each
    // instance's own GetCapacity pre-check passes.
    let (s, nodes) = nodes_with(
        "nd-room",
        &[("a", "100Gi"), ("b", "100Gi")],
        &[
            "--enable-capacity",
            "--capacity-ownerref-level=-1",
            "--capacity-poll-interval=10m",
            "--capacity-for-immediate-binding",
        ],
    )
    .await;
    let class = s.class("imm", "Immediate", json!({})).await;
    published_per_instance(&s, 2).await;
    let show = |capacity: &'static str| {
        let s = &s;
        async move {
            let api: Api<CSIStorageCapacity> = Api::namespaced(s.client.clone(), &s.ns);
            for o in capacity_objects(s).await {
                let patch = json!({"capacity": capacity});
                api.patch(
                    &o.name_any(),
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&patch),
                )
                .await
                .unwrap();
            }
        }
    };
    show("1Gi").await;
    // The claim and the objects reach each instance through different watches: let the
    // objects arrive first, or an instance may take the claim on the 100Gi it still shows.
    tokio::time::sleep(Duration::from_secs(3)).await;
    s.claim("c", &class, "5Gi", json!({})).await;
    s.wait_event("c", "NotEnoughCapacity", "needs 5Gi").await;
    show("100Gi").await;
    s.wait_bound("c").await;
    // The second node's turn (a quarter of the 20 s base delay after room appeared) finds
    // the claim taken.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let tries: Vec<usize> = nodes
        .iter()
        .map(|n| {
            n.prov
                .log()
                .matches("Checking capacity before taking claim")
                .count()
        })
        .collect();
    assert_eq!(
        tries.iter().sum::<usize>(),
        1,
        "nodes that tried to take the claim: {tries:?}"
    );
    let created: usize = nodes.iter().map(|n| n.mock.succeeded("CreateVolume")).sum();
    assert_eq!(created, 1);
}

/// Without capacity tracking nothing brings back a claim that the driver's GetCapacity kept
/// from this node: the instance asks again after `--node-deployment-max-delay`, so the claim is
/// taken once room appears (it waited for the 15-minute resync).
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_claim_get_capacity_kept_away_is_taken_once_room_appears() {
    let (s, nodes) = nodes_with(
        "nd-precheck",
        &[("a", "10Gi")],
        &[
            "--node-deployment-max-delay=4s",
            "--node-deployment-base-delay=1s",
        ],
    )
    .await;
    // 8Gi of the pool taken behind the provisioner's back.
    let driver = csi::Client::connect(&nodes[0].mock.endpoint(), Default::default())
        .await
        .unwrap();
    let here = csi::v1::Topology {
        segments: [(NODE_KEY.to_string(), nodes[0].node.clone())].into(),
    };
    let filler = driver
        .create_volume(csi::v1::CreateVolumeRequest {
            name: "filler".into(),
            capacity_range: Some(csi::v1::CapacityRange {
                required_bytes: 8 << 30,
                limit_bytes: 0,
            }),
            volume_capabilities: vec![csi::v1::VolumeCapability {
                access_mode: Some(csi::v1::volume_capability::AccessMode {
                    mode: csi::v1::volume_capability::access_mode::Mode::SingleNodeWriter as i32,
                }),
                access_type: Some(csi::v1::volume_capability::AccessType::Mount(
                    Default::default(),
                )),
            }],
            accessibility_requirements: Some(csi::v1::TopologyRequirement {
                requisite: vec![here.clone()],
                preferred: vec![here],
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .volume
        .unwrap()
        .volume_id;
    let class = s.class("imm", "Immediate", json!({})).await;
    s.claim("c", &class, "5Gi", json!({})).await;
    nodes[0].prov.wait_for_log(
        "GetCapacity says the volume does not fit on this node",
        Duration::from_secs(60),
    );
    driver
        .delete_volume(csi::v1::DeleteVolumeRequest {
            volume_id: filler,
            ..Default::default()
        })
        .await
        .unwrap();
    s.wait_bound("c").await;
    assert_eq!(
        nodes[0].mock.succeeded("CreateVolume"),
        2,
        "the filler and the claim's"
    );
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn without_published_capacity_upstreams_random_delay_still_picks_one_node() {
    // No capacity tracking: nothing to rank by, so instances race after a random delay.
    // At -v=2 each take is logged with how long the instance waited for it.
    let (s, nodes) = nodes_with(
        "nd-lottery",
        &[("a", "100Gi"), ("b", "100Gi")],
        &["--node-deployment-base-delay=2s", "-v=2"],
    )
    .await;
    let class = s.class("imm", "Immediate", json!({})).await;
    for i in 0..4 {
        s.claim(&format!("c{i}"), &class, "1Gi", json!({})).await;
    }
    for i in 0..4 {
        s.wait_bound(&format!("c{i}")).await;
    }
    let created: Vec<usize> = nodes
        .iter()
        .map(|i| i.mock.succeeded("CreateVolume"))
        .collect();
    assert_eq!(created.iter().sum::<usize>(), 4, "{created:?}");
    // Each claim taken once, after a drawn delay below the 2 s base (the default base, 20 s,
    // would show; so would no delay at all, since four draws near 0 are not credible).
    let waits: Vec<f64> = nodes
        .iter()
        .flat_map(|i| {
            i.prov
                .log()
                .lines()
                .filter(|l| l.contains("\"Took claim for this node\""))
                .map(|l| waited_seconds(l).unwrap_or_else(|| panic!("no waited= in {l}")))
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(waits.len(), 4, "one take per claim: {waits:?}");
    assert!(
        waits.iter().all(|w| *w < 3.0) && waits.iter().any(|w| *w > 0.1),
        "waits before taking: {waits:?}"
    );
    let pvs = our_pvs(&s).await;
    assert_pvs_where_volumes_are(&nodes, &pvs, &created);
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_restarted_instance_adopts_its_object_instead_of_duplicating_it() {
    let (s, mut nodes) = distributed("nd-restart", &[("a", "10Gi"), ("b", "20Gi")], &[]).await;
    let class = s.class("wffc", "WaitForFirstConsumer", json!({})).await;
    let before = published_per_instance(&s, 2).await;
    let names_before: BTreeSet<String> = capacity_objects(&s)
        .await
        .iter()
        .map(|o| o.name_any())
        .collect();
    // The log goes on across restarts: wait for the new run's line.
    let synced = "Caches synced";
    let runs_before = nodes[0].prov.log().matches(synced).count();
    nodes[0].prov.restart();
    nodes[0]
        .prov
        .wait_for_log_count(synced, runs_before + 1, Duration::from_secs(60));
    // A few polls after the restart: the same objects, none added or replaced.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after: BTreeSet<String> = capacity_objects(&s)
        .await
        .iter()
        .map(|o| o.name_any())
        .collect();
    assert_eq!(after, names_before);
    assert_eq!(published_per_instance(&s, 2).await, before);
    // And keeps it up to date: a volume made on a lowers a's value, in that same object.
    let node_a = nodes[0].node.clone();
    let a_object = || async {
        capacity_objects(&s)
            .await
            .into_iter()
            .find(|o| o.labels()["csi.storage.k8s.io/managed-by"].ends_with(node_a.as_str()))
    };
    let adopted = a_object().await.expect("a's object");
    s.claim("vol", &class, "4Gi", on(&node_a)).await;
    s.wait_bound("vol").await;
    let lowered = eventually("a's object to show the volume", WAIT, || async {
        let o = a_object().await?;
        (o.capacity.as_ref().map(|q| q.0.as_str()) == Some("6Gi")).then_some(o)
    })
    .await;
    assert_eq!(
        (lowered.name_any(), lowered.uid()),
        (adopted.name_any(), adopted.uid()),
        "the same object"
    );
    let before = published_per_instance(&s, 2).await;
    // Deleting another node's object is not ours to repair: only its own instance does.
    let api: Api<CSIStorageCapacity> = Api::namespaced(s.client.clone(), &s.ns);
    let b_object = capacity_objects(&s)
        .await
        .into_iter()
        .find(|o| o.labels()["csi.storage.k8s.io/managed-by"].ends_with(&nodes[1].node))
        .unwrap();
    api.delete(&b_object.name_any(), &DeleteParams::default())
        .await
        .unwrap();
    let again = published_per_instance(&s, 2).await;
    assert_eq!(
        again, before,
        "node b's instance publishes its object again"
    );
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_deleted_nodes_capacity_objects_are_removed_by_a_survivor() {
    let (s, mut nodes) = distributed(
        "nd-gone",
        &[("a", "10Gi"), ("b", "20Gi"), ("c", "30Gi")],
        &[],
    )
    .await;
    s.class("wffc", "WaitForFirstConsumer", json!({})).await;
    s.class("other", "WaitForFirstConsumer", json!({})).await;
    // Each instance creates its two objects one after the other: wait for all six (two
    // classes on three nodes).
    let objects = eventually("both classes' objects on every node", WAIT, || async {
        let objects = capacity_objects(&s).await;
        (objects.len() == 6).then_some(objects)
    })
    .await;
    let names_of = |objects: Vec<CSIStorageCapacity>, node: &str| -> BTreeSet<String> {
        objects
            .into_iter()
            .filter(|o| o.labels()["csi.storage.k8s.io/managed-by"].ends_with(node))
            .map(|o| o.name_any())
            .collect()
    };
    let kept: BTreeSet<String> = names_of(objects.clone(), &nodes[1].node)
        .union(&names_of(objects, &nodes[2].node))
        .cloned()
        .collect();
    // Node a goes away with its instance. It was first in line to clean up, so b takes over.
    lose_node(&s, &mut nodes[0]).await;
    let left = eventually(
        "node a's objects to be deleted",
        Duration::from_secs(60),
        || async {
            let objects = capacity_objects(&s).await;
            names_of(objects.clone(), &nodes[0].node)
                .is_empty()
                .then_some(objects)
        },
    )
    .await;
    let left: BTreeSet<String> = left.into_iter().map(|o| o.name_any()).collect();
    assert_eq!(left, kept, "the other nodes' objects stay as they were");
    // Logged right after each delete returns: wait for the second line too.
    let deleted_line = "Deleted CSIStorageCapacity of a node that no longer exists";
    eventually("node b's instance to log both deletions", WAIT, || async {
        (nodes[1].prov.log().matches(deleted_line).count() == 2).then_some(())
    })
    .await;
    assert!(!nodes[2].prov.log().contains(deleted_line));
}

/// A PV of our driver made by hand, bound to a claim that is gone (so Released, with the
/// Delete policy), with `terms` as its required node affinity; returns its name.
async fn released_pv(s: &Scenario, suffix: &str, handle: &str, terms: serde_json::Value) -> String {
    use kube::api::PostParams;
    let name = format!("{}-{suffix}", s.ns);
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": name,
                     "annotations": {"pv.kubernetes.io/provisioned-by": s.driver}},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "",
                 "claimRef": {"namespace": s.ns, "name": "gone", "uid": "00000000-0000-0000-0000-000000000001"},
                 "csi": {"driver": s.driver, "volumeHandle": handle},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": terms}}}
    }))
    .unwrap();
    s.volumes()
        .create(&PostParams::default(), &pv)
        .await
        .unwrap();
    name
}

/// A driver whose NodeGetInfo names an empty topology is a node without labels, as upstream:
/// a PV pinned to another node is not its to delete. Taken for "no topology" (every volume
/// reachable), its instance raced the owning node's to delete it, through its own driver.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn an_empty_node_topology_reaches_no_pinned_volume() {
    let (s, nodes) = nodes_with("nd-empty-topo", &[("b", "10Gi")], &[]).await;
    let owner = &nodes[0];
    // The owner's DeleteVolume is slow: a wrong instance would get there first.
    owner
        .mock
        .set_faults(json!({"DeleteVolume": {"delay_ms": 3000}}));
    let bare_node = s.node_names(&["bare"]).remove(0);
    testenv::create_fake_nodes(&s.client, &s.driver, NODE_KEY, &[&bare_node]).await;
    let bare = start_instance(&s, &bare_node, &["--empty-node-topology".to_string()], &[]);
    bare.prov
        .wait_for_log("Distributed provisioning", Duration::from_secs(60));

    // A provisioned PV on node b whose claim is gone: Released, to be deleted by b's instance.
    let terms = json!([{"matchExpressions": [
        {"key": NODE_KEY, "operator": "In", "values": [owner.node]}]}]);
    let name = released_pv(&s, "released", "vol-on-b", terms).await;
    support::wait_gone(&s.volumes(), &name).await;
    assert_eq!(owner.mock.calls_of("DeleteVolume").len(), 1);
    assert_eq!(
        bare.mock.calls_of("DeleteVolume").len(),
        0,
        "the instance without topology deleted another node's volume"
    );
}

/// A hand-made PV pinned by node name (`matchFields`, which no provisioner writes) is the
/// named node's, as the scheduler reads it: that node's instance deletes it once Released,
/// and no other instance calls its own driver for it (upstream's all do).
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_pv_pinned_by_node_name_is_deleted_by_that_node_alone() {
    let (s, nodes) = nodes_with("nd-fields", &[("a", "10Gi"), ("b", "10Gi")], &[]).await;
    let terms = json!([{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [nodes[1].node]}]}]);
    let name = released_pv(&s, "by-name", "vol-on-b", terms).await;
    support::wait_gone(&s.volumes(), &name).await;
    assert_eq!(nodes[1].mock.calls_of("DeleteVolume").len(), 1);
    assert_eq!(nodes[0].mock.calls_of("DeleteVolume").len(), 0);
}

/// After an upgrade: a claim an earlier version (or its retired admission policy) left holding
/// our creating-volume finalizer, which no node takes (none has room), is let go once deleted,
/// without a call.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn an_unclaimed_deleted_claim_left_holding_our_finalizer_is_let_go_without_a_call() {
    let (s, nodes) = distributed(
        "nd-upgrade",
        &[("a", "1Gi"), ("b", "1Gi")],
        &["--capacity-for-immediate-binding"],
    )
    .await;
    let class = s.class("imm", "Immediate", json!({})).await;
    published_per_instance(&s, 2).await;
    s.claim("big", &class, "50Gi", left_holding(json!({})))
        .await;
    s.wait_event("big", "NotEnoughCapacity", "needs 50Gi").await;
    s.delete_claim("big").await;
    support::wait_gone(&s.claims(), "big").await;
    for i in &nodes {
        assert_eq!(i.mock.calls_of("CreateVolume").len(), 0, "{}", i.node);
        assert_eq!(i.mock.calls_of("DeleteVolume").len(), 0, "{}", i.node);
    }
}

/// After an upgrade, claims an earlier version left holding our finalizer while they wait for
/// a node: an Immediate claim while the nodes take none
/// (`--node-deployment-immediate-binding=false`), and a late-binding claim its node gives back
/// after a failure (rescheduled, no pod to pick again). Deleted, both go: no node will ever
/// take them. The late claim's node asks once more first: the claim held the finalizer before
/// its call and was made within a minute of the provisioner's start, so an earlier process may
/// have called for it (`provisioning::attempt::earlier_attempt_possible`), and node a gave it
/// back still holding it, as the central clean-up would probe (refused: nothing to delete).
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn deleted_claims_left_holding_our_finalizer_while_waiting_for_a_node_are_let_go() {
    let (s, nodes) = nodes_with(
        "nd-wait",
        &[("a", "100Gi"), ("b", "100Gi")],
        &["--node-deployment-immediate-binding=false"],
    )
    .await;
    nodes[0].mock.set_faults(json!({"CreateVolume": {
        "code": "ResourceExhausted", "message": "volume limit of this node reached"}}));
    let immediate = s.class("imm", "Immediate", json!({})).await;
    let late = s.class("late", "WaitForFirstConsumer", json!({})).await;
    s.claim("imm", &immediate, "1Gi", left_holding(json!({})))
        .await;
    // As the scheduler would pick node a for a pod (none here, so nothing picks again).
    s.claim("late", &late, "1Gi", left_holding(on(&nodes[0].node)))
        .await;
    s.wait_event("late", "ProvisioningFailed", "volume limit")
        .await;
    eventually(
        "the late claim to be given back, still held",
        WAIT,
        || async {
            let c = s.claims().get("late").await.ok()?;
            let selected = c
                .annotations()
                .contains_key("volume.kubernetes.io/selected-node");
            (!selected && support::holds_finalizer(&c)).then_some(())
        },
    )
    .await;
    s.delete_claim("imm").await;
    s.delete_claim("late").await;
    support::wait_gone(&s.claims(), "imm").await;
    support::wait_gone(&s.claims(), "late").await;
    assert_eq!(nodes[0].mock.calls_of("CreateVolume").len(), 2);
    assert_eq!(nodes[1].mock.calls_of("CreateVolume").len(), 0);
    for i in &nodes {
        assert_eq!(i.mock.calls_of("DeleteVolume").len(), 0, "{}", i.node);
    }
}

/// `extra` (a claim's metadata) with our creating-volume finalizer, as an earlier version left
/// it on claims it was provisioning.
fn left_holding(mut extra: serde_json::Value) -> serde_json::Value {
    extra["metadata"]["finalizers"] = json!([support::CREATING]);
    extra
}

/// A class whose allowedTopologies admit one node: only that node's instance takes its claims.
/// A claim it cannot provision for another reason (here a reserved parameter nobody knows) is
/// still taken, as upstream, so that the failure shows on the claim instead of nobody taking it.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn allowed_topologies_pick_the_node_and_other_problems_are_reported_on_the_claim() {
    let (s, nodes) = distributed(
        "nd-allowed",
        &[("a", "100Gi"), ("b", "100Gi")],
        &["--capacity-for-immediate-binding"],
    )
    .await;
    let only = |node: &str, parameters: serde_json::Value| {
        json!({"parameters": parameters, "allowedTopologies": [{"matchLabelExpressions": [
            {"key": NODE_KEY, "values": [node]}]}]})
    };
    let good = s
        .class("on-b", "Immediate", only(&nodes[1].node, json!({})))
        .await;
    let bad = s
        .class(
            "on-a-bad",
            "Immediate",
            only(
                &nodes[0].node,
                json!({"csi.storage.k8s.io/no-such-key": "x"}),
            ),
        )
        .await;
    published_per_instance(&s, 2).await;
    s.claim("fine", &good, "1Gi", json!({})).await;
    s.claim("broken", &bad, "1Gi", json!({})).await;

    s.wait_bound("fine").await;
    let pvs = our_pvs(&s).await;
    assert_eq!(pvs.len(), 1);
    assert_eq!(pv_node(&pvs[0]), nodes[1].node);
    let event = s
        .wait_event("broken", "ProvisioningFailed", "prefixed keys")
        .await;
    assert!(
        event
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("no-such-key"),
        "{event:?}"
    );
    let taken = s.claims().get("broken").await.unwrap();
    assert_eq!(
        taken
            .annotations()
            .get("volume.kubernetes.io/selected-node"),
        Some(&nodes[0].node),
        "taken by the node its class admits"
    );
    let calls: Vec<usize> = nodes
        .iter()
        .map(|i| i.mock.calls_of("CreateVolume").len())
        .collect();
    assert_eq!(calls, [0, 1], "one CreateVolume, for the good claim on b");
}

/// A claim's metadata with `selected-node` naming `node`.
fn on(node: &str) -> serde_json::Value {
    json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": node}}})
}

/// A node whose driver refuses every volume (a per-node volume limit GetCapacity does not
/// show): each claim it takes fails there once, goes back, and is taken by the other node;
/// the failing node does not take it again at once, as a fixed order alone would have it do
/// for ever.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_claim_a_node_cannot_hold_goes_to_another_node() {
    let (s, nodes) = distributed(
        "nd-refuse",
        &[("a", "100Gi"), ("b", "100Gi")],
        &["--capacity-for-immediate-binding"],
    )
    .await;
    nodes[0].mock.set_faults(json!({"CreateVolume": {
        "code": "ResourceExhausted", "message": "volume limit of this node reached"}}));
    let class = s.class("imm", "Immediate", json!({})).await;
    published_per_instance(&s, 2).await;
    // Claims are ordered by a hash of their UID: with twelve, node a is first for some.
    let n = 12;
    for i in 0..n {
        s.claim(&format!("c{i}"), &class, "1Gi", json!({})).await;
    }
    for i in 0..n {
        s.wait_bound(&format!("c{i}")).await;
    }
    let pvs = our_pvs(&s).await;
    assert_eq!(pvs.len(), n);
    assert!(pvs.iter().all(|pv| pv_node(pv) == nodes[1].node));
    let refused: Vec<String> = nodes[0]
        .mock
        .calls_of("CreateVolume")
        .iter()
        .map(|c| {
            c["request"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    let distinct: BTreeSet<&String> = refused.iter().collect();
    assert!(
        !refused.is_empty(),
        "node a was first for none of {n} claims"
    );
    assert_eq!(
        distinct.len(),
        refused.len(),
        "node a took a claim again after it failed there: {refused:?}"
    );
    assert_eq!(nodes[1].mock.succeeded("CreateVolume"), n);
}

/// The `waited=` duration of a "Took claim" log line (Rust's `Debug` of a `Duration`), in
/// seconds.
fn waited_seconds(line: &str) -> Option<f64> {
    let rest = &line[line.find("waited=")? + "waited=".len()..];
    let value: String = rest
        .trim_start_matches('"')
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != '"')
        .collect();
    let split = value.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = value.split_at(split);
    let scale = match unit {
        "s" => 1.0,
        "ms" => 1e-3,
        "µs" => 1e-6,
        "ns" => 1e-9,
        _ => return None,
    };
    Some(number.parse::<f64>().ok()? * scale)
}
