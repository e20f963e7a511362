//! The deployment manifests against the real control plane (issue 5, "Deployment"): every
//! file in deploy/kubernetes passes a server-side dry run, the shipped RBAC stays within
//! upstream's, and the real csi-provisioner, authenticated as a ServiceAccount that holds only
//! the shipped RBAC, provisions, deletes and publishes capacity without a single Forbidden.

// Declared here, not in the module, so that other test binaries sharing the module do not
// run the same table tests again.

use crate::support;
use crate::support::WAIT;
use crate::support::deploy;
use std::collections::BTreeSet;
use std::time::Duration;

use crate::support::deploy::world::{
    OWNER_POD, RbacWorld, client_from, create_pod, grant_shipped_rbac, owner_chain,
    provisioner_as_service_account,
};
use crate::support::deploy::{
    beyond_upstream, drop_verb, forbidden_lines, grants, kubectl, load_objects, manifests_dir,
    requests_with,
};
use crate::support::{Scenario, eventually, scrape};
use csi_provisioner::capacity_controller::lookup_owner;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSIStorageCapacity, VolumeAttributesClass};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;
use testenv::ControlPlane;
const FORBIDDEN: &str = "code=\"403\"";

/// (file, objects it must create as `<resource>/<name>`).
const MANIFESTS: &[(&str, &[&str])] = &[
    (
        "rbac.yaml",
        &[
            "serviceaccount/csi-provisioner",
            "clusterrole.rbac.authorization.k8s.io/external-provisioner-runner",
            "clusterrolebinding.rbac.authorization.k8s.io/csi-provisioner-role",
            "role.rbac.authorization.k8s.io/external-provisioner-cfg",
            "rolebinding.rbac.authorization.k8s.io/csi-provisioner-role-cfg",
        ],
    ),
    ("deployment.yaml", &["deployment.apps/csi-provisioner"]),
    (
        "storage-capacity.yaml",
        &[
            "statefulset.apps/csi-provisioner",
            "csidriver.storage.k8s.io/csi.example.com",
        ],
    ),
    ("daemonset.yaml", &["daemonset.apps/csi-provisioner-node"]),
];

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn every_manifest_passes_a_server_dry_run() {
    let cp = ControlPlane::shared();
    let shipped: BTreeSet<String> = std::fs::read_dir(manifests_dir())
        .expect("deploy/kubernetes exists")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    let tested: BTreeSet<String> = MANIFESTS.iter().map(|(f, _)| f.to_string()).collect();
    assert_eq!(shipped, tested, "every shipped manifest is checked here");
    // The manifests name (or default to) the `default` namespace, as upstream's do.
    let _ = kubectl(cp.kubeconfig(), &["create", "namespace", "default"], None);
    for (file, objects) in MANIFESTS {
        let path = manifests_dir().join(file).display().to_string();
        let out = kubectl(
            cp.kubeconfig(),
            &["apply", "--dry-run=server", "-f", &path],
            None,
        )
        .unwrap_or_else(|e| panic!("{file} was refused by the API server:\n{e}"));
        for object in *objects {
            assert!(
                out.lines().any(
                    |l| l.starts_with(&format!("{object} ")) && l.ends_with("(server dry run)")
                ),
                "{file}: no server dry run of {object} in:\n{out}"
            );
        }
        assert_eq!(out.lines().count(), objects.len(), "{file}:\n{out}");
    }
}

