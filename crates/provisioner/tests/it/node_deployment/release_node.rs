//! `csi-provisioner release-node` on the real control plane: a lost node's volumes released,
//! its claims created again elsewhere, never lost (the state file), never brought back once
//! deleted, and never released while the node shows signs of life.

use crate::support::WAIT;
use crate::support::deploy;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::{capacity_objects, distributed, lose_node, pv_node};
use crate::support::{self, Scenario, eventually};
use testenv::ControlPlane;

/// Runs `csi-provisioner release-node <args>` as the admin in the scenario's directory (where
/// the default state file goes); (exit code, stdout + stderr).
fn release_node(s: &Scenario, args: &[&str]) -> (i32, String) {
    release_node_as(s, ControlPlane::shared().kubeconfig(), args)
}

/// The command's output `out` says each of `wanted`.
fn assert_says(out: &str, wanted: &[&str]) {
    for w in wanted {
        assert!(out.contains(w), "{out}");
    }
}

/// [`release_node`] with the credentials of `kubeconfig`.
fn release_node_as(s: &Scenario, kubeconfig: &std::path::Path, args: &[&str]) -> (i32, String) {
    let out = std::process::Command::new(testenv::workspace_binary("csi-provisioner"))
        .arg("release-node")
        .args(args)
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .env_remove("KUBECONFIG")
        .current_dir(&s.dir)
        .output()
        .expect("run csi-provisioner release-node");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "release-node {args:?}: exit {:?}\n{text}",
        out.status.code()
    );
    (out.status.code().unwrap_or(-1), text)
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn release_node_frees_a_lost_nodes_claims_for_provisioning_elsewhere() {
    let (s, mut nodes) = distributed(
        "nd-release",
        &[("a", "100Gi"), ("b", "100Gi")],
        &["--node-deployment-base-delay=2s"],
    )
    .await;
    let class = s.class("imm", "Immediate", json!({})).await;
    // As if the scheduler had picked node a for it.
    let on_a = json!({"metadata": {"annotations": {
        "volume.kubernetes.io/selected-node": nodes[0].node}}});
    s.claim("data", &class, "5Gi", on_a).await;
    let before = s.wait_bound("data").await;
    let old_pv = before.spec.clone().unwrap().volume_name.unwrap();
    assert_eq!(nodes[0].mock.succeeded("CreateVolume"), 1);

    // While the node exists, nothing is released.
    let (code, out) = release_node(&s, &[&nodes[0].node, "--dry-run=false"]);
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("still exists"), "{out}");
    assert!(s.volumes().get_opt(&old_pv).await.unwrap().is_some());

    // Node a is lost for good.
    lose_node(&s, &mut nodes[0]).await;
    // Claims the scheduler had sent to node a, without volumes: one waiting, and one deleted
    // while a's instance held it with our finalizer. Nobody else will ever act on them.
    let sent_to_a = |finalizers: serde_json::Value| {
        json!({"metadata": {"finalizers": finalizers, "annotations": {
            "volume.kubernetes.io/selected-node": nodes[0].node,
            "volume.kubernetes.io/storage-provisioner": s.driver}}})
    };
    s.claim("waiting", &class, "5Gi", sent_to_a(json!([])))
        .await;
    s.claim(
        "doomed",
        &class,
        "5Gi",
        sent_to_a(json!([support::CREATING])),
    )
    .await;
    s.delete_claim("doomed").await;

    // A dry run (the default) lists the volume and its claim and changes nothing.
    let driver = format!("--driver-name={}", s.driver);
    let (code, out) = release_node(&s, &[&nodes[0].node, &driver]);
    assert_eq!(code, 0, "{out}");
    assert_says(
        &out,
        &[
            "1 PersistentVolume(s) pinned to it",
            &old_pv,
            &format!("claim {}/data", s.ns),
            "2 claim(s) sent to it without a volume",
            &format!("claim {}/waiting (waiting", s.ns),
            &format!("claim {}/doomed (deleted", s.ns),
        ],
    );
    assert!(out.contains("dry run: nothing changed"), "{out}");
    assert!(s.volumes().get_opt(&old_pv).await.unwrap().is_some());
    let same = s.claims().get("data").await.unwrap();
    assert_eq!(same.metadata.uid, before.metadata.uid);
    assert!(s.claims().get_opt("doomed").await.unwrap().is_some());

    // The provisioner's own ServiceAccount may not delete or create claims: the release
    // stops before its first write, rather than after a PV is gone and its claim is not back.
    let sa = deploy::world::grant_shipped_rbac(&s, |_| {}).await;
    let (code, out) = release_node_as(&s, &sa, &[&nodes[0].node, &driver, "--dry-run=false"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("may not delete persistentvolumeclaims, create persistentvolumeclaims; nothing was changed"),
        "{out}"
    );
    assert!(s.volumes().get_opt(&old_pv).await.unwrap().is_some());

    // Node a's last capacity writes are recent, a sign of life: the survivor removes its
    // objects first (the Node is gone), as it does within a poll interval.
    eventually(
        "node a's capacity objects removed by the survivor",
        WAIT,
        || async {
            let a = &nodes[0].node;
            let left = capacity_objects(&s).await.into_iter().any(|c| {
                c.node_topology
                    .and_then(|t| t.match_labels)
                    .is_some_and(|l| l.values().any(|v| v == a))
            });
            (!left).then_some(())
        },
    )
    .await;
    // For real: the PV goes, the claim comes back and gets a volume on node b.
    let (code, out) = release_node(&s, &[&nodes[0].node, &driver, "--dry-run=false"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&format!("{old_pv}: deleted")), "{out}");
    assert!(out.contains("created again"), "{out}");
    support::wait_gone(&s.volumes(), &old_pv).await;
    let after = s.wait_bound("data").await;
    assert_ne!(after.metadata.uid, before.metadata.uid);
    let new_pv = s
        .volumes()
        .get(&after.spec.unwrap().volume_name.unwrap())
        .await
        .unwrap();
    assert_eq!(pv_node(&new_pv), nodes[1].node);
    // The waiting claim is taken by node b; the deleted one goes.
    assert!(out.contains("waiting: selected node removed"), "{out}");
    assert!(out.contains("doomed: our finalizers removed"), "{out}");
    s.wait_bound("waiting").await;
    support::wait_gone(&s.claims(), "doomed").await;
    assert_eq!(nodes[1].mock.succeeded("CreateVolume"), 2);
    // The lost node's driver was never asked to delete anything (it is gone).
    assert_eq!(nodes[0].mock.calls_of("DeleteVolume").len(), 0);
}

