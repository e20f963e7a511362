//! Provisioning against the real control plane with the mock driver: the PV, late binding,
//! rescheduling, bad input. Each test has its own namespace, driver name and classes.

use crate::support;
use crate::support::WAIT;
use crate::support::{
    Holder, NODE_KEY, Scenario, create_pod, on_nodes, pod_node, pool_args, set_unschedulable,
};
use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::json;
use std::time::Duration;

/// An Immediate class with an unknown reserved parameter: every claim of it fails in prepare,
/// before any call.
async fn bogus_class(s: &Scenario) -> String {
    s.class(
        "bogus",
        "Immediate",
        json!({"parameters": {"csi.storage.k8s.io/bogus": "x"}}),
    )
    .await
}

/// The walking skeleton and the PV, field by field.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn immediate_claim_binds_to_a_pv_built_like_upstream() {
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

    // Our in-flight finalizer goes once the PV exists (on the background lane, so shortly
    // after); the events are upstream's.
    testenv::wait_for(
        &s.claims(),
        "data",
        "drop the creating-volume finalizer",
        |c| !support::holds_finalizer(c),
    )
    .await;
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

/// WaitForFirstConsumer: the real scheduler picks a node; the volume is created in that node's
/// segment; the PV's node affinity names the node.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn late_binding_volume_lands_in_the_selected_nodes_segment() {
    let (s, names) = Scenario::with_nodes("prov-wffc", &["a", "b"], "100Gi", &[]).await;
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

/// The requisite terms of the first CreateVolume for claim `claim`'s volume, each as sorted
/// `key=value` pairs joined by `,`.
async fn first_requisite(s: &Scenario, claim: &str) -> Vec<String> {
    let uid = s.claims().get(claim).await.unwrap().metadata.uid.unwrap();
    let pv = format!("pvc-{uid}");
    let calls = support::eventually(&format!("a CreateVolume for {pv}"), WAIT, || async {
        let calls = s.create_calls(&pv);
        (!calls.is_empty()).then_some(calls)
    })
    .await;
    let mut terms: Vec<String> = calls[0]["request"]["accessibility_requirements"]["requisite"]
        .as_array()
        .unwrap_or_else(|| panic!("no requisite in {:#}", calls[0]))
        .iter()
        .map(|t| {
            let segments = t["segments"].as_object().unwrap();
            let mut pairs: Vec<String> = segments
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
                .collect();
            pairs.sort();
            pairs.join(",")
        })
        .collect();
    terms.sort();
    terms
}

