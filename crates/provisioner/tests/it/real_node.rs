//! A volume we provisioned, mounted by a real kubelet: the machine's one real node
//! (containerd + kubelet, `testenv::RealNode`), csi-driver-host-path's plugin as its node
//! plugin, registered through our `node-registrar`, and our provisioner in central mode. The
//! plugin's state and call log, the pod's phase and the kernel's mount table are the ground
//! truth.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use testenv::node::{BUSYBOX_IMAGE, NODE_NAME};
use testenv::{ControlPlane, ControlPlaneOptions, HostpathPlugin, Provisioner, RealNode};

use crate::support::{Scenario, eventually, wait_gone};

/// Pod start on a cold node (sandbox, image unpack, mount) takes seconds; give it room on a
/// machine busy with the rest of the suite.
const POD_TIMEOUT: Duration = Duration::from_secs(180);

/// Calls of `method` the plugin answered without an error.
fn answered(plugin: &HostpathPlugin, method: &str) -> usize {
    plugin
        .calls_of(method)
        .iter()
        .filter(|c| c["Error"] == "")
        .count()
}

/// A process that exists and is not a zombie waiting for its parent to reap it.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let after_name = stat.rsplit_once(") ")?.1.to_string();
            after_name.chars().next()
        })
        .is_some_and(|state| state != 'Z')
}

/// Mounts in this machine's table whose path names `volume`.
fn mounts_of(volume: &str) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(volume))
        .map(str::to_string)
        .collect()
}

/// One real node per machine: the tests that start one take turns.
static ONE_NODE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_pod_on_a_real_node_writes_into_the_volume_we_made() {
    let _turn = ONE_NODE.lock().await;
    // A control plane of its own: a real node in the shared one would start other tests'
    // pods for real.
    let cp = ControlPlane::start(ControlPlaneOptions::default())
        .await
        .unwrap();
    let node = RealNode::start(&cp, false).await.unwrap();
    let before = testenv::node::leftovers(node.layout());
    assert!(
        before.processes.len() >= 2,
        "containerd and kubelet are found by the teardown's scan: {before:?}"
    );

    let mut s = Scenario::new_on(&cp, "real-node").await;
    s.driver = format!("{}.hostpath.csi", s.ns);
    testenv::create_csi_driver(&s.client, &s.driver, false).await;
    let plugin = HostpathPlugin::start(&s.dir.join("hp"), &s.driver, NODE_NAME, &[]);
    let _registrar = node.start_registrar(&plugin.socket, &s.dir).unwrap();
    testenv::node::wait_driver_registered(&s.client, &s.driver, Duration::from_secs(120))
        .await
        .unwrap_or_else(|e| panic!("kubelet did not register {}: {e}", s.driver));
    let _prov = Provisioner::start(
        &s.dir,
        "csi-provisioner",
        cp.kubeconfig(),
        &plugin.socket,
        &["-v=5"],
        &[("POD_NAMESPACE", s.ns.as_str())],
    );

    let class = s.class("wffc", "WaitForFirstConsumer", json!({})).await;
    s.claim("data", &class, "1Mi", json!({})).await;
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "writer", "namespace": s.ns},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "c", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                "command": ["sh", "-c", "echo written-by-the-pod > /data/proof && grep -q written-by-the-pod /data/proof"],
                "volumeMounts": [{"name": "v", "mountPath": "/data"}],
            }],
            "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}],
        },
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.ns);
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let phase = eventually("the pod to finish", POD_TIMEOUT, || {
        let pods = pods.clone();
        async move {
            let p = pods.get("writer").await.ok()?;
            let phase = p.status?.phase?;
            matches!(phase.as_str(), "Succeeded" | "Failed").then_some(phase)
        }
    })
    .await;
    assert_eq!(phase, "Succeeded", "kubelet log: {:?}", node.kubelet_log());

    // The pod's write is in the volume the plugin made for our PV, on the host.
    let pv = s.bound_pv("data").await;
    let volumes = plugin.volumes();
    assert_eq!(volumes.len(), 1, "{volumes:?}");
    assert_eq!(volumes[0].vol_name, pv);
    let proof = std::fs::read_to_string(format!("{}/proof", volumes[0].vol_path)).unwrap();
    assert_eq!(proof, "written-by-the-pod\n");
    assert_eq!(answered(&plugin, "CreateVolume"), 1);
    assert_eq!(answered(&plugin, "NodePublishVolume"), 1);

    // The pod goes: kubelet unpublishes, and no mount of the volume is left.
    pods.delete("writer", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&pods, "writer").await;
    eventually("kubelet to unpublish the volume", POD_TIMEOUT, || async {
        (answered(&plugin, "NodeUnpublishVolume") >= 1 && mounts_of(&pv).is_empty()).then_some(())
    })
    .await;
    assert_eq!(answered(&plugin, "NodeUnpublishVolume"), 1);

    // The claim goes: the volume is deleted once, and nothing of it is left.
    s.delete_claim("data").await;
    wait_gone(&s.volumes(), &pv).await;
    eventually(
        "the plugin to forget the volume",
        Duration::from_secs(30),
        || async { plugin.volumes().is_empty().then_some(()) },
    )
    .await;
    assert_eq!(answered(&plugin, "DeleteVolume"), 1);
    assert_eq!(answered(&plugin, "CreateVolume"), 1, "no second volume");

    // The node goes, and takes everything it made with it.
    let layout = node.layout().clone();
    let removed = node.stop().unwrap();
    // kubelet and containerd were stopped by their guards; the scan found the rest. The
    // pod made the bridge and the pod cgroups, which must have been there to remove.
    assert_eq!(removed.links, 1, "{removed:?}");
    assert!(removed.cgroups > 0, "{removed:?}");
    let after = testenv::node::leftovers(&layout);
    assert!(after.is_empty(), "left behind: {after:?}");
}

