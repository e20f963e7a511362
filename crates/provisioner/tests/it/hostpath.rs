//! Interop with a driver nobody here wrote: csi-driver-host-path v1.18.0's `hostpathplugin`
//! (built by `cargo xtask testenv build` from `../shared/third_party/`) behind our
//! `csi-provisioner` on the real control plane. The plugin's state file and its own log of
//! gRPC calls are the ground truth.
//!
//! Central mode talks to one controller socket, so those tests run ONE plugin serving one fake
//! node. The plugin's GetCapacity ignores topology, so per-node pools of different sizes need
//! one plugin and one `--node-deployment` provisioner per node: the plugin's own distributed
//! deployment, tested at the end.

use crate::support;
use crate::support::WAIT;
use std::time::Duration;

use crate::support::{Scenario, eventually, wait_gone};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;
use testenv::{ControlPlane, HOSTPATH_TOPOLOGY_KEY, HostpathPlugin, Provisioner};

const GI: i64 = 1 << 30;

/// A scenario with one hostpathplugin on node `<ns>-n1` and our provisioner in front of it.
struct World {
    s: Scenario,
    node: String,
    plugin: HostpathPlugin,
    prov: Provisioner,
}

impl World {
    async fn start(prefix: &str, plugin_args: &[&str], prov_args: &[&str]) -> World {
        World::start_on(ControlPlane::shared(), prefix, plugin_args, prov_args).await
    }

    /// [`World::start`] on control plane `cp`.
    async fn start_on(
        cp: &ControlPlane,
        prefix: &str,
        plugin_args: &[&str],
        prov_args: &[&str],
    ) -> World {
        let mut s = Scenario::new_on(cp, prefix).await;
        s.driver = format!("{}.hostpath.csi", s.ns);
        let node = format!("{}-n1", s.ns);
        testenv::create_csi_driver(&s.client, &s.driver, true).await;
        testenv::create_fake_nodes(&s.client, &s.driver, HOSTPATH_TOPOLOGY_KEY, &[&node]).await;
        let plugin = HostpathPlugin::start(&s.dir.join("hp"), &s.driver, &node, plugin_args);
        let mut args = vec!["-v=5"];
        args.extend(prov_args);
        let prov = Provisioner::start(
            &s.dir,
            "csi-provisioner",
            cp.kubeconfig(),
            &plugin.socket,
            &args,
            &[
                ("NAMESPACE", s.ns.as_str()),
                ("POD_NAMESPACE", s.ns.as_str()),
            ],
        );
        World {
            s,
            node,
            plugin,
            prov,
        }
    }

    /// CreateVolume calls the plugin answered without an error.
    fn created(&self) -> usize {
        let calls = self.plugin.calls_of("CreateVolume");
        calls.iter().filter(|c| c["Error"] == "").count()
    }

    /// What the plugin's own GetCapacity says for storage kind `kind` on our node.
    async fn get_capacity(&self, kind: &str) -> i64 {
        let client = csi::Client::connect(&self.plugin.endpoint(), Default::default())
            .await
            .unwrap();
        let req = csi::v1::GetCapacityRequest {
            parameters: [("kind".to_string(), kind.to_string())].into(),
            accessible_topology: Some(csi::v1::Topology {
                segments: [(HOSTPATH_TOPOLOGY_KEY.to_string(), self.node.clone())].into(),
            }),
            ..Default::default()
        };
        client.get_capacity(req).await.unwrap().available_capacity
    }

    /// Our CSIStorageCapacity objects for `class`, as (node label, bytes).
    async fn capacities(&self, class: &str) -> Vec<(String, i64)> {
        capacities_of(&self.s, class).await
    }
}

/// The scenario's CSIStorageCapacity objects for `class`, as (node label, bytes), by node.
async fn capacities_of(s: &Scenario, class: &str) -> Vec<(String, i64)> {
    let api: Api<CSIStorageCapacity> = Api::namespaced(s.client.clone(), &s.ns);
    let list = api.list(&ListParams::default()).await.unwrap().items;
    let mut out: Vec<(String, i64)> = list
        .into_iter()
        .filter(|c| c.storage_class_name == class)
        .map(|c| {
            let node = c
                .node_topology
                .and_then(|t| t.match_labels)
                .and_then(|l| l.get(HOSTPATH_TOPOLOGY_KEY).cloned())
                .unwrap_or_default();
            let bytes = c
                .capacity
                .and_then(|q| provisioning::quantity::parse_quantity(&q.0).ok())
                .unwrap_or(-1);
            (node, bytes)
        })
        .collect();
    out.sort();
    out
}

