//! Helpers for the deployment tests: the shipped manifests as JSON (through kubectl), pure
//! rewrites of the RBAC objects, upstream's grants as a table, a ServiceAccount kubeconfig from
//! the TokenRequest API, and the two Forbidden signals (metric and log).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::{Value, json};

/// The manifests directory, `deploy/kubernetes`.
pub fn manifests_dir() -> PathBuf {
    testenv::workspace_root().join("deploy").join("kubernetes")
}

pub use testenv::kubectl;

/// The objects of a manifest file as JSON, parsed by kubectl (no YAML parser needed here).
pub fn load_objects(kubeconfig: &Path, file: &Path) -> Vec<Value> {
    let path = file.display().to_string();
    let text = kubectl(
        kubeconfig,
        &["create", "--dry-run=client", "-o", "json", "-f", &path],
        None,
    )
    .unwrap_or_else(|e| panic!("kubectl cannot read {path}: {e}"));
    // One JSON document per object, one after the other (or a List).
    let mut out = Vec::new();
    for value in serde_json::Deserializer::from_str(&text).into_iter::<Value>() {
        let value = value.expect("kubectl -o json prints JSON");
        match value.get("items") {
            Some(Value::Array(items)) if value["kind"] == "List" => out.extend(items.clone()),
            _ => out.push(value),
        }
    }
    out
}

/// Moves the RBAC objects into namespace `ns` and gives the cluster-scoped ones names of their
/// own (`<name>-<ns>`), so tests running side by side do not share grants.
pub fn localize(objects: &mut [Value], ns: &str) {
    for obj in objects.iter_mut() {
        let kind = obj["kind"].as_str().unwrap_or_default().to_string();
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            if meta.contains_key("namespace") {
                meta.insert("namespace".into(), json!(ns));
            }
            if kind.starts_with("Cluster")
                && let Some(name) = meta.get("name").and_then(Value::as_str)
            {
                let renamed = format!("{name}-{ns}");
                meta.insert("name".into(), json!(renamed));
            }
        }
        if let Some(subjects) = obj.get_mut("subjects").and_then(Value::as_array_mut) {
            for s in subjects.iter_mut().filter(|s| s.get("namespace").is_some()) {
                s["namespace"] = json!(ns);
            }
        }
        if obj["roleRef"]["kind"] == "ClusterRole"
            && let Some(name) = obj["roleRef"]["name"].as_str()
        {
            obj["roleRef"]["name"] = json!(format!("{name}-{ns}"));
        }
    }
}

/// Removes `verb` from every rule that covers `resource`, and rules left without verbs (the
/// API server refuses those); returns how many rules changed.
pub fn drop_verb(objects: &mut [Value], resource: &str, verb: &str) -> usize {
    let mut changed = 0;
    for rules in objects
        .iter_mut()
        .filter_map(|o| o.get_mut("rules").and_then(Value::as_array_mut))
    {
        for rule in rules.iter_mut() {
            let covers = rule["resources"]
                .as_array()
                .is_some_and(|r| r.iter().any(|x| x == resource));
            if let (true, Some(verbs)) = (covers, rule["verbs"].as_array_mut()) {
                let before = verbs.len();
                verbs.retain(|v| v != verb);
                changed += usize::from(verbs.len() != before);
            }
        }
        rules.retain(|r| r["verbs"].as_array().is_none_or(|v| !v.is_empty()));
    }
    changed
}

/// One permission: (scope, API group, resource, verb); scope is "cluster" for a ClusterRole
/// and "namespace" for a Role.
pub type Grant = (String, String, String, String);

/// Every permission the Roles and ClusterRoles in `objects` grant.
pub fn grants(objects: &[Value]) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for obj in objects {
        let scope = match obj["kind"].as_str() {
            Some("ClusterRole") => "cluster",
            Some("Role") => "namespace",
            _ => continue,
        };
        for rule in obj["rules"].as_array().into_iter().flatten() {
            let strs = |k: &str| -> Vec<String> {
                rule[k]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            };
            for group in strs("apiGroups") {
                for resource in strs("resources") {
                    for verb in strs("verbs") {
                        out.insert((scope.into(), group.clone(), resource.clone(), verb));
                    }
                }
            }
        }
    }
    out
}

