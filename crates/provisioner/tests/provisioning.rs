//! Provisioning against the real control plane with the mock driver (issue: provisioning
//! controller). Each test has its own namespace, driver name and classes.

mod support;

use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::json;
use support::Scenario;

const IGNORE: &str = "needs the control plane: cargo xtask test";

/// The walking skeleton and the PV, field by field.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn immediate_claim_binds_to_a_pv_built_like_upstream() {
    let _ = IGNORE;
    let s = Scenario::start("prov-imm", &[], &["-v=5"]).await;
    let class = s
        .class(
            "fast",
            "Immediate",
            json!({"parameters": {"csi.storage.k8s.io/fstype": "ext4", "kind": ""}, "mountOptions": ["noatime"], "reclaimPolicy": "Delete"}),
        )
        .await;
    let created = s.claim("data", &class, "1Gi", json!({})).await;
    let claim = s.wait_bound("data").await;
    let uid = created.metadata.uid.clone().unwrap();
    let pv_name = format!("pvc-{uid}");
    assert_eq!(
        claim.spec.as_ref().unwrap().volume_name.as_deref(),
        Some(pv_name.as_str())
    );

    // The driver was asked exactly once, with the upstream request shape.
    let calls = s.create_calls(&pv_name);
    assert_eq!(calls.len(), 1, "one CreateVolume: {calls:#?}");
    let req = &calls[0]["request"];
    assert_eq!(req["capacity_range"]["required_bytes"], json!(1073741824));
    assert_eq!(
        req["parameters"],
        json!({"kind": ""}),
        "reserved keys stripped"
    );
    assert_eq!(req["volume_capabilities"][0]["mount"]["fs_type"], "ext4");
    assert_eq!(
        req["volume_capabilities"][0]["mount"]["mount_flags"],
        json!(["noatime"])
    );
    assert_eq!(
        req["volume_capabilities"][0]["access_mode"]["mode"],
        "SINGLE_NODE_WRITER"
    );
    let volume = &calls[0]["response"]["volume"];

    let pv: PersistentVolume = s.volumes().get(&pv_name).await.unwrap();
    let ann = pv.metadata.annotations.clone().unwrap();
    assert_eq!(ann["pv.kubernetes.io/provisioned-by"], s.driver);
    assert_eq!(
        ann["volume.kubernetes.io/provisioner-deletion-secret-name"],
        ""
    );
    assert_eq!(
        ann["volume.kubernetes.io/provisioner-deletion-secret-namespace"],
        ""
    );
    assert!(
        pv.metadata
            .finalizers
            .as_ref()
            .unwrap()
            .contains(&"external-provisioner.volume.kubernetes.io/finalizer".to_string())
    );
    let spec = pv.spec.unwrap();
    let csi = spec.csi.unwrap();
    assert_eq!(csi.driver, s.driver);
    assert_eq!(csi.volume_handle, volume["volume_id"].as_str().unwrap());
    assert_ne!(
        csi.volume_handle, pv_name,
        "the handle is the driver's id, not our name"
    );
    assert_eq!(csi.fs_type.as_deref(), Some("ext4"));
    let attrs = csi.volume_attributes.unwrap();
    assert!(
        attrs["storage.kubernetes.io/csiProvisionerIdentity"].ends_with(&format!("-{}", s.driver))
    );
    for (k, v) in volume["volume_context"].as_object().unwrap() {
        assert_eq!(attrs[k], v.as_str().unwrap(), "volume context {k} copied");
    }
    assert_eq!(spec.capacity.unwrap()["storage"], Quantity("1Gi".into()));
    assert_eq!(spec.access_modes.unwrap(), ["ReadWriteOnce"]);
    assert_eq!(spec.mount_options.unwrap(), ["noatime"]);
    assert_eq!(
        spec.persistent_volume_reclaim_policy.as_deref(),
        Some("Delete")
    );
    assert_eq!(spec.volume_mode.as_deref(), Some("Filesystem"));
    assert_eq!(spec.storage_class_name.as_deref(), Some(class.as_str()));
    assert!(
        spec.node_affinity.is_none(),
        "the default pool has no topology"
    );
    let claim_ref = spec.claim_ref.unwrap();
    assert_eq!(claim_ref.name.as_deref(), Some("data"));
    assert_eq!(claim_ref.namespace.as_deref(), Some(s.ns.as_str()));
    assert_eq!(claim_ref.uid.as_deref(), Some(uid.as_str()));

    // Our in-flight finalizer is gone once the PV exists; the events are upstream's.
    let claim = s.claims().get("data").await.unwrap();
    assert!(
        !claim
            .metadata
            .finalizers
            .unwrap_or_default()
            .iter()
            .any(|f| f.ends_with("/creating-volume"))
    );
    s.wait_event(
        "data",
        "Provisioning",
        &format!(
            "External provisioner is provisioning volume for claim \"{}/data\"",
            s.ns
        ),
    )
    .await;
    s.wait_event(
        "data",
        "ProvisioningSucceeded",
        &format!("Successfully provisioned volume {pv_name}"),
    )
    .await;
}

