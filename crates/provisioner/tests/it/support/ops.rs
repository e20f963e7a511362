//! Helpers for the operations tests: a namespace and driver of their own on the shared real
//! control plane, provisioners started as they would be deployed, and a tiny scraper.

use super::{WAIT, eventually};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Secret};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use testenv::{ControlPlane, MockDriver, Process, Provisioner};

/// One test's world: namespace, driver name, directory for sockets and logs, the mock driver.
pub struct Ops {
    pub client: Client,
    pub ns: String,
    pub driver: String,
    pub dir: PathBuf,
    pub mock: MockDriver,
}

/// Leader election with a short Lease (6 s), renew deadline (4 s) and retry period (1 s), so a
/// standby takes over within seconds (the namespace flag is the caller's).
pub const FAST_ELECTION: [&str; 4] = [
    "--leader-election",
    "--leader-election-lease-duration=6s",
    "--leader-election-renew-deadline=4s",
    "--leader-election-retry-period=1s",
];

impl Ops {
    pub async fn start(prefix: &str) -> Ops {
        let cp = ControlPlane::shared();
        let client = cp.client().await;
        let ns = testenv::create_namespace(&client, prefix).await;
        let driver = format!("{ns}.ops.csi");
        // Unix socket paths are limited to 108 bytes: keep the directory short.
        let dir = PathBuf::from(format!("/tmp/{ns}"));
        std::fs::create_dir_all(&dir).expect("test directory");
        eprintln!("{ns}: driver {driver}, logs in {}", dir.display());
        let mock = MockDriver::start(&dir, &["--driver-name", &driver]);
        Ops {
            client,
            ns,
            driver,
            dir,
            mock,
        }
    }

    /// `csi-provisioner` against our driver, logging to `<dir>/<name>.log`.
    pub fn provisioner(&self, name: &str, args: &[&str]) -> Provisioner {
        let cp = ControlPlane::shared();
        Provisioner::start(
            &self.dir,
            name,
            cp.kubeconfig(),
            &self.mock.socket,
            args,
            &[
                ("NAMESPACE", self.ns.as_str()),
                ("POD_NAMESPACE", self.ns.as_str()),
            ],
        )
    }

    /// `csi-provisioner` in its own UTS namespace with `hostname`, so that replicas on this one
    /// machine get distinct leader-election identities (upstream's identity is the hostname,
    /// i.e. the pod name). Needs root, as tests here run.
    pub fn provisioner_on_host(&self, name: &str, hostname: &str, args: &[&str]) -> Process {
        self.provisioner_on_host_with_env(name, hostname, args, &[])
    }

    /// [`Ops::provisioner_on_host`] with `env` added to its environment.
    pub fn provisioner_on_host_with_env(
        &self,
        name: &str,
        hostname: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Process {
        let cp = ControlPlane::shared();
        let binary = testenv::workspace_binary("csi-provisioner");
        let mut cmd = Command::new("unshare");
        cmd.arg("--uts")
            .arg("sh")
            .arg("-c")
            .arg("hostname \"$0\" && exec \"$@\"")
            .arg(hostname)
            .arg(binary)
            .arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
            .arg(format!("--csi-address={}", self.mock.socket.display()))
            .args(args)
            .env("NAMESPACE", &self.ns)
            // The write-ahead record's namespace, unless a leader-election namespace names it.
            .env("POD_NAMESPACE", &self.ns)
            .envs(env.iter().copied());
        testenv::spawn(name, cmd, &self.dir)
    }

    /// A StorageClass `<ns>-<suffix>` of our driver with Immediate binding.
    pub async fn class(&self, suffix: &str, parameters: serde_json::Value) -> String {
        let name = format!("{}-{suffix}", self.ns);
        let sc: StorageClass = serde_json::from_value(json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": name},
            "provisioner": self.driver,
            "volumeBindingMode": "Immediate",
            "reclaimPolicy": "Delete",
            "parameters": parameters,
        }))
        .expect("class");
        Api::<StorageClass>::all(self.client.clone())
            .create(&PostParams::default(), &sc)
            .await
            .unwrap_or_else(|e| panic!("creating StorageClass {name}: {e}"));
        name
    }

    pub async fn secret(&self, name: &str, data: &[(&str, &str)]) {
        let string_data: BTreeMap<String, String> = data
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            string_data: Some(string_data),
            ..Default::default()
        };
        Api::<Secret>::namespaced(self.client.clone(), &self.ns)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap_or_else(|e| panic!("creating Secret {name}: {e}"));
    }

    pub fn claims(&self) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn volumes(&self) -> Api<PersistentVolume> {
        Api::all(self.client.clone())
    }

    /// A 1Gi ReadWriteOnce claim of `class`, not created yet.
    pub fn claim_object(&self, name: &str, class: &str) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                     "resources": {"requests": {"storage": "1Gi"}}},
        }))
        .expect("claim")
    }

    pub async fn claim(&self, name: &str, class: &str) -> PersistentVolumeClaim {
        let pvc = self.claim_object(name, class);
        self.claims()
            .create(&PostParams::default(), &pvc)
            .await
            .unwrap_or_else(|e| panic!("creating claim {name}: {e}"))
    }

    /// Waits until the claim is Bound; returns its volume's name.
    pub async fn wait_bound(&self, name: &str) -> String {
        let claim = testenv::wait_for(&self.claims(), name, "be Bound", |c| {
            c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
        })
        .await;
        claim
            .spec
            .and_then(|s| s.volume_name)
            .expect("a bound claim names its volume")
    }

    /// Deletes a bound claim and waits until its volume is gone (reclaim policy Delete).
    pub async fn delete_and_wait_gone(&self, claim: &str, volume: &str) {
        self.claims()
            .delete(claim, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("deleting claim {claim}: {e}"));
        let volumes = self.volumes();
        eventually(&format!("PV {volume} to be deleted"), WAIT, || async {
            matches!(volumes.get_opt(volume).await, Ok(None)).then_some(())
        })
        .await;
    }

    /// CreateVolume calls the driver answered without error, by volume name.
    pub fn successful_creates(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for call in self.mock.calls_of("CreateVolume") {
            if call.get("error").is_none() {
                let name = call["request"]["name"].as_str().unwrap_or("").to_string();
                *out.entry(name).or_insert(0) += 1;
            }
        }
        out
    }
}
