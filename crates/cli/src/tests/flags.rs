//! Defaults, every flag, pflag syntax.

use pretty_assertions::assert_eq;
use rstest::rstest;

use super::*;

/// Every flag upstream v6.3.0 registers (its own, csi-lib-utils, component-base logging).
const UPSTREAM_FLAGS: &[&str] = &[
    "automaxprocs",
    "capacity-for-immediate-binding",
    "capacity-ownerref-level",
    "capacity-poll-interval",
    "capacity-threads",
    "cloning-protection-threads",
    "controller-publish-readonly",
    "csi-address",
    "default-fstype",
    "enable-capacity",
    "enable-pprof",
    "extra-create-metadata",
    "feature-gates",
    "http-endpoint",
    "immediate-topology",
    "kube-api-burst",
    "kube-api-capacity-burst",
    "kube-api-capacity-qps",
    "kube-api-qps",
    "kubeconfig",
    "leader-election",
    "leader-election-labels",
    "leader-election-lease-duration",
    "leader-election-namespace",
    "leader-election-renew-deadline",
    "leader-election-retry-period",
    "log-flush-frequency",
    "log-json-info-buffer-size",
    "log-json-split-stream",
    "log-text-info-buffer-size",
    "log-text-split-stream",
    "logging-format",
    "master",
    "metrics-address",
    "metrics-path",
    "node-deployment",
    "node-deployment-base-delay",
    "node-deployment-immediate-binding",
    "node-deployment-max-delay",
    "prevent-volume-mode-conversion",
    "retry-interval-max",
    "retry-interval-start",
    "snapshot-orphan-sweep-interval",
    "strict-topology",
    "timeout",
    "v",
    "version",
    "vmodule",
    "volume-name-prefix",
    "volume-name-uuid-length",
    "worker-threads",
];

/// Flags upstream does not have (docs/compatibility.md says what each does); their defaults
/// keep upstream's behaviour.
const OUR_FLAGS: &[&str] = &[
    "capacity-driver-grace",
    "capacity-foreign-check",
    "capacity-pod-aware",
    "capacity-reservations",
    "capacity-stale-action",
    "capacity-stale-after",
];

#[test]
fn registers_exactly_the_upstream_flags_and_ours() {
    let mut ours: Vec<String> = args::RawArgs::command()
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_string))
        .collect();
    ours.sort();
    let mut want: Vec<String> = UPSTREAM_FLAGS
        .iter()
        .chain(OUR_FLAGS)
        .map(|s| s.to_string())
        .collect();
    want.sort();
    assert_eq!(ours, want);
}

#[rstest]
#[case(&[], None, StaleAction::Keep)]
#[case(&["--capacity-stale-after=0"], None, StaleAction::Keep)]
#[case(&["--capacity-stale-after=90s"], Some(secs(90)), StaleAction::Keep)]
#[case(&["--capacity-stale-after=2m", "--capacity-stale-action=zero"], Some(secs(120)), StaleAction::Zero)]
#[case(&["--capacity-stale-after=1m", "--capacity-stale-action=keep"], Some(secs(60)), StaleAction::Keep)]
fn stale_policy_flags(
    #[case] args: &[&str],
    #[case] after: Option<Duration>,
    #[case] action: StaleAction,
) {
    let o = ok(args);
    assert_eq!(
        (o.capacity_stale_after, o.capacity_stale_action),
        (after, action)
    );
}

#[rstest]
#[case(&[], secs(30))]
#[case(&["--capacity-driver-grace=0"], secs(0))]
#[case(&["--capacity-driver-grace=2m"], secs(120))]
fn driver_grace_flag(#[case] args: &[&str], #[case] want: Duration) {
    assert_eq!(ok(args).capacity_driver_grace, want);
}

#[rstest]
#[case(&[], true)]
#[case(&["--capacity-reservations"], true)]
#[case(&["--capacity-reservations=false"], false)]
#[case(&["--capacity-reservations=0"], false)]
fn reservations_flag(#[case] args: &[&str], #[case] want: bool) {
    assert_eq!(ok(args).capacity_reservations, want);
}