const NODE_KEY: &str = "topology.mock.csi/node";

fn pod(name: &str, claim: &str, extra: serde_json::Value) -> k8s_openapi::api::core::v1::Pod {
    let mut obj = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "c", "image": "registry.invalid/none"}],
            "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}],
        },
    });
    if let (Some(spec), Some(extra)) = (obj["spec"].as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            spec.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(obj).unwrap()
}

/// Nodes are cluster-scoped and tests run in parallel: `nodes` keeps the pod on this
/// scenario's own fake nodes.
fn on_nodes(nodes: &[String]) -> serde_json::Value {
    json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": NODE_KEY, "operator": "In", "values": nodes}]}]}}}})
}

async fn create_pod(s: &Scenario, name: &str, claim: &str, extra: serde_json::Value) {
    use kube::api::PostParams;
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(s.client.clone(), &s.ns);
    pods.create(&PostParams::default(), &pod(name, claim, extra))
        .await
        .unwrap();
}

fn pool_args(nodes: &[String], size: &str) -> Vec<String> {
    nodes
        .iter()
        .map(|n| format!("--pool={NODE_KEY}={n}:{size}"))
        .collect()
}

async fn pod_node(s: &Scenario, name: &str) -> String {
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(s.client.clone(), &s.ns);
    let pod = testenv::wait_for(
        &pods,
        name,
        "be scheduled",
        |p: &k8s_openapi::api::core::v1::Pod| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some()
        },
    )
    .await;
    pod.spec.unwrap().node_name.unwrap()
}

/// WaitForFirstConsumer: the real scheduler picks a node; the volume is created in that node's
/// segment; the PV's node affinity names the node.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn late_binding_volume_lands_in_the_selected_nodes_segment() {
    let mut s = Scenario::new("prov-wffc").await;
    let names = s.node_names(&["a", "b"]);
    s.start_driver(&pool_args(&names, "100Gi"));
    s.start_provisioner::<&str>(&[]);
    testenv::create_fake_nodes(
        &s.client,
        &s.driver,
        NODE_KEY,
        &names.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .await;
    let class = s.class("wffc", "WaitForFirstConsumer", json!({})).await;
    s.claim("data", &class, "1Gi", json!({})).await;
    create_pod(&s, "app", "data", on_nodes(&names)).await;
    let claim = s.wait_bound("data").await;
    let node = pod_node(&s, "app").await;
    let selected =
        claim.metadata.annotations.unwrap()["volume.kubernetes.io/selected-node"].clone();
    assert_eq!(selected, node);

    let pv_name = claim.spec.unwrap().volume_name.unwrap();
    let calls = s.create_calls(&pv_name);
    assert_eq!(calls.len(), 1);
    let req = &calls[0]["request"]["accessibility_requirements"];
    assert_eq!(
        req["preferred"][0]["segments"][NODE_KEY], node,
        "selected node first: {req}"
    );
    let requisite: Vec<&str> = req["requisite"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["segments"][NODE_KEY].as_str().unwrap())
        .collect();
    assert!(requisite.contains(&node.as_str()));
    assert_eq!(
        calls[0]["response"]["volume"]["accessible_topology"][0]["segments"][NODE_KEY],
        node
    );

    let pv = s.volumes().get(&pv_name).await.unwrap();
    let terms = pv
        .spec
        .unwrap()
        .node_affinity
        .unwrap()
        .required
        .unwrap()
        .node_selector_terms;
    let expr = &terms[0].match_expressions.as_ref().unwrap()[0];
    assert_eq!(
        (
            expr.key.as_str(),
            expr.operator.as_str(),
            expr.values.clone().unwrap()
        ),
        (NODE_KEY, "In", vec![node])
    );
}

