//! The shared control plane: the real scheduler places a pod by CSIStorageCapacity, nodes and
//! drivers are created or updated, and the control plane dies with the test process.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSIStorageCapacity, StorageClass};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use testenv::{ControlPlane, create_csi_driver, create_fake_nodes, create_namespace, wait_for};

const DRIVER: &str = "sched.testenv.test";
const TOPOLOGY_KEY: &str = "topology.sched.testenv.test/node";
const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

fn from_json<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).expect("valid object")
}

fn pod_unschedulable_for_storage(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|cs| {
        cs.iter().any(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.message
                    .as_deref()
                    .is_some_and(|m| m.contains("enough free storage"))
        })
    })
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn scheduler_places_pod_where_storage_capacity_is() {
    let client = ControlPlane::shared().client().await;
    create_csi_driver(&client, DRIVER, true).await;
    let nodes = create_fake_nodes(&client, DRIVER, TOPOLOGY_KEY, &["sched-a", "sched-b"]).await;
    assert_eq!(
        nodes[1].labels.get(TOPOLOGY_KEY).map(String::as_str),
        Some("sched-b")
    );
    let ns = create_namespace(&client, "sched").await;
    let sc_name = format!("{ns}-wffc");

    let classes: Api<StorageClass> = Api::all(client.clone());
    let sc = json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": sc_name},
        "provisioner": DRIVER,
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Retain",
    });
    classes
        .create(&PostParams::default(), &from_json(sc))
        .await
        .expect("storage class");

    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let pvc = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": sc_name,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    });
    let pvc: PersistentVolumeClaim = pvcs
        .create(&PostParams::default(), &from_json(pvc))
        .await
        .expect("pvc");

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "consumer"},
        "spec": {
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        },
    });
    pods.create(&PostParams::default(), &from_json(pod))
        .await
        .expect("pod");

    // No CSIStorageCapacity yet: the scheduler must refuse every node for lack of storage.
    wait_for(
        &pods,
        "consumer",
        "be unschedulable for lack of storage",
        pod_unschedulable_for_storage,
    )
    .await;
    let pvc_now = pvcs.get("data").await.expect("pvc");
    assert!(
        pvc_now
            .metadata
            .annotations
            .as_ref()
            .is_none_or(|a| !a.contains_key(SELECTED_NODE))
    );

    let capacities: Api<CSIStorageCapacity> = Api::namespaced(client.clone(), &ns);
    let capacity = json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
        "metadata": {"name": "sched-b"},
        "storageClassName": sc_name,
        "nodeTopology": {"matchLabels": {TOPOLOGY_KEY: "sched-b"}},
        "capacity": "10Gi",
    });
    capacities
        .create(&PostParams::default(), &from_json(capacity))
        .await
        .expect("capacity");

    let selected = |c: &PersistentVolumeClaim| {
        c.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SELECTED_NODE))
            .is_some()
    };
    let pvc_now = wait_for(&pvcs, "data", "get a selected node", selected).await;
    let node = &pvc_now.metadata.annotations.as_ref().expect("annotations")[SELECTED_NODE];
    assert_eq!(node, "sched-b", "the only node with capacity");

    // Play the provisioner: a PV pre-bound to the claim on sched-b. The controller manager's
    // binder binds it, and the scheduler then binds the pod to the selected node.
    let pv_api: Api<PersistentVolume> = Api::all(client.clone());
    let pv = json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": format!("{ns}-pv")},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": sc_name,
            "csi": {"driver": DRIVER, "volumeHandle": format!("{ns}-vol")},
            "claimRef": {"namespace": ns, "name": "data", "uid": pvc.metadata.uid},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": TOPOLOGY_KEY, "operator": "In", "values": ["sched-b"]}]}]}},
        },
    });
    pv_api
        .create(&PostParams::default(), &from_json(pv))
        .await
        .expect("pv");
    let bound = |c: &PersistentVolumeClaim| {
        c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
    };
    wait_for(&pvcs, "data", "be bound", bound).await;
    let on_b = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some("sched-b");
    wait_for(&pods, "consumer", "be bound to sched-b", on_b).await;

    // Clean up so the test can rerun against a long-lived `cluster up` cluster. No kubelet
    // confirms pod deletion, so force it; the protection controllers release the rest.
    let dp = DeleteParams::default();
    let _ = pods.delete("consumer", &dp.clone().grace_period(0)).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(&ns, &dp).await;
    let _ = pv_api.delete(&format!("{ns}-pv"), &dp).await;
    let _ = classes.delete(&sc_name, &dp).await;
}

