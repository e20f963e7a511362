//! The parsed options: every upstream v6.3.0 flag with its default, typed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use klog::Format;

use crate::gates::FeatureGates;

/// What a CSIStorageCapacity shows once it is stale (`--capacity-stale-action`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StaleAction {
    /// The last value, as upstream.
    #[default]
    Keep,
    /// 0, for capacity and maximumVolumeSize.
    Zero,
}

/// Environment variables upstream reads at start-up. Empty values count as unset, as upstream's
/// `os.Getenv(...) == ""` checks do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Env {
    /// `NODE_NAME`: required with `--node-deployment`.
    pub node_name: Option<String>,
    /// `NAMESPACE`: required with `--enable-capacity`; namespace of CSIStorageCapacity objects.
    pub namespace: Option<String>,
    /// `POD_NAME`: required with `--enable-capacity` when `--capacity-ownerref-level` >= 0.
    pub pod_name: Option<String>,
    /// `POD_NAMESPACE`: leader-election namespace when `--leader-election-namespace` is empty.
    pub pod_namespace: Option<String>,
    /// `KUBECONFIG`: overrides `--kubeconfig`.
    pub kubeconfig: Option<String>,
}

impl Env {
    /// Reads the variables through `lookup`, so tests need not touch the process environment.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Self {
        let get = |name: &str| lookup(name).filter(|v| !v.is_empty());
        Self {
            node_name: get("NODE_NAME"),
            namespace: get("NAMESPACE"),
            pod_name: get("POD_NAME"),
            pod_namespace: get("POD_NAMESPACE"),
            kubeconfig: get("KUBECONFIG"),
        }
    }
}

/// The process environment, for [`crate::parse_from`] in the real binary.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The component-base logging flags.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggingOptions {
    /// `--logging-format`.
    pub format: Format,
    /// `-v`: 0 to 2^31-1, as upstream accepts.
    pub verbosity: u32,
    /// `--vmodule`, all occurrences joined with commas; validated, for [`klog::init`].
    pub vmodule: Option<String>,
    /// `--log-flush-frequency` (5s). We write every line unbuffered, so nothing needs flushing.
    pub flush_frequency: Duration,
    /// `--log-text-split-stream` / `--log-json-split-stream`: only `false` passes validation.
    pub text_split_stream: bool,
    pub json_split_stream: bool,
    /// `--log-*-info-buffer-size` as given ("0" by default): only zero passes validation.
    pub text_info_buffer_size: String,
    pub json_info_buffer_size: String,
}

impl LoggingOptions {
    /// `-v` for [`klog::init`], which counts levels in a `u8` (levels above 255 behave alike).
    pub fn klog_verbosity(&self) -> u8 {
        u8::try_from(self.verbosity).unwrap_or(u8::MAX)
    }
}

impl Default for LoggingOptions {
    fn default() -> Self {
        Self {
            format: Format::Text,
            verbosity: 0,
            vmodule: None,
            flush_frequency: Duration::from_secs(5),
            text_split_stream: false,
            json_split_stream: false,
            text_info_buffer_size: "0".to_string(),
            json_info_buffer_size: "0".to_string(),
        }
    }
}