/// v6.4.0 (#1582): with Immediate binding the requisite covers every key set the driver
/// registered (here `[node]` on a and b, `[node, rack]` on c), not the keys of one CSINode
/// picked at random; and in both binding modes a Node counts only where our driver registered
/// the keys: d carries the node label but its CSINode names another driver, and every other
/// test's fake Node carries the label too.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn requisite_covers_each_registered_key_set_and_only_registered_nodes() {
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::api::storage::v1::CSINode;
    const RACK_KEY: &str = "topology.mock.csi/rack";
    let mut s = Scenario::new("prov-keysets").await;
    let names = s.node_names(&["a", "b", "c", "d"]);
    let [a, b, c, d] = [0, 1, 2, 3].map(|i| names[i].clone());
    s.start_driver(&pool_args(&names[..3], "100Gi"));
    testenv::create_fake_nodes(&s.client, &s.driver, NODE_KEY, &[&a, &b, &c]).await;
    testenv::create_fake_nodes(&s.client, &format!("other.{}", s.driver), NODE_KEY, &[&d]).await;
    // c reports the finer key set: its Node gets the rack label, its CSINode both keys.
    kube::Api::<Node>::all(s.client.clone())
        .patch(
            &c,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"labels": {RACK_KEY: "r1"}}})),
        )
        .await
        .unwrap();
    // A driver entry is immutable: c's CSINode is made again with both keys.
    let csi_nodes = kube::Api::<CSINode>::all(s.client.clone());
    let mut csi_c = csi_nodes.get(&c).await.unwrap();
    csi_nodes
        .delete(&c, &kube::api::DeleteParams::default())
        .await
        .unwrap();
    support::wait_gone(&csi_nodes, &c).await;
    csi_c.metadata = kube::api::ObjectMeta {
        name: Some(c.clone()),
        ..Default::default()
    };
    csi_c.spec.drivers[0].topology_keys = Some(vec![NODE_KEY.into(), RACK_KEY.into()]);
    csi_nodes
        .create(&kube::api::PostParams::default(), &csi_c)
        .await
        .unwrap();
    // Started after the nodes, so its caches hold them from the first attempt on.
    s.start_provisioner::<&str>(&[]);

    let immediate = s.class("imm", "Immediate", json!({})).await;
    s.claim("imm", &immediate, "1Gi", json!({})).await;
    let node = |n: &str| format!("{NODE_KEY}={n}");
    assert_eq!(
        first_requisite(&s, "imm").await,
        vec![
            node(&a),
            node(&b),
            node(&c),
            format!("{NODE_KEY}={c},{RACK_KEY}=r1"),
        ]
    );

    // Late binding, selected by hand (no pod): the selected node's keys, aggregated over the
    // Nodes that registered them (c's finer registration covers them), never d.
    let wffc = s.class("wffc", "WaitForFirstConsumer", json!({})).await;
    s.claim(
        "late",
        &wffc,
        "1Gi",
        json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": a}}}),
    )
    .await;
    assert_eq!(
        first_requisite(&s, "late").await,
        vec![node(&a), node(&b), node(&c)]
    );
    // One CreateVolume each: the first attempt of each claim succeeded.
    s.wait_bound("imm").await;
    s.wait_bound("late").await;
    assert_eq!(s.mock().calls_of("CreateVolume").len(), 2);
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
    // The scheduler must see the cordon before the pod, or it may pick the big node first.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
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
    let bogus = bogus_class(&s).await;
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
    let restore = s.claim(
        "snapshot",
        &ok,
        "1Gi",
        json!({"spec": {"dataSource": {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "snap"}}}),
    )
    .await;
    let clone = s
        .claim(
            "clone",
            &ok,
            "1Gi",
            json!({"spec": {"dataSource": {"kind": "PersistentVolumeClaim", "name": "bogus"}}}),
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
        // The mock driver reports neither CREATE_DELETE_SNAPSHOT nor CLONE_VOLUME.
        (
            "snapshot",
            "CSI driver does not support snapshot restore: controller CREATE_DELETE_SNAPSHOT capability is not reported",
        ),
        (
            "clone",
            "CSI driver does not support clone operations: controller CLONE_VOLUME capability is not reported",
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
    // A driver that cannot restore or clone is never asked to.
    for c in [&restore, &clone] {
        let name = format!("pvc-{}", c.metadata.uid.as_deref().unwrap_or_default());
        assert_eq!(s.create_calls(&name).len(), 0, "CreateVolume for {name}");
    }
    assert!(s.driver_volumes().await.is_empty());
    assert!(
        s.provisioner().is_running(),
        "bad input must not crash the provisioner"
    );
}

/// Under a tight API budget the claim whose attempt began first gets its requests first.
/// With the finalizer, its PV is written before the other claims' finalizer writes, so when
/// the first PV exists at most a couple of CreateVolume calls have been made (one, when we ran
/// it). Served in issue order (client-go's), other claims' finalizer writes come first, and
/// more calls precede it (four of eight, when we tried).
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn under_a_tight_budget_the_oldest_claim_is_finished_first() {
    let calls_at_first_pv = oldest_claim_first("prov-order", Holder::Finalizer).await;
    assert!(
        (1..=3).contains(&calls_at_first_pv),
        "CreateVolume calls when the first PV appeared: {calls_at_first_pv} of {ORDER_CLAIMS}"
    );
}

/// The same with the write-ahead record (the default): no claim write precedes CreateVolume,
/// and the claims that came while the record's write waited for its turn ride on it, so most
/// calls are made before the first PV (all eight, when we ran it); the oldest attempt's PV is
/// still the first one written.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn under_a_tight_budget_the_oldest_claim_is_finished_first_with_the_record() {
    oldest_claim_first("prov-order-rec", Holder::Record).await;
}