#[rstest]
#[case(&[], false)]
#[case(&["--capacity-pod-aware"], true)]
#[case(&["--capacity-pod-aware=false"], false)]
fn pod_aware_flag(#[case] args: &[&str], #[case] want: bool) {
    assert_eq!(ok(args).capacity_pod_aware, want);
}

#[rstest]
#[case(&[], true)]
#[case(&["--capacity-foreign-check=false"], false)]
fn foreign_check_flag(#[case] args: &[&str], #[case] want: bool) {
    assert_eq!(ok(args).capacity_foreign_check, want);
}

#[rstest]
#[case(&["--capacity-reservations=maybe"], "capacity-reservations")]
#[case(&["--capacity-driver-grace=soon"], "capacity-driver-grace")]
#[case(&["--capacity-stale-action=drop"], "expected keep or zero")]
#[case(&["--capacity-stale-after=-1s"], "capacity-stale-after")]
fn stale_policy_mistakes_are_named(#[case] args: &[&str], #[case] says: &str) {
    let e = parse(args).unwrap_err().to_string();
    assert!(e.contains(says), "{e}");
}

#[test]
fn no_arguments_give_upstream_defaults() {
    assert_eq!(ok(&[]), Options::default());
}

#[test]
fn every_default_matches_upstream() {
    let o = Options::default();
    assert_eq!(o.master, None);
    assert_eq!(o.volume_name_prefix, "pvc");
    assert_eq!(o.volume_name_uuid_length, None);
    assert_eq!(o.retry_interval_start, secs(1));
    assert_eq!(o.retry_interval_max, secs(300));
    assert_eq!(o.worker_threads, 100);
    assert_eq!(o.cloning_protection_threads, 1);
    assert_eq!(o.snapshot_orphan_sweep_interval, Some(secs(300)));
    assert_eq!(o.capacity_threads, 1);
    assert_eq!(o.timeout, secs(10));
    assert!(!o.strict_topology);
    assert!(o.immediate_topology);
    assert!(!o.extra_create_metadata);
    assert!(!o.enable_pprof);
    assert_eq!(o.default_fstype, None);
    assert_eq!(o.kube_api_capacity_qps, 1.0);
    assert_eq!(o.kube_api_capacity_burst, 5);
    assert!(!o.enable_capacity);
    assert!(!o.capacity_for_immediate_binding);
    assert_eq!(o.capacity_poll_interval, secs(60));
    assert_eq!(o.capacity_ownerref_level, Some(1));
    assert!(!o.node_deployment);
    assert!(o.node_deployment_immediate_binding);
    assert_eq!(o.node_deployment_base_delay, secs(20));
    assert_eq!(o.node_deployment_max_delay, secs(60));
    assert!(!o.controller_publish_readonly);
    assert!(o.prevent_volume_mode_conversion);
    assert!(o.feature_gates.enabled(Feature::Topology));
    assert!(
        !o.feature_gates
            .enabled(Feature::CrossNamespaceVolumeDataSource)
    );
    assert!(o.feature_gates.enabled(Feature::VolumeAttributesClass));
    assert!(
        !o.feature_gates
            .enabled(Feature::ReleaseLeaderElectionOnExit)
    );
    assert!(!o.show_version);
    assert_eq!(o.kubeconfig, None);
    assert_eq!(o.csi_address, "/run/csi/socket");
    assert!(!o.leader_election);
    assert_eq!(o.leader_election_namespace, None);
    assert_eq!(o.leader_election_lease_duration, secs(15));
    assert_eq!(o.leader_election_renew_deadline, secs(10));
    assert_eq!(o.leader_election_retry_period, secs(5));
    assert!(o.leader_election_labels.is_empty());
    assert_eq!(o.kube_api_qps, 5.0);
    assert_eq!(o.kube_api_burst, 10);
    assert_eq!(o.http_endpoint, None);
    assert_eq!(o.metrics_address, None);
    assert_eq!(o.metrics_path, "/metrics");
    assert!(!o.automaxprocs);
    assert_eq!(o.logging.format, klog::Format::Text);
    assert_eq!(o.logging.verbosity, 0);
    assert_eq!(o.logging.vmodule, None);
    assert_eq!(o.logging.flush_frequency, secs(5));
    assert!(!o.logging.text_split_stream && !o.logging.json_split_stream);
    assert_eq!(o.logging.text_info_buffer_size, "0");
    assert_eq!(o.logging.json_info_buffer_size, "0");
    assert!(o.positional_args.is_empty());
    assert!(o.accepted_but_ignored().is_empty());
}

