//! A provisioning scenario on the shared real control plane: a namespace, a driver name and
//! StorageClass names of its own, the mock CSI driver and the real `csi-provisioner`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use testenv::{ControlPlane, MockDriver, Provisioner};

pub mod deploy;
mod holder;
mod metrics;
pub mod ops;
pub mod world;

pub use holder::{
    Holder, assert_no_finalizer_with_the_record, count_lease_writes, watch_for_our_finalizer,
};
pub use metrics::{free_port, http_get, sample, scrape};

pub struct Scenario {
    pub client: Client,
    pub ns: String,
    pub driver: String,
    pub dir: PathBuf,
    /// The control plane's admin kubeconfig, which the provisioner is started with.
    kubeconfig: PathBuf,
    mock: Option<MockDriver>,
    provisioner: Option<Provisioner>,
}

impl Scenario {
    /// A namespace, a driver name and a directory; nothing running yet.
    pub async fn new(prefix: &str) -> Scenario {
        Scenario::new_on(ControlPlane::shared(), prefix).await
    }

    /// [`Scenario::new`] on a control plane of the test's own.
    pub async fn new_on(cp: &ControlPlane, prefix: &str) -> Scenario {
        let client = cp.client().await;
        let ns = testenv::create_namespace(&client, prefix).await;
        let driver = format!("{ns}.mock.csi");
        // Unix socket paths are limited to 108 bytes: keep the driver's directory short.
        let dir = PathBuf::from(format!("/tmp/{ns}"));
        std::fs::create_dir_all(&dir).unwrap();
        eprintln!("scenario {ns}: logs in {}", dir.display());
        Scenario {
            client,
            ns,
            driver,
            dir,
            kubeconfig: cp.kubeconfig().to_path_buf(),
            mock: None,
            provisioner: None,
        }
    }

    /// [`Scenario::new`], then the mock driver with `mock_args` and the provisioner with
    /// `prov_args`.
    pub async fn start(prefix: &str, mock_args: &[&str], prov_args: &[&str]) -> Scenario {
        let mut s = Scenario::new(prefix).await;
        s.start_driver(mock_args);
        s.start_provisioner(prov_args);
        s
    }

    pub fn start_driver<S: AsRef<str>>(&mut self, args: &[S]) {
        let mut all = vec![format!("--driver-name={}", self.driver)];
        all.extend(args.iter().map(|s| s.as_ref().to_string()));
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        self.mock = Some(MockDriver::start(&self.dir, &all));
    }

    pub fn start_provisioner<S: AsRef<str>>(&mut self, args: &[S]) {
        self.start_provisioner_with_env(args, &[]);
    }

    /// [`Scenario::start_provisioner`] with `extra_env` added to its environment.
    pub fn start_provisioner_with_env<S: AsRef<str>>(
        &mut self,
        args: &[S],
        extra_env: &[(&str, &str)],
    ) {
        let socket = self.mock().socket.clone();
        let args: Vec<&str> = args.iter().map(|s| s.as_ref()).collect();
        // The write-ahead record lives in the provisioner's namespace: the scenario's, so it
        // goes with it (a later entry of `extra_env` wins).
        let mut env = vec![
            ("NAMESPACE", self.ns.as_str()),
            ("POD_NAMESPACE", self.ns.as_str()),
        ];
        env.extend_from_slice(extra_env);
        self.provisioner = Some(Provisioner::start(
            &self.dir,
            "csi-provisioner",
            &self.kubeconfig,
            &socket,
            &args,
            &env,
        ));
    }

    /// [`Scenario::new`], the mock driver with a `pool_size` pool per node of `short` names,
    /// the provisioner with `prov_args`, and those nodes (Node + CSINode with our driver).
    pub async fn with_nodes(
        prefix: &str,
        short: &[&str],
        pool_size: &str,
        prov_args: &[&str],
    ) -> (Scenario, Vec<String>) {
        let mut s = Scenario::new(prefix).await;
        let names = s.node_names(short);
        s.start_driver(&pool_args(&names, pool_size));
        s.start_provisioner(prov_args);
        s.create_nodes(&names).await;
        (s, names)
    }

