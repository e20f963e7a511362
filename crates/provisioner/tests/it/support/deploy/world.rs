//! One RBAC run on the shared control plane: a namespace holding the shipped RBAC (optionally
//! edited), a kubeconfig with a token of its ServiceAccount, fake nodes with pools, the mock
//! driver, an owner Pod, and csi-provisioner authenticated as that ServiceAccount.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};
use testenv::Provisioner;

use super::{kubectl, load_objects, localize, manifests_dir, mint_token};
use crate::support::{Scenario, free_port};

pub const KEY: &str = "topology.mock.csi/node";
/// The Pod csi-provisioner "runs in": POD_NAME, and the owner at --capacity-ownerref-level=0.
pub const OWNER_POD: &str = "csi-provisioner-0";
/// The ServiceAccount rbac.yaml creates.
pub const SERVICE_ACCOUNT: &str = "csi-provisioner";

pub struct RbacWorld {
    pub s: Scenario,
    pub prov: Provisioner,
    pub port: u16,
}

impl RbacWorld {
    /// Everything above, with `edit` applied to the RBAC objects before they are created.
    pub async fn start(prefix: &str, edit: impl FnOnce(&mut Vec<Value>)) -> RbacWorld {
        Self::start_with(
            prefix,
            &["--leader-election", "--enable-capacity"],
            &[],
            edit,
        )
        .await
    }

    /// [`RbacWorld::start`] with claims held by our finalizer instead of the record.
    pub async fn start_with_the_finalizer(
        prefix: &str,
        edit: impl FnOnce(&mut Vec<Value>),
    ) -> RbacWorld {
        let args = ["--leader-election", "--enable-capacity"];
        let env = [(csi_provisioner::write_ahead::SWITCH, "false")];
        Self::start_with(prefix, &args, &env, edit).await
    }

    /// [`RbacWorld::start`] without leader election, whose Lease would hide the record's.
    pub async fn start_without_election(
        prefix: &str,
        edit: impl FnOnce(&mut Vec<Value>),
    ) -> RbacWorld {
        Self::start_with(prefix, &["--enable-capacity"], &[], edit).await
    }

    async fn start_with(
        prefix: &str,
        prov_args: &[&str],
        env: &[(&str, &str)],
        edit: impl FnOnce(&mut Vec<Value>),
    ) -> RbacWorld {
        let mut s = Scenario::new(prefix).await;
        testenv::create_csi_driver(&s.client, &s.driver, true).await;
        let nodes = s.node_names(&["a", "b"]);
        let names: Vec<&str> = nodes.iter().map(String::as_str).collect();
        testenv::create_fake_nodes(&s.client, &s.driver, KEY, &names).await;
        let mut args: Vec<String> = nodes
            .iter()
            .map(|n| format!("--pool={KEY}={n}:10Gi"))
            .collect();
        // Attach support makes the provisioner watch VolumeAttachments; modify support lets a
        // claim use a VolumeAttributesClass. Both widen what the RBAC must cover.
        args.extend(["--publish-unpublish".into(), "--modify-volume".into()]);
        s.start_driver(&args);
        let kubeconfig = grant_shipped_rbac(&s, edit).await;
        create_pod(&s, OWNER_POD, "").await;

        let (prov, port) = provisioner_as_service_account(
            &s,
            &kubeconfig,
            prov_args,
            &[&[("POD_NAMESPACE", s.ns.as_str())], env].concat(),
        );
        RbacWorld { s, prov, port }
    }
}

/// csi-provisioner as the ServiceAccount of `kubeconfig`, running in the owner Pod, with
/// capacity owned by that Pod, `-v=5`, `args` and `env`, and its HTTP endpoint on a free port;
/// returns it and the port.
pub fn provisioner_as_service_account(
    s: &Scenario,
    kubeconfig: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Provisioner, u16) {
    let port = free_port();
    let http = format!("--http-endpoint=127.0.0.1:{port}");
    let mut all = args.to_vec();
    all.extend(["--capacity-ownerref-level=0", "-v=5", http.as_str()]);
    let kc = kubeconfig.display().to_string();
    // KUBECONFIG overrides --kubeconfig: set it too, so an inherited one cannot win.
    let mut all_env = vec![
        ("KUBECONFIG", kc.as_str()),
        ("NAMESPACE", s.ns.as_str()),
        ("POD_NAME", OWNER_POD),
    ];
    all_env.extend_from_slice(env);
    let socket = s.mock().socket.clone();
    let prov = Provisioner::start(
        &s.dir,
        "csi-provisioner",
        kubeconfig,
        &socket,
        &all,
        &all_env,
    );
    (prov, port)
}