/// A lost node's PV whose claim was bound to another PV meanwhile (its `claimRef` still names
/// the claim's UID): `release-node` deletes only that stale PV. The claim keeps its binding and
/// data; deleting and creating it again, as before, would have released the other PV.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn release_node_leaves_a_claim_bound_elsewhere_alone() {
    let s = Scenario::new("nd-release-stale").await;
    let lost = format!("{}-lost", s.ns);
    let other = format!("{}-other", s.ns);
    let stale = format!("{}-stale", s.ns);
    let pv = |name: &str, extra: serde_json::Value| -> PersistentVolume {
        let mut v = json!({"metadata": {"name": name}, "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
            "csi": {"driver": s.driver, "volumeHandle": name}}});
        for (k, x) in extra.as_object().unwrap() {
            v["spec"][k] = x.clone();
        }
        serde_json::from_value(v).unwrap()
    };
    s.volumes()
        .create(&PostParams::default(), &pv(&other, json!({})))
        .await
        .unwrap();
    s.claim("data", "", "1Gi", json!({"spec": {"volumeName": other}}))
        .await;
    let bound = s.wait_bound("data").await;
    // The lost node's PV for the same claim, saved after a slow call there. A provisioned
    // Delete PV keeps the claim's UID when kube-controller-manager releases it (it clears the
    // UID of a PV made by hand), and no provisioner of this driver runs to delete it.
    let on_lost = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": [lost]}]}]}});
    let claim_ref = json!({"namespace": s.ns, "name": "data", "uid": bound.metadata.uid});
    let mut provisioned = pv(
        &stale,
        json!({"nodeAffinity": on_lost, "claimRef": claim_ref,
               "persistentVolumeReclaimPolicy": "Delete"}),
    );
    provisioned.metadata.annotations = Some(BTreeMap::from([(
        "pv.kubernetes.io/provisioned-by".to_string(),
        s.driver.clone(),
    )]));
    s.volumes()
        .create(&PostParams::default(), &provisioned)
        .await
        .unwrap();
    let released = support::eventually("the stale PV to be Released", WAIT, || async {
        let p = s.volumes().get(&stale).await.ok()?;
        (p.status?.phase.as_deref() == Some("Released")).then_some(p.spec?.claim_ref?)
    })
    .await;
    assert_eq!(released.uid, bound.metadata.uid);

    let driver = format!("--driver-name={}", s.driver);
    let (code, out) = release_node(&s, &[&lost, &driver, "--dry-run=false"]);

    assert_eq!(code, 0, "{out}");
    assert!(out.contains("1 PersistentVolume(s) pinned to it"), "{out}");
    assert!(out.contains(&format!("{stale}: deleted")), "{out}");
    assert!(!out.contains("created again"), "{out}");
    support::wait_gone(&s.volumes(), &stale).await;
    let after = s.claims().get("data").await.unwrap();
    assert_eq!(after.metadata.uid, bound.metadata.uid);
    assert_eq!(after.metadata.deletion_timestamp, None);
    assert_eq!(
        after.spec.unwrap().volume_name.as_deref(),
        Some(other.as_str())
    );
    let kept = s.volumes().get(&other).await.unwrap();
    assert_eq!(kept.status.unwrap().phase.as_deref(), Some("Bound"));
}