/// Every flag of upstream external-provisioner v6.3.0 (its own, csi-lib-utils' standard flags,
/// component-base logging), plus the environment it reads. Strings that upstream treats as
/// "unset" when empty are `None` here.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    // external-provisioner
    pub master: Option<String>,
    pub volume_name_prefix: String,
    /// `None` for -1: the whole claim UID, dashes included. `Some(n)`: the first n characters
    /// of the UID without dashes, 1..=32.
    pub volume_name_uuid_length: Option<usize>,
    pub retry_interval_start: Duration,
    pub retry_interval_max: Duration,
    pub worker_threads: usize,
    pub cloning_protection_threads: usize,
    /// `None` when the sweep is disabled (the flag is 0 or negative).
    pub snapshot_orphan_sweep_interval: Option<Duration>,
    pub capacity_threads: usize,
    pub timeout: Duration,
    pub strict_topology: bool,
    pub immediate_topology: bool,
    pub extra_create_metadata: bool,
    pub enable_pprof: bool,
    pub default_fstype: Option<String>,
    pub kube_api_capacity_qps: f32,
    pub kube_api_capacity_burst: i64,
    pub enable_capacity: bool,
    pub capacity_for_immediate_binding: bool,
    pub capacity_poll_interval: Duration,
    /// `--capacity-stale-after` (ours); `None` when 0 (off).
    pub capacity_stale_after: Option<Duration>,
    /// `--capacity-driver-grace` (ours).
    pub capacity_driver_grace: Duration,
    /// `--capacity-reservations` (ours).
    pub capacity_reservations: bool,
    /// `--capacity-pod-aware` (ours).
    pub capacity_pod_aware: bool,
    /// `--capacity-foreign-check` (ours).
    pub capacity_foreign_check: bool,
    /// `--capacity-stale-action` (ours).
    pub capacity_stale_action: StaleAction,
    /// `None` for no owner (any negative level).
    pub capacity_ownerref_level: Option<u32>,
    pub node_deployment: bool,
    pub node_deployment_immediate_binding: bool,
    pub node_deployment_base_delay: Duration,
    pub node_deployment_max_delay: Duration,
    pub controller_publish_readonly: bool,
    pub prevent_volume_mode_conversion: bool,
    pub feature_gates: FeatureGates,
    // csi-lib-utils standard flags
    pub show_version: bool,
    /// After the `KUBECONFIG` override.
    pub kubeconfig: Option<String>,
    pub csi_address: String,
    pub leader_election: bool,
    pub leader_election_namespace: Option<String>,
    pub leader_election_lease_duration: Duration,
    pub leader_election_renew_deadline: Duration,
    pub leader_election_retry_period: Duration,
    pub leader_election_labels: BTreeMap<String, String>,
    pub kube_api_qps: f64,
    pub kube_api_burst: i64,
    pub http_endpoint: Option<String>,
    pub metrics_address: Option<String>,
    pub metrics_path: String,
    pub automaxprocs: bool,
    // component-base logging
    pub logging: LoggingOptions,
    // environment
    pub env: Env,
    /// Warnings from `--feature-gates` (setting a GA gate) for the start-up log.
    pub feature_gate_warnings: Vec<String>,
    /// Stray positional arguments (e.g. the `false` in `--leader-election false`), which
    /// upstream ignores; worth a warning.
    pub positional_args: Vec<String>,
    /// Long names of the flags given on the command line.
    pub(crate) explicit: BTreeSet<String>,
}

impl Default for Options {
    /// Upstream's defaults with an empty environment.
    fn default() -> Self {
        Self {
            master: None,
            volume_name_prefix: "pvc".to_string(),
            volume_name_uuid_length: None,
            retry_interval_start: Duration::from_secs(1),
            retry_interval_max: Duration::from_secs(300),
            worker_threads: 100,
            cloning_protection_threads: 1,
            snapshot_orphan_sweep_interval: Some(Duration::from_secs(300)),
            capacity_threads: 1,
            timeout: Duration::from_secs(10),
            strict_topology: false,
            immediate_topology: true,
            extra_create_metadata: false,
            enable_pprof: false,
            default_fstype: None,
            kube_api_capacity_qps: 1.0,
            kube_api_capacity_burst: 5,
            enable_capacity: false,
            capacity_for_immediate_binding: false,
            capacity_poll_interval: Duration::from_secs(60),
            capacity_stale_after: None,
            capacity_driver_grace: Duration::from_secs(30),
            capacity_reservations: true,
            capacity_pod_aware: false,
            capacity_foreign_check: true,
            capacity_stale_action: StaleAction::Keep,
            capacity_ownerref_level: Some(1),
            node_deployment: false,
            node_deployment_immediate_binding: true,
            node_deployment_base_delay: Duration::from_secs(20),
            node_deployment_max_delay: Duration::from_secs(60),
            controller_publish_readonly: false,
            prevent_volume_mode_conversion: true,
            feature_gates: FeatureGates::default(),
            show_version: false,
            kubeconfig: None,
            csi_address: "/run/csi/socket".to_string(),
            leader_election: false,
            leader_election_namespace: None,
            leader_election_lease_duration: Duration::from_secs(15),
            leader_election_renew_deadline: Duration::from_secs(10),
            leader_election_retry_period: Duration::from_secs(5),
            leader_election_labels: BTreeMap::new(),
            kube_api_qps: 5.0,
            kube_api_burst: 10,
            http_endpoint: None,
            metrics_address: None,
            metrics_path: "/metrics".to_string(),
            automaxprocs: false,
            logging: LoggingOptions::default(),
            env: Env::default(),
            feature_gate_warnings: Vec::new(),
            positional_args: Vec::new(),
            explicit: BTreeSet::new(),
        }
    }
}

impl Options {
    /// Whether `--<name>` was given on the command line.
    pub fn is_explicit(&self, name: &str) -> bool {
        self.explicit.contains(name)
    }

    /// The address to serve HTTP on: `--metrics-address` (deprecated) or `--http-endpoint`;
    /// validation guarantees at most one is set.
    pub fn http_address(&self) -> Option<&str> {
        self.metrics_address
            .as_deref()
            .or(self.http_endpoint.as_deref())
    }
}

/// The `--version` output, as upstream prints it: the program path as invoked, a space, the
/// version (`fmt.Println(os.Args[0], version)`).
pub fn version_line(argv0: &str, version: &str) -> String {
    format!("{argv0} {version}")
}
