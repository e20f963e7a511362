//! Volumes from data sources on the real control plane: restores from VolumeSnapshots taken by
//! the real snapshot controller and csi-snapshotter (external-snapshotter v8.7.0), and clones,
//! both filled by csi-driver-host-path's `hostpathplugin`, whose state file records where each
//! volume came from and whose volume directories hold the data.

use crate::support;
use crate::support::WAIT;
use crate::support::deploy;
use std::path::Path;
use std::time::Duration;

use crate::support::{Scenario, eventually, wait_gone};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::Api;
use kube::api::{ApiResource, DeleteParams, DynamicObject, PostParams};
use provisioning::names;
use serde_json::json;
use testenv::{ControlPlane, HOSTPATH_TOPOLOGY_KEY, HostpathPlugin, Provisioner};

/// One hostpathplugin with csi-snapshotter beside it and our provisioner, for one namespace
/// (the snapshot controller is shared: [`snapshot_controller`]).
struct World {
    s: Scenario,
    plugin: HostpathPlugin,
    snapshotter: Option<testenv::Snapshotter>,
    _prov: Provisioner,
    class: String,
    /// The provisioner's HTTP endpoint (metrics).
    port: u16,
}

/// The control plane of these tests: their snapshot-controller acts on every snapshot in the
/// cluster, so they get one of their own (as they had when they were a test binary of their
/// own), and tests elsewhere that make snapshots by hand never meet it.
fn control_plane() -> &'static ControlPlane {
    ControlPlane::shared_group("data_sources")
}

/// Starts the one snapshot-controller of these tests, once the CRDs are there. It runs
/// without leader election, so one per test would all act on every snapshot, and their writes
/// would conflict with each other's and with ours. It dies with the test process.
fn snapshot_controller() {
    static CONTROLLER: std::sync::Mutex<Option<testenv::SnapshotController>> =
        std::sync::Mutex::new(None);
    let mut controller = CONTROLLER.lock().unwrap_or_else(|e| e.into_inner());
    if controller.is_none() {
        let cp = control_plane();
        *controller = Some(testenv::SnapshotController::start(
            &cp.dir().join("snapshot-controller"),
            cp.kubeconfig(),
        ));
    }
}

/// How the provisioner talks to the API server.
enum Identity {
    Admin,
    /// As the ServiceAccount of the shipped RBAC, with this change to its objects.
    ShippedRbac(fn(&mut Vec<serde_json::Value>)),
}

impl World {
    async fn start(prefix: &str, prov_args: &[&str]) -> World {
        World::start_as(prefix, prov_args, Identity::Admin).await
    }

    async fn start_as(prefix: &str, prov_args: &[&str], identity: Identity) -> World {
        let mut s = Scenario::new_on(control_plane(), prefix).await;
        s.driver = format!("{}.hostpath.csi", s.ns);
        let node = format!("{}-n1", s.ns);
        let kubeconfig = control_plane().kubeconfig();
        testenv::install_snapshot_crds(&s.client)
            .await
            .expect("snapshot CRDs");
        testenv::create_csi_driver(&s.client, &s.driver, true).await;
        testenv::create_fake_nodes(&s.client, &s.driver, HOSTPATH_TOPOLOGY_KEY, &[&node]).await;
        let plugin = HostpathPlugin::start(&s.dir.join("hp"), &s.driver, &node, &[]);
        snapshot_controller();
        let snapshotter =
            testenv::Snapshotter::start(&s.dir.join("snapshotter"), kubeconfig, &plugin.socket);
        let port = support::free_port();
        let http = format!("--http-endpoint=127.0.0.1:{port}");
        let prov_kubeconfig = match identity {
            Identity::Admin => kubeconfig.to_path_buf(),
            Identity::ShippedRbac(edit) => deploy::world::grant_shipped_rbac(&s, edit).await,
        };
        let prov = Provisioner::start(
            &s.dir,
            "csi-provisioner",
            &prov_kubeconfig,
            &plugin.socket,
            &[
                &["-v=5", "--snapshot-orphan-sweep-interval=2s", &http],
                prov_args,
            ]
            .concat(),
            &[
                ("NAMESPACE", s.ns.as_str()),
                ("POD_NAMESPACE", s.ns.as_str()),
            ],
        );
        let class = s
            .class("imm", "Immediate", json!({"reclaimPolicy": "Delete"}))
            .await;
        let snapshot_class = json!({
            "apiVersion": "snapshot.storage.k8s.io/v1",
            "kind": "VolumeSnapshotClass",
            "metadata": {"name": s.ns},
            "driver": s.driver,
            "deletionPolicy": "Delete",
        });
        create(
            &s,
            testenv::volume_snapshot_class_resource(),
            false,
            snapshot_class,
        )
        .await;
        World {
            s,
            plugin,
            snapshotter: Some(snapshotter),
            _prov: prov,
            class,
            port,
        }
    }