type Check = fn(&Options) -> bool;

/// One non-default value for every flag, in `--flag=value` form.
#[rstest]
#[case(&["--master=https://k8s:6443"], |o: &Options| o.master.as_deref() == Some("https://k8s:6443"))]
#[case(&["--volume-name-prefix=vol"], |o: &Options| o.volume_name_prefix == "vol")]
#[case(&["--volume-name-uuid-length=16"], |o: &Options| o.volume_name_uuid_length == Some(16))]
#[case(&["--retry-interval-start=2s"], |o: &Options| o.retry_interval_start == secs(2))]
#[case(&["--retry-interval-max=10m"], |o: &Options| o.retry_interval_max == secs(600))]
#[case(&["--worker-threads=5"], |o: &Options| o.worker_threads == 5)]
#[case(&["--cloning-protection-threads=3"], |o: &Options| o.cloning_protection_threads == 3)]
#[case(&["--snapshot-orphan-sweep-interval=0"], |o: &Options| o.snapshot_orphan_sweep_interval.is_none())]
#[case(&["--snapshot-orphan-sweep-interval=-1s"], |o: &Options| o.snapshot_orphan_sweep_interval.is_none())]
#[case(&["--snapshot-orphan-sweep-interval=1h"], |o: &Options| o.snapshot_orphan_sweep_interval == Some(secs(3600)))]
#[case(&["--capacity-threads=4"], |o: &Options| o.capacity_threads == 4)]
#[case(&["--timeout=250s"], |o: &Options| o.timeout == secs(250))]
#[case(&["--strict-topology"], |o: &Options| o.strict_topology)]
#[case(&["--immediate-topology=false"], |o: &Options| !o.immediate_topology)]
#[case(&["--extra-create-metadata"], |o: &Options| o.extra_create_metadata)]
#[case(&["--enable-pprof"], |o: &Options| o.enable_pprof)]
#[case(&["--default-fstype=ext4"], |o: &Options| o.default_fstype.as_deref() == Some("ext4"))]
#[case(&["--default-fstype="], |o: &Options| o.default_fstype.is_none())]
#[case(&["--kube-api-capacity-qps=2.5"], |o: &Options| o.kube_api_capacity_qps == 2.5)]
#[case(&["--kube-api-capacity-burst=50"], |o: &Options| o.kube_api_capacity_burst == 50)]
#[case(&["--capacity-for-immediate-binding"], |o: &Options| o.capacity_for_immediate_binding)]
#[case(&["--capacity-poll-interval=30s"], |o: &Options| o.capacity_poll_interval == secs(30))]
#[case(&["--capacity-ownerref-level=-1"], |o: &Options| o.capacity_ownerref_level.is_none())]
#[case(&["--capacity-ownerref-level=2"], |o: &Options| o.capacity_ownerref_level == Some(2))]
#[case(&["--node-deployment-immediate-binding=false"], |o: &Options| !o.node_deployment_immediate_binding)]
#[case(&["--node-deployment-base-delay=1s"], |o: &Options| o.node_deployment_base_delay == secs(1))]
#[case(&["--node-deployment-max-delay=2m"], |o: &Options| o.node_deployment_max_delay == secs(120))]
#[case(&["--controller-publish-readonly"], |o: &Options| o.controller_publish_readonly)]
#[case(&["--prevent-volume-mode-conversion=false"], |o: &Options| !o.prevent_volume_mode_conversion)]
#[case(&["--feature-gates=ReleaseLeaderElectionOnExit=true"], |o: &Options| o.feature_gates.enabled(Feature::ReleaseLeaderElectionOnExit))]
#[case(&["--version"], |o: &Options| o.show_version)]
#[case(&["--kubeconfig=/k"], |o: &Options| o.kubeconfig.as_deref() == Some("/k"))]
#[case(&["--csi-address=/csi/csi.sock"], |o: &Options| o.csi_address == "/csi/csi.sock")]
#[case(&["--leader-election"], |o: &Options| o.leader_election)]
#[case(&["--leader-election-namespace=kube-system"], |o: &Options| o.leader_election_namespace.as_deref() == Some("kube-system"))]
#[case(&["--leader-election-lease-duration=30s"], |o: &Options| o.leader_election_lease_duration == secs(30))]
#[case(&["--leader-election-renew-deadline=12s"], |o: &Options| o.leader_election_renew_deadline == secs(12))]
#[case(&["--leader-election-retry-period=3s"], |o: &Options| o.leader_election_retry_period == secs(3))]
#[case(&["--leader-election-labels=a:b,c:d"], |o: &Options| o.leader_election_labels.len() == 2 && o.leader_election_labels["c"] == "d")]
#[case(&["--kube-api-qps=20"], |o: &Options| o.kube_api_qps == 20.0)]
#[case(&["--kube-api-burst=40"], |o: &Options| o.kube_api_burst == 40)]
#[case(&["--http-endpoint=:8080"], |o: &Options| o.http_address() == Some(":8080"))]
#[case(&["--metrics-address=:9090"], |o: &Options| o.http_address() == Some(":9090"))]
#[case(&["--metrics-path=/m"], |o: &Options| o.metrics_path == "/m")]
#[case(&["--automaxprocs"], |o: &Options| o.automaxprocs)]
#[case(&["--automaxprocs="], |o: &Options| o.automaxprocs)]
#[case(&["--automaxprocs=false"], |o: &Options| !o.automaxprocs)]
#[case(&["-v=4"], |o: &Options| o.logging.verbosity == 4)]
#[case(&["--vmodule=controller=5"], |o: &Options| o.logging.vmodule.as_deref() == Some("controller=5"))]
#[case(&["--logging-format=json"], |o: &Options| o.logging.format == klog::Format::Json)]
#[case(&["--log-flush-frequency=1s"], |o: &Options| o.logging.flush_frequency == secs(1))]
#[case(&["--log-text-split-stream=false"], |o: &Options| !o.logging.text_split_stream)]
#[case(&["--log-json-split-stream=false"], |o: &Options| !o.logging.json_split_stream)]
#[case(&["--log-text-info-buffer-size=0"], |o: &Options| o.logging.text_info_buffer_size == "0")]
#[case(&["--log-json-info-buffer-size=0Ki"], |o: &Options| o.logging.json_info_buffer_size == "0Ki")]
fn every_flag_is_settable(#[case] args: &[&str], #[case] check: Check) {
    let o = ok(args);
    assert!(check(&o), "{args:?} -> {o:#?}");
    let name = args[0].trim_start_matches('-').split('=').next().unwrap();
    assert!(o.is_explicit(name), "{name} not recorded as explicit");
}

