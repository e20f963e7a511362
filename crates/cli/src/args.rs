//! The raw command line as clap sees it. clap only splits the arguments the way pflag does;
//! every value stays a string here and is converted by `options.rs`, so that the grammar
//! (Go durations, Go integers, `ParseBool`) and the error messages are ours.
//!
//! pflag forms and how they map:
//! - `--flag=value` and `--flag value` for value flags; the value may start with `-`
//!   (`--capacity-ownerref-level -1`), as in pflag.
//! - bool flags take `--flag` or `--flag=value` only (`require_equals`); in `--flag false` the
//!   `false` is a stray positional argument, which pflag ignores and so do we (see
//!   `Options::positional_args`).
//! - `-v 5`, `-v=5`, `-v5`, `--v=5`, `--v 5`.
//! - repeating a flag: the last value wins, except the list flags (`--feature-gates`,
//!   `--leader-election-labels`, `--vmodule`), which accumulate.

use clap::{ArgAction, Parser};

const BOOL: &str = "bool";
const DURATION: &str = "duration";

#[derive(Debug, Parser)]
#[command(
    name = "csi-provisioner",
    about = "Kubernetes CSI external-provisioner sidecar: provisions and deletes volumes through a \
             CSI driver and publishes CSIStorageCapacity objects.",
    disable_version_flag = true,
    args_override_self = true,
    max_term_width = 100
)]
pub(crate) struct RawArgs {
    // ---- external-provisioner's own flags ----
    #[arg(
        long,
        value_name = "string",
        allow_hyphen_values = true,
        help = "API server URL; out of cluster, set this or --kubeconfig"
    )]
    pub master: Option<String>,
    #[arg(
        long,
        value_name = "string",
        allow_hyphen_values = true,
        help = "Prefix of the names of created volumes (PVs) [default: pvc]"
    )]
    pub volume_name_prefix: Option<String>,
    #[arg(
        long,
        value_name = "int",
        allow_hyphen_values = true,
        help = "Use only this many characters of the claim UID (without dashes) in volume names, \
                  1 to 32; -1 keeps the whole UID [default: -1]"
    )]
    pub volume_name_uuid_length: Option<String>,
    #[arg(long, value_name = DURATION, allow_hyphen_values = true,
          help = "First retry delay after a failed provisioning or deletion; doubles up to \
                  --retry-interval-max [default: 1s]")]
    pub retry_interval_start: Option<String>,
    #[arg(long, value_name = DURATION, allow_hyphen_values = true,
          help = "Longest retry delay after failed provisioning or deletion [default: 5m0s]")]
    pub retry_interval_max: Option<String>,
    #[arg(
        long,
        value_name = "uint",
        allow_hyphen_values = true,
        help = "Number of provisioning workers and, separately, of deletion workers \
                  [default: 100]"
    )]
    pub worker_threads: Option<String>,
    #[arg(
        long,
        value_name = "uint",
        allow_hyphen_values = true,
        help = "Workers removing the cloning-protection finalizer from source claims [default: 1]"
    )]
    pub cloning_protection_threads: Option<String>,
    #[arg(long, value_name = DURATION, allow_hyphen_values = true,
          help = "Interval of the sweep for orphaned snapshot source-protection finalizers; 0 \
                  disables it [default: 5m0s]")]
    pub snapshot_orphan_sweep_interval: Option<String>,
    #[arg(
        long,
        value_name = "uint",
        allow_hyphen_values = true,
        help = "Workers maintaining CSIStorageCapacity objects [default: 1]"
    )]
    pub capacity_threads: Option<String>,
    #[arg(long, value_name = DURATION, allow_hyphen_values = true,
          help = "Timeout of every call to the CSI driver [default: 10s]")]
    pub timeout: Option<String>,
    #[arg(long, value_name = BOOL, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          help = "Delayed binding: pass only the selected node's topology to CreateVolume \
                  [default: false]")]
    pub strict_topology: Option<String>,
    #[arg(long, value_name = BOOL, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          help = "Immediate binding: pass the topology of all nodes with the driver; false passes \
                  none [default: true]")]
    pub immediate_topology: Option<String>,
    #[arg(long, value_name = BOOL, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          help = "Add PVC and PV name and namespace to CreateVolume parameters [default: false]")]
    pub extra_create_metadata: Option<String>,
    #[arg(long, value_name = BOOL, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          help = "Serve profiling endpoints under /debug/pprof/ on --http-endpoint [default: false]")]
    pub enable_pprof: Option<String>,
    #[arg(
        long,
        value_name = "string",
        allow_hyphen_values = true,
        help = "Filesystem type for volumes whose StorageClass sets none [default: none]"
    )]
    pub default_fstype: Option<String>,
    #[arg(
        long,
        value_name = "float32",
        allow_hyphen_values = true,
        help = "API request rate of the capacity client [default: 1]"
    )]
    pub kube_api_capacity_qps: Option<String>,
    #[arg(
        long,
        value_name = "int",
        allow_hyphen_values = true,
        help = "API request burst of the capacity client [default: 5]"
    )]
    pub kube_api_capacity_burst: Option<String>,
    #[arg(long, value_name = BOOL, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          help = "Publish CSIStorageCapacity objects from the driver's GetCapacity [default: false]")]
    pub enable_capacity: Option<String>,
    #[arg(long, value_name = BOOL, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          help = "Also publish capacity for storage classes with immediate binding [default: false]")]
    pub capacity_for_immediate_binding: Option<String>,
    #[arg(long, value_name = DURATION, allow_hyphen_values = true,
          help = "How often capacity is polled from the driver [default: 1m0s]")]
    pub capacity_poll_interval: Option<String>,
    #[arg(long, value_name = DURATION, allow_hyphen_values = true,
          help = "Not in upstream: when GetCapacity has not succeeded for this long, a Warning \
                  event on the CSIStorageCapacity says so; 0 is off, as upstream [default: 0s]")]
    pub capacity_stale_after: Option<String>,
    #[arg(long, value_name = DURATION, allow_hyphen_values = true,
          help = "Not in upstream: how long a node whose CSINode entry for the driver went away \
                  (a driver restarting) keeps its CSIStorageCapacity objects; 0 deletes them at \
                  once, as upstream [default: 30s]")]
    pub capacity_driver_grace: Option<String>,
    #[arg(long, value_name = BOOL, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          help = "Not in upstream: while a claim's CreateVolume runs, its size is taken from the \
                  published capacity of its node, and a claim that no longer fits there is sent \
                  back to the scheduler without calling the driver; false publishes what \
                  GetCapacity says, as upstream [default: true]")]
    pub capacity_reservations: Option<String>,
    #[arg(long, value_name = BOOL, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          help = "Not in upstream: the claims of one pod selected to one node are added up \
                  before the first volume is made; if they do not fit together, none is made \
                  and the node is shown too small for the pod for a while. Needs list on pods \
                  and --capacity-reservations [default: false]")]
    pub capacity_pod_aware: Option<String>,
    #[arg(long, value_name = BOOL, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          help = "Not in upstream: watch the CSIStorageCapacity objects of the namespace that \
                  this provisioner does not manage and report (Warning event, metric) those \
                  that overlap its own; false skips the watch [default: true]")]
    pub capacity_foreign_check: Option<String>,
    #[arg(
        long,
        value_name = "keep|zero",
        allow_hyphen_values = true,
        help = "Not in upstream: what a stale object shows: its last value (keep), or 0 so that \
                  the scheduler stops sending volumes to storage that cannot be asked (zero); \
                  needs --capacity-stale-after [default: keep]"
    )]
    pub capacity_stale_action: Option<String>,
    #[arg(
        long,
        value_name = "int",
        allow_hyphen_values = true,
        help = "Owner of CSIStorageCapacity objects, counted from the pod named by POD_NAME and \
                  NAMESPACE: 0 the pod, 1 its StatefulSet/DaemonSet/ReplicaSet, 2 a Deployment; \
                  -1 for no owner [default: 1]"
    )]
    pub capacity_ownerref_level: Option<String>,
    #[arg(long, value_name = BOOL, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          help = "Run on every node next to a node-local driver (needs NODE_NAME) [default: false]")]
    pub node_deployment: Option<String>,
    #[arg(long, value_name = BOOL, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          help = "Node deployment: also handle claims with immediate binding [default: true]")]
    pub node_deployment_immediate_binding: Option<String>,
    #[arg(long, value_name = DURATION, allow_hyphen_values = true,
          help = "Node deployment: initial delay before claiming an immediate-binding PVC \
                  [default: 20s]")]
    pub node_deployment_base_delay: Option<String>,
    #[arg(long, value_name = DURATION, allow_hyphen_values = true,
          help = "Node deployment: longest such delay [default: 1m0s]")]
    pub node_deployment_max_delay: Option<String>,
    #[arg(long, value_name = BOOL, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          help = "Mark PVs of ReadOnlyMany claims read-only for ControllerPublishVolume \
                  [default: false]")]
    pub controller_publish_readonly: Option<String>,
    #[arg(long, value_name = BOOL, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          help = "Refuse to change the volume mode of a volume restored from a snapshot \
                  [default: true]")]
    pub prevent_volume_mode_conversion: Option<String>,
    #[arg(long, value_name = "mapStringBool", action = ArgAction::Append, allow_hyphen_values = true,
          help = feature_gates_help())]
    pub feature_gates: Vec<String>,

    // ---- csi-lib-utils standard flags ----
    #[arg(long, value_name = BOOL, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          help = "Print the version and exit")]
    pub version: Option<String>,
    #[arg(
        long,
        value_name = "string",
        allow_hyphen_values = true,
        help = "Path to a kubeconfig; the KUBECONFIG variable overrides it. Only needed out of \
                  cluster"
    )]
    pub kubeconfig: Option<String>,
    #[arg(
        long,
        value_name = "string",
        allow_hyphen_values = true,
        help = "Path of the CSI driver's socket [default: /run/csi/socket]"
    )]
    pub csi_address: Option<String>,
    #[arg(long, value_name = BOOL, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          help = "Elect one active replica through a Lease [default: false]")]
    pub leader_election: Option<String>,
    #[arg(
        long,
        value_name = "string",
        allow_hyphen_values = true,
        help = "Namespace of the Lease [default: POD_NAMESPACE, else the pod's namespace]"
    )]
    pub leader_election_namespace: Option<String>,
    #[arg(long, value_name = DURATION, allow_hyphen_values = true,
          help = "How long non-leaders wait before taking over the Lease [default: 15s]")]
    pub leader_election_lease_duration: Option<String>,
    #[arg(long, value_name = DURATION, allow_hyphen_values = true,
          help = "How long the leader keeps trying to renew before giving up [default: 10s]")]
    pub leader_election_renew_deadline: Option<String>,
    #[arg(long, value_name = DURATION, allow_hyphen_values = true,
          help = "Wait between leader election attempts [default: 5s]")]
    pub leader_election_retry_period: Option<String>,
    #[arg(long, value_name = "key:value,...", action = ArgAction::Append, allow_hyphen_values = true,
          help = "Labels put on the Lease while this replica leads, e.g. app:csi,tier:storage")]
    pub leader_election_labels: Vec<String>,
    #[arg(
        long,
        value_name = "float",
        allow_hyphen_values = true,
        help = "API request rate of the main client [default: 5]"
    )]
    pub kube_api_qps: Option<String>,
    #[arg(
        long,
        value_name = "int",
        allow_hyphen_values = true,
        help = "API request burst of the main client [default: 10]"
    )]
    pub kube_api_burst: Option<String>,
    #[arg(
        long,
        value_name = "string",
        allow_hyphen_values = true,
        help = "Address of the HTTP server for metrics and the leader-election health check, \
                  e.g. :8080; empty disables it. Exclusive with --metrics-address"
    )]
    pub http_endpoint: Option<String>,
    #[arg(
        long,
        value_name = "string",
        allow_hyphen_values = true,
        help = "(deprecated) Old name of --http-endpoint; set only one of the two"
    )]
    pub metrics_address: Option<String>,
    #[arg(
        long,
        value_name = "string",
        allow_hyphen_values = true,
        help = "HTTP path of the Prometheus metrics [default: /metrics]"
    )]
    pub metrics_path: Option<String>,
    #[arg(long, value_name = BOOL, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          help = "Go runtime tuning in upstream; accepted and has no effect here")]
    pub automaxprocs: Option<String>,

    // ---- component-base logging flags ----
    #[arg(
        short = 'v',
        long = "v",
        value_name = "Level",
        allow_hyphen_values = true,
        help = "Log verbosity: messages at this klog level or lower are written [default: 0]"
    )]
    pub v: Option<String>,
    #[arg(long, value_name = "pattern=N,...", action = ArgAction::Append, allow_hyphen_values = true,
          help = "Per-file verbosity: comma-separated pattern=N, matched against source file names \
                  (text format only)")]
    pub vmodule: Vec<String>,
    #[arg(
        long,
        value_name = "string",
        allow_hyphen_values = true,
        help = "Log format: text or json [default: text]"
    )]
    pub logging_format: Option<String>,
    #[arg(long, value_name = DURATION, allow_hyphen_values = true,
          help = "Longest time between log flushes; lines are written unbuffered here \
                  [default: 5s]")]
    pub log_flush_frequency: Option<String>,
    #[arg(long, value_name = BOOL, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          help = "[Alpha] Text format: errors to stderr, info to stdout. Needs the \
                  LoggingAlphaOptions gate, which cannot be enabled (as upstream)")]
    pub log_text_split_stream: Option<String>,
    #[arg(
        long,
        value_name = "quantity",
        allow_hyphen_values = true,
        help = "[Alpha] Text format: info buffer with split streams; only 0 is accepted (as \
                  upstream)"
    )]
    pub log_text_info_buffer_size: Option<String>,
    #[arg(long, value_name = BOOL, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          help = "[Alpha] JSON format: errors to stderr, info to stdout. Needs the \
                  LoggingAlphaOptions gate, which cannot be enabled (as upstream)")]
    pub log_json_split_stream: Option<String>,
    #[arg(
        long,
        value_name = "quantity",
        allow_hyphen_values = true,
        help = "[Alpha] JSON format: info buffer with split streams; only 0 is accepted (as \
                  upstream)"
    )]
    pub log_json_info_buffer_size: Option<String>,

    /// Stray arguments; pflag ignores them and so do we.
    #[arg(hide = true, value_name = "ARGS")]
    pub positional: Vec<String>,
}

fn feature_gates_help() -> String {
    let mut help =
        String::from("Comma-separated Name=true|false pairs for feature gates. Options are:");
    for line in crate::gates::FeatureGates::help_lines() {
        help.push('\n');
        help.push_str(&line);
    }
    help
}