    /// The hostpath volume behind a bound claim.
    async fn volume_of(&self, claim: &str) -> testenv::HostpathVolume {
        let pvc = self.s.wait_bound(claim).await;
        let pv = pvc.spec.and_then(|s| s.volume_name).expect("bound");
        let handle = self.s.volume_handle(&pv).await;
        self.plugin
            .volumes()
            .into_iter()
            .find(|v| v.vol_id == handle)
            .unwrap_or_else(|| panic!("no hostpath volume {handle}"))
    }

    /// The content source of the successful CreateVolume of the claim's volume, from the
    /// plugin's own call log (its state file does not keep it).
    async fn content_source(&self, claim: &str) -> serde_json::Value {
        let pvc = self.s.wait_bound(claim).await;
        let pv = pvc.spec.and_then(|s| s.volume_name).expect("bound");
        let calls = self.plugin.calls_of("CreateVolume");
        let call = calls
            .iter()
            .find(|c| c["Request"]["name"] == pv.as_str() && c["Error"] == "")
            .unwrap_or_else(|| panic!("no successful CreateVolume of {pv}"));
        call["Request"]["volume_content_source"]["Type"].clone()
    }

    /// CreateVolume calls the plugin answered without an error.
    fn created(&self) -> usize {
        let calls = self.plugin.calls_of("CreateVolume");
        calls.iter().filter(|c| c["Error"] == "").count()
    }

    fn snapshots(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.s.client.clone(),
            &self.s.ns,
            &testenv::volume_snapshot_resource(),
        )
    }

    /// Takes a snapshot of `claim` and waits until it can be restored from.
    async fn snapshot(&self, name: &str, claim: &str) -> DynamicObject {
        let body = json!({
            "apiVersion": "snapshot.storage.k8s.io/v1",
            "kind": "VolumeSnapshot",
            "metadata": {"name": name, "namespace": self.s.ns},
            "spec": {"volumeSnapshotClassName": self.s.ns, "source": {"persistentVolumeClaimName": claim}},
        });
        create(&self.s, testenv::volume_snapshot_resource(), true, body).await;
        let api = self.snapshots();
        eventually(&format!("snapshot {name} readyToUse"), WAIT, || async {
            let s = api.get(name).await.ok()?;
            (s.data["status"]["readyToUse"] == true).then_some(s)
        })
        .await
    }

    async fn claim_from(
        &self,
        name: &str,
        size: &str,
        source: serde_json::Value,
    ) -> PersistentVolumeClaim {
        self.s
            .claim(
                name,
                &self.class,
                size,
                json!({"spec": {"dataSource": source}}),
            )
            .await
    }
}

async fn create(s: &Scenario, ar: ApiResource, namespaced: bool, body: serde_json::Value) {
    let api: Api<DynamicObject> = if namespaced {
        Api::namespaced_with(s.client.clone(), &s.ns, &ar)
    } else {
        Api::all_with(s.client.clone(), &ar)
    };
    let object: DynamicObject = serde_json::from_value(body).expect("object");
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("creating {}: {e}", ar.kind));
}

fn snapshot_source(name: &str) -> serde_json::Value {
    json!({"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": name})
}

fn claim_source(name: &str) -> serde_json::Value {
    json!({"kind": "PersistentVolumeClaim", "name": name})
}

fn write_marker(dir: &str, text: &str) {
    std::fs::write(Path::new(dir).join("marker"), text).expect("writing the marker");
}

fn read_marker(dir: &str) -> String {
    std::fs::read_to_string(Path::new(dir).join("marker")).unwrap_or_default()
}

/// Adds `finalizer` to `name` as a user would. Controllers may be writing the object at the
/// same time (snapshot-controller making a snapshot ready, our provisioner dropping its
/// creating-volume finalizer): re-read and retry on a conflict.
async fn add_finalizer<K>(api: &Api<K>, name: &str, finalizer: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    eventually(
        &format!("finalizer {finalizer} on {name}"),
        WAIT,
        || async {
            let mut object = api.get(name).await.unwrap();
            object
                .meta_mut()
                .finalizers
                .get_or_insert_with(Vec::new)
                .push(finalizer.into());
            match api.replace(name, &PostParams::default(), &object).await {
                Ok(_) => Some(()),
                Err(kube::Error::Api(e)) if e.code == 409 => None,
                Err(e) => panic!("adding finalizer {finalizer} to {name}: {e}"),
            }
        },
    )
    .await;
}