/// pflag's syntax: `=` or a separate value, bare booleans, Go booleans, the `-v` shorthand,
/// repeats, negative values after a space, and ignored positional arguments.
#[rstest]
#[case(&["--timeout", "1m30s"], |o: &Options| o.timeout == secs(90))]
#[case(&["--timeout=1.5h"], |o: &Options| o.timeout == secs(5400))]
#[case(&["--timeout=250ms"], |o: &Options| o.timeout == Duration::from_millis(250))]
#[case(&["--timeout=.5s"], |o: &Options| o.timeout == Duration::from_millis(500))]
#[case(&["--timeout=1µs"], |o: &Options| o.timeout == Duration::from_micros(1))]
#[case(&["--timeout=1us"], |o: &Options| o.timeout == Duration::from_micros(1))]
#[case(&["--timeout=1s", "--timeout=2s"], |o: &Options| o.timeout == secs(2))]
#[case(&["--leader-election=false"], |o: &Options| !o.leader_election)]
#[case(&["--leader-election=true"], |o: &Options| o.leader_election)]
#[case(&["--leader-election=1"], |o: &Options| o.leader_election)]
#[case(&["--leader-election=T"], |o: &Options| o.leader_election)]
#[case(&["--leader-election=False"], |o: &Options| !o.leader_election)]
#[case(&["--leader-election", "false"], |o: &Options| o.leader_election && o.positional_args == ["false"])]
#[case(&["--leader-election", "--leader-election=false"], |o: &Options| !o.leader_election)]
#[case(&["-v", "5"], |o: &Options| o.logging.verbosity == 5)]
#[case(&["-v5"], |o: &Options| o.logging.verbosity == 5)]
#[case(&["--v=5"], |o: &Options| o.logging.verbosity == 5)]
#[case(&["--v", "5"], |o: &Options| o.logging.verbosity == 5)]
#[case(&["-v=2147483647"], |o: &Options| o.logging.verbosity == 2147483647 && o.logging.klog_verbosity() == 255)]
#[case(&["--capacity-ownerref-level", "-1"], |o: &Options| o.capacity_ownerref_level.is_none())]
#[case(&["--worker-threads=0x10"], |o: &Options| o.worker_threads == 16)]
#[case(&["--kube-api-burst=1_000"], |o: &Options| o.kube_api_burst == 1000)]
#[case(&["--kube-api-burst=010"], |o: &Options| o.kube_api_burst == 8)]
#[case(&["--kube-api-qps=-1"], |o: &Options| o.kube_api_qps == -1.0)]
#[case(&["--kube-api-qps=0", "--kube-api-burst=0"], |o: &Options| o.kube_api_qps == 0.0 && o.kube_api_burst == 0)]
#[case(&["--feature-gates=Topology=false,CrossNamespaceVolumeDataSource=true", "--feature-gates=Topology=true"],
       |o: &Options| o.feature_gates.enabled(Feature::Topology) && o.feature_gates.enabled(Feature::CrossNamespaceVolumeDataSource))]
