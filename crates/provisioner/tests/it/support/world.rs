//! The world of one capacity test: a namespace, a driver name, fake nodes with one mock pool
//! each, the mock CSI driver and the real `csi-provisioner`, plus helpers to read what the
//! scheduler and the provisioner did.

use super::{CAPACITY_WAIT, eventually, free_port, scrape};
use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSIStorageCapacity, StorageClass};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use testenv::{ControlPlane, MockDriver, Provisioner};

/// The mock driver's topology key.
pub const KEY: &str = super::NODE_KEY;
pub const GI: i64 = 1 << 30;
/// The scheduler's choice of node on a late-binding claim.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

/// One test's world: namespace, driver, nodes, mock driver and provisioner.
pub struct World {
    pub client: Client,
    pub ns: String,
    pub driver: String,
    pub dir: PathBuf,
    pub mock: MockDriver,
    pub prov: Provisioner,
    pub port: u16,
}

impl World {
    /// Nodes `<ns>-<suffix>` with a pool of `size` each, a CSIDriver with storageCapacity,
    /// the mock driver (plus `mock_args`) and the provisioner (plus `prov_args`).
    pub async fn start(
        prefix: &str,
        pools: &[(&str, &str)],
        mock_args: &[&str],
        prov_args: &[&str],
    ) -> World {
        let pools: Vec<(&str, &str, &str)> =
            pools.iter().map(|(n, size)| ("", *n, *size)).collect();
        World::start_with_kinds(prefix, &pools, mock_args, prov_args).await
    }

    /// [`World::start`] with pools of several kinds, (kind, node suffix, size), a node holding
    /// one pool of each of its kinds (listed one after the other); an empty kind is the plain
    /// pool of [`World::start`].
    pub async fn start_with_kinds(
        prefix: &str,
        pools: &[(&str, &str, &str)],
        mock_args: &[&str],
        prov_args: &[&str],
    ) -> World {
        let cp = ControlPlane::shared();
        let client = cp.client().await;
        let ns = testenv::create_namespace(&client, prefix).await;
        let driver = format!("{ns}.mock.csi");
        let dir = PathBuf::from(format!("/tmp/{ns}"));
        std::fs::create_dir_all(&dir).unwrap();
        testenv::create_csi_driver(&client, &driver, true).await;
        let mut nodes: Vec<String> = pools.iter().map(|(_, n, _)| format!("{ns}-{n}")).collect();
        nodes.dedup();
        let names: Vec<&str> = nodes.iter().map(String::as_str).collect();
        testenv::create_fake_nodes(&client, &driver, KEY, &names).await;
        let mut args = vec![format!("--driver-name={driver}")];
        for (kind, node, size) in pools {
            let kind = if kind.is_empty() {
                String::new()
            } else {
                format!("{kind}@")
            };
            args.push(format!("--pool={kind}{KEY}={ns}-{node}:{size}"));
        }
        args.extend(mock_args.iter().map(|s| s.to_string()));
        let mock = MockDriver::start(&dir, &args.iter().map(String::as_str).collect::<Vec<_>>());
        let port = free_port();
        let prov = start_provisioner(&dir, &mock, &ns, port, prov_args, &[]);
        eprintln!("world {ns}: logs in {}", dir.display());
        World {
            client,
            ns,
            driver,
            dir,
            mock,
            prov,
            port,
        }
    }

    /// [`World::start`] with nodes a and b of 10Gi each and `prov_args`, a
    /// WaitForFirstConsumer class, and both nodes' objects published; returns the class.
    pub async fn two_published_pools(prefix: &str, prov_args: &[&str]) -> (World, String) {
        let w = World::start(prefix, &[("a", "10Gi"), ("b", "10Gi")], &[], prov_args).await;
        let class = w.class("fast", "WaitForFirstConsumer").await;
        w.wait_objects("2 objects", |o| o.len() == 2).await;
        (w, class)
    }

    /// [`World::start`] with one node, a, whose pool holds 100Gi, `--strict-topology` and the
    /// poll out of the way (every change comes from the claims), and a WaitForFirstConsumer
    /// class whose object shows the 100Gi; returns the class and node a.
    pub async fn one_strict_pool(prefix: &str) -> (World, String, String) {
        let w = World::start(
            prefix,
            &[("a", "100Gi")],
            &[],
            &["--capacity-poll-interval=10m", "--strict-topology"],
        )
        .await;
        let class = w.class("fast", "WaitForFirstConsumer").await;
        let node = w.node("a");
        w.wait_objects("100Gi on a", |o| {
            o.get(&key(&class, &node)).and_then(bytes) == Some(100 * GI)
        })
        .await;
        (w, class, node)
    }