    /// Fake nodes `names` (Node + CSINode with our driver) on the mock's topology key.
    pub async fn create_nodes(&self, names: &[String]) {
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        testenv::create_fake_nodes(&self.client, &self.driver, NODE_KEY, &names).await;
    }

    /// The admin kubeconfig of the scenario's control plane.
    pub fn kubeconfig(&self) -> &std::path::Path {
        &self.kubeconfig
    }

    pub fn mock(&self) -> &MockDriver {
        self.mock.as_ref().expect("the mock driver was not started")
    }

    pub fn mock_mut(&mut self) -> &mut MockDriver {
        self.mock.as_mut().expect("the mock driver was not started")
    }

    pub fn provisioner(&mut self) -> &mut Provisioner {
        self.provisioner
            .as_mut()
            .expect("the provisioner was not started")
    }

    /// Node names unique to this scenario (Nodes are cluster-scoped).
    pub fn node_names(&self, short: &[&str]) -> Vec<String> {
        short.iter().map(|n| format!("{}-{n}", self.ns)).collect()
    }

    /// A StorageClass of our driver named `<ns>-<suffix>`.
    pub async fn class(&self, suffix: &str, binding: &str, extra: serde_json::Value) -> String {
        let name = format!("{}-{suffix}", self.ns);
        let mut obj = json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": name},
            "provisioner": self.driver,
            "volumeBindingMode": binding,
        });
        merge(&mut obj, extra);
        let sc: StorageClass = serde_json::from_value(obj).unwrap();
        Api::<StorageClass>::all(self.client.clone())
            .create(&PostParams::default(), &sc)
            .await
            .unwrap();
        name
    }

    pub async fn claim(
        &self,
        name: &str,
        class: &str,
        size: &str,
        extra: serde_json::Value,
    ) -> PersistentVolumeClaim {
        let mut obj = json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                     "resources": {"requests": {"storage": size}}},
        });
        merge(&mut obj, extra);
        let pvc: PersistentVolumeClaim = serde_json::from_value(obj).unwrap();
        self.claims()
            .create(&PostParams::default(), &pvc)
            .await
            .unwrap()
    }

    /// A plain claim (see [`Scenario::claim`]); the name of its volume, `pvc-<uid>`.
    pub async fn claim_volume_name(&self, name: &str, class: &str, size: &str) -> String {
        let claim = self.claim(name, class, size, json!({})).await;
        format!("pvc-{}", claim.metadata.uid.unwrap())
    }

    pub fn claims(&self) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn volumes(&self) -> Api<PersistentVolume> {
        Api::all(self.client.clone())
    }

    pub async fn wait_bound(&self, name: &str) -> PersistentVolumeClaim {
        testenv::wait_for(
            &self.claims(),
            name,
            "be Bound",
            |c: &PersistentVolumeClaim| {
                c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
            },
        )
        .await
    }

    /// Waits until claim `name` is Bound; returns its PV's name.
    pub async fn bound_pv(&self, name: &str) -> String {
        let claim = self.wait_bound(name).await;
        claim
            .spec
            .and_then(|s| s.volume_name)
            .expect("a Bound claim names its PV")
    }

    /// The CSI volume handle of PV `pv`.
    pub async fn volume_handle(&self, pv: &str) -> String {
        let pv = self.volumes().get(pv).await.unwrap();
        pv.spec.unwrap().csi.unwrap().volume_handle
    }

    /// Waits until the namespace has no claim left.
    pub async fn wait_no_claims(&self, timeout: Duration) {
        eventually("every claim to be gone", timeout, || async {
            self.claims()
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .is_empty()
                .then_some(())
        })
        .await
    }

    /// Deletes claim `name` (it may stay while finalizers hold it).
    pub async fn delete_claim(&self, name: &str) {
        self.claims()
            .delete(name, &kube::api::DeleteParams::default())
            .await
            .unwrap();
    }

    /// Deletes StorageClass `name` and waits until it is gone.
    pub async fn delete_class(&self, name: &str) {
        let classes = Api::<StorageClass>::all(self.client.clone());
        classes
            .delete(name, &kube::api::DeleteParams::default())
            .await
            .unwrap();
        wait_gone(&classes, name).await;
    }

    /// Events on an object of this namespace, by involved object name.
    pub async fn events_for(&self, name: &str) -> Vec<Event> {
        Api::<Event>::namespaced(self.client.clone(), &self.ns)
            .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
            .await
            .unwrap()
            .items
    }

    /// The reasons of the events our provisioner (its source names the driver) recorded on
    /// object `name`.
    pub async fn our_event_reasons(&self, name: &str) -> Vec<String> {
        self.events_for(name)
            .await
            .into_iter()
            .filter(|e| {
                e.source
                    .as_ref()
                    .and_then(|src| src.component.as_deref())
                    .is_some_and(|c| c.starts_with(&self.driver))
            })
            .filter_map(|e| e.reason)
            .collect()
    }

    /// Waits for an event with `reason` whose message contains `needle` on object `name`.
    pub async fn wait_event(&self, name: &str, reason: &str, needle: &str) -> Event {
        testenv::wait_event(&self.client, &self.ns, name, reason, needle).await
    }

    /// The mock driver's CreateVolume calls for volume name `pv`.
    pub fn create_calls(&self, pv: &str) -> Vec<serde_json::Value> {
        self.mock()
            .calls_of("CreateVolume")
            .into_iter()
            .filter(|c| c["request"]["name"] == pv)
            .collect()
    }

    /// The volume ids the driver answered CreateVolume of `volume_name` with.
    pub fn volume_ids_made(&self, volume_name: &str) -> Vec<String> {
        self.create_calls(volume_name)
            .iter()
            .filter_map(|c| {
                c["response"]["volume"]["volume_id"]
                    .as_str()
                    .map(String::from)
            })
            .collect()
    }

    /// The driver made one volume for `volume_name` (however often it was asked), and exactly
    /// that one was deleted, once.
    pub fn assert_one_volume_made_and_deleted(&self, volume_name: &str) {
        let made = self.volume_ids_made(volume_name);
        assert!(
            !made.is_empty() && made.iter().all(|id| id == &made[0]),
            "one volume: {made:?}"
        );
        let deleted: Vec<serde_json::Value> = self
            .mock()
            .calls_of("DeleteVolume")
            .into_iter()
            .filter(|c| c.get("error").is_none())
            .collect();
        assert_eq!(deleted.len(), 1, "{deleted:?}");
        assert_eq!(deleted[0]["request"]["volume_id"], made[0].as_str());
    }

    /// Waits until the provisioner has sent a CreateVolume (logged as sent at `-v=5`).
    pub fn wait_create_volume_sent(&mut self) {
        self.provisioner().wait_for_log(
            "\"GRPC call\" method=\"/csi.v1.Controller/CreateVolume\"",
            Duration::from_secs(60),
        );
    }

    /// Deletes claim `name` while its CreateVolume is under way (sent, not answered: the scenario
    /// runs at `-v=5` and the driver is slow). The finalizer must hold the claim until that call
    /// has answered (the record's entry holds it past the claim, which goes at once): the answer
    /// is saved as a PV, which the claim's deletion releases, and its reclaim policy deletes the
    /// volume. In the end the driver made that one volume and deleted it, once. (The mock makes
    /// a volume only at the end of its delay, so "the driver is empty" alone would also hold for
    /// a provisioner that let the claim go at once and left the volume to appear later.)
    pub async fn delete_while_creating(&mut self, name: &str) {
        self.delete_while_creating_held(name, Holder::Record).await;
    }

    /// [`Scenario::delete_while_creating`] with claims held by `holder`.
    pub async fn delete_while_creating_held(&mut self, name: &str, holder: Holder) {
        let claim = self.wait_held(holder, name).await;
        let volume = format!("pvc-{}", claim.metadata.uid.clone().unwrap());
        self.wait_create_volume_sent();
        assert!(
            self.volume_ids_made(&volume).is_empty(),
            "CreateVolume answered before the deletion: the test needs a slower driver"
        );
        self.delete_claim(name).await;
        match holder {
            Holder::Finalizer => wait_gone(&self.claims(), name).await,
            Holder::Record => self.wait_let_go(holder, &claim).await,
        }
        assert!(
            !self.volume_ids_made(&volume).is_empty(),
            "the claim went before its CreateVolume answered"
        );
        eventually("the volume to be deleted", WAIT, || async {
            self.driver_volumes().await.is_empty().then_some(())
        })
        .await;
        self.assert_one_volume_made_and_deleted(&volume);
    }

    /// Names of the volumes the driver holds now (ListVolumes through our own CSI client).
    pub async fn driver_volumes(&self) -> Vec<String> {
        volumes_of(self.mock()).await
    }
}

