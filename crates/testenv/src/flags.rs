//! Command lines of the control-plane components (pure, so they can be table-tested).

use std::path::{Path, PathBuf};

/// Components in start order; teardown goes in reverse.
pub const COMPONENTS: &[&str] = &[
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
];

/// Controllers the fake cluster needs: PV binding and protection (deletes hang without them),
/// expansion, ephemeral volumes, garbage collection, namespaces and default service accounts.
/// Node lifecycle is left out on purpose: it would taint the kubelet-less fake nodes.
pub(crate) const CONTROLLERS: &[&str] = &[
    "persistentvolume-binder-controller",
    "persistentvolumeclaim-protection-controller",
    "persistentvolume-protection-controller",
    "persistentvolume-expander-controller",
    "ephemeral-volume-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
];

/// Ports of one control plane, all on 127.0.0.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ports {
    pub etcd_client: u16,
    pub etcd_peer: u16,
    pub apiserver: u16,
    pub controller_manager: u16,
    pub scheduler: u16,
}

/// Files of one control plane under its working directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    pub dir: PathBuf,
}

impl Layout {
    pub fn etcd_data(&self) -> PathBuf {
        self.dir.join("etcd")
    }
    pub fn logs(&self) -> PathBuf {
        self.dir.join("logs")
    }
    pub fn pki(&self) -> PathBuf {
        self.dir.join("pki")
    }
    pub fn ca_cert(&self) -> PathBuf {
        self.pki().join("ca.crt")
    }
    pub fn serving_cert(&self) -> PathBuf {
        self.pki().join("apiserver.crt")
    }
    pub fn serving_key(&self) -> PathBuf {
        self.pki().join("apiserver.key")
    }
    pub fn sa_key(&self) -> PathBuf {
        self.pki().join("sa.key")
    }
    pub fn sa_pub(&self) -> PathBuf {
        self.pki().join("sa.pub")
    }
    pub fn tokens(&self) -> PathBuf {
        self.pki().join("tokens.csv")
    }
    pub fn audit_policy(&self) -> PathBuf {
        self.pki().join("audit-policy.yaml")
    }
    pub fn audit_log(&self) -> PathBuf {
        self.logs().join("audit.log")
    }
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }
    pub fn pids(&self) -> PathBuf {
        self.dir.join("pids")
    }
}

fn p(path: &Path) -> String {
    path.display().to_string()
}

pub(crate) fn etcd(ports: &Ports, layout: &Layout) -> Vec<String> {
    let client = format!("http://127.0.0.1:{}", ports.etcd_client);
    let peer = format!("http://127.0.0.1:{}", ports.etcd_peer);
    vec![
        "--name=default".into(),
        format!("--data-dir={}", p(&layout.etcd_data())),
        "--log-level=warn".into(),
        // Test data is thrown away; fsync only slows a shared 2-core machine down.
        "--unsafe-no-fsync=true".into(),
        format!("--listen-client-urls={client}"),
        format!("--advertise-client-urls={client}"),
        format!("--listen-peer-urls={peer}"),
        format!("--initial-advertise-peer-urls={peer}"),
        format!("--initial-cluster=default={peer}"),
    ]
}

pub(crate) fn apiserver(ports: &Ports, layout: &Layout) -> Vec<String> {
    vec![
        format!("--etcd-servers=http://127.0.0.1:{}", ports.etcd_client),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={}", ports.apiserver),
        format!("--tls-cert-file={}", p(&layout.serving_cert())),
        format!("--tls-private-key-file={}", p(&layout.serving_key())),
        format!("--token-auth-file={}", p(&layout.tokens())),
        "--authorization-mode=Node,RBAC".into(),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
        format!("--service-account-signing-key-file={}", p(&layout.sa_key())),
        format!("--service-account-key-file={}", p(&layout.sa_pub())),
        "--service-cluster-ip-range=10.0.0.0/24".into(),
        // No ServiceAccount controller token flow and no kubelet: without disabling
        // TaintNodesByCondition every new Node gets a not-ready NoSchedule taint.
        "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition".into(),
        "--allow-privileged=true".into(),
        // A loopback advertise address is only accepted without the endpoint reconciler.
        "--endpoint-reconciler-type=none".into(),
        "--advertise-address=127.0.0.1".into(),
        "--profiling=false".into(),
        // The real node's name does not resolve: logs, exec and port-forward go to its IP.
        "--kubelet-preferred-address-types=InternalIP,Hostname".into(),
        // Alpha: without it the API server drops `dataSourceRef.namespace`, so claims could not
        // name a source in another namespace (the provisioner keeps its own gate, off by
        // default, so this changes nothing else).
        "--feature-gates=CrossNamespaceVolumeDataSource=true".into(),
        // Who wrote which claim, as the API server saw it (`crate::audit`).
        format!("--audit-policy-file={}", p(&layout.audit_policy())),
        format!("--audit-log-path={}", p(&layout.audit_log())),
        "--audit-log-format=json".into(),
    ]
}