const ORDER_CLAIMS: usize = 8;

/// Creates [`ORDER_CLAIMS`] claims under a budget of 2 QPS, asserts the first PV saved is one
/// of the two oldest attempts' claims, and returns how many CreateVolume calls were made when
/// it was. Counted in the provisioner's own log, whose order is the order things happened (a
/// poll of the PVs would see the first one late, after more calls).
async fn oldest_claim_first(prefix: &str, holder: Holder) -> usize {
    let mut s = Scenario::start_held(
        prefix,
        &[],
        &["--kube-api-qps=2", "--kube-api-burst=1", "-v=5"],
        holder,
    )
    .await;
    let class = s.class("imm", "Immediate", json!({})).await;
    // Let the provisioner's start-up requests (lists of its caches) drain the bucket first.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    for i in 0..ORDER_CLAIMS {
        s.claim(&format!("c{i}"), &class, "1Gi", json!({})).await;
    }
    // Logged right after the PV create returns.
    let saved = "\"Provisioned volume\"";
    s.provisioner()
        .wait_for_log(saved, std::time::Duration::from_secs(60));
    let log = s.provisioner().log();
    let calls_at_first_pv = log
        .lines()
        .take_while(|l| !l.contains(saved))
        .filter(|l| l.contains("\"GRPC call\"") && l.contains("/CreateVolume"))
        .count();
    // The first PV is one of the oldest attempts' claims: the first two whose attempts began
    // ("step=Provision"; when two workers take claims within microseconds, the instant the
    // second's attempt began can come first on a loaded machine). Not c0 or c1 by name: an
    // attempt begins once kube-controller-manager has annotated the claim, and a busy one
    // (the shared control plane of the test binary) annotates them out of order.
    let claim_of = |l: &str| {
        let start = l.find("claim=\"")? + "claim=\"".len();
        l[start..].split('"').next().map(str::to_string)
    };
    let mut oldest: Vec<String> = Vec::new();
    for l in log.lines().filter(|l| l.contains("step=\"Provision\"")) {
        if let Some(c) = claim_of(l).filter(|c| c.starts_with(&format!("{}/", s.ns)))
            && !oldest.contains(&c)
        {
            oldest.push(c);
        }
    }
    oldest.truncate(2);
    let first = log.lines().find(|l| l.contains(saved)).unwrap_or_default();
    assert!(
        claim_of(first).is_some_and(|c| oldest.contains(&c)),
        "the first PV saved is not one of the two oldest attempts' ({oldest:?}): {first}"
    );
    for i in 0..ORDER_CLAIMS {
        s.wait_bound(&format!("c{i}")).await;
    }
    assert_eq!(s.mock().calls_of("CreateVolume").len(), ORDER_CLAIMS);
    calls_at_first_pv
}