/// A user who keeps upstream's RBAC keeps working: nothing in ours is missing from theirs but
/// the documented grants (`DOCUMENTED_EXTRAS`).
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn shipped_rbac_stays_within_upstreams() {
    let cp = ControlPlane::shared();
    let objects = load_objects(cp.kubeconfig(), &manifests_dir().join("rbac.yaml"));
    let ours = grants(&objects);
    assert!(ours.len() > 20, "parsed too few grants: {ours:?}");
    assert_eq!(
        beyond_upstream(&ours),
        vec![],
        "grants upstream's RBAC lacks"
    );
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn shipped_rbac_is_enough_for_provisioning_and_capacity() {
    let mut w = RbacWorld::start("rbac-ok", |_| {}).await;
    let s = &w.s;

    // Leader election: the Lease is ours, in our namespace.
    let lease_name = leader_election::lock_name(&s.driver);
    let leases: Api<Lease> = Api::namespaced(s.client.clone(), &s.ns);
    eventually("the leader Lease", WAIT, || async {
        let l = leases.get_opt(&lease_name).await.ok()??;
        l.spec?.holder_identity.filter(|h| !h.is_empty())
    })
    .await;

    let wffc = s
        .class(
            "wffc",
            "WaitForFirstConsumer",
            json!({"reclaimPolicy": "Delete"}),
        )
        .await;
    let imm = s
        .class("imm", "Immediate", json!({"reclaimPolicy": "Delete"}))
        .await;

    // Capacity: one object per (node, WFFC class), owned by our Pod (level 0 read it).
    let pod_uid = Api::<Pod>::namespaced(s.client.clone(), &s.ns)
        .get(OWNER_POD)
        .await
        .unwrap()
        .metadata
        .uid;
    let capacities: Api<CSIStorageCapacity> = Api::namespaced(s.client.clone(), &s.ns);
    let objects = eventually("2 CSIStorageCapacity objects", WAIT, || async {
        let list = capacities.list(&ListParams::default()).await.ok()?.items;
        (list.len() == 2 && list.iter().all(|c| c.storage_class_name == wffc)).then_some(list)
    })
    .await;
    for o in &objects {
        let owner = &o.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("Pod", OWNER_POD)
        );
        assert_eq!(Some(&owner.uid), pod_uid.as_ref());
    }

    // An Immediate claim, one with a VolumeAttributesClass (a GET upstream's example RBAC
    // lacks), and a WaitForFirstConsumer claim with its pod on a fake node.
    let vac = format!("{}-gold", s.ns);
    let class: VolumeAttributesClass = serde_json::from_value(json!({
        "metadata": {"name": vac}, "driverName": s.driver, "parameters": {"iops": "300"},
    }))
    .unwrap();
    Api::<VolumeAttributesClass>::all(s.client.clone())
        .create(&PostParams::default(), &class)
        .await
        .unwrap();
    let first = s.claim("first", &imm, "1Gi", json!({})).await;
    s.claim(
        "gold",
        &imm,
        "1Gi",
        json!({"spec": {"volumeAttributesClassName": vac}}),
    )
    .await;
    s.claim("late", &wffc, "1Gi", json!({})).await;
    create_pod(s, "late", "late").await;
    s.wait_bound("first").await;
    let gold = s.wait_bound("gold").await;
    s.wait_bound("late").await;
    let gold_pv = gold.spec.unwrap().volume_name.unwrap();
    let calls = s.create_calls(&gold_pv);
    assert_eq!(
        calls[0]["request"]["mutable_parameters"]["iops"], "300",
        "{calls:#?}"
    );
    s.wait_event("late", "ProvisioningSucceeded", "").await;

    // Deleting a claim deletes its volume and PV.
    let first_pv = format!("pvc-{}", first.metadata.uid.unwrap());
    s.delete_claim("first").await;
    eventually("the first PV deleted", WAIT, || async {
        s.volumes()
            .get_opt(&first_pv)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let volumes = s.driver_volumes().await;
    assert_eq!(volumes.len(), 2, "the driver still holds {volumes:?}");

    // Zero Forbidden: by the provisioner's own request metric and in its log.
    let metrics = scrape(w.port).await.expect("metrics endpoint answers");
    assert!(
        requests_with(&metrics, &["code=\"201\""]) >= 4.0,
        "{metrics}"
    );
    assert_none_forbidden(&metrics);
    let log = w.prov.log();
    assert_eq!(
        forbidden_lines(&log),
        Vec::<&str>::new(),
        "log: {}",
        w.prov.log_path().display()
    );
    assert!(w.prov.is_running(), "csi-provisioner exited");
    w.prov.stop();
}

/// The same run with `create` on Leases removed: the write-ahead record (a Lease in the
/// provisioner's namespace) cannot be written, so no volume is created, and both signals the
/// test above relies on show the refusal. (Without leader election, whose Lease would be
/// refused the same way.)
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_missing_verb_shows_up_as_forbidden() {
    let mut w = RbacWorld::start_without_election("rbac-cut", |objects| {
        assert_eq!(drop_verb(objects, "leases", "create"), 1);
    })
    .await;
    let s = &w.s;
    let imm = s.class("imm", "Immediate", json!({})).await;
    s.claim("stuck", &imm, "1Gi", json!({})).await;
    let port = w.port;
    let metrics = eventually("a 403 in rest_client_requests_total", WAIT, || async {
        let m = scrape(port).await?;
        (requests_with(&m, &[FORBIDDEN]) > 0.0).then_some(m)
    })
    .await;
    assert!(
        requests_with(&metrics, &[FORBIDDEN, "method=\"POST\""]) > 0.0,
        "the refused calls are the record's creates:\n{}",
        forbidden_in(&metrics)
    );
    w.prov.wait_for_log("forbidden", Duration::from_secs(30));
    let log = w.prov.log();
    let lines = forbidden_lines(&log);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("cannot create resource \\\"leases\\\"")
                || l.contains("cannot create resource \"leases\"")),
        "the refusal names the verb and resource: {lines:#?}"
    );
    let claim: PersistentVolumeClaim = s.claims().get("stuck").await.unwrap();
    assert_ne!(
        claim.status.and_then(|st| st.phase).as_deref(),
        Some("Bound")
    );
    assert!(
        s.mock().calls_of("CreateVolume").is_empty(),
        "no volume without its entry in the record"
    );
    w.prov.stop();
}

