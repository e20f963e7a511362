//! The real node's files and configurations, as pure functions of its layout: where
//! containerd and kubelet keep their state, and the text of their configuration files.

use std::path::{Path, PathBuf};

/// kubelet's root directory. Fixed, as on every real node: the e2e suite hard-codes it, and
/// the teardown after a `kill -9` must find it without any record.
pub const KUBELET_ROOT: &str = "/var/lib/kubelet";

/// The node's name (and `--hostname-override`).
pub const NODE_NAME: &str = "real-node";

/// The pod network of the CNI bridge. Private, and not the service range (10.0.0.0/24).
pub const POD_SUBNET: &str = "10.244.0.0/24";

/// The bridge the CNI plugin makes (and the teardown deletes).
pub const BRIDGE: &str = "cnirs0";

/// Where the pod sandbox image is tagged (what containerd's `sandbox_image` names).
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10.2";

/// The busybox image tests run, under the name the e2e suite asks for.
pub const BUSYBOX_IMAGE: &str = "registry.k8s.io/e2e-test-images/busybox:1.37.0-2";

/// agnhost, the e2e suite's image of many test servers, under the tag e2e v1.37.2 asks for
/// (made only when `agnhost` has been built: `cargo xtask e2e`).
pub const AGNHOST_IMAGE: &str = "registry.k8s.io/e2e-test-images/agnhost:2.66.1";

/// The tag e2e v1.37.2 uses for nginx: the storage specs only run a shell in it, so it is
/// the busybox image under that name.
pub const NGINX_IMAGE: &str = "registry.k8s.io/e2e-test-images/nginx:1.27.0-2";

/// Every path of the one real node on this machine, all fixed so that `node down` after a
/// crash finds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLayout {
    /// Persistent state: containerd's root (images, snapshots), configs.
    pub state: PathBuf,
    /// Runtime state: sockets, containerd's state, runc's state, the host-value record.
    pub run: PathBuf,
    pub kubelet_root: PathBuf,
}

impl Default for NodeLayout {
    fn default() -> Self {
        NodeLayout {
            state: PathBuf::from("/var/lib/csi-provisioner-rs-node"),
            run: PathBuf::from("/run/csi-provisioner-rs-node"),
            kubelet_root: PathBuf::from(KUBELET_ROOT),
        }
    }
}

impl NodeLayout {
    pub fn containerd_root(&self) -> PathBuf {
        self.state.join("containerd")
    }
    pub fn containerd_state(&self) -> PathBuf {
        self.run.join("containerd")
    }
    pub fn containerd_socket(&self) -> PathBuf {
        self.run.join("containerd.sock")
    }
    pub fn containerd_config(&self) -> PathBuf {
        self.state.join("containerd.toml")
    }
    pub fn runc_root(&self) -> PathBuf {
        self.run.join("runc")
    }
    pub fn cni_conf_dir(&self) -> PathBuf {
        self.state.join("cni")
    }
    pub fn cni_state(&self) -> PathBuf {
        self.run.join("cni-ipam")
    }
    pub fn kubelet_config(&self) -> PathBuf {
        self.state.join("kubelet.yaml")
    }
    pub fn images(&self) -> PathBuf {
        self.state.join("images")
    }
    /// The host settings the node changes, as they were before (restored by the teardown).
    pub fn host_record(&self) -> PathBuf {
        self.run.join("host-before.txt")
    }
    /// kubelet's plugin registration directory (registrar sockets go here).
    pub fn plugins_registry(&self) -> PathBuf {
        self.kubelet_root.join("plugins_registry")
    }
    /// Marks the kubelet root as the test environment's: a teardown never touches a kubelet
    /// root without it (a real node's, say).
    pub fn marker(&self) -> PathBuf {
        self.kubelet_root.join(".csi-provisioner-rs-node")
    }
    /// Where a CSI driver's node socket lives, as kubelet sees it.
    pub fn plugin_dir(&self, driver: &str) -> PathBuf {
        self.kubelet_root.join("plugins").join(driver)
    }
    /// Every directory under which the node mounts something (the teardown unmounts them all).
    pub fn mount_roots(&self) -> Vec<PathBuf> {
        vec![
            self.kubelet_root.clone(),
            self.state.clone(),
            self.run.clone(),
        ]
    }
}