/// How long a test waits for what the control plane and the provisioner do next.
pub const WAIT: Duration = Duration::from_secs(60);
/// The capacity tests' wait: objects follow a capacity poll, and the scheduler retries a pod on
/// its own backoff.
pub const CAPACITY_WAIT: Duration = Duration::from_secs(120);

/// Polls `check` every 200 ms until it returns `Some`, for at most `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {}s waiting for {what}",
            timeout.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub fn merge(base: &mut serde_json::Value, extra: serde_json::Value) {
    match (base, extra) {
        (serde_json::Value::Object(b), serde_json::Value::Object(e)) => {
            for (k, v) in e {
                merge(b.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (b, e) => *b = e,
    }
}

pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub const NODE_KEY: &str = "topology.mock.csi/node";
pub fn pod(name: &str, claim: &str, extra: serde_json::Value) -> k8s_openapi::api::core::v1::Pod {
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
pub fn on_nodes(nodes: &[String]) -> serde_json::Value {
    json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": NODE_KEY, "operator": "In", "values": nodes}]}]}}}})
}
pub async fn create_pod(s: &Scenario, name: &str, claim: &str, extra: serde_json::Value) {
    use kube::api::PostParams;
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(s.client.clone(), &s.ns);
    pods.create(&PostParams::default(), &pod(name, claim, extra))
        .await
        .unwrap();
}
pub fn pool_args(nodes: &[String], size: &str) -> Vec<String> {
    nodes
        .iter()
        .map(|n| format!("--pool={NODE_KEY}={n}:{size}"))
        .collect()
}
pub async fn pod_node(s: &Scenario, name: &str) -> String {
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

pub async fn set_unschedulable(s: &Scenario, node: &str, unschedulable: bool) {
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

pub async fn create_secret(s: &Scenario, name: &str, data: &[(&str, &str)]) {
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

pub async fn wait_gone<K>(api: &kube::Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    eventually(&format!("{name} to be deleted"), WAIT, || async {
        api.get_opt(name).await.unwrap().is_none().then_some(())
    })
    .await
}

pub const CREATING: &str = "external-provisioner.volume.kubernetes.io/creating-volume";
pub fn holds_finalizer(c: &k8s_openapi::api::core::v1::PersistentVolumeClaim) -> bool {
    c.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == CREATING)
}

pub async fn no_pv_of_class(s: &Scenario, class: &str) {
    eventually(
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

/// Waits until a ValidatingAdmissionPolicy just created refuses replacing claim `name` with
/// `changed` (a dry run: nothing is written).
pub async fn wait_update_refused(s: &Scenario, changed: &PersistentVolumeClaim, what: &str) {
    let name = changed.metadata.name.clone().unwrap_or_default();
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    eventually(what, WAIT, || async {
        s.claims()
            .replace(&name, &dry, changed)
            .await
            .is_err()
            .then_some(())
    })
    .await;
}

/// A ValidatingAdmissionPolicy `name` refusing, with `message`, every update of `resource`
/// (API group, plural) in the scenario's namespace for which `allowed` (CEL) is false.
pub async fn refuse_updates(
    s: &Scenario,
    name: &str,
    resource: (&str, &str),
    allowed: &str,
    message: &str,
) {
    let (group, plural) = resource;
    create_validating_policy(
        s,
        name,
        json!({
            "failurePolicy": "Fail",
            "matchConstraints": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": s.ns}},
                "resourceRules": [{"apiGroups": [group], "apiVersions": ["v1"],
                    "operations": ["UPDATE"], "resources": [plural]}]},
            "validations": [{"expression": allowed, "message": message}],
        }),
    )
    .await;
}

/// Creates ValidatingAdmissionPolicy `name` with `spec` and a binding that denies what it
/// refuses (cluster-wide: the spec's expression names what it applies to).
pub async fn create_validating_policy(s: &Scenario, name: &str, spec: serde_json::Value) {
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name}, "spec": spec,
    });
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    });
    for (kind, body) in [
        ("ValidatingAdmissionPolicy", policy),
        ("ValidatingAdmissionPolicyBinding", binding),
    ] {
        Api::<kube::api::DynamicObject>::all_with(s.client.clone(), &admission_resource(kind))
            .create(
                &PostParams::default(),
                &serde_json::from_value(body).unwrap(),
            )
            .await
            .unwrap();
    }
}

/// Deletes what [`create_validating_policy`] made.
pub async fn drop_validating_policy(s: &Scenario, name: &str) {
    for kind in [
        "ValidatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicy",
    ] {
        Api::<kube::api::DynamicObject>::all_with(s.client.clone(), &admission_resource(kind))
            .delete(name, &kube::api::DeleteParams::default())
            .await
            .unwrap();
    }
}

fn admission_resource(kind: &str) -> kube::api::ApiResource {
    kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
        "admissionregistration.k8s.io",
        "v1",
        kind,
    ))
}