fn pv_topology(pv: &PersistentVolume) -> Vec<(String, Vec<String>)> {
    let spec = pv.spec.clone().unwrap_or_default();
    let terms = spec.node_affinity.and_then(|a| a.required);
    terms
        .map(|r| r.node_selector_terms)
        .unwrap_or_default()
        .into_iter()
        .flat_map(|t| t.match_expressions.unwrap_or_default())
        .map(|e| (e.key, e.values.unwrap_or_default()))
        .collect()
}

async fn bound_pv(w: &World, claim: &str) -> PersistentVolume {
    let pvc = w.s.wait_bound(claim).await;
    let name = pvc.spec.and_then(|s| s.volume_name).unwrap();
    w.s.volumes().get(&name).await.unwrap()
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn immediate_claim_creates_and_deletes_a_hostpath_volume() {
    let w = World::start("hp-imm", &[], &[]).await;
    let class = w.s.class("imm", "Immediate", json!({})).await;
    w.s.claim("data", &class, "1Gi", json!({})).await;
    let pv = bound_pv(&w, "data").await;
    let pv_name = pv.metadata.name.clone().unwrap();

    let vols = w.plugin.volumes();
    assert_eq!(vols.len(), 1, "{vols:?}");
    assert_eq!(w.created(), 1);
    let csi = pv.spec.as_ref().and_then(|s| s.csi.clone()).unwrap();
    assert_eq!(csi.driver, w.s.driver);
    assert_eq!(csi.volume_handle, vols[0].vol_id);
    assert_eq!(vols[0].vol_name, pv_name);
    assert_eq!(vols[0].vol_size, GI);
    assert_eq!(
        pv_topology(&pv),
        vec![(HOSTPATH_TOPOLOGY_KEY.to_string(), vec![w.node.clone()])]
    );

    w.s.delete_claim("data").await;
    wait_gone(&w.s.volumes(), &pv_name).await;
    assert!(w.plugin.volumes().is_empty(), "{:?}", w.plugin.volumes());
    let deletes = w.plugin.calls_of("DeleteVolume");
    let ok: Vec<_> = deletes.iter().filter(|c| c["Error"] == "").collect();
    assert_eq!(ok.len(), 1, "{deletes:?}");
    assert_eq!(ok[0]["Request"]["volume_id"], csi.volume_handle.as_str());
}

/// hostpathplugin can snapshot, so the snapshot orphan sweep would run; this control plane has
/// no VolumeSnapshot API (404, like a cluster without the CRDs or, with 403, RBAC that cannot
/// list them): one line says the sweep is off, and nothing else changes.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn without_the_snapshot_api_the_orphan_sweep_is_off_and_provisioning_goes_on() {
    // A control plane of its own: the shared one may have the CRDs already (provisioning's
    // restores install them, as does data_sources.rs on a TESTENV_CLUSTER).
    let cp = ControlPlane::start(Default::default())
        .await
        .unwrap_or_else(|e| panic!("a control plane without the snapshot CRDs: {e}"));
    let w = World::start_on(
        &cp,
        "hp-nosnap",
        &[],
        &["--snapshot-orphan-sweep-interval=1s"],
    )
    .await;
    let snapshots: Api<kube::api::DynamicObject> =
        Api::all_with(w.s.client.clone(), &testenv::volume_snapshot_resource());
    match snapshots
        .list_metadata(&ListParams::default().limit(1))
        .await
    {
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        other => {
            panic!("this test needs a control plane without the VolumeSnapshot CRDs: {other:?}")
        }
    }
    let class = w.s.class("imm", "Immediate", json!({})).await;
    w.s.claim("data", &class, "1Gi", json!({})).await;
    bound_pv(&w, "data").await;
    assert_eq!(w.created(), 1);
    let disabled = "Snapshot orphan sweep disabled: cannot list VolumeSnapshots";
    w.prov.wait_for_log(disabled, Duration::from_secs(30));
    // Several intervals: a sweep that ran anyway would warn every second.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let log = w.prov.log();
    assert_eq!(log.matches(disabled).count(), 1, "one line");
    assert!(!log.contains("Snapshot orphan sweep failed"), "{log}");
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn capacity_objects_follow_the_plugins_get_capacity() {
    let prov = [
        "--enable-capacity",
        "--capacity-ownerref-level=-1",
        "--capacity-poll-interval=1m",
    ];
    let w = World::start("hp-cap", &["--capacity=fast=10Gi"], &prov).await;
    // A node without the plugin: no CSIStorageCapacity, so the scheduler must avoid it.
    let bare = format!("{}-n2", w.s.ns);
    testenv::try_create_bare_nodes(&w.s.client, HOSTPATH_TOPOLOGY_KEY, &[&bare])
        .await
        .unwrap();
    let params = json!({"parameters": {"kind": "fast"}});
    let class = w.s.class("fast", "WaitForFirstConsumer", params).await;

    let first = eventually("one capacity object of 10Gi", WAIT, || async {
        let caps = w.capacities(&class).await;
        (caps == [(w.node.clone(), 10 * GI)]).then_some(caps)
    })
    .await;
    assert_eq!(first[0].1, w.get_capacity("fast").await);

    let nodes = [w.node.clone(), bare.clone()];
    w.s.claim("c1", &class, "4Gi", json!({})).await;
    create_pod(&w, "p1", "c1", &nodes).await;
    assert_eq!(support::pod_node(&w.s, "p1").await, w.node);
    let pv = bound_pv(&w, "c1").await;
    let vols = w.plugin.volumes();
    assert_eq!(vols.len(), 1, "{vols:?}");
    assert_eq!((vols[0].kind.as_str(), vols[0].vol_size), ("fast", 4 * GI));
    assert_eq!(
        pv_topology(&pv),
        vec![(HOSTPATH_TOPOLOGY_KEY.to_string(), vec![w.node.clone()])]
    );

    eventually("the capacity object to drop to 6Gi", WAIT, || async {
        (w.capacities(&class).await == [(w.node.clone(), 6 * GI)]).then_some(())
    })
    .await;
    assert_eq!(w.get_capacity("fast").await, 6 * GI);

    // Too big for what is left: the pod waits, our explanation lands on its claim.
    w.s.claim("c2", &class, "8Gi", json!({})).await;
    create_pod(&w, "p2", "c2", &nodes).await;
    let event =
        w.s.wait_event("c2", "NotEnoughCapacity", &class)
            .await
            .message
            .unwrap_or_default();
    assert!(event.contains("8Gi"), "{event}");
    let pods: Api<Pod> = Api::namespaced(w.s.client.clone(), &w.s.ns);
    let p2 = pods.get("p2").await.unwrap();
    assert_eq!(p2.spec.and_then(|s| s.node_name), None);
    assert_eq!(w.created(), 1);
    assert_eq!(w.plugin.volumes().len(), 1);
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn block_mode_and_mount_options_reach_the_plugin() {
    let w = World::start("hp-modes", &[], &[]).await;
    let plain = w.s.class("plain", "Immediate", json!({})).await;
    let opts = json!({"mountOptions": ["noatime", "nodev"]});
    let mounted = w.s.class("mnt", "Immediate", opts).await;
    w.s.claim(
        "blk",
        &plain,
        "1Gi",
        json!({"spec": {"volumeMode": "Block"}}),
    )
    .await;
    w.s.claim("fs", &mounted, "1Gi", json!({})).await;
    let blk = bound_pv(&w, "blk").await;
    let fs = bound_pv(&w, "fs").await;

    let handle = |pv: &PersistentVolume| pv.spec.clone().unwrap().csi.unwrap().volume_handle;
    let vols = w.plugin.volumes();
    let access = |id: String| {
        vols.iter()
            .find(|v| v.vol_id == id)
            .map(|v| v.vol_access_type)
    };
    assert_eq!(access(handle(&blk)), Some(1), "block in {vols:?}");
    assert_eq!(access(handle(&fs)), Some(0), "mount in {vols:?}");

    let creates = w.plugin.calls_of("CreateVolume");
    let request_of = |pv: &PersistentVolume| {
        let name = pv.metadata.name.clone().unwrap();
        let call = creates
            .iter()
            .find(|c| c["Request"]["name"] == name.as_str());
        call.map(|c| c["Request"].to_string()).unwrap_or_default()
    };
    let fs_request = request_of(&fs);
    assert!(
        fs_request.contains(r#"["noatime","nodev"]"#),
        "{fs_request}"
    );
    let blk_request = request_of(&blk);
    assert!(blk_request.contains("Block"), "{blk_request}");
    assert!(!blk_request.contains("noatime"), "{blk_request}");

    // The plugin backs a block volume with a loop device: only DeleteVolume detaches it.
    for claim in ["blk", "fs"] {
        w.s.delete_claim(claim).await;
    }
    for pv in [&blk, &fs] {
        wait_gone(&w.s.volumes(), pv.metadata.name.as_deref().unwrap()).await;
    }
    assert!(w.plugin.volumes().is_empty(), "{:?}", w.plugin.volumes());
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn parameters_the_plugin_rejects_fail_without_leaks() {
    // Without --capacity the plugin refuses the `kind` parameter (InvalidArgument).
    let w = World::start("hp-bad", &[], &[]).await;
    let params = json!({"parameters": {"kind": "fast"}});
    let class = w.s.class("bad", "Immediate", params).await;
    w.s.claim("bad", &class, "1Gi", json!({})).await;
    let event = w.s.wait_event("bad", "ProvisioningFailed", "kind").await;
    let message = event.message.unwrap_or_default();
    assert!(message.contains("\"fast\""), "{message}");

    let creates = w.plugin.calls_of("CreateVolume");
    assert!(!creates.is_empty());
    assert!(creates.iter().all(|c| c["Error"] != ""), "{creates:?}");
    let pvc: PersistentVolumeClaim = w.s.claims().get("bad").await.unwrap();
    assert_eq!(pvc.spec.and_then(|s| s.volume_name), None);
    let pvs = w.s.volumes().list(&ListParams::default()).await.unwrap();
    let ours = pvs.items.iter().filter(|pv| {
        pv.spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_deref())
            == Some(class.as_str())
    });
    assert_eq!(ours.count(), 0);
    assert!(w.plugin.volumes().is_empty(), "{:?}", w.plugin.volumes());
}

/// A pod of `claim` that may only go to `nodes` (nodes are shared by parallel tests).
async fn create_pod(w: &World, name: &str, claim: &str, nodes: &[String]) {
    let affinity = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}]}}}});
    let pod = support::pod(name, claim, affinity);
    let pods: Api<Pod> = Api::namespaced(w.s.client.clone(), &w.s.ns);
    pods.create(&PostParams::default(), &pod).await.unwrap();
}