/// Puts our finalizer on snapshot `name` and has a ValidatingAdmissionPolicy refuse every
/// update that would take it off again; returns the policy's name. The finalizer is
/// re-added until the policy is in force, since a sweep may take it off before.
async fn keep_finalizer_on(w: &World, name: &str) -> String {
    let policy = format!("{}-keep-finalizer", w.s.ns);
    let f = names::SNAPSHOT_SOURCE_FINALIZER;
    let had =
        format!("has(oldObject.metadata.finalizers) && '{f}' in oldObject.metadata.finalizers");
    let has = format!("has(object.metadata.finalizers) && '{f}' in object.metadata.finalizers");
    support::create_validating_policy(
        &w.s,
        &policy,
        json!({
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": ["snapshot.storage.k8s.io"],
                "apiVersions": ["*"], "operations": ["UPDATE"], "resources": ["volumesnapshots"]}]},
            "validations": [{"expression": format!(
                "!(object.metadata.namespace == '{}' && object.metadata.name == '{name}' && ({had}) && !({has}))",
                w.s.ns),
                "message": "test: this snapshot keeps its finalizer"}],
        }),
    )
    .await;
    let api = w.snapshots();
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    eventually("the policy to keep the finalizer", WAIT, || async {
        let mut s = api.get(name).await.unwrap();
        if !finalizers(&s.metadata).iter().any(|x| x == f) {
            add_finalizer(&api, name, f).await;
            return None;
        }
        s.metadata.finalizers.as_mut().unwrap().retain(|x| x != f);
        api.replace(name, &dry, &s).await.is_err().then_some(())
    })
    .await;
    policy
}