/// Under a burst the events wait behind the claims' own requests, and at most one client burst
/// of Normal events waits (`--kube-api-burst=1` here): the rest are logged, not written. So a
/// burst costs one PV create per claim and few events, where client-go's recorder would queue
/// a Provisioning and a ProvisioningSucceeded event for every claim. A waiting "Provisioning"
/// notice still gives way to its outcome.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn under_a_burst_only_one_burst_of_normal_events_is_written() {
    const CLAIMS: usize = 12;
    let mut s = Scenario::start(
        "prov-notice",
        &[],
        &["--kube-api-qps=2", "--kube-api-burst=1", "-v=4"],
    )
    .await;
    let class = s.class("imm", "Immediate", json!({})).await;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    for i in 0..CLAIMS {
        s.claim(&format!("c{i}"), &class, "1Gi", json!({})).await;
    }
    for i in 0..CLAIMS {
        s.wait_bound(&format!("c{i}")).await;
    }
    // The background lane is drained once the claims' finalizers are off and no event has been
    // written for a few seconds (one event takes 0.5 s of this budget).
    support::eventually("the creating-volume finalizers removed", WAIT, || async {
        let claims = s.claims().list(&Default::default()).await.ok()?;
        (!claims.items.iter().any(support::holds_finalizer)).then_some(())
    })
    .await;
    let mut last = (0, std::time::Instant::now());
    while last.1.elapsed() < std::time::Duration::from_secs(4) {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let mut now = 0;
        for i in 0..CLAIMS {
            now += s.our_event_reasons(&format!("c{i}")).await.len();
        }
        if now != last.0 {
            last = (now, std::time::Instant::now());
        }
    }
    let (mut told, mut written) = (0, 0);
    for i in 0..CLAIMS {
        let ours = s.our_event_reasons(&format!("c{i}")).await;
        let count = |reason: &str| ours.iter().filter(|r| *r == reason).count();
        assert!(count("ProvisioningSucceeded") <= 1, "c{i}: {ours:?}");
        assert_eq!(
            ours.len(),
            count("ProvisioningSucceeded") + count("Provisioning"),
            "c{i}: {ours:?}"
        );
        told += usize::from(!ours.is_empty());
        written += ours.len();
    }
    // The first claims' events fill the backlog; a few more get in as the background lane
    // finds free tokens between the claims' own requests.
    assert!(
        (1..=CLAIMS / 3).contains(&told),
        "{told} of {CLAIMS} claims got events written ({written} events)"
    );
    // Nothing is lost from the log: every outcome is there, and so is each one not written.
    let log = s.provisioner().log();
    let lines = |needles: &[&str]| {
        log.lines()
            .filter(|l| needles.iter().all(|n| l.contains(n)))
            .count()
    };
    assert_eq!(
        lines(&[
            "\"Successfully provisioned volume",
            "reason=\"ProvisioningSucceeded\""
        ]),
        CLAIMS
    );
    let shed = lines(&["\"Normal event not written"]);
    assert!(
        shed >= CLAIMS - told,
        "{shed} events shed, {told} claims told"
    );
    assert_eq!(s.mock().calls_of("CreateVolume").len(), CLAIMS);
}

/// On an idle provisioner every attempt's notice is sent, as upstream's is, even when the
/// attempt fails before any await (an unknown reserved parameter): the failure is recorded
/// before the delivery task gets to run, and must not replace the notice.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn on_an_idle_provisioner_each_failed_attempt_keeps_its_notice() {
    let s = Scenario::start("prov-idle-notice", &[], &[]).await;
    let bogus = bogus_class(&s).await;
    s.claim("bogus", &bogus, "1Gi", json!({})).await;
    // Attempts 1 s, 2 s and 4 s apart: three failures within about 8 s.
    let count = |events: &[k8s_openapi::api::core::v1::Event], reason: &str| {
        events
            .iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .map(|e| e.count.unwrap_or(1))
            .sum::<i32>()
    };
    support::eventually("three failed attempts", WAIT, || async {
        let events = s.events_for("bogus").await;
        (count(&events, "ProvisioningFailed") >= 3).then_some(())
    })
    .await;
    let events = s.events_for("bogus").await;
    let (notices, failures) = (
        count(&events, "Provisioning"),
        count(&events, "ProvisioningFailed"),
    );
    // The attempt under way may have recorded its notice and not yet its failure.
    assert!(
        notices == failures || notices == failures + 1,
        "{notices} Provisioning events for {failures} failed attempts"
    );
    assert!(s.mock().calls_of("CreateVolume").is_empty());
}

