//! CSI migration on the real control plane: the mock driver runs under the name of a cloud
//! driver that replaces an in-tree plugin (with volume ids in that driver's shape), and
//! kube-controller-manager hands claims of the in-tree plugin's classes to it.
//!
//! Run with `cargo xtask test` (needs the control plane binaries).

use crate::support;
use crate::support::WAIT;
use crate::support::{Scenario, eventually, wait_gone};
use crate::support::{free_port, sample, scrape};
use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

const PV_FINALIZER: &str = "external-provisioner.volume.kubernetes.io/finalizer";
const CALLS: &str = "csi_sidecar_operations_seconds_count";

/// One in-tree plugin and the CSI driver that replaces it.
struct Plugin {
    prefix: &'static str,
    in_tree: &'static str,
    driver: &'static str,
    /// The driver's own topology key.
    key: &'static str,
    /// Volume ids as the real driver makes them.
    id_format: &'static str,
    /// Two zones the mock driver has pools in; the class asks for the second.
    zones: [&'static str; 2],
    /// In-tree class parameters besides the zone.
    parameters: Value,
    /// The key of the PV's node affinity in the in-tree form.
    affinity_key: &'static str,
    /// Checks the in-tree source of a provisioned PV against the driver's volume id.
    check_source: fn(&Value, &str),
    /// A hand-made in-tree PV (metadata and spec parts) and the handle it is deleted by.
    existing: (Value, &'static str),
}

fn plugins() -> [Plugin; 3] {
    [
        Plugin {
            prefix: "mig-ebs",
            in_tree: "kubernetes.io/aws-ebs",
            driver: "ebs.csi.aws.com",
            key: "topology.ebs.csi.aws.com/zone",
            id_format: "vol-0{seq}",
            zones: ["us-east-1a", "us-east-1b"],
            parameters: json!({"type": "gp3", "fsType": "xfs"}),
            affinity_key: "topology.kubernetes.io/zone",
            check_source: |spec, handle| {
                let source = &spec["awsElasticBlockStore"];
                assert_eq!(source["volumeID"], handle, "{spec}");
                assert_eq!(source["fsType"], "xfs", "{spec}");
            },
            existing: (
                json!({"spec": {"awsElasticBlockStore": {
                    "volumeID": "aws://us-east-1a/vol-0existing", "fsType": "ext4"}}}),
                "vol-0existing",
            ),
        },
        Plugin {
            prefix: "mig-pd",
            in_tree: "kubernetes.io/gce-pd",
            driver: "pd.csi.storage.gke.io",
            key: "topology.gke.io/zone",
            // In-tree PVs do not record the project, so the way back to CSI names it
            // UNSPECIFIED (the PD driver then uses its own): ids the mock can find again.
            id_format: "projects/UNSPECIFIED/zones/{segment}/disks/{name}",
            zones: ["europe-west1-b", "europe-west1-c"],
            parameters: json!({"type": "pd-ssd", "fsType": "xfs"}),
            affinity_key: "topology.kubernetes.io/zone",
            check_source: |spec, handle| {
                let source = &spec["gcePersistentDisk"];
                let disk = handle.rsplit('/').next().unwrap();
                assert_eq!(source["pdName"], disk, "{spec}");
                assert_eq!(source["fsType"], "xfs", "{spec}");
            },
            existing: (
                json!({
                    "metadata": {"labels": {"topology.kubernetes.io/zone": "europe-west1-b"}},
                    "spec": {"gcePersistentDisk": {"pdName": "disk-existing", "fsType": "ext4"}},
                }),
                "projects/UNSPECIFIED/zones/europe-west1-b/disks/disk-existing",
            ),
        },
        Plugin {
            prefix: "mig-disk",
            in_tree: "kubernetes.io/azure-disk",
            driver: "disk.csi.azure.com",
            key: "topology.disk.csi.azure.com/zone",
            id_format: "/subscriptions/sub-1/resourceGroups/rg-1/providers/Microsoft.Compute/disks/{name}",
            zones: ["westeurope-1", "westeurope-2"],
            parameters: json!({"skuName": "Premium_LRS"}),
            // csi-translation-lib leaves an Azure disk PV's affinity in the driver's key.
            affinity_key: "topology.disk.csi.azure.com/zone",
            check_source: |spec, handle| {
                let source = &spec["azureDisk"];
                assert_eq!(source["diskURI"], handle, "{spec}");
                assert_eq!(
                    source["diskName"],
                    handle.rsplit('/').next().unwrap(),
                    "{spec}"
                );
                assert_eq!(source["kind"], "Managed", "{spec}");
            },
            existing: (
                json!({"spec": {"azureDisk": {
                    "diskName": "disk-existing", "kind": "Managed", "cachingMode": "ReadOnly",
                    "diskURI": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/disks/disk-existing"}}}),
                "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/disks/disk-existing",
            ),
        },
    ]
}

/// A claim of the in-tree class is provisioned by the CSI driver in the class's zone and gets
/// an in-tree PV; deleting it calls DeleteVolume with the driver's id; a hand-made in-tree PV
/// is deleted through CSI too; both calls carry `migrated="true"`; a class of another in-tree
/// plugin is not ours.
async fn provisions_and_deletes_through_csi(plugin: Plugin) {
    let mut s = Scenario::new(plugin.prefix).await;
    s.driver = plugin.driver.to_string();
    let pools: Vec<String> = plugin
        .zones
        .iter()
        .map(|z| format!("--pool={}={z}:100Gi", plugin.key))
        .collect();
    let mut mock_args = vec![format!("--volume-id-format={}", plugin.id_format)];
    mock_args.extend(pools);
    s.start_driver(&mock_args);
    let port = free_port();
    s.start_provisioner(&[format!("--http-endpoint=127.0.0.1:{port}")]);

    let zone = plugin.zones[1];
    let mut parameters = plugin.parameters.clone();
    support::merge(&mut parameters, json!({"zone": zone}));
    let class = in_tree_class(&s, "in-tree", plugin.in_tree, parameters).await;
    let other = in_tree_class(&s, "other", "kubernetes.io/cinder", json!({})).await;
    s.claim("data", &class, "1Gi", json!({})).await;
    s.claim("not-ours", &other, "1Gi", json!({})).await;

    let claim = s.wait_bound("data").await;
    let annotations = claim.annotations();
    assert_eq!(
        annotations
            .get("volume.kubernetes.io/storage-provisioner")
            .map(String::as_str),
        Some(plugin.driver),
        "{annotations:?}"
    );
    let pv_name = claim.spec.unwrap().volume_name.unwrap();
    let pv = s.volumes().get(&pv_name).await.unwrap();
    let spec = serde_json::to_value(pv.spec.as_ref().unwrap()).unwrap();
    assert!(spec.get("csi").is_none(), "not in in-tree form: {spec}");
    let calls = s.create_calls(&pv_name);
    assert_eq!(calls.len(), 1, "{calls:?}");
    let request = &calls[0]["request"];
    let handle = calls[0]["response"]["volume"]["volume_id"]
        .as_str()
        .unwrap()
        .to_string();
    (plugin.check_source)(&spec, &handle);
    // The in-tree zone parameter became the driver's topology requirement.
    let requisite = request["accessibility_requirements"]["requisite"].to_string();
    assert!(
        requisite.contains(plugin.key) && requisite.contains(zone),
        "{request}"
    );
    let params = request["parameters"].to_string();
    assert!(
        !params.contains("\"zone\""),
        "in-tree zone passed on: {params}"
    );
    let affinity = serde_json::to_string(&pv.spec.as_ref().unwrap().node_affinity).unwrap();
    assert!(
        affinity.contains(plugin.affinity_key) && affinity.contains(zone),
        "{affinity}"
    );
    assert_eq!(
        pv.annotations()
            .get("pv.kubernetes.io/provisioned-by")
            .map(String::as_str),
        Some(plugin.in_tree)
    );
    assert!(pv.finalizers().iter().any(|f| f == PV_FINALIZER));

    let existing = existing_in_tree_pv(&s, plugin.in_tree, &plugin.existing.0).await;
    s.wait_bound("existing").await;
    s.delete_claim("data").await;
    s.delete_claim("existing").await;
    wait_gone(&s.volumes(), &pv_name).await;
    wait_gone(&s.volumes(), &existing).await;
    let deleted: Vec<String> = s
        .mock()
        .calls_of("DeleteVolume")
        .into_iter()
        .filter(|c| c.get("error").is_none())
        .map(|c| {
            c["request"]["volume_id"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    let mut want = vec![handle.clone(), plugin.existing.1.to_string()];
    want.sort();
    let mut got = deleted.clone();
    got.sort();
    assert_eq!(got, want, "DeleteVolume calls");

    // The other plugin's claim: never sent to our driver.
    assert_eq!(s.mock().calls_of("CreateVolume").len(), 1);
    let metrics = scrape(port).await.expect("metrics");
    for (method, want) in [("CreateVolume", 1.0), ("DeleteVolume", 2.0)] {
        let method = format!("/csi.v1.Controller/{method}");
        let labels = [("method_name", method.as_str()), ("migrated", "true")];
        assert_eq!(sample(&metrics, CALLS, &labels), Some(want), "{method}");
    }
}

async fn in_tree_class(s: &Scenario, suffix: &str, provisioner: &str, parameters: Value) -> String {
    let name = format!("{}-{suffix}", s.ns);
    let sc: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": name},
        "provisioner": provisioner,
        "parameters": parameters,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    }))
    .unwrap();
    Api::all(s.client.clone())
        .create(&PostParams::default(), &sc)
        .await
        .unwrap();
    name
}

/// An in-tree PV made by hand (as an old cluster has them), provisioned by the in-tree
/// plugin and marked migrated to our driver, bound to a claim `existing`.
async fn existing_in_tree_pv(s: &Scenario, in_tree: &str, source: &Value) -> String {
    let name = format!("{}-existing", s.ns);
    let mut pv = json!({
        "metadata": {"name": name, "annotations": {
            "pv.kubernetes.io/provisioned-by": in_tree,
            "pv.kubernetes.io/migrated-to": s.driver}},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "",
                 "claimRef": {"namespace": s.ns, "name": "existing"}},
    });
    support::merge(&mut pv, source.clone());
    let pv: PersistentVolume = serde_json::from_value(pv).unwrap();
    s.volumes()
        .create(&PostParams::default(), &pv)
        .await
        .unwrap();
    s.claim("existing", "", "1Gi", json!({"spec": {"volumeName": name}}))
        .await;
    // Bound, it gets our finalizer like any PV of ours.
    eventually(
        "the hand-made in-tree PV to get our finalizer",
        WAIT,
        || async {
            let pv = s.volumes().get(&name).await.ok()?;
            pv.finalizers()
                .iter()
                .any(|f| f == PV_FINALIZER)
                .then_some(())
        },
    )
    .await;
    name
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn aws_ebs_classes_and_volumes_go_through_the_csi_driver() {
    let [ebs, _, _] = plugins();
    provisions_and_deletes_through_csi(ebs).await;
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn gce_pd_classes_and_volumes_go_through_the_csi_driver() {
    let [_, pd, _] = plugins();
    provisions_and_deletes_through_csi(pd).await;
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn azure_disk_classes_and_volumes_go_through_the_csi_driver() {
    let [_, _, disk] = plugins();
    provisions_and_deletes_through_csi(disk).await;
}
