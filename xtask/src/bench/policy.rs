//! The "with admission policy" variants: the MutatingAdmissionPolicy that keeps our
//! creating-volume finalizer on the API server's side, installed for one run's driver exactly as
//! our binary prints it (`csi-provisioner admission-policy --output json`).

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{ApiResource, DeleteParams, DynamicObject, PostParams};
use kube::{Api, Client};
use serde_json::json;

use provisioning::admission;
use provisioning::names::CREATING_VOLUME_FINALIZER;

use super::cluster;
use super::launch::Running;

const GAUGE: &str = "csi_provisioner_admission_policy_active";
/// The StorageClass the probe claims name: none exists, so only the policy acts on them
/// (kube-controller-manager records a ProvisioningFailed event saying so).
pub const PROBE_CLASS: &str = "no-such-class";

/// The API resource of the printed object of `kind` (the policy or its binding).
fn resource(kind: &str) -> Result<ApiResource> {
    let (kind, plural) = [admission::POLICY, admission::BINDING]
        .into_iter()
        .find(|(k, _)| *k == kind)
        .ok_or_else(|| anyhow::anyhow!("unexpected kind {kind:?} in the printed policy"))?;
    Ok(ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: admission::API_VERSION.into(),
        kind: kind.into(),
        plural: plural.into(),
    })
}

/// The objects our binary prints for `driver`.
fn printed(ours: &Path, driver: &str) -> Result<Vec<serde_json::Value>> {
    let out = std::process::Command::new(ours)
        .args(["admission-policy", "--driver-name", driver, "--output=json"])
        .output()
        .with_context(|| format!("running {} admission-policy", ours.display()))?;
    if !out.status.success() {
        bail!(
            "admission-policy failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let list: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    Ok(list["items"].as_array().cloned().unwrap_or_default())
}

/// Installs the policy and its binding for `driver` and waits until the API server applies it
/// (a probe claim in `namespace` gets the finalizer); the probe is removed again.
pub async fn install(client: &Client, ours: &Path, driver: &str, namespace: &str) -> Result<()> {
    for item in printed(ours, driver)? {
        let kind = item["kind"].as_str().unwrap_or_default().to_string();
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource(&kind)?);
        let obj: DynamicObject = serde_json::from_value(item)?;
        api.create(&PostParams::default(), &obj)
            .await
            .with_context(|| format!("creating the {kind} for {driver}"))?;
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    // No such class: kube-controller-manager leaves the probe alone; only the policy acts.
    let probe: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"generateName": "policy-probe-",
                     "annotations": {"volume.kubernetes.io/storage-provisioner": driver}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": PROBE_CLASS,
                 "resources": {"requests": {"storage": "1Gi"}}},
    }))?;
    // Each try leaves a probe; the API server may need a moment to load the new policy.
    let mut probes = Vec::new();
    for _ in 0..120 {
        let made = claims.create(&PostParams::default(), &probe).await?;
        probes.push(made.metadata.name.clone().unwrap_or_default());
        let held = made.metadata.finalizers.iter().flatten();
        if held.clone().any(|f| f == CREATING_VOLUME_FINALIZER) {
            return cluster::force_delete(&claims, probes).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    cluster::force_delete(&claims, probes).await?;
    bail!("the API server did not apply the admission policy for {driver} within a minute")
}

/// Removes the policy and binding of `driver` (after the run; errors are reported only).
pub async fn remove(client: &Client, driver: &str) {
    let name = admission::policy_name(driver);
    for (kind, _) in [admission::BINDING, admission::POLICY] {
        let Ok(r) = resource(kind) else { continue };
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &r);
        if let Err(e) = api.delete(&name, &DeleteParams::default()).await {
            eprintln!("bench: removing the {kind} {name}: {e}");
        }
    }
}

/// Whether the provisioner says it uses the policy (its gauge is 1).
pub async fn seen_by(prov: &Running) -> Result<bool> {
    let samples = super::prom::scrape(&prov.http_addr).await?;
    Ok(super::prom::sum(&samples, GAUGE, &[]) >= 1.0)
}