/// A VolumeSnapshot bound to a VolumeSnapshotContent of our driver, both made by hand and
/// marked ready (no snapshot controller runs on the shared control plane: data_sources.rs has
/// its own; the mock restores any handle).
async fn ready_snapshot(s: &Scenario, name: &str, handle: &str) {
    use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
    let content_name = format!("{}-{name}", s.ns);
    let snapshots: Api<DynamicObject> = Api::namespaced_with(
        s.client.clone(),
        &s.ns,
        &testenv::volume_snapshot_resource(),
    );
    let contents: Api<DynamicObject> = Api::all_with(
        s.client.clone(),
        &testenv::volume_snapshot_content_resource(),
    );
    let object =
        |body: serde_json::Value| -> DynamicObject { serde_json::from_value(body).unwrap() };
    let snapshot = snapshots
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
                "metadata": {"name": name, "namespace": s.ns},
                "spec": {"source": {"volumeSnapshotContentName": content_name}},
            })),
        )
        .await
        .unwrap();
    contents
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
                "metadata": {"name": content_name},
                "spec": {
                    "deletionPolicy": "Retain", "driver": s.driver,
                    "source": {"snapshotHandle": handle},
                    "volumeSnapshotRef": {"name": name, "namespace": s.ns,
                                          "uid": snapshot.metadata.uid},
                },
            })),
        )
        .await
        .unwrap();
    let status = |body: serde_json::Value| Patch::Merge(json!({ "status": body }));
    contents
        .patch_status(
            &content_name,
            &PatchParams::default(),
            &status(json!({"snapshotHandle": handle, "readyToUse": true})),
        )
        .await
        .unwrap();
    snapshots
        .patch_status(
            name,
            &PatchParams::default(),
            &status(json!({"boundVolumeSnapshotContentName": content_name,
                           "readyToUse": true, "restoreSize": "1Gi"})),
        )
        .await
        .unwrap();
}

/// Two claims, "slow" (its CreateVolume answering after `slow_fault`'s delay, as it says) and
/// then "fast", restore from one snapshot made by hand, with the orphan sweep off so that only
/// the restores take our finalizer off. Returns once fast is Bound and its release has kept
/// the finalizer for slow (asserted), with slow's call still running.
async fn two_restores(
    prefix: &str,
    slow_fault: serde_json::Value,
) -> (Scenario, kube::Api<kube::api::DynamicObject>) {
    let mut s = support::Scenario::new(prefix).await;
    testenv::install_snapshot_crds(&s.client)
        .await
        .expect("snapshot CRDs");
    s.start_driver(&["--restore-snapshots"]);
    s.start_provisioner(&["-v=4", "--snapshot-orphan-sweep-interval=0"]);
    ready_snapshot(&s, "snap", "handle-1").await;
    let mut fault = slow_fault;
    fault["match_parameters"] = json!({"speed": "slow"});
    s.mock().set_faults(json!({ "CreateVolume": fault }));
    let slow = s
        .class(
            "slow",
            "Immediate",
            json!({"parameters": {"speed": "slow"}}),
        )
        .await;
    let fast = s.class("fast", "Immediate", json!({})).await;
    let source = json!({"spec": {"dataSource": {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "snap"}}});
    let snapshots: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        s.client.clone(),
        &s.ns,
        &testenv::volume_snapshot_resource(),
    );

    s.claim("slow", &slow, "1Gi", source.clone()).await;
    support::eventually("our finalizer on the snapshot", WAIT, || async {
        protected(&snapshots).await.then_some(())
    })
    .await;
    s.claim("fast", &fast, "1Gi", source).await;
    s.wait_bound("fast").await;
    // The fast restore's release decides: it keeps the finalizer (and says so), or takes it off.
    let log_path = s.provisioner().log_path().to_path_buf();
    let kept = || {
        std::fs::read_to_string(&log_path)
            .unwrap_or_default()
            .contains("other claims still restore from it")
    };
    support::eventually("the fast restore's release", WAIT, || async {
        (kept() || !protected(&snapshots).await).then_some(())
    })
    .await;
    assert!(
        protected(&snapshots).await,
        "the finalizer went while a restore ran"
    );
    assert_eq!(
        s.mock().succeeded("CreateVolume"),
        1,
        "the slow restore is still running"
    );
    (s, snapshots)
}

