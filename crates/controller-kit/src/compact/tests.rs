use super::*;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume};

fn cm(name: &str, rv: &str) -> ConfigMap {
    let mut c = ConfigMap::default();
    c.metadata.name = Some(name.into());
    c.metadata.namespace = Some("ns".into());
    c.metadata.resource_version = Some(rv.into());
    c
}

fn r(name: &str) -> ObjectRef<ConfigMap> {
    ObjectRef::new(name).within("ns")
}

fn rv(c: Option<Arc<ConfigMap>>) -> Option<String> {
    c.and_then(|c| c.metadata.resource_version.clone())
}

fn names(store: &CompactStore<ConfigMap>) -> Vec<String> {
    let mut n: Vec<String> = store
        .state()
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    n.sort();
    n
}

/// A PV as the API server returns one of ours (bound, CSI, node affinity).
fn pv() -> PersistentVolume {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "pvc-1b2f3c4d-aaaa-bbbb-cccc-000000000001", "uid": "u-1",
            "resourceVersion": "1234567", "creationTimestamp": "2026-11-27T07:00:00Z",
            "annotations": {"pv.kubernetes.io/provisioned-by": "hostpath.csi.k8s.io",
                "volume.kubernetes.io/provisioner-deletion-secret-name": "s"},
            "finalizers": ["kubernetes.io/pv-protection", "external-provisioner.volume.kubernetes.io/finalizer"]},
        "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"},
            "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "fast",
            "volumeMode": "Filesystem", "mountOptions": ["noatime"],
            "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": "ns",
                "name": "data", "uid": "1b2f3c4d-aaaa-bbbb-cccc-000000000001", "resourceVersion": "99"},
            "csi": {"driver": "hostpath.csi.k8s.io", "volumeHandle": "1b2f3c4d-0001", "fsType": "ext4",
                "volumeAttributes": {"storage.kubernetes.io/csiProvisionerIdentity": "1700000000000-1-hostpath"},
                "controllerExpandSecretRef": {"name": "s", "namespace": "ns"}},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.hostpath.csi/node", "operator": "In", "values": ["node-1"]}]}]}}},
        "status": {"phase": "Bound", "lastPhaseTransitionTime": "2026-11-27T07:00:01Z"}
    }))
    .unwrap()
}

#[test]
fn an_object_reads_back_as_it_was_written() {
    let (store, mut writer) = store::<PersistentVolume>();
    let pv = pv();
    writer.apply_watcher_event(&Event::Apply(pv.clone()));
    let read = store.get(&ObjectRef::new(pv.metadata.name.as_deref().unwrap()));
    assert_eq!(read.as_deref(), Some(&pv));
    assert_eq!(store.state(), vec![Arc::new(pv)]);
}

#[test]
fn a_pv_takes_a_fraction_of_its_decoded_size() {
    // The reason for the store: the decoded struct alone (before its strings and maps) is
    // over 3 KiB; the bytes kept are about a third of that.
    let bytes = encode(&pv()).unwrap();
    let decoded = std::mem::size_of::<PersistentVolume>();
    assert!(decoded > 3000, "{decoded}");
    assert!(bytes.len() * 2 < decoded, "{} bytes", bytes.len());
}

#[test]
fn applies_and_deletes_show_at_once() {
    let (store, mut writer) = store::<ConfigMap>();
    writer.apply_watcher_event(&Event::Apply(cm("a", "1")));
    writer.apply_watcher_event(&Event::Apply(cm("b", "1")));
    writer.apply_watcher_event(&Event::Apply(cm("a", "2")));
    assert_eq!(rv(store.get(&r("a"))), Some("2".into()));
    writer.apply_watcher_event(&Event::Delete(cm("b", "1")));
    assert_eq!(store.get(&r("b")), None);
    assert_eq!(names(&store), ["a"]);
    assert_eq!(store.references().len(), 1);
    // The namespace is part of the key.
    assert_eq!(store.get(&ObjectRef::new("a").within("other")), None);
}

#[test]
fn a_relist_replaces_the_objects_when_it_ends() {
    let (store, mut writer) = store::<ConfigMap>();
    writer.apply_watcher_event(&Event::Apply(cm("a", "1")));
    writer.apply_watcher_event(&Event::Apply(cm("gone", "1")));
    writer.apply_watcher_event(&Event::Init);
    writer.apply_watcher_event(&Event::InitApply(cm("a", "5")));
    writer.apply_watcher_event(&Event::InitApply(cm("new", "5")));
    // Mid-list the store still shows the old objects, as kube's reflector does.
    assert_eq!(names(&store), ["a", "gone"]);
    assert_eq!(rv(store.get(&r("a"))), Some("1".into()));
    writer.apply_watcher_event(&Event::InitDone);
    assert_eq!(names(&store), ["a", "new"]);
    assert_eq!(rv(store.get(&r("a"))), Some("5".into()));
}

#[tokio::test]
async fn ready_once_the_first_list_ends() {
    let (store, mut writer) = store::<ConfigMap>();
    let waiting = tokio::spawn({
        let store = store.clone();
        async move { store.wait_until_ready().await }
    });
    writer.apply_watcher_event(&Event::Init);
    writer.apply_watcher_event(&Event::InitApply(cm("a", "1")));
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished(), "ready before the list ended");
    writer.apply_watcher_event(&Event::InitDone);
    assert_eq!(waiting.await.unwrap(), Ok(()));
    assert_eq!(names(&store), ["a"]);
}

#[tokio::test]
async fn a_dropped_writer_is_not_ready() {
    let (store, writer) = store::<ConfigMap>();
    drop(writer);
    assert_eq!(store.wait_until_ready().await, Err(WriterDropped));
}