const CHILD_ENV: &str = "TESTENV_SHARED_TEARDOWN_CHILD";

/// Runs twice: as the test, it runs itself as a helper process that starts the shared
/// control plane, prints the pids and exits normally; the components must then die.
#[test]
#[ignore = "needs the control plane: cargo xtask test"]
fn shared_control_plane_dies_with_the_test_process() {
    if std::env::var_os(CHILD_ENV).is_some() {
        for (name, pid) in ControlPlane::shared().pids() {
            println!("COMPONENT {name} {pid}");
        }
        return;
    }
    let name = "shared_control_plane_dies_with_the_test_process";
    let mut helper = Command::new(std::env::current_exe().expect("exe"))
        .args(["--exact", name, "--include-ignored", "--nocapture"])
        .env(CHILD_ENV, "1")
        // The helper must start its own control plane, not attach to a `cluster up` one.
        .env_remove(testenv::CLUSTER_ENV)
        .stdout(Stdio::piped())
        .spawn()
        .expect("helper");
    let stdout = helper.stdout.take().expect("stdout");
    let pids: Vec<(String, u32)> = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| {
            let rest = l.strip_prefix("COMPONENT ")?.to_string();
            let (name, pid) = rest.split_once(' ')?;
            Some((name.to_string(), pid.parse().ok()?))
        })
        .collect();
    let status = helper.wait().expect("helper exit");
    assert!(status.success(), "helper failed: {status}");
    let names: Vec<&str> = pids.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, testenv::COMPONENTS, "helper output");
    let deadline = Instant::now() + Duration::from_secs(20);
    for (name, pid) in &pids {
        while !is_dead(*pid) {
            assert!(
                Instant::now() < deadline,
                "{name} ({pid}) outlived its test process"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Gone, or a zombie waiting for init to reap it.
fn is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

/// Creating what exists updates it: CSIDriver's storageCapacity flips, a node gets the labels
/// of a second topology key, and a bare node has no CSINode entry.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn nodes_and_drivers_are_created_or_updated() {
    use k8s_openapi::api::storage::v1::{CSIDriver, CSINode};
    let client = ControlPlane::shared().client().await;
    let driver = "idem.testenv.test";
    create_csi_driver(&client, driver, false).await;
    let flipped = create_csi_driver(&client, driver, true).await;
    assert_eq!(flipped.spec.storage_capacity, Some(true));
    let stored: CSIDriver = Api::all(client.clone()).get(driver).await.unwrap();
    assert_eq!(stored.spec.storage_capacity, Some(true));

    create_fake_nodes(&client, driver, "topology.idem/a", &["idem-1"]).await;
    let again = testenv::try_create_bare_nodes(&client, "topology.idem/b", &["idem-1", "idem-2"])
        .await
        .unwrap();
    assert_eq!(
        again[0].labels.get("topology.idem/a").map(String::as_str),
        Some("idem-1")
    );
    assert_eq!(
        again[0].labels.get("topology.idem/b").map(String::as_str),
        Some("idem-1")
    );
    let csi_nodes: Api<CSINode> = Api::all(client.clone());
    assert!(csi_nodes.get_opt("idem-1").await.unwrap().is_some());
    assert!(csi_nodes.get_opt("idem-2").await.unwrap().is_none());
}

/// `restart` takes a component down and brings it back with its data: an object written
/// before the API server and then etcd were killed is still there, and writes work again.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn components_restart_with_their_data() {
    let cp = ControlPlane::start(testenv::ControlPlaneOptions::default())
        .await
        .expect("a control plane of its own");
    let client = cp.client().await;
    let before = create_namespace(&client, "before-restart").await;
    for component in ["kube-apiserver", "etcd"] {
        cp.restart(component, Duration::from_secs(1))
            .await
            .unwrap_or_else(|e| panic!("restarting {component}: {e}"));
        // A new client, as a restarted caller would have.
        let client = cp.client().await;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        wait_for(
            &namespaces,
            &before,
            "the namespace after a restart",
            |_| true,
        )
        .await;
        create_namespace(&client, &format!("after-{component}")).await;
    }
    let log = std::fs::read_to_string(cp.log_dir().join("etcd.log")).unwrap();
    assert_eq!(
        log.matches("--- testenv: starting").count(),
        2,
        "etcd started twice"
    );
    assert!(cp.restart("kubelet", Duration::ZERO).await.is_err());
}