async fn set_unschedulable(s: &Scenario, node: &str, unschedulable: bool) {
    use kube::api::{Patch, PatchParams};
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(s.client.clone());
    nodes
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": unschedulable}})),
        )
        .await
        .unwrap();
}

/// ResourceExhausted on the selected node → the annotation is removed → the scheduler places
/// the pod again. The big node is cordoned until the first failure has been handled, so the
/// scheduler's first pick is the node without room.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn resource_exhausted_on_the_selected_node_reschedules_elsewhere() {
    let mut s = Scenario::new("prov-resched").await;
    let names = s.node_names(&["small", "big"]);
    let (small, big) = (names[0].clone(), names[1].clone());
    s.start_driver(&[
        format!("--pool={NODE_KEY}={small}:1Gi"),
        format!("--pool={NODE_KEY}={big}:100Gi"),
    ]);
    // Node-local storage: only the selected node may hold the volume.
    s.start_provisioner(&["--strict-topology"]);
    testenv::create_fake_nodes(&s.client, &s.driver, NODE_KEY, &[&small, &big]).await;
    set_unschedulable(&s, &big, true).await;
    let class = s.class("wffc", "WaitForFirstConsumer", json!({})).await;
    s.claim("data", &class, "10Gi", json!({})).await;
    create_pod(&s, "app", "data", on_nodes(&names)).await;

    let failed = s
        .wait_event("data", "ProvisioningFailed", "ResourceExhausted")
        .await;
    assert!(
        failed
            .message
            .unwrap()
            .contains("rpc error: code = ResourceExhausted")
    );
    let exhausted = s.mock().calls_of("CreateVolume");
    assert!(
        exhausted
            .iter()
            .all(|c| c["error"]["code"] == "ResourceExhausted"),
        "{exhausted:#?}"
    );

    set_unschedulable(&s, &big, false).await;
    set_unschedulable(&s, &small, true).await;
    let claim = s.wait_bound("data").await;
    assert_eq!(
        claim.metadata.annotations.unwrap()["volume.kubernetes.io/selected-node"],
        big
    );
    assert_eq!(pod_node(&s, "app").await, big);
    let pv = s
        .volumes()
        .get(&claim.spec.unwrap().volume_name.unwrap())
        .await
        .unwrap();
    let affinity = pv.spec.unwrap().node_affinity.unwrap().required.unwrap();
    assert_eq!(
        affinity.node_selector_terms[0]
            .match_expressions
            .as_ref()
            .unwrap()[0]
            .values
            .as_ref()
            .unwrap(),
        &[big]
    );
}

