//! The real snapshot stack works end to end: external-snapshotter v8.7.0's CRDs,
//! `snapshot-controller` and `csi-snapshotter` turn a VolumeSnapshot of a claim into a
//! CreateSnapshot on csi-driver-host-path's `hostpathplugin`, and deleting it into a
//! DeleteSnapshot. The plugin's log of gRPC calls is the ground truth.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, PostParams};
use serde_json::json;
use testenv::{
    ControlPlane, HostpathPlugin, SnapshotController, Snapshotter, WAIT_TIMEOUT, create_namespace,
    install_snapshot_crds, volume_snapshot_class_resource, volume_snapshot_content_resource,
    volume_snapshot_resource, wait_for,
};

fn from_json<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).expect("valid object")
}

/// Polls a snapshot object until `done` holds; on timeout panics with the last object seen and
/// the tails of the logs that explain it.
async fn wait_dynamic(
    api: &Api<DynamicObject>,
    name: &str,
    what: &str,
    logs: &[&std::path::Path],
    done: impl Fn(Option<&DynamicObject>) -> bool,
) -> Option<DynamicObject> {
    let deadline = Instant::now() + WAIT_TIMEOUT;
    loop {
        let last = api.get_opt(name).await;
        if let Ok(obj) = &last
            && done(obj.as_ref())
        {
            return obj.clone();
        }
        if Instant::now() >= deadline {
            let mut msg = format!(
                "timed out after {}s waiting for {name} to {what}; last seen: {}",
                WAIT_TIMEOUT.as_secs(),
                match last {
                    Ok(Some(o)) => serde_json::to_string_pretty(&o).unwrap_or_default(),
                    Ok(None) => "not found".into(),
                    Err(e) => format!("error: {e}"),
                }
            );
            for log in logs {
                let tail = testenv::log_tail(log, 15);
                msg.push_str(&format!("\n--- last lines of {}:\n{tail}", log.display()));
            }
            panic!("{msg}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The plugin's logged calls of `method` that succeeded.
fn succeeded(plugin: &HostpathPlugin, method: &str) -> Vec<serde_json::Value> {
    let calls = plugin.calls_of(method);
    calls.into_iter().filter(|c| c["Error"] == "").collect()
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn volume_snapshot_of_a_hostpath_claim_becomes_ready_and_is_deleted() {
    let cp = ControlPlane::shared();
    let client = cp.client().await;
    install_snapshot_crds(&client).await.expect("snapshot CRDs");
    // Again, as another test sharing the control plane would: applying is idempotent.
    install_snapshot_crds(&client)
        .await
        .expect("snapshot CRDs again");
    let ns = create_namespace(&client, "snap").await;
    // Unix socket paths are limited to 108 bytes: keep the plugin's directory short.
    let dir = PathBuf::from(format!("/tmp/{ns}"));
    std::fs::create_dir_all(&dir).expect("test dir");
    eprintln!("snapshots: logs in {}", dir.display());
    let driver = format!("{ns}.hostpath.csi.k8s.io");

    let controller = SnapshotController::start(&dir, cp.kubeconfig());
    let plugin = HostpathPlugin::start(&dir.join("hp"), &driver, "n1", &[]);
    let snapshotter = Snapshotter::start(&dir, cp.kubeconfig(), &plugin.socket);
    let logs = [
        controller.log_path(),
        snapshotter.log_path(),
        plugin.log_path(),
    ];

    // A real volume in the plugin, then a PV for it pre-bound to a claim (playing the
    // provisioner), bound by the controller manager's binder.
    let csi = csi::Client::connect(&plugin.endpoint(), Default::default())
        .await
        .expect("connect to hostpathplugin");
    let created = csi
        .create_volume(csi::v1::CreateVolumeRequest {
            name: format!("{ns}-vol"),
            capacity_range: Some(csi::v1::CapacityRange {
                required_bytes: 1 << 20,
                limit_bytes: 0,
            }),
            volume_capabilities: vec![csi::v1::VolumeCapability {
                access_type: Some(csi::v1::volume_capability::AccessType::Mount(
                    Default::default(),
                )),
                access_mode: Some(csi::v1::volume_capability::AccessMode {
                    mode: csi::v1::volume_capability::access_mode::Mode::SingleNodeWriter as i32,
                }),
            }],
            ..Default::default()
        })
        .await
        .expect("CreateVolume");
    let volume_id = created.volume.expect("volume").volume_id;

    let pv_name = format!("{ns}-pv");
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pv = json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": pv_name},
        "spec": {
            "capacity": {"storage": "1Mi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "claimRef": {"namespace": ns, "name": "data"},
            "csi": {"driver": driver, "volumeHandle": volume_id},
        },
    });
    pvs.create(&PostParams::default(), &from_json(pv))
        .await
        .expect("pv");
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let pvc = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": pv_name,
            "resources": {"requests": {"storage": "1Mi"}},
        },
    });
    pvcs.create(&PostParams::default(), &from_json(pvc))
        .await
        .expect("pvc");
    wait_for(&pvcs, "data", "be bound", |c| {
        c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
    })
    .await;

    let class_name = format!("{ns}-class");
    let classes: Api<DynamicObject> =
        Api::all_with(client.clone(), &volume_snapshot_class_resource());
    let class = json!({
        "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
        "metadata": {"name": class_name},
        "driver": driver,
        "deletionPolicy": "Delete",
    });
    classes
        .create(&PostParams::default(), &from_json(class))
        .await
        .expect("volume snapshot class");
    let snapshots: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &volume_snapshot_resource());
    let snapshot = json!({
        "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
        "metadata": {"name": "snap"},
        "spec": {
            "volumeSnapshotClassName": class_name,
            "source": {"persistentVolumeClaimName": "data"},
        },
    });
    snapshots
        .create(&PostParams::default(), &from_json(snapshot))
        .await
        .expect("volume snapshot");

    let ready = |s: Option<&DynamicObject>| {
        s.is_some_and(|s| {
            s.data["status"]["readyToUse"] == true
                && s.data["status"]["boundVolumeSnapshotContentName"].is_string()
        })
    };
    let snap = wait_dynamic(&snapshots, "snap", "become readyToUse", &logs, ready)
        .await
        .expect("ready snapshot");
    let content_name = snap.data["status"]["boundVolumeSnapshotContentName"]
        .as_str()
        .expect("content name")
        .to_string();

    // The content the controller made names our driver and volume; its handle is what the
    // plugin's CreateSnapshot returned for that volume.
    let contents: Api<DynamicObject> =
        Api::all_with(client.clone(), &volume_snapshot_content_resource());
    let content = contents.get(&content_name).await.expect("content");
    assert_eq!(content.data["spec"]["driver"], driver.as_str());
    assert_eq!(
        content.data["spec"]["source"]["volumeHandle"],
        volume_id.as_str()
    );
    let handle = content.data["status"]["snapshotHandle"]
        .as_str()
        .expect("snapshot handle")
        .to_string();
    let creates = succeeded(&plugin, "CreateSnapshot");
    assert_eq!(creates.len(), 1, "{creates:#?}");
    assert_eq!(
        creates[0]["Request"]["source_volume_id"],
        volume_id.as_str()
    );
    assert_eq!(
        creates[0]["Response"]["snapshot"]["snapshot_id"],
        handle.as_str()
    );

    // deletionPolicy Delete: the snapshot goes, its content goes, and so does the plugin's copy.
    snapshots
        .delete("snap", &DeleteParams::default())
        .await
        .expect("delete snapshot");
    wait_dynamic(&contents, &content_name, "be deleted", &logs, |c| {
        c.is_none()
    })
    .await;
    let deletes = succeeded(&plugin, "DeleteSnapshot");
    assert_eq!(deletes.len(), 1, "{deletes:#?}");
    assert_eq!(deletes[0]["Request"]["snapshot_id"], handle.as_str());

    // Cluster-scoped leftovers would outlive the namespace.
    classes
        .delete(&class_name, &DeleteParams::default())
        .await
        .expect("delete class");
    pvcs.delete("data", &DeleteParams::default())
        .await
        .expect("delete pvc");
    pvs.delete(&pv_name, &DeleteParams::default())
        .await
        .expect("delete pv");
    csi.delete_volume(csi::v1::DeleteVolumeRequest {
        volume_id,
        ..Default::default()
    })
    .await
    .expect("DeleteVolume");
}