/// A node killed with its pods running leaves shims, containers, mounts and cgroups behind;
/// the next node start removes them all and comes up Ready, and its own teardown leaves
/// nothing.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn the_next_node_cleans_up_after_a_killed_one() {
    let _turn = ONE_NODE.lock().await;
    let cp = ControlPlane::start(ControlPlaneOptions::default())
        .await
        .unwrap();
    let node = RealNode::start(&cp, false).await.unwrap();
    let s = Scenario::new_on(&cp, "node-crash").await;
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "sleeper", "namespace": s.ns},
        "spec": {"containers": [{
            "name": "c", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
            "command": ["sleep", "3600"]}]},
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.ns);
    pods.create(&PostParams::default(), &pod).await.unwrap();
    eventually("the pod to run", POD_TIMEOUT, || {
        let pods = pods.clone();
        async move {
            let phase = pods.get("sleeper").await.ok()?.status?.phase?;
            (phase == "Running").then_some(())
        }
    })
    .await;
    let layout = node.layout().clone();
    node.crash();
    let orphans = testenv::node::leftovers(&layout);
    // The shim, the pause process and the container survive their containerd and kubelet.
    assert!(orphans.processes.len() >= 3, "{orphans:?}");
    assert!(!orphans.netns.is_empty(), "{orphans:?}");
    assert!(orphans.bridge, "{orphans:?}");
    assert!(!orphans.cgroups.is_empty(), "{orphans:?}");

    let node = RealNode::start(&cp, false).await.unwrap();
    let orphan_pids: Vec<u32> = orphans.processes.clone();
    let still: Vec<u32> = orphan_pids.into_iter().filter(|p| alive(*p)).collect();
    assert!(
        still.is_empty(),
        "the killed node's processes live on: {still:?}"
    );
    let cleaned = node.cleaned_at_start().clone();
    assert!(cleaned.processes >= 3, "{cleaned:?}");
    assert!(cleaned.netns >= 1, "{cleaned:?}");
    assert_eq!(cleaned.links, 1, "{cleaned:?}");
    assert!(cleaned.cgroups > 0, "{cleaned:?}");
    node.stop().unwrap();
    let after = testenv::node::leftovers(&layout);
    assert!(after.is_empty(), "left behind: {after:?}");
}