/// A static PV of the scenario's driver pinned to `node` (which has no Node object), and claim
/// "data" bound to it, with `finalizers` besides kube-controller-manager's; returns (PV name,
/// the bound claim). No provisioner runs: only release-node acts on them.
async fn bound_on(
    s: &Scenario,
    node: &str,
    finalizers: &[&str],
) -> (String, PersistentVolumeClaim) {
    let pv_name = format!("{}-lost", s.ns);
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": pv_name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                 "csi": {"driver": s.driver, "volumeHandle": pv_name},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}
    }))
    .unwrap();
    s.volumes()
        .create(&PostParams::default(), &pv)
        .await
        .unwrap();
    let pre_bound = json!({
        "metadata": {"labels": {"app": "db"}, "finalizers": finalizers},
        "spec": {"volumeName": pv_name}});
    s.claim("data", "", "1Gi", pre_bound).await;
    (pv_name, s.wait_bound("data").await)
}

/// Successful creates of claim `name` recorded by the API server, and refused ones.
fn creates_of(s: &Scenario, name: &str) -> (usize, usize) {
    let log = ControlPlane::shared().audit_log();
    let creates: Vec<_> = testenv::audit::claim_writes(&log, &s.ns)
        .unwrap()
        .into_iter()
        .filter(|w| w.verb == "create" && w.name == name)
        .collect();
    let ok = creates.iter().filter(|w| w.code == Some(201)).count();
    (ok, creates.len() - ok)
}