    pub fn node(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.ns)
    }

    /// Restarts the provisioner with other flags and environment (same port).
    pub fn replace_provisioner(&mut self, prov_args: &[&str], env: &[(&str, &str)]) {
        self.prov.stop();
        self.prov = start_provisioner(&self.dir, &self.mock, &self.ns, self.port, prov_args, env);
    }

    pub async fn class(&self, suffix: &str, binding: &str) -> String {
        let name = format!("{}-{suffix}", self.ns);
        let sc: StorageClass = serde_json::from_value(json!({
            "metadata": {"name": name}, "provisioner": self.driver,
            "volumeBindingMode": binding, "reclaimPolicy": "Delete",
        }))
        .unwrap();
        Api::<StorageClass>::all(self.client.clone())
            .create(&PostParams::default(), &sc)
            .await
            .unwrap();
        name
    }

    pub fn capacities(&self) -> Api<CSIStorageCapacity> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Waits until our objects, by (class, node), satisfy `ok`.
    pub async fn wait_objects(&self, what: &str, ok: impl Fn(&Objects) -> bool) -> Objects {
        eventually(what, CAPACITY_WAIT, || async {
            let list = self.capacities().list(&ListParams::default()).await.ok()?;
            let objects = by_key(list.items);
            ok(&objects).then_some(objects)
        })
        .await
    }

    pub async fn claim_and_pod(&self, name: &str, class: &str, size: &str) {
        let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                     "resources": {"requests": {"storage": size}}},
        }))
        .unwrap();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "registry.invalid/none"}],
                     "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": name}}]},
        }))
        .unwrap();
        let pp = PostParams::default();
        self.claims().create(&pp, &pvc).await.unwrap();
        self.pods().create(&pp, &pod).await.unwrap();
    }

    pub fn claims(&self) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// A claim of `size` of `class` that the scheduler already sent to `node` (no pod: nothing
    /// selects a node again once it is sent back). Returns its UID.
    pub async fn claim_on(&self, name: &str, class: &str, size: &str, node: &str) -> String {
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": {
                SELECTED_NODE: node,
                "volume.kubernetes.io/storage-provisioner": self.driver,
                "volume.beta.kubernetes.io/storage-provisioner": self.driver}},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                     "resources": {"requests": {"storage": size}}},
        }))
        .unwrap();
        let created = self
            .claims()
            .create(&Default::default(), &claim)
            .await
            .unwrap();
        created.metadata.uid.unwrap()
    }

    /// Waits for an event `reason` on object `name` whose message contains `needle`.
    pub async fn wait_event(&self, name: &str, reason: &str, needle: &str) -> Event {
        testenv::wait_event(&self.client, &self.ns, name, reason, needle).await
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub async fn wait_scheduled(&self, pod: &str) -> String {
        eventually(&format!("pod {pod} scheduled"), CAPACITY_WAIT, || async {
            let p = self.pods().get(pod).await.ok()?;
            p.spec?.node_name
        })
        .await
    }

    /// Waits for the scheduler to report the pod unschedulable for a reason containing
    /// `because`; returns the message. Earlier verdicts with other reasons are passed over: a
    /// scheduler whose cache has not seen the claim yet first says "persistentvolumeclaim not
    /// found", then tries again when the claim arrives.
    pub async fn wait_unschedulable(&self, pod: &str, because: &str) -> String {
        eventually(
            &format!("pod {pod} unschedulable: {because}"),
            CAPACITY_WAIT,
            || async {
                let p = self.pods().get(pod).await.ok()?;
                assert_eq!(p.spec.as_ref()?.node_name, None, "pod {pod} was scheduled");
                let c = p
                    .status?
                    .conditions?
                    .into_iter()
                    .find(|c| c.type_ == "PodScheduled")?;
                let message = c.message.unwrap_or_default();
                (c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
                    && message.contains(because))
                .then_some(message)
            },
        )
        .await
    }

    /// Deletes pod and claim at once (fake nodes have no kubelet to confirm a graceful delete).
    pub async fn delete_claim_and_pod(&self, name: &str) {
        let now = DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        self.pods().delete(name, &now).await.unwrap();
        self.claims()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }

    /// A volume created behind the provisioner's back (changes the pool's free space).
    pub async fn create_volume_directly(&self, name: &str, bytes: i64, node: &str) {
        let client = csi::Client::connect(&self.mock.endpoint(), Default::default())
            .await
            .unwrap();
        let topology = csi::v1::Topology {
            segments: [(KEY.to_string(), node.to_string())].into(),
        };
        client
            .create_volume(csi::v1::CreateVolumeRequest {
                name: name.into(),
                capacity_range: Some(csi::v1::CapacityRange {
                    required_bytes: bytes,
                    limit_bytes: 0,
                }),
                volume_capabilities: vec![mount_capability()],
                accessibility_requirements: Some(csi::v1::TopologyRequirement {
                    requisite: vec![topology.clone()],
                    preferred: vec![topology],
                }),
                ..Default::default()
            })
            .await
            .unwrap();
    }

    pub async fn metrics(&self) -> Option<String> {
        scrape(self.port).await
    }

    /// A gauge of one (class, node) key, from /metrics.
    pub async fn key_metric(&self, name: &str, class: &str, node: &str) -> Option<f64> {
        let series = format!("{name}{{storageclass=\"{class}\",segment=\"{KEY}={node}\"}} ");
        let text = self.metrics().await?;
        text.lines()
            .find_map(|l| l.strip_prefix(&series)?.trim().parse().ok())
    }

    pub fn create_calls(&self) -> usize {
        self.mock.calls_of("CreateVolume").len()
    }
}

