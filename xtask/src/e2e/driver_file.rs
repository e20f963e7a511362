//! The e2e suite's test-driver file for csi-driver-host-path on the real node (pure): which
//! of the driver's capabilities the External Storage specs may rely on here.

use std::fmt;

/// How the provisioner runs, as csi-driver-host-path's own deployments do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Deployment {
    /// One provisioner beside the driver's controller.
    Central,
    /// A `--node-deployment` provisioner on each node, publishing capacity.
    Distributed,
}

impl fmt::Display for Deployment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Deployment::Central => "central",
            Deployment::Distributed => "distributed",
        })
    }
}

/// Capabilities hostpath has that this machine cannot offer, with the reason (shown in
/// E2E.md beside the results).
pub const LEFT_OUT: &[(&str, &str)] = &[
    (
        "controllerExpansion, nodeExpansion, onlineExpansion",
        "the Go module proxy refuses external-resizer, so nothing resizes volumes here",
    ),
    (
        "RWX",
        "csi-driver-host-path's own test-driver file does not claim it either",
    ),
];

/// The test-driver YAML for `driver` (the storage and snapshot classes are made by the suite,
/// `FromName`), `block` when loop devices exist.
pub fn render(driver: &str, topology_key: &str, deployment: Deployment, block: bool) -> String {
    let mut caps = vec![
        ("persistence", true),
        ("exec", true),
        ("multipods", true),
        ("singleNodeVolume", true),
        ("fsGroup", true),
        ("snapshotDataSource", true),
        ("pvcDataSource", true),
        ("topology", true),
        ("block", block),
    ];
    if deployment == Deployment::Distributed {
        caps.push(("capacity", true));
    }
    let caps: String = caps
        .iter()
        .map(|(name, on)| format!("    {name}: {on}\n"))
        .collect();
    format!(
        r#"# Written by cargo xtask e2e: csi-driver-host-path on the real node, {deployment} provisioner.
StorageClass:
  FromName: true
SnapshotClass:
  FromName: true
DriverInfo:
  Name: {driver}
  SupportedSizeRange:
    Min: 1Mi
    Max: 1Ti
  SupportedFsType:
    "": {{}}
  TopologyKeys: ["{topology_key}"]
  Capabilities:
{caps}"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_only_in_the_distributed_deployment_and_block_only_with_loop_devices() {
        let central: serde_yaml::Value =
            serde_yaml::from_str(&render("hp.test", "k", Deployment::Central, false)).unwrap();
        let caps = &central["DriverInfo"]["Capabilities"];
        assert_eq!(caps["persistence"], true);
        assert_eq!(caps["block"], false);
        assert!(caps.get("capacity").is_none());
        assert!(caps.get("controllerExpansion").is_none());
        assert_eq!(central["DriverInfo"]["Name"], "hp.test");
        assert_eq!(central["DriverInfo"]["TopologyKeys"][0], "k");
        assert_eq!(central["StorageClass"]["FromName"], true);
        let dist: serde_yaml::Value =
            serde_yaml::from_str(&render("hp.test", "k", Deployment::Distributed, true)).unwrap();
        assert_eq!(dist["DriverInfo"]["Capabilities"]["capacity"], true);
        assert_eq!(dist["DriverInfo"]["Capabilities"]["block"], true);
    }
}