fn p(path: &Path) -> String {
    path.display().to_string()
}

/// containerd's configuration (version 2): its own root, state and socket, so it never meets
/// a containerd someone else runs; the CRI plugin as the VM allows it.
pub fn containerd_toml(layout: &NodeLayout) -> String {
    format!(
        r#"version = 2
root = "{root}"
state = "{state}"

[grpc]
  address = "{socket}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  # The VM's root lacks CAP_SYS_RESOURCE: runc cannot lower oom_score_adj, and without this
  # every sandbox fails with "can't get final child's PID from pipe".
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{runc}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni}"
"#,
        root = p(&layout.containerd_root()),
        state = p(&layout.containerd_state()),
        socket = p(&layout.containerd_socket()),
        pause = PAUSE_IMAGE,
        runc = p(&layout.runc_root()),
        cni = p(&layout.cni_conf_dir()),
    )
}

/// The CNI network: a bridge with host-local addresses. No IP masquerade and no port mapping,
/// so the node adds no iptables rules; pods reach each other and the host, which is all the
/// tests need.
pub fn cni_conflist(layout: &NodeLayout) -> String {
    serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "csi-provisioner-rs",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{ "subnet": POD_SUBNET }]],
                    "dataDir": p(&layout.cni_state()),
                }
            },
            { "type": "loopback" }
        ]
    })
    .to_string()
}

/// kubelet's configuration. `port`/`healthz_port`: free ports, so the node never collides
/// with something listening on kubelet's usual ones.
/// kubelet refuses a loopback node IP, and the API server reaches logs and exec through it:
/// kubelet listens on the host's first global IPv4 address (never the pod bridge's).
pub fn node_ip(ip_addr_output: &str) -> Option<String> {
    ip_addr_output
        .lines()
        .filter(|l| !l.contains(BRIDGE))
        .find_map(|l| {
            let mut words = l.split_whitespace();
            words.find(|w| *w == "inet")?;
            let cidr = words.next()?;
            Some(cidr.split('/').next()?.to_string())
        })
}

pub fn kubelet_yaml(layout: &NodeLayout, node_ip: &str, port: u16, healthz_port: u16) -> String {
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# These VMs have cgroup v1, which kubelet 1.35+ refuses unless told otherwise.
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://{socket}
failSwapOn: false
address: {node_ip}
port: {port}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {healthz_port}
# A test node on a machine whose network is closed: whoever reaches the host's address may use
# it (the API server needs no credentials for logs and exec).
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
# The disk is shared with builds: never evict or garbage-collect images for space.
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "0%"
  nodefs.inodesFree: "0%"
  imagefs.available: "0%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# Nothing here may be pulled: the images are imported.
serializeImagePulls: false
resolvConf: /etc/resolv.conf
"#,
        socket = p(&layout.containerd_socket()),
    )
}

/// kubelet's flags.
pub fn kubelet_args(layout: &NodeLayout, kubeconfig: &Path, node_ip: &str) -> Vec<String> {
    vec![
        format!("--config={}", p(&layout.kubelet_config())),
        format!("--kubeconfig={}", p(kubeconfig)),
        format!("--root-dir={}", p(&layout.kubelet_root)),
        format!("--hostname-override={NODE_NAME}"),
        format!("--node-ip={node_ip}"),
        "--v=2".into(),
    ]
}

/// The host settings that containerd, the CNI bridge plugin or kubelet change: the teardown
/// puts back what they were.
pub const HOST_SETTINGS: &[&str] = &[
    "/proc/sys/net/ipv4/ip_forward",
    "/proc/sys/vm/overcommit_memory",
    "/proc/sys/kernel/panic",
    "/proc/sys/kernel/panic_on_oops",
];

/// The record of host settings: one `path value` per line.
pub fn render_host_record(values: &[(String, String)]) -> String {
    values
        .iter()
        .map(|(path, value)| format!("{path} {value}\n"))
        .collect()
}