/// What upstream external-provisioner v6.3.0's deploy/kubernetes/rbac.yaml grants, including
/// its commented-out optional rules (secrets, referencegrants): (scope, group, resource, verbs).
#[rustfmt::skip]
pub const UPSTREAM_V6_3_0: &[(&str, &str, &str, &[&str])] = &[
    ("cluster", "", "secrets", &["get", "list"]),
    ("cluster", "", "persistentvolumes", &["get", "list", "watch", "create", "patch", "delete"]),
    ("cluster", "", "persistentvolumeclaims", &["get", "list", "watch", "update"]),
    ("cluster", "storage.k8s.io", "storageclasses", &["get", "list", "watch"]),
    ("cluster", "", "events", &["list", "watch", "create", "update", "patch"]),
    ("cluster", "snapshot.storage.k8s.io", "volumesnapshots", &["get", "list", "watch", "update"]),
    ("cluster", "snapshot.storage.k8s.io", "volumesnapshotcontents", &["get", "list"]),
    ("cluster", "storage.k8s.io", "csinodes", &["get", "list", "watch"]),
    ("cluster", "", "nodes", &["get", "list", "watch"]),
    ("cluster", "storage.k8s.io", "volumeattachments", &["get", "list", "watch"]),
    ("cluster", "gateway.networking.k8s.io", "referencegrants", &["get", "list", "watch"]),
    ("namespace", "coordination.k8s.io", "leases", &["get", "watch", "list", "delete", "update", "create"]),
    ("namespace", "storage.k8s.io", "csistoragecapacities", &["get", "list", "watch", "create", "update", "patch", "delete"]),
    ("namespace", "", "pods", &["get"]),
    ("namespace", "apps", "replicasets", &["get"]),
];

/// Grants beyond upstream's that are documented in rbac.yaml: upstream's code GETs the
/// VolumeAttributesClass too, its example RBAC just lacks the rule; and (ours) watching
/// VolumeSnapshotContents, so that restores read them from a cache (ours); patching claims,
/// so that a write sends only what it changes without reading the claim first (ours); reading
/// the CSIDriver's storageCapacity for capacity reservations (ours).
#[rustfmt::skip]
pub const DOCUMENTED_EXTRAS: &[(&str, &str, &str, &str)] = &[
    ("cluster", "", "persistentvolumeclaims", "patch"),
    ("cluster", "storage.k8s.io", "csidrivers", "get"),
    ("cluster", "storage.k8s.io", "volumeattributesclasses", "get"),
    ("cluster", "snapshot.storage.k8s.io", "volumesnapshotcontents", "watch"),
];

/// The grants in `ours` that upstream's RBAC does not give and that are not documented extras.
pub fn beyond_upstream(ours: &BTreeSet<Grant>) -> Vec<Grant> {
    let allowed = |g: &Grant| {
        let (s, grp, r, v) = (g.0.as_str(), g.1.as_str(), g.2.as_str(), g.3.as_str());
        UPSTREAM_V6_3_0
            .iter()
            .any(|(us, ug, ur, uv)| (*us, *ug, *ur) == (s, grp, r) && uv.contains(&v))
            || DOCUMENTED_EXTRAS.contains(&(s, grp, r, v))
    };
    ours.iter().filter(|g| !allowed(g)).cloned().collect()
}

/// A token for ServiceAccount `sa` in `ns` from the TokenRequest API (valid one hour).
pub async fn mint_token(client: &Client, ns: &str, sa: &str) -> String {
    let request: TokenRequest = serde_json::from_value(json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": [], "expirationSeconds": 3600},
    }))
    .expect("a valid TokenRequest");
    let answer = Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create_token_request(sa, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("TokenRequest for {ns}/{sa}: {e}"));
    answer
        .status
        .and_then(|s| s.token)
        .expect("TokenRequest status with a token")
}

/// Writes a kubeconfig that authenticates with `token`, taking the server and CA from `admin`.
pub fn write_token_kubeconfig(admin: &Path, token: &str, out: &Path) {
    let kc = kube::config::Kubeconfig::read_from(admin).expect("reading the admin kubeconfig");
    let cluster = kc.clusters[0].cluster.as_ref().expect("a cluster entry");
    let server = cluster.server.as_deref().expect("a server URL");
    let ca = cluster
        .certificate_authority_data
        .as_deref()
        .expect("certificate-authority-data");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: sa\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: sa\ncurrent-context: c\n"
    );
    std::fs::write(out, text).unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
}

/// Sum of `rest_client_requests_total` samples that carry every one of `labels`
/// (e.g. `code="403"`).
pub fn requests_with(metrics: &str, labels: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("rest_client_requests_total{"))
        .filter(|l| labels.iter().all(|label| l.contains(label)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Log lines that report a refused API call.
pub fn forbidden_lines(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| {
            let lower = l.to_ascii_lowercase();
            lower.contains("forbidden")
                || ["code: 403", "code=403", "\"code\":403"]
                    .iter()
                    .any(|n| lower.contains(n))
        })
        .collect()
}

pub mod world;

mod tests;