/// `--capacity-ownerref-level=2` under a Deployment reads the ReplicaSet (found through
/// discovery, which every authenticated user may read). The shipped Role's `get` on
/// replicasets is enough, and needed: without it level 2 is refused.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn owner_lookup_through_a_deployment_needs_only_the_shipped_rbac() {
    let s = Scenario::new("rbac-owner").await;
    let sa = client_from(&grant_shipped_rbac(&s, |_| {}).await).await;
    let pod = owner_chain(&s).await;
    for (level, kind) in [(0, "Pod"), (1, "ReplicaSet"), (2, "Deployment")] {
        let owner = lookup_owner(&sa, &s.ns, &pod, Some(level))
            .await
            .unwrap_or_else(|e| panic!("level {level}: {e}"))
            .unwrap();
        assert_eq!(owner.kind, kind, "level {level}");
    }

    let cut = Scenario::new("rbac-owner-cut").await;
    let sa = client_from(
        &grant_shipped_rbac(&cut, |objects| {
            assert_eq!(drop_verb(objects, "replicasets", "get"), 1);
        })
        .await,
    )
    .await;
    let pod = owner_chain(&cut).await;
    lookup_owner(&sa, &cut.ns, &pod, Some(1)).await.unwrap();
    let err = lookup_owner(&sa, &cut.ns, &pod, Some(2))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.to_lowercase().contains("forbidden"), "{err}");
}

fn assert_none_forbidden(metrics: &str) {
    let forbidden = requests_with(metrics, &[FORBIDDEN]);
    assert_eq!(
        forbidden,
        0.0,
        "Forbidden API calls:\n{}",
        forbidden_in(metrics)
    );
}

fn forbidden_in(metrics: &str) -> String {
    metrics
        .lines()
        .filter(|l| l.starts_with("rest_client_requests_total{") && l.contains(FORBIDDEN))
        .collect::<Vec<_>>()
        .join("\n")
}