/// `kubectl apply`s claim `name` (class `class`, 1Gi) with `labels`, as the admin, the way a
/// user manages it: kubectl keeps the last-applied annotation and owns its fields as
/// `kubectl-client-side-apply`.
pub fn kubectl_apply_claim(s: &Scenario, name: &str, class: &str, labels: serde_json::Value) {
    let claim = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": s.ns, "labels": labels},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                 "resources": {"requests": {"storage": "1Gi"}}},
    });
    testenv::kubectl(
        &s.kubeconfig,
        &["apply", "-f", "-"],
        Some(&claim.to_string()),
    )
    .unwrap_or_else(|e| panic!("kubectl apply of claim {name}: {e}"));
}

/// The claim still carries what `kubectl apply` needs for its three-way merge: the
/// last-applied annotation and kubectl's field manager entry.
pub fn assert_still_kubectls(claim: &PersistentVolumeClaim) {
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    assert!(
        claim
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("kubectl.kubernetes.io/last-applied-configuration")),
        "claim {name} lost its last-applied annotation: {:?}",
        claim.metadata.annotations
    );
    let managers: Vec<&str> = claim
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.as_deref())
        .collect();
    assert!(
        managers.contains(&"kubectl-client-side-apply"),
        "claim {name} lost kubectl's field manager entry: {managers:?}"
    );
}

/// Waits until claim `name` is Bound and holds no creating-volume finalizer (released after
/// binding when the provisioner added it).
pub async fn wait_bound_and_released(s: &Scenario, name: &str) -> PersistentVolumeClaim {
    testenv::wait_for(
        &s.claims(),
        name,
        "be Bound without the creating-volume finalizer",
        |c: &PersistentVolumeClaim| {
            c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
                && !holds_finalizer(c)
        },
    )
    .await
}

/// The labels of claim `name` now.
pub async fn claim_labels(s: &Scenario, name: &str) -> BTreeMap<String, String> {
    s.claims()
        .get(name)
        .await
        .unwrap()
        .metadata
        .labels
        .unwrap_or_default()
}

/// Names of the volumes `mock` holds now (ListVolumes through our own CSI client).
pub async fn volumes_of(mock: &MockDriver) -> Vec<String> {
    let client = csi::Client::connect(
        &format!("unix://{}", mock.socket.display()),
        Default::default(),
    )
    .await
    .unwrap();
    let resp = client
        .list_volumes(csi::v1::ListVolumesRequest::default())
        .await
        .unwrap();
    resp.entries
        .into_iter()
        .filter_map(|e| e.volume)
        .map(|v| v.volume_id)
        .collect()
}
