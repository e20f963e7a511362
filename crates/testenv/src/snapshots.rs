//! CSI snapshots on the real control plane: external-snapshotter's CRDs, its
//! `snapshot-controller` and its `csi-snapshotter` sidecar (v8.7.0, built by `cargo xtask
//! testenv build`), as guarded child processes.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client};

use crate::cluster::WAIT_TIMEOUT;
use crate::error::IoContext;
use crate::process::{Process, try_spawn};
use crate::{Error, paths};

/// The API group of VolumeSnapshot, VolumeSnapshotContent and VolumeSnapshotClass.
pub const SNAPSHOT_GROUP: &str = "snapshot.storage.k8s.io";

/// The `testenv-bin` entry (a folder linked into the build cache) holding the CRDs.
const CRD_DIR: &str = "snapshot-crd";

const CRD_FILES: [&str; 3] = [
    "snapshot.storage.k8s.io_volumesnapshotclasses.yaml",
    "snapshot.storage.k8s.io_volumesnapshotcontents.yaml",
    "snapshot.storage.k8s.io_volumesnapshots.yaml",
];

/// Group snapshots are on by default, but their CRDs are not installed here: without this the
/// controller waits 30 s for them before starting (the sidecar only warns; it gets the flag
/// too so that both agree).
const NO_GROUP_SNAPSHOTS: &str = "--feature-gates=CSIVolumeGroupSnapshot=false";

/// How long a component gets to log that it started.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// `snapshot.storage.k8s.io/v1` VolumeSnapshot (namespaced), for `Api<DynamicObject>`.
pub fn volume_snapshot_resource() -> ApiResource {
    snapshot_resource("VolumeSnapshot", "volumesnapshots")
}

/// `snapshot.storage.k8s.io/v1` VolumeSnapshotContent (cluster-scoped).
pub fn volume_snapshot_content_resource() -> ApiResource {
    snapshot_resource("VolumeSnapshotContent", "volumesnapshotcontents")
}

/// `snapshot.storage.k8s.io/v1` VolumeSnapshotClass (cluster-scoped).
pub fn volume_snapshot_class_resource() -> ApiResource {
    snapshot_resource("VolumeSnapshotClass", "volumesnapshotclasses")
}

fn snapshot_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(SNAPSHOT_GROUP, "v1", kind), plural)
}

/// Applies the three `snapshot.storage.k8s.io` CRDs (server-side apply, so any number of tests
/// sharing a control plane may call it, at once or again) and waits until each is Established.
pub async fn install_snapshot_crds(client: &Client) -> Result<(), Error> {
    install_crds(client, CRD_DIR, &CRD_FILES).await
}

/// Applies Gateway API's ReferenceGrant CRD (v1.2.1, which serves `v1beta1`), for
/// cross-namespace data sources; like [`install_snapshot_crds`].
pub async fn install_reference_grant_crd(client: &Client) -> Result<(), Error> {
    install_crds(
        client,
        "gateway-crd",
        &["gateway.networking.k8s.io_referencegrants.yaml"],
    )
    .await
}