pub fn mount_capability() -> csi::v1::VolumeCapability {
    use csi::v1::volume_capability::{AccessMode, AccessType, MountVolume, access_mode::Mode};
    csi::v1::VolumeCapability {
        access_mode: Some(AccessMode {
            mode: Mode::SingleNodeWriter as i32,
        }),
        access_type: Some(AccessType::Mount(MountVolume::default())),
    }
}

pub fn start_provisioner(
    dir: &std::path::Path,
    mock: &MockDriver,
    ns: &str,
    port: u16,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Provisioner {
    let http = format!("--http-endpoint=127.0.0.1:{port}");
    let mut args = vec!["--enable-capacity", "-v=5", http.as_str()];
    if !extra
        .iter()
        .any(|a| a.starts_with("--capacity-ownerref-level"))
    {
        args.push("--capacity-ownerref-level=-1");
    }
    args.extend(extra);
    // The write-ahead record lives in the provisioner's namespace (see `Scenario`).
    let mut all_env = vec![("NAMESPACE", ns), ("POD_NAMESPACE", ns)];
    all_env.extend(env);
    Provisioner::start(
        dir,
        "csi-provisioner",
        ControlPlane::shared().kubeconfig(),
        &mock.socket,
        &args,
        &all_env,
    )
}

/// Our objects by (class, node name).
pub type Objects = BTreeMap<(String, String), CSIStorageCapacity>;

pub fn by_key(items: Vec<CSIStorageCapacity>) -> Objects {
    let mut out = Objects::new();
    for o in items {
        let node = o
            .node_topology
            .as_ref()
            .and_then(|t| t.match_labels.as_ref())
            .and_then(|l| l.get(KEY))
            .cloned()
            .unwrap_or_default();
        let key = (o.storage_class_name.clone(), node);
        assert!(!out.contains_key(&key), "duplicate object for {key:?}");
        out.insert(key, o);
    }
    out
}

pub fn bytes(o: &CSIStorageCapacity) -> Option<i64> {
    let q = o.capacity.as_ref()?;
    provisioning::quantity::parse_quantity(&q.0).ok()
}

pub fn key(class: &str, node: &str) -> (String, String) {
    (class.to_string(), node.to_string())
}

/// A Deployment → ReplicaSet → Pod chain (no controllers run for them: plain objects).
pub async fn owner_chain(client: &Client, ns: &str) -> (Deployment, ReplicaSet, Pod) {
    let pp = PostParams::default();
    let labels = json!({"app": "csi-provisioner"});
    let template = json!({"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "registry.invalid/none"}]}});
    let dep: Deployment = serde_json::from_value(json!({"metadata": {"name": "prov"},
        "spec": {"selector": {"matchLabels": labels}, "template": template}}))
    .unwrap();
    let dep = Api::<Deployment>::namespaced(client.clone(), ns)
        .create(&pp, &dep)
        .await
        .unwrap();
    let owned_by = |kind: &str, name: &str, uid: &Option<String>| json!([{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid, "controller": true}]);
    let rs: ReplicaSet = serde_json::from_value(json!({"metadata": {"name": "prov-1", "ownerReferences": owned_by("Deployment", "prov", &dep.metadata.uid)},
        "spec": {"selector": {"matchLabels": labels}, "template": template}})).unwrap();
    let rs = Api::<ReplicaSet>::namespaced(client.clone(), ns)
        .create(&pp, &rs)
        .await
        .unwrap();
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "prov-1-x", "labels": labels, "ownerReferences": owned_by("ReplicaSet", "prov-1", &rs.metadata.uid)},
        "spec": template["spec"]})).unwrap();
    let pod = Api::<Pod>::namespaced(client.clone(), ns)
        .create(&pp, &pod)
        .await
        .unwrap();
    (dep, rs, pod)
}

/// Capacity values seen per object key, in the order shown.
pub type Shown = std::sync::Arc<std::sync::Mutex<BTreeMap<(String, String), Vec<Option<i64>>>>>;

/// Every capacity value each of our objects shows from now on, in order: a watch delivers each
/// version, so a value shown for a moment is recorded too. Returns once the initial list is in.
pub async fn record_values(w: &World) -> (Shown, tokio::task::JoinHandle<()>) {
    use futures::StreamExt;
    use kube::runtime::watcher::{self, Event};
    let shown = Shown::default();
    let (ready, listed) = tokio::sync::oneshot::channel();
    let api = w.capacities();
    let record = shown.clone();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(watcher::watcher(api, watcher::Config::default()));
        let mut ready = Some(ready);
        while let Some(event) = stream.next().await {
            match event.unwrap() {
                Event::InitDone => {
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(());
                    }
                }
                Event::Apply(o) | Event::InitApply(o) => {
                    let value = bytes(&o);
                    for (key, _) in by_key(vec![o]) {
                        record.lock().unwrap().entry(key).or_default().push(value);
                    }
                }
                Event::Delete(_) | Event::Init => {}
            }
        }
    });
    listed.await.unwrap();
    (shown, task)
}