async fn create_secret(s: &Scenario, name: &str, data: &[(&str, &str)]) {
    use kube::api::PostParams;
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": s.ns},
        "stringData": data.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
    }))
    .unwrap();
    kube::Api::namespaced(s.client.clone(), &s.ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

async fn wait_gone<K>(api: &kube::Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    support::eventually(&format!("{name} to be deleted"), || async {
        api.get_opt(name).await.unwrap().is_none().then_some(())
    })
    .await
}

/// Reclaim policy Delete: DeleteVolume with the deletion secret, then the PV goes. Retain: the
/// volume and PV stay, and the PV does not carry our finalizer.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn deleting_claims_follows_the_reclaim_policy_with_deletion_secrets() {
    let s = Scenario::start("prov-reclaim", &[], &[]).await;
    create_secret(&s, "creds", &[("token", "s3cr3t-value")]).await;
    let secret_params = json!({
        "csi.storage.k8s.io/provisioner-secret-name": "creds",
        "csi.storage.k8s.io/provisioner-secret-namespace": "${pvc.namespace}",
    });
    let delete = s
        .class(
            "delete",
            "Immediate",
            json!({"parameters": secret_params, "reclaimPolicy": "Delete"}),
        )
        .await;
    let retain = s
        .class("retain", "Immediate", json!({"reclaimPolicy": "Retain"}))
        .await;
    s.claim("gone", &delete, "1Gi", json!({})).await;
    s.claim("kept", &retain, "1Gi", json!({})).await;
    let gone_pv = s
        .wait_bound("gone")
        .await
        .spec
        .unwrap()
        .volume_name
        .unwrap();
    let kept_pv = s
        .wait_bound("kept")
        .await
        .spec
        .unwrap()
        .volume_name
        .unwrap();
    let create = &s.create_calls(&gone_pv)[0];
    assert_eq!(
        create["request"]["secrets"]["token"], "s3cr3t-value",
        "CreateVolume got the provisioner secret"
    );
    let pv = s.volumes().get(&gone_pv).await.unwrap();
    assert_eq!(
        pv.metadata.annotations.as_ref().unwrap()["volume.kubernetes.io/provisioner-deletion-secret-name"],
        "creds"
    );
    let handle = pv.spec.unwrap().csi.unwrap().volume_handle;
    let kept_handle = s
        .volumes()
        .get(&kept_pv)
        .await
        .unwrap()
        .spec
        .unwrap()
        .csi
        .unwrap()
        .volume_handle;

    use kube::api::DeleteParams;
    s.claims()
        .delete("gone", &DeleteParams::default())
        .await
        .unwrap();
    s.claims()
        .delete("kept", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&s.volumes(), &gone_pv).await;
    let deletes = s.mock().calls_of("DeleteVolume");
    let delete_call = deletes
        .iter()
        .find(|c| c["request"]["volume_id"] == handle.as_str())
        .expect("DeleteVolume for the Delete PV");
    assert_eq!(
        delete_call["request"]["secrets"]["token"], "s3cr3t-value",
        "DeleteVolume got the deletion secret"
    );
    assert!(!s.driver_volumes().await.contains(&handle));

    let kept = testenv::wait_for(
        &s.volumes(),
        &kept_pv,
        "be Released",
        |pv: &PersistentVolume| {
            pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released")
        },
    )
    .await;
    assert!(
        !kept
            .metadata
            .finalizers
            .unwrap_or_default()
            .iter()
            .any(|f| f == "external-provisioner.volume.kubernetes.io/finalizer")
    );
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert!(
        s.volumes().get_opt(&kept_pv).await.unwrap().is_some(),
        "Retain keeps the PV"
    );
    assert!(
        s.mock()
            .calls_of("DeleteVolume")
            .iter()
            .all(|c| c["request"]["volume_id"] != kept_handle.as_str())
    );
    assert!(s.driver_volumes().await.contains(&kept_handle));
}

/// A VolumeAttachment referencing the PV blocks DeleteVolume (VolumeFailedDelete on the PV)
/// until it is gone.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_volume_attachment_blocks_deletion_until_it_is_gone() {
    use kube::api::{DeleteParams, PostParams};
    let s = Scenario::start("prov-va", &["--publish-unpublish"], &[]).await;
    let class = s.class("imm", "Immediate", json!({})).await;
    s.claim("data", &class, "1Gi", json!({})).await;
    let pv_name = s
        .wait_bound("data")
        .await
        .spec
        .unwrap()
        .volume_name
        .unwrap();
    let va_name = format!("{}-va", s.ns);
    let va: k8s_openapi::api::storage::v1::VolumeAttachment = serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
        "metadata": {"name": va_name},
        "spec": {"attacher": s.driver, "nodeName": "node-x", "source": {"persistentVolumeName": pv_name}},
    }))
    .unwrap();
    let vas: kube::Api<k8s_openapi::api::storage::v1::VolumeAttachment> =
        kube::Api::all(s.client.clone());
    vas.create(&PostParams::default(), &va).await.unwrap();
    // In a cluster the attachment exists long before the claim is deleted; give the
    // provisioner's VolumeAttachment cache a moment to see this one.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    s.claims()
        .delete("data", &DeleteParams::default())
        .await
        .unwrap();

    let events = support::eventually("VolumeFailedDelete on the PV", || async {
        let list =
            kube::Api::<k8s_openapi::api::core::v1::Event>::namespaced(s.client.clone(), "default")
                .list(
                    &kube::api::ListParams::default()
                        .fields(&format!("involvedObject.name={pv_name}")),
                )
                .await
                .unwrap();
        list.items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("VolumeFailedDelete"))
    })
    .await;
    assert_eq!(
        events.message.as_deref(),
        Some(format!("persistentvolume {pv_name} is still attached to node node-x").as_str())
    );
    assert!(
        s.mock().calls_of("DeleteVolume").is_empty(),
        "no DeleteVolume while attached"
    );
    vas.delete(&va_name, &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&s.volumes(), &pv_name).await;
    assert_eq!(s.mock().calls_of("DeleteVolume").len(), 1);
}