/// Parses [`render_host_record`]; lines it cannot read, or for settings it does not know,
/// are skipped (the record is ours, but a half-written one must not stop a teardown).
pub fn parse_host_record(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(path, _)| HOST_SETTINGS.contains(path))
        .map(|(path, value)| (path.to_string(), value.trim().to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containerd_keeps_to_its_own_paths_and_the_vms_limits() {
        let text = containerd_toml(&NodeLayout::default());
        for want in [
            "root = \"/var/lib/csi-provisioner-rs-node/containerd\"",
            "state = \"/run/csi-provisioner-rs-node/containerd\"",
            "address = \"/run/csi-provisioner-rs-node/containerd.sock\"",
            "restrict_oom_score_adj = true",
            "SystemdCgroup = false",
            "Root = \"/run/csi-provisioner-rs-node/runc\"",
            "conf_dir = \"/var/lib/csi-provisioner-rs-node/cni\"",
            "sandbox_image = \"registry.k8s.io/pause:3.10.2\"",
        ] {
            assert!(text.contains(want), "{want} missing in\n{text}");
        }
    }

    #[test]
    fn the_pod_network_adds_no_iptables_rules() {
        let conf: serde_json::Value =
            serde_json::from_str(&cni_conflist(&NodeLayout::default())).unwrap();
        let bridge = &conf["plugins"][0];
        assert_eq!(bridge["type"], "bridge");
        assert_eq!(bridge["bridge"], BRIDGE);
        assert_eq!(bridge["ipMasq"], false);
        assert_eq!(bridge["ipam"]["ranges"][0][0]["subnet"], POD_SUBNET);
        assert_eq!(
            bridge["ipam"]["dataDir"],
            "/run/csi-provisioner-rs-node/cni-ipam"
        );
        let types: Vec<&str> = conf["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["bridge", "loopback"], "no portmap, no firewall");
    }

    #[test]
    fn kubelet_runs_on_cgroup_v1_with_its_own_ports() {
        let layout = NodeLayout::default();
        let yaml: serde_yaml::Value =
            serde_yaml::from_str(&kubelet_yaml(&layout, "192.0.2.2", 4001, 4002)).unwrap();
        assert_eq!(yaml["failCgroupV1"], false);
        assert_eq!(yaml["cgroupDriver"], "cgroupfs");
        assert_eq!(yaml["port"], 4001);
        assert_eq!(yaml["healthzPort"], 4002);
        assert_eq!(yaml["address"], "192.0.2.2");
        assert_eq!(
            yaml["containerRuntimeEndpoint"],
            "unix:///run/csi-provisioner-rs-node/containerd.sock"
        );
        let args = kubelet_args(&layout, Path::new("/cp/kubeconfig"), "192.0.2.2");
        assert!(args.contains(&"--node-ip=192.0.2.2".to_string()));
        assert!(args.contains(&"--root-dir=/var/lib/kubelet".to_string()));
        assert!(args.contains(&"--kubeconfig=/cp/kubeconfig".to_string()));
        assert!(args.contains(&format!("--hostname-override={NODE_NAME}")));
    }

    #[test]
    fn the_node_ip_is_the_first_global_address_but_the_pod_bridge() {
        let out = "13: cnirs0    inet 10.244.0.1/24 brd 10.244.0.255 scope global cnirs0\\       valid_lft forever\n\
                   4: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\\       valid_lft forever\n";
        assert_eq!(node_ip(out).as_deref(), Some("192.0.2.2"));
        assert_eq!(node_ip(""), None);
    }

    #[test]
    fn host_record_round_trips_and_ignores_what_it_does_not_know() {
        let values = vec![
            ("/proc/sys/net/ipv4/ip_forward".to_string(), "0".to_string()),
            ("/proc/sys/kernel/panic".to_string(), "10".to_string()),
        ];
        let text = render_host_record(&values);
        assert_eq!(parse_host_record(&text), values);
        let hostile = format!("{text}/etc/passwd x\nno-space\n");
        assert_eq!(parse_host_record(&hostile), values);
    }
}