/// daemonset.yaml's shape: `--node-deployment` with capacity owned by the instance's Pod,
/// authenticated as the shipped ServiceAccount. An Immediate claim is taken for the node and a
/// WaitForFirstConsumer claim is provisioned there, with zero Forbidden.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn node_deployment_needs_only_the_shipped_rbac() {
    const KEY: &str = deploy::world::KEY;
    let mut s = Scenario::new("rbac-node").await;
    testenv::create_csi_driver(&s.client, &s.driver, true).await;
    let node = s.node_names(&["a"]).remove(0);
    testenv::create_fake_nodes(&s.client, &s.driver, KEY, &[node.as_str()]).await;
    s.start_driver(&[
        format!("--pool={KEY}={node}:10Gi"),
        format!("--node-id={node}"),
        format!("--node-topology={KEY}={node}"),
    ]);
    let kubeconfig = grant_shipped_rbac(&s, |_| {}).await;
    create_pod(&s, OWNER_POD, "").await;
    let (mut prov, port) = provisioner_as_service_account(
        &s,
        &kubeconfig,
        &[
            "--node-deployment",
            "--enable-capacity",
            "--capacity-for-immediate-binding",
        ],
        // In a pod the service account's namespace file names the record's namespace.
        &[
            ("NODE_NAME", node.as_str()),
            ("POD_NAMESPACE", s.ns.as_str()),
        ],
    );

    let imm = s.class("imm", "Immediate", json!({})).await;
    let wffc = s.class("wffc", "WaitForFirstConsumer", json!({})).await;
    let capacities: Api<CSIStorageCapacity> = Api::namespaced(s.client.clone(), &s.ns);
    let objects = eventually("one object per class for the node", WAIT, || async {
        let list = capacities.list(&ListParams::default()).await.ok()?.items;
        (list.len() == 2).then_some(list)
    })
    .await;
    for o in &objects {
        let labels = o.metadata.labels.as_ref().unwrap();
        assert_eq!(
            labels["csi.storage.k8s.io/managed-by"],
            format!("external-provisioner-{node}")
        );
        let owner = &o.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("Pod", OWNER_POD)
        );
    }
    s.claim("now", &imm, "1Gi", json!({})).await;
    s.claim("late", &wffc, "1Gi", json!({})).await;
    create_pod(&s, "user", "late").await;
    let now = s.wait_bound("now").await;
    s.wait_bound("late").await;
    assert_eq!(
        now.metadata.annotations.unwrap()["volume.kubernetes.io/selected-node"],
        node,
        "the Immediate claim was taken for the node"
    );
    let pv = s
        .volumes()
        .get(&now.spec.unwrap().volume_name.unwrap())
        .await
        .unwrap();
    let identity = &pv.spec.unwrap().csi.unwrap().volume_attributes.unwrap()["storage.kubernetes.io/csiProvisionerIdentity"];
    assert!(
        identity.ends_with(&format!("-{}-{node}", s.driver)),
        "{identity}"
    );

    let metrics = scrape(port).await.expect("metrics endpoint answers");
    assert_none_forbidden(&metrics);
    assert_eq!(forbidden_lines(&prov.log()), Vec::<&str>::new());
    // Upstream's node instances have the capacity queue but no topology queue.
    assert!(
        metrics.contains(r#"workqueue_adds_total{name="csistoragecapacity"}"#),
        "{metrics}"
    );
    assert!(!metrics.contains(r#"name="csitopology""#), "{metrics}");
    assert!(prov.is_running(), "csi-provisioner exited");
    prov.stop();
}

/// Upstream's RBAC (`update` on claims, no `patch`), with the finalizer
/// (`CSI_PROVISIONER_WRITE_AHEAD_RECORD=false`; the record writes no claim): a claim write
/// reads the claim and PUTs it whole with our change applied, so a claim managed with `kubectl
/// apply` keeps its last-applied annotation and field managers all the same. One refused
/// patch, then updates only (the provisioner remembers the refusal).
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn without_patch_on_claims_writes_keep_what_kubectl_applied() {
    let mut w = RbacWorld::start_with_the_finalizer("rbac-nopatch", |objects| {
        assert_eq!(drop_verb(objects, "persistentvolumeclaims", "patch"), 1);
    })
    .await;
    let s = &w.s;
    let imm = s.class("imm", "Immediate", json!({})).await;
    support::kubectl_apply_claim(s, "data", &imm, json!({"app": "db", "tier": "gold"}));
    let claim = support::wait_bound_and_released(s, "data").await;
    support::assert_still_kubectls(&claim);
    let log = testenv::ControlPlane::shared().audit_log();
    let ours: Vec<(String, Option<i64>)> =
        eventually("our claim writes in the audit log", WAIT, || async {
            let writes: Vec<(String, Option<i64>)> = testenv::audit::claim_writes(&log, &s.ns)
                .unwrap()
                .into_iter()
                .filter(|w| w.user_agent.starts_with("csi-provisioner/"))
                .map(|w| (w.verb, w.code))
                .collect();
            let answered = writes.iter().filter(|w| w.1 != Some(409)).count();
            (answered >= 3).then_some(writes)
        })
        .await;
    // A PUT needs the version it read: the release may meet kube-controller-manager's status
    // write right after binding (a 409, then a re-read); patch rights avoid that.
    let conflicts = ours.iter().filter(|w| w.1 == Some(409)).count();
    let done: Vec<_> = ours.iter().filter(|w| w.1 != Some(409)).cloned().collect();
    assert_eq!(
        done,
        [
            ("patch".to_string(), Some(403)),
            ("update".to_string(), Some(200)),
            ("update".to_string(), Some(200)),
        ],
        "one refused patch, then the finalizer's add and release as updates: {ours:?}"
    );
    assert!(conflicts <= 1, "{ours:?}");
    support::kubectl_apply_claim(s, "data", &imm, json!({"app": "db"}));
    assert_eq!(
        support::claim_labels(s, "data").await,
        support::labels(&[("app", "db")])
    );
    w.prov.stop();
}