/// A claim being deleted (Terminating: held by a finalizer, as pvc-protection holds it while its
/// pod is stuck on the lost node) is let go: its PV goes, our finalizer on it goes, and it is
/// never created again. Before, its finalizers were stripped and it came back, empty.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn release_node_lets_a_terminating_claim_go_and_never_creates_it_again() {
    let s = Scenario::new("nd-release-term").await;
    let lost = format!("{}-gone", s.ns);
    let hold = "test.example.com/hold";
    let (pv, before) = bound_on(&s, &lost, &[hold, support::CREATING]).await;
    s.delete_claim("data").await;
    let terminating = s.claims().get("data").await.unwrap();
    assert!(terminating.metadata.deletion_timestamp.is_some());

    let driver = format!("--driver-name={}", s.driver);
    let (code, dry) = release_node(&s, &[&lost, &driver]);
    assert_eq!(code, 0, "{dry}");
    let (code, out) = release_node(&s, &[&lost, &driver, "--dry-run=false"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&format!("{pv}: deleted")), "{out}");
    assert!(!out.contains("created again (uid"), "{out}");
    support::wait_gone(&s.volumes(), &pv).await;
    // Still the same incarnation, still being deleted, without our finalizer; the other
    // holder's finalizer is not ours to remove.
    let after = s.claims().get("data").await.unwrap();
    assert_eq!(after.metadata.uid, before.metadata.uid);
    assert!(after.metadata.deletion_timestamp.is_some());
    let finalizers = after.metadata.finalizers.clone().unwrap_or_default();
    assert!(
        !finalizers.iter().any(|f| f == support::CREATING),
        "{finalizers:?}"
    );
    assert!(finalizers.iter().any(|f| f == hold), "{finalizers:?}");
    // Once its holder lets go, it is gone for good: one create ever (the test's).
    // A patch, not a PUT of the copy read above: kube-controller-manager may write the
    // claim in between.
    let no_finalizers = serde_json::json!({"metadata": {"finalizers": null}});
    s.claims()
        .patch(
            "data",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&no_finalizers),
        )
        .await
        .unwrap();
    support::wait_gone(&s.claims(), "data").await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert!(s.claims().get_opt("data").await.unwrap().is_none());
    assert_eq!(creates_of(&s, "data"), (1, 0));
    assert!(
        dry.contains("being deleted: let go, not created again"),
        "{dry}"
    );
}

/// Refuses every claim create in the scenario's namespace (a ValidatingAdmissionPolicy, as a
/// webhook or a namespace at its quota would) until [`support::drop_validating_policy`].
async fn refuse_claims(s: &Scenario) -> String {
    let name = format!("{}-no-claims", s.ns);
    support::create_validating_policy(
        s,
        &name,
        json!({
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["persistentvolumeclaims"]}]},
            "validations": [{"expression": format!("request.namespace != '{}'", s.ns),
                "message": "test: claim creation refused"}],
        }),
    )
    .await;
    wait_claim_create(s, false).await;
    name
}

/// Waits until a dry-run claim create is refused (`allowed` false) or allowed.
async fn wait_claim_create(s: &Scenario, allowed: bool) {
    let probe: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "probe"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                 "resources": {"requests": {"storage": "1Gi"}}}}))
    .unwrap();
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    eventually("the policy to take effect", WAIT, || async {
        (s.claims().create(&dry, &probe).await.is_ok() == allowed).then_some(())
    })
    .await;
}