async fn install_crds(client: &Client, link: &str, files: &[&str]) -> Result<(), Error> {
    let dir = paths::try_go_binary(link)?;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply("testenv").force();
    let mut names = Vec::with_capacity(files.len());
    for file in files {
        let path = dir.join(file);
        let text = fs::read_to_string(&path).ctx(|| format!("reading {}", path.display()))?;
        let crd: CustomResourceDefinition =
            serde_yaml::from_str(&text).map_err(|source| Error::Yaml {
                path: path.clone(),
                source,
            })?;
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &params, &Patch::Apply(&crd)).await?;
        names.push(name);
    }
    let deadline = Instant::now() + WAIT_TIMEOUT;
    for name in names {
        loop {
            let crd = api.get(&name).await?;
            if established(&crd) {
                break;
            }
            if Instant::now() >= deadline {
                return Err(Error::NotReady(format!(
                    "CRD {name} not Established after {}s; status: {:?}",
                    WAIT_TIMEOUT.as_secs(),
                    crd.status
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

fn established(crd: &CustomResourceDefinition) -> bool {
    let conditions = crd.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|cs| {
        cs.iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    })
}

/// external-snapshotter's `snapshot-controller`: the cluster-wide half of snapshotting. It
/// creates a VolumeSnapshotContent for each dynamically requested VolumeSnapshot, binds the two
/// and copies the content's status back. Needs the CRDs ([`install_snapshot_crds`]). It runs
/// without leader election, so start one per control plane: two would both act on every
/// snapshot.
#[derive(Debug)]
pub struct SnapshotController {
    process: Process,
}

impl SnapshotController {
    /// Starts `snapshot-controller --kubeconfig=<kubeconfig> --leader-election=false --v=5`
    /// (log `<dir>/snapshot-controller.log`) and waits until it has found the CRDs and started.
    ///
    /// # Panics
    /// When the binary is missing or it does not start.
    pub fn start(dir: &Path, kubeconfig: &Path) -> SnapshotController {
        Self::try_start(dir, kubeconfig).unwrap_or_else(|e| panic!("snapshot-controller: {e}"))
    }

    pub fn try_start(dir: &Path, kubeconfig: &Path) -> Result<SnapshotController, Error> {
        let binary = paths::try_go_binary("snapshot-controller")?;
        let mut cmd = Command::new(binary);
        cmd.arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg("--leader-election=false")
            .arg(NO_GROUP_SNAPSHOTS)
            .arg("--v=5");
        let from = log_len(dir, "snapshot-controller");
        let mut process = try_spawn("snapshot-controller", cmd, dir)?;
        wait_for_log(&mut process, from, "Starting snapshot controller")?;
        Ok(SnapshotController { process })
    }

    pub fn log_path(&self) -> &Path {
        self.process.log_path()
    }

    pub fn process(&mut self) -> &mut Process {
        &mut self.process
    }
}

/// external-snapshotter's `csi-snapshotter` sidecar: the driver's half of snapshotting. It
/// calls CreateSnapshot and DeleteSnapshot on one driver's socket for the
/// VolumeSnapshotContents of that driver (the name the driver reports) and records the result
/// in their status.
#[derive(Debug)]
pub struct Snapshotter {
    process: Process,
}

impl Snapshotter {
    /// Starts `csi-snapshotter --csi-address=<socket> --kubeconfig=<kubeconfig>
    /// --leader-election=false --v=5` (log `<dir>/csi-snapshotter.log`) and waits until it has
    /// reached the driver and started.
    ///
    /// # Panics
    /// When the binary is missing or it does not start.
    pub fn start(dir: &Path, kubeconfig: &Path, socket: &Path) -> Snapshotter {
        Self::try_start(dir, kubeconfig, socket).unwrap_or_else(|e| panic!("csi-snapshotter: {e}"))
    }

    pub fn try_start(dir: &Path, kubeconfig: &Path, socket: &Path) -> Result<Snapshotter, Error> {
        let binary = paths::try_go_binary("csi-snapshotter")?;
        let mut cmd = Command::new(binary);
        cmd.arg(format!("--csi-address={}", socket.display()))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg("--leader-election=false")
            .arg(NO_GROUP_SNAPSHOTS)
            .arg("--v=5");
        let from = log_len(dir, "csi-snapshotter");
        let mut process = try_spawn("csi-snapshotter", cmd, dir)?;
        wait_for_log(&mut process, from, "Starting CSI snapshotter")?;
        Ok(Snapshotter { process })
    }

    pub fn log_path(&self) -> &Path {
        self.process.log_path()
    }

    pub fn process(&mut self) -> &mut Process {
        &mut self.process
    }
}

/// The size of `<dir>/<name>.log` now: logs are appended across starts, so an earlier run's
/// lines must not count.
fn log_len(dir: &Path, name: &str) -> usize {
    fs::metadata(dir.join(format!("{name}.log"))).map_or(0, |m| m.len() as usize)
}

/// Neither component opens a socket of its own, so "started" is the line it logs once its
/// preconditions (CRDs, driver) are met; fails with the log tail when it exits or times out.
fn wait_for_log(process: &mut Process, from: usize, needle: &str) -> Result<(), Error> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        // All of this run's log, not the tail: the line may scroll past quickly at --v=5.
        let log = fs::read(process.log_path()).unwrap_or_default();
        let log = String::from_utf8_lossy(log.get(from..).unwrap_or_default());
        if log.contains(needle) {
            return Ok(());
        }
        if let Ok(Some(status)) = process.try_wait() {
            return Err(Error::NotReady(format!(
                "exited ({status}) before logging {needle:?}; log {}:\n{}",
                process.log_path().display(),
                process.log_tail(20)
            )));
        }
        if Instant::now() >= deadline {
            return Err(Error::NotReady(format!(
                "did not log {needle:?} within {}s; log {}:\n{}",
                START_TIMEOUT.as_secs(),
                process.log_path().display(),
                process.log_tail(20)
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn established_needs_a_true_condition() {
        let crd = |conditions: serde_json::Value| -> CustomResourceDefinition {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "x"},
                "spec": {"group": "g", "names": {"plural": "xs", "kind": "X"},
                         "scope": "Namespaced", "versions": []},
                "status": {"conditions": conditions},
            }))
            .unwrap()
        };
        let cond = |t: &str, s: &str| serde_json::json!({"type": t, "status": s});
        let cases = [
            (serde_json::json!([]), false),
            (serde_json::json!([cond("NamesAccepted", "True")]), false),
            (serde_json::json!([cond("Established", "False")]), false),
            (
                serde_json::json!([cond("NamesAccepted", "True"), cond("Established", "True")]),
                true,
            ),
        ];
        for (conditions, want) in cases {
            assert_eq!(established(&crd(conditions.clone())), want, "{conditions}");
        }
    }

    #[test]
    fn resources_name_group_version_and_plural() {
        let r = volume_snapshot_content_resource();
        assert_eq!(r.api_version, "snapshot.storage.k8s.io/v1");
        assert_eq!(r.plural, "volumesnapshotcontents");
        assert_eq!(volume_snapshot_resource().kind, "VolumeSnapshot");
        assert_eq!(
            volume_snapshot_class_resource().plural,
            "volumesnapshotclasses"
        );
    }
}