/// Bad input: one clear ProvisioningFailed event each, no CreateVolume, no crash.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn bad_input_gets_a_clear_event_and_no_volume() {
    let mut s = Scenario::start(
        "prov-bad",
        &["--reject-access-mode=MULTI_NODE_MULTI_WRITER"],
        &[],
    )
    .await;
    let ok = s.class("ok", "Immediate", json!({})).await;
    let bogus = s
        .class(
            "bogus",
            "Immediate",
            json!({"parameters": {"csi.storage.k8s.io/bogus": "x"}}),
        )
        .await;
    let no_secret = s
        .class(
            "nosecret",
            "Immediate",
            json!({"parameters": {
            "csi.storage.k8s.io/provisioner-secret-name": "missing",
            "csi.storage.k8s.io/provisioner-secret-namespace": "${pvc.namespace}"}}),
        )
        .await;
    let bad_template = s
        .class(
            "badtemplate",
            "Immediate",
            json!({"parameters": {
            "csi.storage.k8s.io/provisioner-secret-name": "${pvc.nonsense}",
            "csi.storage.k8s.io/provisioner-secret-namespace": "default"}}),
        )
        .await;
    let two_fs = s
        .class(
            "twofs",
            "Immediate",
            json!({"parameters": {"fstype": "xfs", "csi.storage.k8s.io/fstype": "ext4"}}),
        )
        .await;
    s.claim("bogus", &bogus, "1Gi", json!({})).await;
    s.claim("nosecret", &no_secret, "1Gi", json!({})).await;
    s.claim("badtemplate", &bad_template, "1Gi", json!({}))
        .await;
    s.claim("twofs", &two_fs, "1Gi", json!({})).await;
    s.claim(
        "selector",
        &ok,
        "1Gi",
        json!({"spec": {"selector": {"matchLabels": {"a": "b"}}}}),
    )
    .await;
    s.claim(
        "rwx",
        &ok,
        "1Gi",
        json!({"spec": {"accessModes": ["ReadWriteMany"]}}),
    )
    .await;
    s.claim(
        "snapshot",
        &ok,
        "1Gi",
        json!({"spec": {"dataSource": {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "snap"}}}),
    )
    .await;
    s.claim(
        "populated",
        &ok,
        "1Gi",
        json!({"spec": {"dataSourceRef": {"apiGroup": "populators.example.com", "kind": "Sample", "name": "x"}}}),
    )
    .await;
    for (claim, needle) in [
        (
            "bogus",
            r#"found unknown parameter key "csi.storage.k8s.io/bogus" with reserved namespace csi.storage.k8s.io/"#,
        ),
        ("nosecret", "missing"),
        ("badtemplate", "invalid tokens"),
        ("twofs", "fstype"),
        ("selector", "claim Selector is not supported"),
        ("rwx", "InvalidArgument"),
        (
            "snapshot",
            "data sources (snapshots and clones) are not supported yet",
        ),
    ] {
        let event = s.wait_event(claim, "ProvisioningFailed", needle).await;
        eprintln!("{claim}: {}", event.message.unwrap_or_default());
    }
    // A populator's claim is left to the populator, as upstream does.
    s.wait_event(
        "populated",
        "Provisioning",
        "Assuming an external populator will provision the volume",
    )
    .await;
    let created: Vec<_> = s
        .mock()
        .calls_of("CreateVolume")
        .into_iter()
        .filter(|c| c.get("response").is_some())
        .collect();
    assert!(created.is_empty(), "no volume may be created: {created:#?}");
    assert!(s.driver_volumes().await.is_empty());
    assert!(
        s.provisioner().is_running(),
        "bad input must not crash the provisioner"
    );
}

