//! Counting a provisioner's API requests on the API server's side, the same way for both.
//!
//! Upstream's `/metrics` has no client request counter, so each measured run gets its own
//! identity: a ServiceAccount bound to cluster-admin, a kubeconfig with its token, and a
//! FlowSchema that matches only that ServiceAccount. The API server's
//! `apiserver_flowcontrol_dispatched_requests_total{flow_schema=...}` then counts exactly the
//! requests of that provisioner.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::flowcontrol::v1::FlowSchema;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::prom;

/// Name of the ServiceAccount, FlowSchema and ClusterRoleBinding of a run.
pub fn object_name(driver: &str) -> String {
    format!("bench-{driver}")
}

/// The admin kubeconfig with its bearer token replaced by `token`.
pub fn with_token(kubeconfig: &str, token: &str) -> Result<String> {
    let mut replaced = 0;
    let lines: Vec<String> = kubeconfig
        .lines()
        .map(|line| match line.split_once("token:") {
            Some((indent, _)) if indent.trim().is_empty() => {
                replaced += 1;
                format!("{indent}token: {token}")
            }
            _ => line.to_string(),
        })
        .collect();
    if replaced != 1 {
        bail!("expected one `token:` line in the admin kubeconfig, found {replaced}");
    }
    Ok(lines.join("\n") + "\n")
}

/// Creates the identity of one run in `namespace` and writes `<dir>/kubeconfig`.
pub async fn create(
    client: &Client,
    admin_kubeconfig: &Path,
    namespace: &str,
    driver: &str,
    dir: &Path,
) -> Result<PathBuf> {
    let name = object_name(driver);
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    accounts
        .create(&PostParams::default(), &sa)
        .await
        .context("creating the ServiceAccount")?;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    }))?;
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .context("creating the ClusterRoleBinding")?;
    let schema: FlowSchema = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "matchingPrecedence": 100,
            "priorityLevelConfiguration": {"name": "workload-high"},
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [{
                "subjects": [{"kind": "ServiceAccount",
                              "serviceAccount": {"namespace": namespace, "name": name}}],
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                   "clusterScope": true, "namespaces": ["*"]}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            }],
        },
    }))?;
    Api::<FlowSchema>::all(client.clone())
        .create(&PostParams::default(), &schema)
        .await
        .context("creating the FlowSchema")?;
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"expirationSeconds": 86400}}))?;
    let token = accounts
        .create_token_request(&name, &PostParams::default(), &request)
        .await
        .context("requesting a token")?
        .status
        .and_then(|s| s.token)
        .context("TokenRequest without a token")?;
    let admin = std::fs::read_to_string(admin_kubeconfig)
        .with_context(|| format!("reading {}", admin_kubeconfig.display()))?;
    std::fs::create_dir_all(dir)?;
    let path = dir.join("kubeconfig");
    std::fs::write(&path, with_token(&admin, &token)?)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Deletes the identity of a run.
pub async fn delete(client: &Client, namespace: &str, driver: &str) {
    let name = object_name(driver);
    let dp = DeleteParams::default();
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let _ = accounts.delete(&name, &dp).await;
    let _ = Api::<FlowSchema>::all(client.clone())
        .delete(&name, &dp)
        .await;
    let _ = Api::<ClusterRoleBinding>::all(client.clone())
        .delete(&name, &dp)
        .await;
}

/// Requests the API server has dispatched for the run of `driver` so far.
pub async fn requests(client: &Client, driver: &str) -> Result<f64> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = client
        .request_text(request)
        .await
        .context("reading the API server's metrics")?;
    let samples = prom::parse(&text);
    let name = object_name(driver);
    Ok(prom::sum(
        &samples,
        "apiserver_flowcontrol_dispatched_requests_total",
        &[("flow_schema", name.as_str())],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_is_replaced_once() {
        let admin = "users:\n- name: admin\n  user:\n    token: secret\ncontexts: []\n";
        let got = with_token(admin, "sa-token").unwrap();
        assert_eq!(
            got,
            "users:\n- name: admin\n  user:\n    token: sa-token\ncontexts: []\n"
        );
        assert!(with_token("users: []\n", "t").is_err());
        let two = format!("{admin}    token: other\n");
        assert!(with_token(&two, "t").is_err());
    }

    #[test]
    fn names_are_per_run() {
        assert_eq!(
            object_name("s1-ours-r1.bench.csi"),
            "bench-s1-ours-r1.bench.csi"
        );
    }
}