/// A claim whose create is refused is never lost: its spec is in the state file (written
/// before anything changed), the run exits non-zero naming the file, and a re-run once the
/// refusal is lifted creates it from there, with the same spec, once. Before, the run aborted
/// after deleting the claim and a re-run found nothing to do.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_refused_claim_is_kept_in_the_state_file_and_created_by_a_rerun() {
    let s = Scenario::new("nd-release-file").await;
    let lost = format!("{}-gone", s.ns);
    let (pv, before) = bound_on(&s, &lost, &[]).await;
    let policy = refuse_claims(&s).await;

    let driver = format!("--driver-name={}", s.driver);
    let run = [
        lost.as_str(),
        &driver,
        "--dry-run=false",
        "--retry-timeout=4s",
    ];
    let (code, out) = release_node(&s, &run);
    let file = s.dir.join(format!("release-node-{lost}.json"));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("{pv}: deleted")), "{out}");
    assert!(out.contains("trying again in"), "{out}");
    assert!(
        out.contains(&format!(
            "claim(s) {}/data could not be created again",
            s.ns
        )),
        "{out}"
    );
    assert!(out.contains(&format!("release-node-{lost}.json")), "{out}");
    support::wait_gone(&s.volumes(), &pv).await;
    assert!(s.claims().get_opt("data").await.unwrap().is_none());
    // The file holds the claim as read, spec and all.
    let record: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(record["node"], json!(lost));
    let entries = record["claims"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{record}");
    assert_eq!(entries[0]["state"], "deleting");
    let kept: PersistentVolumeClaim = serde_json::from_value(entries[0]["claim"].clone()).unwrap();
    assert_eq!(kept.metadata.uid, before.metadata.uid);
    assert_eq!(kept.spec, before.spec);
    let (created, refused) = creates_of(&s, "data");
    assert_eq!(created, 1);
    assert!(refused >= 2, "retried: {refused} refused creates");

    // The refusal is lifted; the same command again creates the claim from the file.
    support::drop_validating_policy(&s, &policy).await;
    wait_claim_create(&s, true).await;
    let (code, out) = release_node(&s, &[lost.as_str(), &driver, "--dry-run=false"]);
    let again = s.claims().get_opt("data").await.unwrap();
    assert!(again.is_some(), "not created again from the file: {out}");
    assert_eq!(code, 0, "{out}");
    assert_says(
        &out,
        &[
            "0 PersistentVolume(s) pinned to it",
            "1 claim(s) an earlier run did not finish",
            &format!("claim {}/data: created again", s.ns),
        ],
    );
    let again = s.claims().get("data").await.unwrap();
    assert_ne!(again.metadata.uid, before.metadata.uid);
    let mut want = before.spec.clone().unwrap();
    want.volume_name = None;
    assert_eq!(again.spec.clone().unwrap(), want);
    assert_eq!(again.labels().get("app").map(String::as_str), Some("db"));
    assert_eq!(creates_of(&s, "data").0, 2);
    let record: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(record["claims"][0]["state"], "recreated");
    assert_eq!(
        record["claims"][0]["recreatedUid"],
        json!(again.metadata.uid)
    );

    // A third run finds it done: the claim is not replaced, nothing is created.
    let (code, out) = release_node(&s, &[lost.as_str(), &driver, "--dry-run=false"]);
    assert_eq!(code, 0, "{out}");
    let same = s.claims().get("data").await.unwrap();
    assert_eq!(same.metadata.uid, again.metadata.uid);
    assert_eq!(creates_of(&s, "data").0, 2);
}

/// A node whose Node object is gone but whose kubelet still renews its Lease is alive: the
/// release is refused and changes nothing; `--force` releases anyway.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_node_whose_kubelet_renews_its_lease_is_not_released_without_force() {
    use k8s_openapi::api::coordination::v1::Lease;
    let s = Scenario::new("nd-release-alive").await;
    let lost = format!("{}-gone", s.ns);
    let (pv, before) = bound_on(&s, &lost, &[]).await;
    let leases: Api<Lease> = Api::namespaced(s.client.clone(), "kube-node-lease");
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": lost},
        "spec": {"holderIdentity": lost, "leaseDurationSeconds": 40, "renewTime": now}}))
    .unwrap();
    leases.create(&PostParams::default(), &lease).await.unwrap();

    let driver = format!("--driver-name={}", s.driver);
    let (code, out) = release_node(&s, &[lost.as_str(), &driver, "--dry-run=false"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("shows signs of life"), "{out}");
    assert!(
        out.contains("renewed its Lease in kube-node-lease"),
        "{out}"
    );
    assert!(out.contains("--force"), "{out}");
    assert!(out.contains("nothing was changed"), "{out}");
    // Nothing changed: the PV is there, the claim is the same, no state file.
    let pinned: Vec<_> = s
        .volumes()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.name_any() == pv)
        .collect();
    assert_eq!(pinned.len(), 1);
    assert_eq!(
        s.claims().get("data").await.unwrap().metadata.uid,
        before.metadata.uid
    );
    assert!(!s.dir.join(format!("release-node-{lost}.json")).exists());
    assert_eq!(creates_of(&s, "data"), (1, 0));

    let (code, out) = release_node(&s, &[lost.as_str(), &driver, "--dry-run=false", "--force"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("signs of life ignored (--force)"), "{out}");
    support::wait_gone(&s.volumes(), &pv).await;
    let again = s.claims().get("data").await.unwrap();
    assert_ne!(again.metadata.uid, before.metadata.uid);
    assert_eq!(creates_of(&s, "data").0, 2);
    leases
        .delete(&lost, &DeleteParams::default())
        .await
        .unwrap();
}