/// Proves the csi-sanity harness (not our provisioner): the controller suite that runs against
/// our mock driver also passes against a driver written elsewhere.
#[test]
#[ignore = "needs the control plane: cargo xtask test"]
fn csi_sanity_controller_suite_passes_against_hostpathplugin() {
    // Short: unix socket paths are limited to 108 bytes.
    let dir = std::path::PathBuf::from(format!("/tmp/hp-sanity-{}", std::process::id()));
    let plugin = HostpathPlugin::start(&dir.join("hp"), "hostpath.csi.k8s.io", "n1", &[]);
    let run = testenv::run_csi_sanity(&plugin.socket, &dir, Some("Node Service")).unwrap();
    assert!(
        run.passed_something(),
        "csi-sanity: {}\n{}\nplugin log: {}",
        run.summary,
        run.output,
        plugin.log_path().display()
    );
    let creates = plugin.calls_of("CreateVolume");
    assert!(
        creates.len() > 5,
        "only {} CreateVolume calls",
        creates.len()
    );
    eprintln!("csi-sanity against hostpathplugin: {}", run.summary);
    drop(plugin);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The plugin's distributed form: one plugin and one `--node-deployment` provisioner per fake
/// node (upstream's `deploy/kubernetes-distributed` arguments), pools of 10, 10 and 100 Gi.
/// A late-binding 50 Gi volume lands on the big node; each node's capacity object is what its
/// plugin's GetCapacity says; Immediate claims are taken once each; every volume is deleted by
/// its own plugin.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn distributed_plugins_one_per_node() {
    let mut s = Scenario::new("hp-dist").await;
    s.driver = format!("{}.hostpath.csi", s.ns);
    testenv::create_csi_driver(&s.client, &s.driver, true).await;
    let nodes = s.node_names(&["a", "b", "c"]);
    let names: Vec<&str> = nodes.iter().map(String::as_str).collect();
    testenv::create_fake_nodes(&s.client, &s.driver, HOSTPATH_TOPOLOGY_KEY, &names).await;
    let mut plugins = Vec::new();
    let mut provs = Vec::new();
    for (node, size) in nodes.iter().zip(["10Gi", "10Gi", "100Gi"]) {
        let dir = s.dir.join(node.rsplit('-').next().unwrap());
        let pool = format!("--capacity=fast={size}");
        let plugin = HostpathPlugin::start(&dir, &s.driver, node, &[pool.as_str()]);
        provs.push(Provisioner::start(
            &dir,
            "csi-provisioner",
            ControlPlane::shared().kubeconfig(),
            &plugin.socket,
            &[
                "--node-deployment",
                "--enable-capacity",
                "--capacity-for-immediate-binding",
                "--capacity-ownerref-level=-1",
                "--capacity-poll-interval=2s",
                "--strict-topology",
                "--immediate-topology=false",
                "-v=5",
            ],
            &[
                ("NAMESPACE", s.ns.as_str()),
                ("POD_NAMESPACE", s.ns.as_str()),
                ("NODE_NAME", node.as_str()),
            ],
        ));
        plugins.push(plugin);
    }
    let params = json!({"parameters": {"kind": "fast"}});
    let late = s
        .class("late", "WaitForFirstConsumer", params.clone())
        .await;
    let now = s.class("now", "Immediate", params).await;
    let want = |sizes: [i64; 3]| -> Vec<(String, i64)> {
        nodes.iter().cloned().zip(sizes.map(|g| g * GI)).collect()
    };
    eventually(
        "one object per node with its plugin's capacity",
        WAIT,
        || async { (capacities_of(&s, &late).await == want([10, 10, 100])).then_some(()) },
    )
    .await;

    s.claim("big", &late, "50Gi", json!({})).await;
    create_pod_on(&s, "app", "big", &nodes).await;
    assert_eq!(support::pod_node(&s, "app").await, nodes[2]);
    let pvc = s.wait_bound("big").await;
    let pv = s
        .volumes()
        .get(&pvc.spec.unwrap().volume_name.unwrap())
        .await
        .unwrap();
    assert_eq!(
        pv_topology(&pv),
        vec![(HOSTPATH_TOPOLOGY_KEY.to_string(), vec![nodes[2].clone()])]
    );
    let held: Vec<usize> = plugins.iter().map(|p| p.volumes().len()).collect();
    assert_eq!(held, [0, 0, 1]);
    eventually("the big node's object to drop to 50Gi", WAIT, || async {
        (capacities_of(&s, &late).await == want([10, 10, 50])).then_some(())
    })
    .await;
    // What each node's object says is what its own plugin's GetCapacity answers.
    for (plugin, want) in plugins.iter().zip([10 * GI, 10 * GI, 50 * GI]) {
        let client = csi::Client::connect(&plugin.endpoint(), Default::default())
            .await
            .unwrap();
        let req = csi::v1::GetCapacityRequest {
            parameters: [("kind".to_string(), "fast".to_string())].into(),
            ..Default::default()
        };
        let got = client.get_capacity(req).await.unwrap().available_capacity;
        assert_eq!(got, want, "GetCapacity of {}", plugin.node_id);
    }

    // Immediate claims of 8Gi: taken once each, never by a node whose plugin cannot hold them.
    for i in 0..6 {
        s.claim(&format!("now{i}"), &now, "8Gi", json!({})).await;
    }
    for i in 0..6 {
        s.wait_bound(&format!("now{i}")).await;
    }
    let created: Vec<usize> = plugins
        .iter()
        .map(|p| {
            p.calls_of("CreateVolume")
                .iter()
                .filter(|c| c["Error"] == "")
                .count()
        })
        .collect();
    assert_eq!(created.iter().sum::<usize>(), 7, "{created:?}");
    let failed: usize = plugins
        .iter()
        .map(|p| {
            p.calls_of("CreateVolume")
                .iter()
                .filter(|c| c["Error"] != "")
                .count()
        })
        .sum();
    assert_eq!(failed, 0, "no node took a claim it had no room for");
    let held: Vec<usize> = plugins.iter().map(|p| p.volumes().len()).collect();
    assert_eq!(held, created);

    for claim in ["big", "now0", "now1", "now2", "now3", "now4", "now5"] {
        s.delete_claim(claim).await;
    }
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.ns);
    // No kubelet runs it: only a forced deletion lets pvc-protection release the claim.
    let force = kube::api::DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    pods.delete("app", &force).await.unwrap();
    // The plugin logs a call once it has answered, after its state file changed: wait for
    // the log too.
    let deletes = eventually("every plugin to be empty", WAIT, || async {
        let deletes: Vec<usize> = plugins
            .iter()
            .map(|p| p.calls_of("DeleteVolume").len())
            .collect();
        (plugins.iter().all(|p| p.volumes().is_empty())
            && deletes.iter().sum::<usize>() >= created.iter().sum::<usize>())
        .then_some(deletes)
    })
    .await;
    assert_eq!(
        deletes, created,
        "each volume deleted by its own node's instance only"
    );
    drop(provs);
}

/// A pod of `claim` that may only go to `nodes` (nodes are shared by parallel tests).
async fn create_pod_on(s: &Scenario, name: &str, claim: &str, nodes: &[String]) {
    let affinity = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}]}}}});
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.ns);
    pods.create(&PostParams::default(), &support::pod(name, claim, affinity))
        .await
        .unwrap();
}