/// Whether "snap" holds our source-protection finalizer.
async fn protected(snapshots: &kube::Api<kube::api::DynamicObject>) -> bool {
    let snap = snapshots.get("snap").await.unwrap();
    snap.metadata
        .finalizers
        .unwrap_or_default()
        .iter()
        .any(|f| f == provisioning::names::SNAPSHOT_SOURCE_FINALIZER)
}

/// How often the provisioner's log says it added (`added=true`) or removed our finalizer.
fn finalizer_changes(log: &str) -> (usize, usize) {
    let changed = |added: &str| {
        log.lines()
            .filter(|l| l.contains("Changed finalizer") && l.contains(added))
            .count()
    };
    (changed("added=true"), changed("added=false"))
}

/// Two claims restore from one snapshot. The one whose CreateVolume ends first leaves our
/// source-protection finalizer on the snapshot while the other's call still runs (upstream
/// takes it off, and a deletion of the snapshot then goes ahead under the other restore); the
/// last one out takes it off. One add and one removal in all.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_snapshot_keeps_its_finalizer_until_the_last_restore_from_it_ends() {
    let (mut s, snapshots) = two_restores("prov-restores", json!({"delay_ms": 8000})).await;
    s.wait_bound("slow").await;
    support::eventually(
        "the last restore to take the finalizer off",
        WAIT,
        || async { (!protected(&snapshots).await).then_some(()) },
    )
    .await;
    let log = s.provisioner().log();
    assert_eq!(finalizer_changes(&log), (1, 1), "{log}");
    // Both volumes were restored from the snapshot's handle.
    let calls = s.mock().calls_of("CreateVolume");
    assert_eq!(calls.len(), 2, "{calls:#?}");
    for call in &calls {
        assert_eq!(
            call["request"]["volume_content_source"],
            json!({"snapshot": {"snapshot_id": "handle-1"}}),
            "{call:#}"
        );
    }
}

/// The restore still running when the other finished fails: the finalizer that the finished
/// one kept for it comes off then, as upstream's first success would have taken it off (with
/// the sweep off it stayed for good). That write to the snapshot does not retry the failed
/// claim early: its InvalidArgument backoff (5 min) holds, and its next attempt would put the
/// finalizer back.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_finalizer_kept_for_a_restore_that_fails_comes_off_then() {
    let fault = json!({"delay_ms": 6000, "code": "InvalidArgument", "message": "no restore here"});
    let (mut s, snapshots) = two_restores("prov-restore-fails", fault).await;
    s.wait_event("slow", "ProvisioningFailed", "no restore here")
        .await;
    s.provisioner().wait_for_log(
        "The last restore from the snapshot failed",
        Duration::from_secs(30),
    );
    support::eventually(
        "the owed release to take the finalizer off",
        WAIT,
        || async { (!protected(&snapshots).await).then_some(()) },
    )
    .await;
    // An early retry would come at once, with its own add.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!protected(&snapshots).await, "the finalizer came back");
    let log = s.provisioner().log();
    assert_eq!(finalizer_changes(&log), (1, 1), "{log}");
    let calls = s.mock().calls_of("CreateVolume");
    assert_eq!(calls.len(), 2, "no early retry: {calls:#?}");
    assert_eq!(s.mock().succeeded("CreateVolume"), 1);
}