/// A claim the lost node gave back (it may have made a volume for it first) holds that node's
/// own finalizer wherever it went since; only that node's instance would ever remove it, so
/// release-node does: from a claim waiting on another node (its creating-volume finalizer is
/// the other node's and stays), and from a deleted one it alone held (it goes). Another node's
/// finalizer is left alone, and no claim is created again.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn release_node_drops_the_lost_nodes_own_finalizer_wherever_its_claim_went() {
    let s = Scenario::new("nd-release-fin").await;
    let class = s.class("imm", "Immediate", json!({})).await;
    let lost = format!("{}-gone", s.ns);
    let alive = format!("{}-alive", s.ns);
    let lost_fin = provisioning::distributed::node_finalizer(&lost);
    let alive_fin = provisioning::distributed::node_finalizer(&alive);
    let claim = |name: &str, node: &str, finalizers: Vec<&str>| -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": name, "finalizers": finalizers, "annotations": {
                "volume.kubernetes.io/selected-node": node,
                "volume.kubernetes.io/storage-provisioner": s.driver}},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                     "resources": {"requests": {"storage": "1Gi"}}}}))
        .unwrap()
    };
    let made = [
        claim("moved", &alive, vec![support::CREATING, &lost_fin]),
        claim("ended", &lost, vec![&lost_fin]),
        claim("others", &alive, vec![&alive_fin]),
    ];
    let mut uids = BTreeMap::new();
    for c in &made {
        let created = s.claims().create(&PostParams::default(), c).await.unwrap();
        uids.insert(c.name_any(), created.metadata.uid.unwrap());
    }
    s.delete_claim("ended").await;
    assert!(s.claims().get_opt("ended").await.unwrap().is_some());

    let driver = format!("--driver-name={}", s.driver);
    let (code, dry) = release_node(&s, &[&lost, &driver]);
    assert_eq!(code, 0, "{dry}");
    assert!(dry.contains("2 claim(s)"), "{dry}");
    let (code, out) = release_node(&s, &[&lost, &driver, "--dry-run=false"]);
    assert_eq!(code, 0, "{out}");

    // kube-controller-manager's pvc-protection is not ours to judge here.
    let finalizers = |c: &PersistentVolumeClaim| -> Vec<String> {
        let all = c.metadata.finalizers.clone().unwrap_or_default();
        all.into_iter()
            .filter(|f| f != "kubernetes.io/pvc-protection")
            .collect()
    };
    let moved = s.claims().get("moved").await.unwrap();
    assert_eq!(moved.metadata.uid.as_ref(), uids.get("moved"));
    assert_eq!(finalizers(&moved), [support::CREATING], "moved");
    let others = s.claims().get("others").await.unwrap();
    assert_eq!(finalizers(&others), [alive_fin.as_str()], "others");
    support::wait_gone(&s.claims(), "ended").await;
    for name in ["moved", "ended", "others"] {
        assert_eq!(creates_of(&s, name), (1, 0), "{name}");
    }
    // Let the claim left go.
    let no_finalizers = json!({"metadata": {"finalizers": null}});
    for name in ["moved", "others"] {
        s.claims()
            .patch(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&no_finalizers),
            )
            .await
            .unwrap();
    }
}