fn finalizers(meta: &kube::api::ObjectMeta) -> Vec<String> {
    meta.finalizers.clone().unwrap_or_default()
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn restore_from_a_snapshot_and_clone_a_claim_carry_the_data() {
    // No orphan sweep: it would take our finalizer off on its own (the release below must do
    // it), and its writes to other tests' snapshots would blur the request counts.
    let w = World::start("ds-fill", &["--snapshot-orphan-sweep-interval=0"]).await;
    w.s.claim("src", &w.class, "1Gi", json!({})).await;
    let source = w.volume_of("src").await;
    write_marker(&source.vol_path, "written before the snapshot");

    let snap = w.snapshot("snap", "src").await;
    w.claim_from("restored", "1Gi", snapshot_source("snap"))
        .await;
    let restored = w.volume_of("restored").await;
    assert_eq!(
        read_marker(&restored.vol_path),
        "written before the snapshot"
    );
    // The driver was asked to restore exactly the snapshot's handle.
    let content_name = snap.data["status"]["boundVolumeSnapshotContentName"]
        .as_str()
        .expect("bound content")
        .to_string();
    let contents: Api<DynamicObject> = Api::all_with(
        w.s.client.clone(),
        &testenv::volume_snapshot_content_resource(),
    );
    let content = contents.get(&content_name).await.unwrap();
    let handle = content.data["status"]["snapshotHandle"].clone();
    assert!(handle.is_string(), "{content:?}");
    assert_eq!(
        w.content_source("restored").await,
        json!({"Snapshot": {"snapshot_id": handle}})
    );
    // Our protection finalizer was put on for the restore and comes off (on the background
    // lane) once the volume exists.
    let after = eventually(
        "the snapshot's protection finalizer removed",
        WAIT,
        || async {
            let after = w.snapshots().get("snap").await.unwrap();
            (!finalizers(&after.metadata)
                .iter()
                .any(|f| f == names::SNAPSHOT_SOURCE_FINALIZER))
            .then_some(after)
        },
    )
    .await;
    // Those two writes changed the finalizers only: every field manager the snapshot had
    // before (its creator, snapshot-controller) still owns its fields.
    let managers = |o: &DynamicObject| -> std::collections::BTreeSet<String> {
        o.metadata
            .managed_fields
            .iter()
            .flatten()
            .filter_map(|m| m.manager.clone())
            .collect()
    };
    let (before, now) = (managers(&snap), managers(&after));
    assert!(
        !before.is_empty() && before.is_subset(&now),
        "field managers before the restore {before:?}, after {now:?}"
    );
    // The snapshot was ready before the claim came: the restore read it from the watch's
    // cache, not from the API server (counted by our client, as requests are sent). Only a
    // write that met someone else's (a 409: snapshot-controller's status, another test's
    // orphan sweep) re-reads the snapshot, as it should.
    let sent = |metrics: &str, verb: &str, resource: &str| {
        support::sample(
            metrics,
            "csi_provisioner_api_requests_total",
            &[("verb", verb), ("resource", resource)],
        )
        .unwrap_or(0.0)
    };
    // Our finalizer was added, and its removal sent (another test's sweep may have taken it
    // off first: then ours is a 409).
    let metrics = eventually("our removal of the finalizer", WAIT, || async {
        let metrics = support::scrape(w.port).await?;
        (sent(&metrics, "update", "volumesnapshots") >= 2.0).then_some(metrics)
    })
    .await;
    let requests = |verb: &str, resource: &str| sent(&metrics, verb, resource);
    let conflicts = support::sample(
        &metrics,
        "rest_client_requests_total",
        &[("code", "409"), ("method", "PUT")],
    )
    .unwrap_or(0.0);
    let gets = requests("get", "volumesnapshots");
    // Each re-read follows a 409 of ours, and one of the snapshot's updates (at least the
    // first add) went through: the 409s on snapshots are at most the updates less one.
    let updates = requests("update", "volumesnapshots");
    assert!(
        gets <= conflicts && gets <= updates - 1.0,
        "{gets} GETs of the snapshot, only {conflicts} of them after a conflict \
         ({updates} snapshot updates)"
    );
    assert_eq!(
        requests("get", "volumesnapshotcontents"),
        0.0,
        "GETs of the content"
    );
    // Events are sent in the background: wait for it.
    w.s.wait_event("restored", "ProvisioningSucceeded", "")
        .await;

    // A clone copies the source volume and protects the source while it is filled.
    w.claim_from("copy", "1Gi", claim_source("src")).await;
    let copy = w.volume_of("copy").await;
    assert_eq!(read_marker(&copy.vol_path), "written before the snapshot");
    assert_eq!(
        w.content_source("copy").await,
        json!({"Volume": {"volume_id": source.vol_id}})
    );
    let src = w.s.claims().get("src").await.unwrap();
    assert!(
        finalizers(&src.metadata)
            .iter()
            .any(|f| f == names::CLONE_SOURCE_FINALIZER)
    );
    // Exactly one volume per claim: src, restored, copy.
    assert_eq!(w.created(), 3);
    assert_eq!(w.plugin.volumes().len(), 3);

    // No clone waits for the source any more: deleting it goes through.
    w.s.delete_claim("src").await;
    wait_gone(&w.s.claims(), "src").await;
}

/// Upstream's RBAC has no `watch` on VolumeSnapshotContents (ours adds it): under the shipped
/// RBAC without it the content watch turns itself off with one log line, and a restore reads
/// its content with a GET instead.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn without_watch_on_contents_a_restore_reads_its_content_by_get() {
    let w = World::start_as(
        "ds-nowatch",
        &[],
        Identity::ShippedRbac(|objects| {
            let dropped = deploy::drop_verb(objects, "volumesnapshotcontents", "watch");
            assert_eq!(dropped, 1, "the shipped RBAC grants watch on contents once");
        }),
    )
    .await;
    w.s.claim("src", &w.class, "1Gi", json!({})).await;
    let source = w.volume_of("src").await;
    write_marker(&source.vol_path, "before the snapshot");
    w.snapshot("snap", "src").await;
    w.claim_from("restored", "1Gi", snapshot_source("snap"))
        .await;
    let restored = w.volume_of("restored").await;
    assert_eq!(read_marker(&restored.vol_path), "before the snapshot");
    assert!(w.content_source("restored").await["Snapshot"]["snapshot_id"].is_string());
    let log = w._prov.log();
    let off = log
        .lines()
        .filter(|l| {
            l.contains("Not watching") && l.contains("restores read their content with a GET")
        })
        .count();
    assert_eq!(off, 1, "the content watch's off line, once");
    let metrics = support::scrape(w.port).await.expect("metrics");
    let gets = support::sample(
        &metrics,
        "csi_provisioner_api_requests_total",
        &[("verb", "get"), ("resource", "volumesnapshotcontents")],
    )
    .unwrap_or(0.0);
    assert!(gets >= 1.0, "the content was read by GET ({gets})");
    assert_eq!(w.created(), 2, "one volume each for src and restored");
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_pending_clone_holds_its_source_and_says_so() {
    let w = World::start("ds-hold", &[]).await;
    w.s.claim("src", &w.class, "1Gi", json!({})).await;
    let _ = w.volume_of("src").await;
    // Larger than hostpathplugin's largest volume (1 TiB): CreateVolume keeps failing, so the
    // clone stays Pending.
    w.claim_from("stuck", "2Ti", claim_source("src")).await;
    w.s.wait_event("stuck", "ProvisioningFailed", "").await;
    eventually("the source's protection finalizer", WAIT, || async {
        let c = w.s.claims().get("src").await.ok()?;
        finalizers(&c.metadata)
            .iter()
            .any(|f| f == names::CLONE_SOURCE_FINALIZER)
            .then_some(())
    })
    .await;

    w.s.delete_claim("src").await;
    let event =
        w.s.wait_event("src", names::EVENT_WAIT_FOR_CLONES, "stuck")
            .await;
    assert_eq!(
        event.message.as_deref(),
        Some("deletion waits until 1 claim is cloned from this claim: stuck")
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let held =
        w.s.claims()
            .get("src")
            .await
            .expect("the source is still there");
    assert!(held.metadata.deletion_timestamp.is_some());

    // The clone goes: nothing holds the source any more.
    w.s.delete_claim("stuck").await;
    wait_gone(&w.s.claims(), "src").await;
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn refused_sources_get_the_exact_event_and_no_volume_until_fixed() {
    // A first retry two minutes after a failure: only the snapshot watch can bind "later"
    // within the wait below.
    let w = World::start("ds-refuse", &["--retry-interval-start=120s"]).await;
    w.s.claim("src", &w.class, "2Gi", json!({})).await;
    let _ = w.volume_of("src").await;
    w.snapshot("snap", "src").await;
    let before = w.created();

    // Too small for the snapshot: refused, never sent to the driver.
    w.claim_from("small", "1Gi", snapshot_source("snap")).await;
    w.s.wait_event(
        "small",
        "ProvisioningFailed",
        "error getting handle for DataSource Type VolumeSnapshot by Name snap: requested volume size 1073741824 is less than the size 2147483648 for the source snapshot snap",
    )
    .await;
    // A clone smaller than its source.
    w.claim_from("small-copy", "1Gi", claim_source("src")).await;
    w.s.wait_event(
        "small-copy",
        "ProvisioningFailed",
        "error, new PVC request must be greater than or equal in size to the specified PVC data source, requested 1073741824 but source is 2147483648",
    )
    .await;
    // Restoring a filesystem snapshot as a block volume without the content's permission.
    w.s.claim(
        "as-block",
        &w.class,
        "2Gi",
        json!({"spec": {"volumeMode": "Block", "dataSource": snapshot_source("snap")}}),
    )
    .await;
    w.s.wait_event(
        "as-block",
        "ProvisioningFailed",
        "modifies the mode of the source volume but does not have permission to do so",
    )
    .await;
    // A snapshot that does not exist yet: refused until it is taken, then restored.
    w.claim_from("later", "2Gi", snapshot_source("later")).await;
    w.s.wait_event(
        "later",
        "ProvisioningFailed",
        "error getting snapshot later from api server",
    )
    .await;
    // A pre-provisioned snapshot whose content belongs to another driver: the snapshot
    // controller binds the two, and the restore names the content and the class.
    let content = format!("{}-foreign", w.s.ns);
    create(
        &w.s,
        testenv::volume_snapshot_content_resource(),
        false,
        json!({
            "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
            "metadata": {"name": content},
            "spec": {"driver": "other.example.com", "deletionPolicy": "Retain",
                     "source": {"snapshotHandle": "elsewhere"},
                     "volumeSnapshotRef": {"name": "foreign", "namespace": w.s.ns}},
        }),
    )
    .await;
    create(
        &w.s,
        testenv::volume_snapshot_resource(),
        true,
        json!({
            "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
            "metadata": {"name": "foreign", "namespace": w.s.ns},
            "spec": {"source": {"volumeSnapshotContentName": content}},
        }),
    )
    .await;
    let api = w.snapshots();
    eventually("the foreign snapshot to be bound", WAIT, || async {
        let s = api.get("foreign").await.ok()?;
        s.data["status"]["boundVolumeSnapshotContentName"]
            .is_string()
            .then_some(())
    })
    .await;
    w.claim_from("foreign-copy", "2Gi", snapshot_source("foreign"))
        .await;
    w.s.wait_event(
        "foreign-copy",
        "ProvisioningFailed",
        &format!(
            "snapshotcontent {content} for snapshot foreign is not handled by CSI driver of StorageClass {}",
            w.class
        ),
    )
    .await;
    assert_eq!(w.created(), before, "no CreateVolume for a refused source");

    w.snapshot("later", "src").await;
    let _ = w.volume_of("later").await;
    assert!(w.content_source("later").await["Snapshot"]["snapshot_id"].is_string());
    assert_eq!(w.created(), before + 1);
    for claim in ["small", "small-copy", "as-block"] {
        let c = w.s.claims().get(claim).await.unwrap();
        assert_eq!(
            c.status.and_then(|s| s.phase).as_deref(),
            Some("Pending"),
            "{claim}"
        );
    }
}

/// The sweep releases what no pending claim needs, keeps what one does, and goes on past a
/// snapshot that refuses the update ("a-stuck", listed first: a policy keeps our finalizer on
/// it), as upstream.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn the_orphan_sweep_releases_snapshots_no_pending_claim_needs() {
    let w = World::start("ds-sweep", &[]).await;
    w.s.claim("src", &w.class, "1Gi", json!({})).await;
    let _ = w.volume_of("src").await;
    w.snapshot("kept", "src").await;
    w.snapshot("orphan", "src").await;
    w.snapshot("a-stuck", "src").await;
    let policy = keep_finalizer_on(&w, "a-stuck").await;
    // A pending claim still wants "kept" (it is too small to be restored). It is in the
    // provisioner's claim cache before either snapshot carries our finalizer: otherwise a
    // sweep (every 2 s) in between would rightly release "kept" too.
    w.claim_from("waits", "1Mi", snapshot_source("kept")).await;
    w.s.wait_event("waits", "ProvisioningFailed", "is less than the size")
        .await;
    // A pending claim naming "orphan" as another API group's VolumeSnapshot (refused, as
    // upstream) does not want the snapshot, as upstream's sweep.
    w.s.claim(
        "other-group",
        &w.class,
        "1Gi",
        json!({"spec": {"dataSourceRef": {"apiGroup": "example.com", "kind": "VolumeSnapshot", "name": "orphan"}}}),
    )
    .await;
    w.s.wait_event("other-group", "ProvisioningFailed", "right APIGroup")
        .await;
    // Our finalizer by hand on both, as a restore that was interrupted would leave it.
    add_finalizer(&w.snapshots(), "kept", names::SNAPSHOT_SOURCE_FINALIZER).await;
    add_finalizer(&w.snapshots(), "orphan", names::SNAPSHOT_SOURCE_FINALIZER).await;

    let api = w.snapshots();
    eventually(
        "the sweep releases the orphan",
        Duration::from_secs(30),
        || async {
            let s = api.get("orphan").await.ok()?;
            (!finalizers(&s.metadata)
                .iter()
                .any(|f| f == names::SNAPSHOT_SOURCE_FINALIZER))
            .then_some(())
        },
    )
    .await;
    for held in ["kept", "a-stuck"] {
        let held = api.get(held).await.unwrap();
        assert!(
            finalizers(&held.metadata)
                .iter()
                .any(|f| f == names::SNAPSHOT_SOURCE_FINALIZER),
            "{:?}",
            held.metadata.name
        );
    }
    support::drop_validating_policy(&w.s, &policy).await;
    // Deleting the snapshot works once the finalizer is gone.
    api.delete("orphan", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&api, "orphan").await;
}

/// Our mock driver with `--omit-content-source` clones volumes but does not say so: upstream
/// deletes such a volume and retries; so do we, and no PV is ever written for it.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_driver_that_omits_the_content_source_has_its_volume_deleted() {
    let s = Scenario::start("ds-omit", &["--clone-volume", "--omit-content-source"], &[]).await;
    let class = s.class("imm", "Immediate", json!({})).await;
    s.claim("src", &class, "1Gi", json!({})).await;
    let src = s.wait_bound("src").await;
    let src_volume = s
        .volume_handle(src.spec.and_then(|s| s.volume_name).as_deref().unwrap())
        .await;
    let copy = s
        .claim(
            "copy",
            &class,
            "1Gi",
            json!({"spec": {"dataSource": claim_source("src")}}),
        )
        .await;
    s.wait_event(
        "copy",
        "ProvisioningFailed",
        "volume content source missing",
    )
    .await;
    let pv = format!("pvc-{}", copy.metadata.uid.as_deref().unwrap());
    // Every volume the driver made for the clone was deleted again.
    let made = eventually("the clone's volumes deleted", WAIT, || async {
        let made: Vec<String> = s
            .create_calls(&pv)
            .iter()
            .filter_map(|c| {
                c["response"]["volume"]["volume_id"]
                    .as_str()
                    .map(str::to_string)
            })
            .collect();
        let deleted: Vec<String> = s
            .mock()
            .calls_of("DeleteVolume")
            .iter()
            .filter(|c| c.get("response").is_some())
            .filter_map(|c| c["request"]["volume_id"].as_str().map(str::to_string))
            .collect();
        (!made.is_empty() && made.iter().all(|id| deleted.contains(id))).then_some(made)
    })
    .await;
    // The driver was asked to clone the source volume, every time.
    for call in s.create_calls(&pv) {
        assert_eq!(
            call["request"]["volume_content_source"]["volume"]["volume_id"],
            src_volume.as_str(),
            "{call}"
        );
    }
    assert!(!made.is_empty());
    assert_eq!(s.driver_volumes().await, vec![src_volume]);
    assert!(
        s.volumes().get_opt(&pv).await.unwrap().is_none(),
        "no PV for {pv}"
    );
}

/// With the `CrossNamespaceVolumeDataSource` gate a claim may restore or clone from another
/// namespace once a ReferenceGrant there allows it (Gateway API's CRD, v1beta1).
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_source_in_another_namespace_needs_a_reference_grant() {
    let w = World::start(
        "ds-xns",
        &["--feature-gates=CrossNamespaceVolumeDataSource=true"],
    )
    .await;
    testenv::install_reference_grant_crd(&w.s.client)
        .await
        .expect("ReferenceGrant CRD");
    w.s.claim("src", &w.class, "1Gi", json!({})).await;
    let source = w.volume_of("src").await;
    write_marker(&source.vol_path, "from next door");
    w.snapshot("snap", "src").await;

    let mut dst = Scenario::new_on(control_plane(), "ds-xns-dst").await;
    dst.driver = w.s.driver.clone();
    let from = |kind: &str, group: Option<&str>, name: &str| {
        let mut r = json!({"kind": kind, "name": name, "namespace": w.s.ns});
        if let Some(g) = group {
            r["apiGroup"] = json!(g);
        }
        json!({"spec": {"dataSourceRef": r}})
    };
    dst.claim(
        "restored",
        &w.class,
        "1Gi",
        from("VolumeSnapshot", Some("snapshot.storage.k8s.io"), "snap"),
    )
    .await;
    dst.claim(
        "copy",
        &w.class,
        "1Gi",
        from("PersistentVolumeClaim", None, "src"),
    )
    .await;
    // A populator's source across namespaces is checked as well, before the claim is left to
    // the populator (no "Assuming an external populator" while it is refused).
    dst.claim(
        "populated",
        &w.class,
        "1Gi",
        from("Widget", Some("example.com"), "w"),
    )
    .await;
    let denied = |name: &str, kind: &str, source: &str| {
        format!(
            "accessing {}/{source} of {kind} dataSource from {}/{name} isn't allowed",
            w.s.ns, dst.ns
        )
    };
    dst.wait_event(
        "restored",
        "ProvisioningFailed",
        &denied("restored", "VolumeSnapshot", "snap"),
    )
    .await;
    dst.wait_event(
        "copy",
        "ProvisioningFailed",
        &denied("copy", "PersistentVolumeClaim", "src"),
    )
    .await;
    dst.wait_event(
        "populated",
        "ProvisioningFailed",
        &denied("populated", "Widget", "w"),
    )
    .await;
    let populator = |e: &k8s_openapi::api::core::v1::Event| {
        e.message
            .as_deref()
            .is_some_and(|m| m.contains("external populator"))
    };
    let events = dst.events_for("populated").await;
    assert!(
        !events.iter().any(populator),
        "handed to a populator while refused: {events:?}"
    );
    let before = w.created();

    let grant = json!({
        "apiVersion": "gateway.networking.k8s.io/v1beta1",
        "kind": "ReferenceGrant",
        "metadata": {"name": "let-dst-in", "namespace": w.s.ns},
        "spec": {
            "from": [{"group": "", "kind": "PersistentVolumeClaim", "namespace": dst.ns}],
            "to": [
                {"group": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "snap"},
                {"group": "", "kind": "PersistentVolumeClaim"},
                {"group": "example.com", "kind": "Widget"}
            ]
        }
    });
    let grants: Api<DynamicObject> = Api::namespaced_with(
        w.s.client.clone(),
        &w.s.ns,
        &ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk(
                "gateway.networking.k8s.io",
                "v1beta1",
                "ReferenceGrant",
            ),
            "referencegrants",
        ),
    );
    grants
        .create(
            &PostParams::default(),
            &serde_json::from_value(grant).unwrap(),
        )
        .await
        .expect("ReferenceGrant");
    for claim in ["restored", "copy"] {
        let pvc = dst.wait_bound(claim).await;
        let pv = pvc.spec.and_then(|s| s.volume_name).unwrap();
        let handle = dst.volume_handle(&pv).await;
        let volume = w
            .plugin
            .volumes()
            .into_iter()
            .find(|v| v.vol_id == handle)
            .expect("the new volume");
        assert_eq!(read_marker(&volume.vol_path), "from next door", "{claim}");
    }
    // Granted, the populator's claim is left to its populator: no volume of ours.
    dst.wait_event(
        "populated",
        "Provisioning",
        "Assuming an external populator will provision the volume",
    )
    .await;
    assert_eq!(w.created(), before + 2);
}