/// A ValidatingAdmissionPolicy (and binding) that refuses any update of a claim in the
/// scenario's namespace that takes our creating-volume finalizer off; returns once it is in
/// force. Its objects are cluster-scoped, named after the namespace.
async fn refuse_finalizer_removal(s: &Scenario) {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
    let resource = |kind: &str| {
        ApiResource::from_gvk(&GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            kind,
        ))
    };
    let name = format!("{}-keep-finalizer", s.ns);
    let f = provisioning::names::CREATING_VOLUME_FINALIZER;
    let keeps = format!(
        "!has(oldObject.metadata.finalizers) || !('{f}' in oldObject.metadata.finalizers) || (has(object.metadata.finalizers) && '{f}' in object.metadata.finalizers)"
    );
    let objects = [
        (
            "ValidatingAdmissionPolicy",
            json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": name},
                "spec": {"failurePolicy": "Fail",
                    "matchConstraints": {
                        "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                            "operations": ["UPDATE"], "resources": ["persistentvolumeclaims"]}],
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": s.ns}}},
                    "validations": [{"expression": keeps, "message": "this test keeps the finalizer"}]}}),
        ),
        (
            "ValidatingAdmissionPolicyBinding",
            json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": name},
                "spec": {"policyName": name, "validationActions": ["Deny"]}}),
        ),
    ];
    for (kind, body) in objects {
        let api: kube::Api<DynamicObject> = kube::Api::all_with(s.client.clone(), &resource(kind));
        api.create(
            &PostParams::default(),
            &serde_json::from_value(body).unwrap(),
        )
        .await
        .unwrap_or_else(|e| panic!("the API server refused the {kind}: {e}"));
    }
    // In force once a probe (no class: nothing else touches it) cannot lose the finalizer.
    let no_class = format!("{}-no-such-class", s.ns);
    s.claim(
        "policy-probe",
        &no_class,
        "1Gi",
        json!({"metadata": {"finalizers": [f]}}),
    )
    .await;
    support::eventually(
        "the policy to refuse the finalizer's removal",
        WAIT,
        || async {
            let claims = s.claims();
            let mut current = claims.get("policy-probe").await.ok()?;
            let finalizers = current.metadata.finalizers.get_or_insert_with(Vec::new);
            if !finalizers.iter().any(|x| x == f) {
                // Taken off before the policy was in force: put it back and try again.
                finalizers.push(f.to_string());
                let _ = claims
                    .replace("policy-probe", &PostParams::default(), &current)
                    .await;
                return None;
            }
            finalizers.retain(|x| x != f);
            match claims
                .replace("policy-probe", &PostParams::default(), &current)
                .await
            {
                Err(kube::Error::Api(e)) if e.message.contains("keeps the finalizer") => Some(()),
                _ => None,
            }
        },
    )
    .await;
}

/// A failed attempt whose own follow-up write fails (here the release of our finalizer after a
/// final InvalidArgument, refused by an admission policy; the finalizer holds claims with
/// `CSI_PROVISIONER_WRITE_AHEAD_RECORD=false`) still waits out the failure's
/// backoff, 5 minutes for InvalidArgument: the work queue's retries of the failed write do not
/// call the driver again. Before, the failed write left no hold, and each retry (1, 2, 4 s …)
/// was a new CreateVolume.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_failed_attempt_whose_release_is_refused_still_waits_its_backoff() {
    let mut s = Scenario::start_held("prov-refused", &[], &["-v=4"], Holder::Finalizer).await;
    refuse_finalizer_removal(&s).await;
    s.mock().set_faults(
        json!({"CreateVolume": {"code": "InvalidArgument", "message": "not this request"}}),
    );
    let class = s.class("imm", "Immediate", json!({})).await;
    s.claim("a", &class, "1Gi", json!({})).await;
    s.wait_event("a", "ProvisioningFailed", "not this request")
        .await;
    // The refused write's retries, 1, 2 and 4 s apart, all come within 8 s.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let log = s.provisioner().log();
    assert!(
        log.contains("keeps the finalizer"),
        "the write was refused: {log}"
    );
    assert_eq!(s.mock().calls_of("CreateVolume").len(), 1, "{log}");
}
