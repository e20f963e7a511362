//! Kubernetes objects and names the scenarios create (pure builders).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    PersistentVolume, PersistentVolumeClaim, Pod, TypedLocalObjectReference,
};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::DynamicObject;
use serde_json::json;

use super::results::Impl;

/// The topology key of the fake nodes (testenv's default, the mock driver's segments).
pub const TOPOLOGY_KEY: &str = "topology.mock.csi/node";
/// Label on everything a bench run creates cluster-wide, for cleanup.
pub const BENCH_LABEL: &str = "bench.csi-provisioner-rs/run";
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
const STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
const BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";

/// The CSI driver name of one measured run: distinct per scenario, variant, provisioner and
/// run, so that no object of an earlier run is ever "ours" again. Valid as a CSI driver name
/// and as a label value (at most 63 characters).
pub fn driver_name(scenario: u8, variant: &str, which: Impl, run: u32) -> String {
    let tag = tag(variant);
    let name = if tag.is_empty() {
        format!("s{scenario}-{which}-r{run}.bench.csi")
    } else {
        format!("s{scenario}-{tag}-{which}-r{run}.bench.csi")
    };
    name.chars().take(63).collect()
}

/// The namespace of one measured run.
pub fn namespace_name(driver: &str) -> String {
    let base = driver.trim_end_matches(".bench.csi").replace('.', "-");
    format!("bench-{base}").chars().take(63).collect()
}

/// A variant description reduced to lowercase alphanumerics and dashes (`qps 5/10` →
/// `qps5-10`).
fn tag(variant: &str) -> String {
    let mut out = String::new();
    for c in variant.to_ascii_lowercase().chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if c == '/' || c == '-' {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

/// `node-1` .. `node-n`, the names testenv gives fake nodes.
pub fn node_names(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("node-{i}")).collect()
}

/// Fake nodes beyond the first `n` (they would widen the scheduler's choice).
pub fn extra_nodes(existing: &[String], n: usize) -> Vec<String> {
    existing
        .iter()
        .filter(|name| {
            name.strip_prefix("node-")
                .and_then(|i| i.parse::<usize>().ok())
                .is_some_and(|i| i > n)
        })
        .cloned()
        .collect()
}

pub fn storage_class(name: &str, driver: &str, binding: &str, reclaim: &str) -> StorageClass {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {BENCH_LABEL: driver}},
        "provisioner": driver,
        "volumeBindingMode": binding,
        "reclaimPolicy": reclaim,
    }))
    .expect("static StorageClass shape")
}

/// A ReadWriteOnce claim of `size`. `selected_node` sets the scheduler's annotation, and the
/// provisioner annotations with it, as the scheduler and controller-manager would.
pub fn claim(
    name: &str,
    class: &str,
    size: &str,
    driver: &str,
    selected_node: Option<&str>,
) -> PersistentVolumeClaim {
    let mut annotations = BTreeMap::new();
    if let Some(node) = selected_node {
        annotations.insert(SELECTED_NODE.to_string(), node.to_string());
        annotations.insert(STORAGE_PROVISIONER.to_string(), driver.to_string());
        annotations.insert(BETA_STORAGE_PROVISIONER.to_string(), driver.to_string());
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": class,
            "resources": {"requests": {"storage": size}},
        },
    }))
    .expect("static PVC shape")
}

/// A [`claim`] restored from the VolumeSnapshot `snapshot` of its namespace.
pub fn claim_from_snapshot(
    name: &str,
    class: &str,
    size: &str,
    driver: &str,
    snapshot: &str,
) -> PersistentVolumeClaim {
    let mut c = claim(name, class, size, driver, None);
    if let Some(spec) = c.spec.as_mut() {
        spec.data_source = Some(TypedLocalObjectReference {
            api_group: Some(testenv::SNAPSHOT_GROUP.into()),
            kind: "VolumeSnapshot".into(),
            name: snapshot.into(),
        });
    }
    c
}

/// A VolumeSnapshot of `claim` in `namespace`, taken with the VolumeSnapshotClass `class`.
pub fn volume_snapshot(name: &str, namespace: &str, class: &str, claim: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"volumeSnapshotClassName": class, "source": {"persistentVolumeClaimName": claim}},
    }))
    .expect("static VolumeSnapshot shape")
}

/// A VolumeSnapshotClass of `driver` whose snapshots go with their VolumeSnapshot.
pub fn volume_snapshot_class(name: &str, driver: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshotClass",
        "metadata": {"name": name, "labels": {BENCH_LABEL: driver}},
        "driver": driver,
        "deletionPolicy": "Delete",
    }))
    .expect("static VolumeSnapshotClass shape")
}

/// A pod without resource requests that mounts `claim`; no kubelet ever runs it.
pub fn pod(name: &str, claim: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "app", "image": "registry.invalid/bench"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
            "terminationGracePeriodSeconds": 0,
        },
    }))
    .expect("static Pod shape")
}

/// A claim that is already bound to the volume of the same name (scenario 3): the
/// bind-completed annotation and the protection finalizer are set up front so that the
/// controller-manager has nothing to write.
pub fn prebound_claim(name: &str, class: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "annotations": {"pv.kubernetes.io/bind-completed": "yes"},
            "finalizers": ["kubernetes.io/pvc-protection"],
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": class,
            "volumeName": name,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }))
    .expect("static PVC shape")
}