/// Creates rbac.yaml's objects (moved into the scenario's namespace, then `edit`ed), waits
/// until the authorizer sees them, and returns a kubeconfig for the ServiceAccount.
pub async fn grant_shipped_rbac(s: &Scenario, edit: impl FnOnce(&mut Vec<Value>)) -> PathBuf {
    let admin = s.kubeconfig();
    let mut objects = load_objects(admin, &manifests_dir().join("rbac.yaml"));
    localize(&mut objects, &s.ns);
    edit(&mut objects);
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects}).to_string();
    kubectl(admin, &["apply", "-f", "-"], Some(&list))
        .unwrap_or_else(|e| panic!("applying the RBAC: {e}"));
    wait_until_granted(admin, &s.ns);
    let token = mint_token(&s.client, &s.ns, SERVICE_ACCOUNT).await;
    let kubeconfig = s.dir.join("sa.kubeconfig");
    super::write_token_kubeconfig(admin, &token, &kubeconfig);
    kubeconfig
}

/// New bindings reach the API server's authorizer a moment after they are written; wait for
/// both bindings, so that the provisioner's first calls cannot meet a stale Forbidden.
fn wait_until_granted(admin: &Path, ns: &str) {
    let user = format!("--as=system:serviceaccount:{ns}:{SERVICE_ACCOUNT}");
    let checks = [
        ["list", "persistentvolumeclaims"],
        ["get", "leases.coordination.k8s.io"],
    ];
    for [verb, resource] in checks {
        let deadline = Instant::now() + Duration::from_secs(30);
        let args = ["auth", "can-i", verb, resource, "-n", ns, user.as_str()];
        while kubectl(admin, &args, None).is_err() {
            assert!(
                Instant::now() < deadline,
                "the ServiceAccount never got {verb} {resource}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// A plain pod (no kubelet runs it); with `claim` non-empty it mounts that claim.
pub async fn create_pod(s: &Scenario, name: &str, claim: &str) {
    let mut spec = json!({"containers": [{"name": "c", "image": "registry.invalid/none"}]});
    if !claim.is_empty() {
        spec["volumes"] = json!([{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]);
    }
    let pod: Pod =
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
    Api::<Pod>::namespaced(s.client.clone(), &s.ns)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
}

/// A kube client from a kubeconfig file (the ServiceAccount's).
pub async fn client_from(kubeconfig: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("reading the kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("a usable kubeconfig");
    kube::Client::try_from(config).expect("a client")
}

/// Plain Deployment → ReplicaSet → Pod objects linked by controller references (no
/// controllers act on them); returns the Pod's name.
pub async fn owner_chain(s: &Scenario) -> String {
    let labels = json!({"app": "csi-provisioner"});
    let template = json!({"metadata": {"labels": labels},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/none"}]}});
    let spec = json!({"selector": {"matchLabels": labels}, "template": template});
    let mut owner: Option<(&str, String, String)> = None;
    for (api_version, kind, plural, name) in [
        ("apps/v1", "Deployment", "deployments", "prov"),
        ("apps/v1", "ReplicaSet", "replicasets", "prov-1"),
        ("v1", "Pod", "pods", "prov-1-x"),
    ] {
        let mut obj = json!({"apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": s.ns, "labels": labels}});
        obj["spec"] = if kind == "Pod" {
            template["spec"].clone()
        } else {
            spec.clone()
        };
        if let Some((k, n, uid)) = &owner {
            obj["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": k,
                "name": n, "uid": uid, "controller": true}]);
        }
        let gvk = kube::api::GroupVersionKind::gvk(
            api_version.split_once('/').map_or("", |(g, _)| g),
            api_version.rsplit('/').next().unwrap_or(api_version),
            kind,
        );
        let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, plural);
        let api: Api<kube::api::DynamicObject> =
            Api::namespaced_with(s.client.clone(), &s.ns, &resource);
        let created = api
            .create(
                &PostParams::default(),
                &serde_json::from_value(obj).unwrap(),
            )
            .await
            .unwrap_or_else(|e| panic!("creating {kind} {name}: {e}"));
        owner = Some((
            kind,
            name.to_string(),
            created.metadata.uid.unwrap_or_default(),
        ));
    }
    "prov-1-x".to_string()
}