/// Not ready yet: the snapshot exists but csi-snapshotter is down, so the driver never took it.
/// The claim is refused without a CreateVolume, then restored once the snapshot is ready.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_snapshot_that_is_not_ready_is_restored_once_it_is() {
    let mut w = World::start("ds-ready", &[]).await;
    w.s.claim("src", &w.class, "1Gi", json!({})).await;
    let source = w.volume_of("src").await;
    write_marker(&source.vol_path, "taken late");
    w.snapshotter = None;
    let body = json!({
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "metadata": {"name": "snap", "namespace": w.s.ns},
        "spec": {"volumeSnapshotClassName": w.s.ns, "source": {"persistentVolumeClaimName": "src"}},
    });
    create(&w.s, testenv::volume_snapshot_resource(), true, body).await;
    w.claim_from("restored", "1Gi", snapshot_source("snap"))
        .await;
    let event =
        w.s.wait_event(
            "restored",
            "ProvisioningFailed",
            "error getting handle for DataSource Type VolumeSnapshot by Name snap: snapshot snap",
        )
        .await;
    let message = event.message.unwrap_or_default();
    assert!(
        message.ends_with("snapshot snap not bound")
            || message.ends_with("snapshot snap is not Ready"),
        "{message}"
    );
    assert_eq!(w.created(), 1, "only the source's volume");
    assert!(w.plugin.calls_of("CreateSnapshot").is_empty());

    w.snapshotter = Some(testenv::Snapshotter::start(
        &w.s.dir.join("snapshotter-2"),
        control_plane().kubeconfig(),
        &w.plugin.socket,
    ));
    let restored = w.volume_of("restored").await;
    assert_eq!(read_marker(&restored.vol_path), "taken late");
    assert_eq!(w.created(), 2);
}