/// The provisioned volume of [`prebound_claim`], bound to the claim's uid.
pub fn prebound_volume(
    name: &str,
    namespace: &str,
    claim_uid: &str,
    class: &str,
    driver: &str,
    node: &str,
) -> PersistentVolume {
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {BENCH_LABEL: driver},
            "annotations": {"pv.kubernetes.io/provisioned-by": driver},
            "finalizers": ["kubernetes.io/pv-protection"],
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "capacity": {"storage": "1Gi"},
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": class,
            "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                         "namespace": namespace, "name": name, "uid": claim_uid},
            "csi": {"driver": driver, "volumeHandle": format!("prebound-{name}")},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": TOPOLOGY_KEY, "operator": "In", "values": [node]}]}]}},
        },
    }))
    .expect("static PV shape")
}

/// The PV name a provisioner gives the volume of a claim (`--volume-name-prefix` `pvc`, full
/// uid).
pub fn pv_name_for(claim_uid: &str) -> String {
    format!("pvc-{claim_uid}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_and_valid() {
        let cases = [
            (1, "qps 5/10", Impl::Ours, 1, "s1-qps5-10-ours-r1.bench.csi"),
            (
                1,
                "qps 100/200",
                Impl::Upstream,
                3,
                "s1-qps100-200-upstream-r3.bench.csi",
            ),
            (4, "", Impl::Ours, 2, "s4-ours-r2.bench.csi"),
        ];
        for (s, variant, which, run, want) in cases {
            let d = driver_name(s, variant, which, run);
            assert_eq!(d, want);
            let ns = namespace_name(&d);
            assert!(ns.len() <= 63 && !ns.contains('.'), "{ns}");
            assert!(ns.starts_with("bench-s"), "{ns}");
        }
        let long = driver_name(1, &"x".repeat(80), Impl::Ours, 1);
        assert_eq!(long.len(), 63);
    }

    #[test]
    fn extra_nodes_are_those_past_n() {
        let existing: Vec<String> = ["node-1", "node-2", "node-10", "other", "node-x"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(extra_nodes(&existing, 2), vec!["node-10"]);
        assert_eq!(extra_nodes(&existing, 0).len(), 3);
        assert!(extra_nodes(&existing, 10).is_empty());
        assert_eq!(node_names(2), vec!["node-1", "node-2"]);
    }

    #[test]
    fn claims_carry_the_scheduler_annotations_only_when_placed() {
        let c = claim("c", "sc", "9Gi", "d.csi", Some("node-3"));
        let ann = c.metadata.annotations.unwrap();
        assert_eq!(ann.get(SELECTED_NODE).map(String::as_str), Some("node-3"));
        assert_eq!(
            ann.get(STORAGE_PROVISIONER).map(String::as_str),
            Some("d.csi")
        );
        let c = claim("c", "sc", "9Gi", "d.csi", None);
        assert!(c.metadata.annotations.unwrap_or_default().is_empty());
        let spec = c.spec.unwrap();
        assert_eq!(spec.storage_class_name.as_deref(), Some("sc"));
    }

    #[test]
    fn prebound_pairs_point_at_each_other() {
        let c = prebound_claim("v1", "sc");
        assert_eq!(c.spec.unwrap().volume_name.as_deref(), Some("v1"));
        let pv = prebound_volume("v1", "ns", "uid-1", "sc", "d.csi", "node-1");
        let spec = pv.spec.unwrap();
        let claim_ref = spec.claim_ref.unwrap();
        assert_eq!(claim_ref.uid.as_deref(), Some("uid-1"));
        assert_eq!(claim_ref.namespace.as_deref(), Some("ns"));
        assert_eq!(spec.csi.unwrap().driver, "d.csi");
        assert_eq!(
            spec.persistent_volume_reclaim_policy.as_deref(),
            Some("Retain")
        );
    }

    #[test]
    fn builders_produce_the_requested_shapes() {
        let sc = storage_class("fast", "d.csi", "WaitForFirstConsumer", "Delete");
        assert_eq!(sc.provisioner, "d.csi");
        assert_eq!(
            sc.volume_binding_mode.as_deref(),
            Some("WaitForFirstConsumer")
        );
        let p = pod("p", "c");
        let vols = p.spec.unwrap().volumes.unwrap();
        assert_eq!(
            vols[0].persistent_volume_claim.as_ref().unwrap().claim_name,
            "c"
        );
        assert_eq!(pv_name_for("abc"), "pvc-abc");
    }

    #[test]
    fn restores_name_their_snapshot() {
        let c = claim_from_snapshot("r-1", "sc", "1Gi", "d.csi", "snap-1");
        let source = c.spec.unwrap().data_source.unwrap();
        assert_eq!(source.api_group.as_deref(), Some("snapshot.storage.k8s.io"));
        assert_eq!(
            (source.kind.as_str(), source.name.as_str()),
            ("VolumeSnapshot", "snap-1")
        );
        let s = volume_snapshot("snap-1", "ns", "vsc", "src");
        assert_eq!(s.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(s.data["spec"]["source"]["persistentVolumeClaimName"], "src");
        let class = volume_snapshot_class("vsc", "d.csi");
        assert_eq!(class.data["driver"], "d.csi");
        assert_eq!(class.types.unwrap().kind, "VolumeSnapshotClass");
    }
}