#[case(&["--feature-gates", "AllAlpha=true"], |o: &Options| o.feature_gates.enabled(Feature::ReleaseLeaderElectionOnExit))]
#[case(&["--leader-election-labels=a:1", "--leader-election-labels", "b:2"], |o: &Options| o.leader_election_labels.len() == 2)]
#[case(&["--vmodule=a=1", "--vmodule=b=2"], |o: &Options| o.logging.vmodule.as_deref() == Some("a=1,b=2"))]
#[case(&["--csi-address", "--leader-election"], |o: &Options| o.csi_address == "--leader-election" && !o.leader_election)]
#[case(&["extra", "--timeout=3s", "args"], |o: &Options| o.timeout == secs(3) && o.positional_args == ["extra", "args"])]
#[case(&["--", "--timeout=3s"], |o: &Options| o.timeout == secs(10) && o.positional_args == ["--timeout=3s"])]
#[case(&["--volume-name-uuid-length=1"], |o: &Options| o.volume_name_uuid_length == Some(1))]
#[case(&["--volume-name-uuid-length=32"], |o: &Options| o.volume_name_uuid_length == Some(32))]
fn pflag_forms(#[case] args: &[&str], #[case] check: Check) {
    let o = ok(args);
    assert!(check(&o), "{args:?} -> {o:#?}");
}