/// A claim being deleted (a finalizer of someone else's still holds it) cannot be cloned; the
/// clone is never sent to the driver.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_source_being_deleted_is_not_cloned() {
    let w = World::start("ds-going", &[]).await;
    w.s.claim("src", &w.class, "1Gi", json!({})).await;
    let _ = w.volume_of("src").await;
    // Our own hold, not kube-controller-manager's pvc-protection: that one lets go of a claim
    // whose user pod it has not seen yet.
    add_finalizer(&w.s.claims(), "src", "test.example.com/hold").await;
    w.s.delete_claim("src").await;
    eventually("src terminating", WAIT, || async {
        let c = w.s.claims().get("src").await.ok()?;
        c.metadata.deletion_timestamp.map(|_| ())
    })
    .await;
    w.claim_from("copy", "1Gi", claim_source("src")).await;
    w.s.wait_event(
        "copy",
        "ProvisioningFailed",
        "error getting handle for DataSource Type PersistentVolumeClaim by Name src: the PVC DataSource src is currently being deleted",
    )
    .await;
    assert_eq!(w.created(), 1, "only the source's volume");
    let copy = w.s.claims().get("copy").await.unwrap();
    assert_eq!(
        copy.status.and_then(|s| s.phase).as_deref(),
        Some("Pending")
    );
}