const CREATING: &str = "external-provisioner.volume.kubernetes.io/creating-volume";

fn holds_finalizer(c: &k8s_openapi::api::core::v1::PersistentVolumeClaim) -> bool {
    c.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == CREATING)
}

/// kill -9 in the middle of CreateVolume, delete the claim while the provisioner is down,
/// restart it: the claim goes away and the driver holds no volume (upstream leaks here, #486).
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_claim_deleted_while_the_provisioner_is_down_leaves_no_volume() {
    use kube::api::DeleteParams;
    let mut s = Scenario::start("prov-crash", &[], &[]).await;
    s.mock()
        .set_faults(json!({"CreateVolume": {"delay_ms": 4000}}));
    let class = s.class("imm", "Immediate", json!({})).await;
    s.claim("data", &class, "1Gi", json!({})).await;
    // The finalizer goes on before the call is made.
    testenv::wait_for(
        &s.claims(),
        "data",
        "hold the creating-volume finalizer",
        holds_finalizer,
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    s.provisioner().kill9();
    s.claims()
        .delete("data", &DeleteParams::default())
        .await
        .unwrap();
    let held = s.claims().get("data").await.unwrap();
    assert!(
        held.metadata.deletion_timestamp.is_some() && holds_finalizer(&held),
        "the finalizer keeps the deleted claim"
    );
    // Let the interrupted call finish in the driver if it is going to.
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    s.mock().clear_faults();
    s.provisioner().restart();
    wait_gone(&s.claims(), "data").await;
    assert!(
        s.driver_volumes().await.is_empty(),
        "no volume left behind: {:?}",
        s.driver_volumes().await
    );
    let pvs = s.volumes().list(&Default::default()).await.unwrap();
    assert!(pvs.items.iter().all(|pv| {
        pv.spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_deref())
            != Some(class.as_str())
    }));
}

/// A claim deleted while its CreateVolume is in flight (the provisioner stays up).
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_claim_deleted_during_create_volume_leaves_no_volume() {
    use kube::api::DeleteParams;
    let s = Scenario::start("prov-race", &[], &[]).await;
    s.mock()
        .set_faults(json!({"CreateVolume": {"delay_ms": 3000}}));
    let class = s.class("imm", "Immediate", json!({})).await;
    s.claim("data", &class, "1Gi", json!({})).await;
    testenv::wait_for(
        &s.claims(),
        "data",
        "hold the creating-volume finalizer",
        holds_finalizer,
    )
    .await;
    s.claims()
        .delete("data", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&s.claims(), "data").await;
    support::eventually("the driver to be empty", || async {
        s.driver_volumes().await.is_empty().then_some(())
    })
    .await;
    no_pv_of_class(&s, &class).await;
}

async fn no_pv_of_class(s: &Scenario, class: &str) {
    support::eventually_within(
        "every PV of the class to be gone",
        std::time::Duration::from_secs(240),
        || async {
            let pvs = s.volumes().list(&Default::default()).await.unwrap();
            pvs.items
                .iter()
                .all(|pv| {
                    pv.spec
                        .as_ref()
                        .and_then(|s| s.storage_class_name.as_deref())
                        != Some(class)
                })
                .then_some(())
        },
    )
    .await;
}