pub(crate) fn controller_manager(ports: &Ports, layout: &Layout, extra: &[String]) -> Vec<String> {
    let controllers: Vec<&str> = CONTROLLERS
        .iter()
        .copied()
        .chain(extra.iter().map(String::as_str))
        .collect();
    vec![
        format!("--kubeconfig={}", p(&layout.kubeconfig())),
        "--leader-elect=false".into(),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={}", ports.controller_manager),
        "--use-service-account-credentials=false".into(),
        format!("--controllers={}", controllers.join(",")),
        "--pvclaimbinder-sync-period=2s".into(),
    ]
}

pub(crate) fn scheduler(ports: &Ports, layout: &Layout) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", p(&layout.kubeconfig())),
        "--leader-elect=false".into(),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={}", ports.scheduler),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> (Ports, Layout) {
        let ports = Ports {
            etcd_client: 1001,
            etcd_peer: 1002,
            apiserver: 1003,
            controller_manager: 1004,
            scheduler: 1005,
        };
        (
            ports,
            Layout {
                dir: PathBuf::from("/cp"),
            },
        )
    }

    fn has(args: &[String], want: &str) -> bool {
        args.iter().any(|a| a == want)
    }

    #[test]
    fn every_component_gets_its_port_and_paths() {
        let (ports, layout) = fixture();
        let cases: &[(&str, Vec<String>, &[&str])] = &[
            (
                "etcd",
                etcd(&ports, &layout),
                &[
                    "--data-dir=/cp/etcd",
                    "--listen-client-urls=http://127.0.0.1:1001",
                    "--listen-peer-urls=http://127.0.0.1:1002",
                    "--initial-cluster=default=http://127.0.0.1:1002",
                ],
            ),
            (
                "kube-apiserver",
                apiserver(&ports, &layout),
                &[
                    "--etcd-servers=http://127.0.0.1:1001",
                    "--secure-port=1003",
                    "--tls-cert-file=/cp/pki/apiserver.crt",
                    "--token-auth-file=/cp/pki/tokens.csv",
                    "--service-account-signing-key-file=/cp/pki/sa.key",
                    "--service-account-key-file=/cp/pki/sa.pub",
                    "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
                    "--endpoint-reconciler-type=none",
                ],
            ),
            (
                "kube-controller-manager",
                controller_manager(&ports, &layout, &[]),
                &[
                    "--kubeconfig=/cp/kubeconfig",
                    "--secure-port=1004",
                    "--leader-elect=false",
                    "--pvclaimbinder-sync-period=2s",
                ],
            ),
            (
                "kube-scheduler",
                scheduler(&ports, &layout),
                &[
                    "--kubeconfig=/cp/kubeconfig",
                    "--secure-port=1005",
                    "--leader-elect=false",
                ],
            ),
        ];
        for (name, args, wants) in cases {
            for want in *wants {
                assert!(has(args, want), "{name}: missing {want} in {args:?}");
            }
        }
    }

    #[test]
    fn controller_manager_runs_pv_controllers_but_not_node_lifecycle() {
        let (ports, layout) = fixture();
        let args = controller_manager(
            &ports,
            &layout,
            &["root-ca-certificate-publisher-controller".to_string()],
        );
        let list = args
            .iter()
            .find_map(|a| a.strip_prefix("--controllers="))
            .expect("--controllers flag");
        let names: Vec<&str> = list.split(',').collect();
        for want in [
            "persistentvolume-binder-controller",
            "persistentvolumeclaim-protection-controller",
            "persistentvolume-protection-controller",
            "root-ca-certificate-publisher-controller",
        ] {
            assert!(names.contains(&want), "{want} missing from {list}");
        }
        assert!(
            !names
                .iter()
                .any(|n| n.contains("nodelifecycle") || n.contains("node-lifecycle"))
        );
    }
}