/// 200 claims created and deleted at once: every claim goes away and no volume is left.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn creating_and_deleting_200_claims_in_a_burst_leaves_nothing_behind() {
    use kube::api::DeleteParams;
    let s = Scenario::start(
        "prov-burst",
        &[],
        &["--kube-api-qps=50", "--kube-api-burst=100"],
    )
    .await;
    s.mock()
        .set_faults(json!({"CreateVolume": {"delay_ms": 50}}));
    let class = s.class("imm", "Immediate", json!({})).await;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..200 {
        let (claims, class) = (s.claims(), class.clone());
        let ns = s.ns.clone();
        tasks.spawn(async move {
            let name = format!("c{i}");
            let pvc: k8s_openapi::api::core::v1::PersistentVolumeClaim = serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": ns},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class, "resources": {"requests": {"storage": "1Mi"}}},
            }))
            .unwrap();
            claims.create(&Default::default(), &pvc).await.unwrap();
            // Spread the deletions over the whole provisioning window.
            tokio::time::sleep(std::time::Duration::from_millis(i * 15)).await;
            claims.delete(&name, &DeleteParams::default()).await.unwrap();
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    support::eventually_within(
        "every claim to be gone",
        std::time::Duration::from_secs(240),
        || async {
            s.claims()
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .is_empty()
                .then_some(())
        },
    )
    .await;
    support::eventually_within(
        "every PV of the class to be gone",
        std::time::Duration::from_secs(240),
        || async {
            let pvs = s.volumes().list(&Default::default()).await.unwrap();
            pvs.items
                .iter()
                .all(|pv| {
                    pv.spec
                        .as_ref()
                        .and_then(|s| s.storage_class_name.as_deref())
                        != Some(class.as_str())
                })
                .then_some(())
        },
    )
    .await;
    support::eventually("the driver to be empty", || async {
        s.driver_volumes().await.is_empty().then_some(())
    })
    .await;
    let created = s
        .mock()
        .calls_of("CreateVolume")
        .iter()
        .filter(|c| c.get("response").is_some())
        .count();
    let deleted = s
        .mock()
        .calls_of("DeleteVolume")
        .iter()
        .filter(|c| c.get("response").is_some())
        .count();
    eprintln!("burst: {created} successful CreateVolume calls, {deleted} DeleteVolume calls");
}

/// Clusters run one provisioner per driver and the finalizer's name is shared: a provisioner
/// must never act on another driver's claims, not even deleted ones holding the finalizer.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn another_drivers_provisioner_never_touches_our_claims() {
    use kube::api::DeleteParams;
    let ours = Scenario::start("prov-ours", &[], &[]).await;
    let theirs = Scenario::start("prov-theirs", &[], &[]).await;
    ours.mock()
        .set_faults(json!({"CreateVolume": {"delay_ms": 2000}}));
    let class = ours.class("imm", "Immediate", json!({})).await;
    let claim = ours.claim("data", &class, "1Gi", json!({})).await;
    let pv_name = format!("pvc-{}", claim.metadata.uid.unwrap());
    testenv::wait_for(
        &ours.claims(),
        "data",
        "hold the creating-volume finalizer",
        holds_finalizer,
    )
    .await;
    ours.claims()
        .delete("data", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&ours.claims(), "data").await;
    support::eventually("our driver to be empty", || async {
        ours.driver_volumes().await.is_empty().then_some(())
    })
    .await;
    let touched: Vec<_> = theirs
        .mock()
        .calls()
        .into_iter()
        .filter(|c| c["request"]["name"] == pv_name.as_str())
        .collect();
    assert!(
        touched.is_empty(),
        "the other driver was called for our claim: {touched:#?}"
    );
}

/// As upstream: when the driver goes away the sidecar exits (status 1), even when idle, so
/// Kubernetes restarts it next to the restarted driver.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn losing_the_driver_connection_exits_the_provisioner() {
    let mut s = Scenario::start("prov-lost", &[], &[]).await;
    s.provisioner()
        .wait_for_log("Caches synced", std::time::Duration::from_secs(60));
    s.mock_mut().kill();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(status) = s.provisioner().process().try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the provisioner did not exit after losing its driver"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(status.code(), Some(1), "exit status");
    assert!(
        s.provisioner()
            .log()
            .contains("Lost connection to CSI driver, exiting")
    );
}
