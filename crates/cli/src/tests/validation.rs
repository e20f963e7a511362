//! Validation messages, environment, upstream example command lines.

use std::collections::BTreeMap;

use pretty_assertions::assert_eq;
use rstest::rstest;

use super::*;

#[rstest]
#[case(&["--timeout=abc"], r#"invalid value "abc" for flag --timeout: expected a Go duration such as 10s, 1m30s or 250ms (time: invalid duration "abc")"#)]
#[case(&["--timeout=10"], r#"invalid value "10" for flag --timeout: expected a Go duration such as 10s, 1m30s or 250ms (time: missing unit in duration "10")"#)]
#[case(&["--timeout=1d"], r#"invalid value "1d" for flag --timeout: expected a Go duration such as 10s, 1m30s or 250ms (time: unknown unit "d" in duration "1d")"#)]
#[case(&["--timeout=-1s"], r#"invalid value "-1s" for flag --timeout: expected a duration of 0 or more, such as 0, 30s or 5m"#)]
#[case(&["--timeout=0"], "flag --timeout: must be greater than 0, every CSI call would time out at once")]
#[case(&["--leader-election=maybe"], r#"invalid value "maybe" for flag --leader-election: expected true or false (also accepted: 1, 0, t, f, T, F, TRUE, FALSE, True, False)"#)]
#[case(&["--worker-threads=-1"], r#"invalid value "-1" for flag --worker-threads: expected a whole number of 0 or more, such as 1 or 100"#)]
#[case(&["--worker-threads=0"], "flag --worker-threads: must be greater than 0")]
#[case(&["--kube-api-burst=ten"], r#"invalid value "ten" for flag --kube-api-burst: expected an integer such as 5, -1 or 0x10"#)]
#[case(&["--kube-api-burst=9223372036854775808"], r#"invalid value "9223372036854775808" for flag --kube-api-burst: value out of range; expected an integer such as 5, -1 or 0x10"#)]
#[case(&["--kube-api-burst=-1"], "flag --kube-api-burst: burst is required to be greater than 0 when --kube-api-qps is greater than 0")]
#[case(&["--kube-api-burst=0"], "flag --kube-api-burst: burst is required to be greater than 0 when --kube-api-qps is greater than 0")]
#[case(&["--kube-api-qps=fast"], r#"invalid value "fast" for flag --kube-api-qps: expected a number such as 5 or 2.5"#)]
#[case(&["--kube-api-qps=NaN"], r#"invalid value "NaN" for flag --kube-api-qps: expected a number such as 5 or 2.5"#)]
#[case(&["--kube-api-capacity-qps=1e39"], r#"invalid value "1e39" for flag --kube-api-capacity-qps: value out of range; expected a number such as 1 or 0.5"#)]
#[case(&["--volume-name-prefix="], "flag --volume-name-prefix: must not be empty")]
#[case(&["--csi-address="], "flag --csi-address: must not be empty; give the path of the CSI driver's socket")]
#[case(&["--volume-name-uuid-length=0"], r#"invalid value "0" for flag --volume-name-uuid-length: expected -1 (whole UID) or 1 to 32"#)]
#[case(&["--volume-name-uuid-length=33"], r#"invalid value "33" for flag --volume-name-uuid-length: expected -1 (whole UID) or 1 to 32"#)]
#[case(&["--volume-name-uuid-length=-2"], r#"invalid value "-2" for flag --volume-name-uuid-length: expected -1 (whole UID) or 1 to 32"#)]
#[case(&["--capacity-ownerref-level=4294967296"], r#"invalid value "4294967296" for flag --capacity-ownerref-level: expected -1, 0, 1, 2 or another small level"#)]
#[case(&["--http-endpoint=:8080", "--metrics-address=:8081"], "flag --metrics-address: only one of --metrics-address and --http-endpoint can be set; drop the deprecated --metrics-address")]
#[case(&["--http-endpoint=:8080", "--metrics-path=metrics"], "flag --metrics-path: must be an HTTP path starting with /, such as /metrics")]
#[case(&["--feature-gates=Bogus=true"], r#"invalid value "Bogus=true" for flag --feature-gates: unrecognized feature gate: Bogus; known gates: AllAlpha, AllBeta, Topology, CrossNamespaceVolumeDataSource, VolumeAttributesClass, ReleaseLeaderElectionOnExit"#)]
#[case(&["--feature-gates=Topology"], r#"invalid value "Topology" for flag --feature-gates: expected Name=true|false pairs (malformed pair "Topology", expect string=bool)"#)]
#[case(&["--feature-gates=Topology=on"], r#"invalid value "Topology=on" for flag --feature-gates: expected Name=true|false pairs (invalid value of Topology: on)"#)]
#[case(&["--leader-election-labels=app"], r#"invalid value "app" for flag --leader-election-labels: expected key:value pairs separated by commas, such as app:csi,tier:storage (malformed item "app")"#)]
#[case(&["--leader-election-labels="], r#"invalid value "" for flag --leader-election-labels: expected key:value pairs separated by commas, such as app:csi,tier:storage (malformed item "")"#)]
#[case(&["-v=-1"], r#"invalid value "-1" for flag --v: expected a verbosity level from 0 to 2147483647"#)]
#[case(&["-v=2147483648"], r#"invalid value "2147483648" for flag --v: expected a verbosity level from 0 to 2147483647"#)]
#[case(&["-v=high"], r#"invalid value "high" for flag --v: expected a verbosity level from 0 to 2147483647"#)]
#[case(&["--vmodule=controller"], r#"invalid value "controller" for flag --vmodule: expected comma-separated pattern=N such as controller=5 ("controller" does not have the pattern=N format)"#)]
#[case(&["--vmodule=a=1", "--logging-format=json"], "flag --vmodule: only supported with --logging-format=text")]
#[case(&["--logging-format=xml"], r#"invalid value "xml" for flag --logging-format: expected text or json"#)]
#[case(&["--log-flush-frequency=0"], "flag --log-flush-frequency: must be greater than 0")]
#[case(&["--log-text-split-stream"], "flag --log-text-split-stream: needs the LoggingAlphaOptions feature gate, which cannot be enabled; only the default is accepted (as upstream)")]
#[case(&["--log-json-split-stream=true"], "flag --log-json-split-stream: needs the LoggingAlphaOptions feature gate, which cannot be enabled; only the default is accepted (as upstream)")]
#[case(&["--log-text-info-buffer-size=1Mi"], "flag --log-text-info-buffer-size: needs the LoggingAlphaOptions feature gate, which cannot be enabled; only the default is accepted (as upstream)")]
#[case(&["--log-json-info-buffer-size=lots"], r#"invalid value "lots" for flag --log-json-info-buffer-size: expected a quantity such as 0, 512, 64Ki or 1Mi"#)]
#[case(&["--leader-election", "--leader-election-lease-duration=10s"], "flag --leader-election-lease-duration: must be greater than --leader-election-renew-deadline (10s <= 10s)")]
#[case(&["--leader-election", "--leader-election-retry-period=9s"], "flag --leader-election-renew-deadline: must be greater than 1.2 x --leader-election-retry-period (10s <= 1.2 x 9s)")]
#[case(&["--leader-election", "--leader-election-retry-period=0"], "flag --leader-election-retry-period: must be greater than 0")]
#[case(&["--node-deployment"], "the NODE_NAME environment variable must be set when --node-deployment is set")]
#[case(&["--enable-capacity"], "the NAMESPACE environment variable must be set when --enable-capacity is set")]
#[case(&["--bogus"], "unknown flag: --bogus")]
#[case(&["--timeot=1s"], "unknown flag: --timeot (did you mean --timeout?)")]
#[case(&["-x"], "unknown shorthand flag: -x")]
#[case(&["-csi-address=/x"], "unknown shorthand flag: -c")]
#[case(&["--timeout"], "flag needs an argument: --timeout")]
fn rejects_with_one_line_messages(#[case] args: &[&str], #[case] message: &str) {
    let err = parse(args).unwrap_err();
    assert_eq!(err.to_string(), message);
    assert!(!err.to_string().contains('\n'));
    assert_eq!(err.exit_code(), 2);
}

#[rstest]
#[case(&["--enable-capacity"], &[("NAMESPACE", "kube-system")], "the POD_NAME environment variable must be set when --enable-capacity is set and --capacity-ownerref-level is 0 or more")]
#[case(&["--enable-capacity", "--capacity-threads=0"], &[("NAMESPACE", "ns"), ("POD_NAME", "p")], "flag --capacity-threads: must be greater than 0")]
#[case(&["--enable-capacity", "--capacity-poll-interval=0s"], &[("NAMESPACE", "ns"), ("POD_NAME", "p")], "flag --capacity-poll-interval: must be greater than 0")]
#[case(&["--enable-capacity", "--capacity-stale-action=zero"], &[("NAMESPACE", "ns"), ("POD_NAME", "p")], "flag --capacity-stale-action: zero needs --capacity-stale-after (when an object counts as stale)")]
#[case(&["--enable-capacity", "--kube-api-capacity-burst=0"], &[("NAMESPACE", "ns"), ("POD_NAME", "p")], "flag --kube-api-capacity-burst: burst is required to be greater than 0 when --kube-api-capacity-qps is greater than 0")]
#[case(&["--node-deployment"], &[("NODE_NAME", "")], "the NODE_NAME environment variable must be set when --node-deployment is set")]
fn rejects_with_environment(
    #[case] args: &[&str],
    #[case] env: &'static [(&'static str, &'static str)],
    #[case] message: &str,
) {
    assert_eq!(parse_env(args, env).unwrap_err().to_string(), message);
}

#[test]
fn environment_is_captured_and_kubeconfig_overrides_the_flag() {
    let env: &[(&str, &str)] = &[
        ("KUBECONFIG", "/env/kubeconfig"),
        ("NODE_NAME", "node-1"),
        ("NAMESPACE", "storage"),
        ("POD_NAME", "csi-0"),
        ("POD_NAMESPACE", "storage"),
    ];
    let o = parse_env(&["--kubeconfig=/flag/kubeconfig"], env).unwrap();
    assert_eq!(o.kubeconfig.as_deref(), Some("/env/kubeconfig"));
    assert_eq!(
        o.env,
        Env {
            node_name: Some("node-1".into()),
            namespace: Some("storage".into()),
            pod_name: Some("csi-0".into()),
            pod_namespace: Some("storage".into()),
            kubeconfig: Some("/env/kubeconfig".into()),
        }
    );
    // An empty KUBECONFIG does not override.
    let o = parse_env(&["--kubeconfig=/flag/kubeconfig"], &[("KUBECONFIG", "")]).unwrap();
    assert_eq!(o.kubeconfig.as_deref(), Some("/flag/kubeconfig"));
}

#[test]
fn version_skips_the_later_checks_like_upstream() {
    // Upstream prints the version before checking these.
    let o = ok(&[
        "--version",
        "--http-endpoint=:1",
        "--metrics-address=:2",
        "--enable-capacity",
    ]);
    assert!(o.show_version);
    // ...but after these.
    assert!(parse(&["--version", "--feature-gates=Bogus=true"]).is_err());
    assert!(parse(&["--version", "--node-deployment"]).is_err());
    assert!(parse(&["--version", "--log-flush-frequency=0"]).is_err());
    assert_eq!(
        version_line("/csi-provisioner", "v6.3.0"),
        "/csi-provisioner v6.3.0"
    );
}

#[test]
fn help_exits_zero_with_usage() {
    for flag in ["--help", "-h"] {
        let err = parse(&[flag]).unwrap_err();
        assert!(err.is_help());
        assert_eq!(err.exit_code(), 0);
        let text = err.to_string();
        for name in [
            "--csi-address",
            "--feature-gates",
            "--leader-election-labels",
            "-v, --v",
        ] {
            assert!(text.contains(name), "{name} missing from help");
        }
        assert!(text.contains("CrossNamespaceVolumeDataSource=true|false (ALPHA - default=false)"));
    }
    assert!(usage().contains("--timeout"));
}

#[test]
fn gate_warnings_are_reported() {
    let o = ok(&["--feature-gates=Topology=true"]);
    assert_eq!(
        o.feature_gate_warnings,
        ["Setting GA feature gate Topology=true. It will be removed in a future release."]
    );
    assert!(o.feature_gates.explicitly_set(Feature::Topology));
}

#[test]
fn accepted_but_ignored_lists_flags_given_that_do_nothing_here() {
    let env: &[(&str, &str)] = &[("NODE_NAME", "n1")];
    let o = parse_env(
        &[
            "--node-deployment",
            "--automaxprocs",
            "--log-flush-frequency=10s",
            "--snapshot-orphan-sweep-interval=1m",
            "--cloning-protection-threads=2",
            "--prevent-volume-mode-conversion=false",
            // Acted on (the HTTP endpoint serves /debug/pprof/; distributed provisioning; data
            // sources), so not listed.
            "--enable-pprof",
            "--feature-gates=CrossNamespaceVolumeDataSource=true",
            "--log-text-info-buffer-size=0",
        ],
        env,
    )
    .unwrap();
    let flags: Vec<&str> = o.accepted_but_ignored().iter().map(|(f, _)| *f).collect();
    assert_eq!(
        flags,
        [
            "automaxprocs",
            "log-flush-frequency",
            "log-text-info-buffer-size",
            "cloning-protection-threads",
        ]
    );
    assert!(
        o.accepted_but_ignored()
            .iter()
            .all(|(_, why)| !why.is_empty())
    );
    // Flags we act on are never listed.
    assert!(
        ok(&["--timeout=5s", "--vmodule=x=2", "-v=3"])
            .accepted_but_ignored()
            .is_empty()
    );
}

/// Argument lists of upstream's example deployments and of the deployments Kubernetes' own e2e
/// tests and csi-driver-host-path use (`$(VAR)` expanded by the kubelet before we see it).
#[rstest]
#[case::readme(&["--csi-address=/var/lib/csi/sockets/pluginproxy/mock.socket", "--leader-election", "--http-endpoint=:8080", "-v=5"], &[])]
#[case::deployment_yaml(&["--csi-address=/var/lib/csi/sockets/pluginproxy/mock.socket", "--leader-election", "--http-endpoint=:8080"], &[])]
#[case::storage_capacity_yaml(&["--csi-address=/var/lib/csi/sockets/pluginproxy/mock.socket", "--leader-election", "--enable-capacity", "--capacity-ownerref-level=2"], &[("NAMESPACE", "default"), ("POD_NAME", "csi-provisioner-7d9f-x")])]
#[case::hostpath_distributed(&["-v=5", "--csi-address=/csi/csi.sock", "--feature-gates=Topology=true", "--enable-capacity", "--capacity-ownerref-level=0", "--node-deployment=true", "--strict-topology=true", "--immediate-topology=false", "--worker-threads=5"], &[("NODE_NAME", "kind-worker"), ("NAMESPACE", "default"), ("POD_NAME", "csi-hostpathplugin-abcde")])]
#[case::hostpath_plugin(&["-v=5", "--csi-address=/csi/csi.sock", "--feature-gates=Topology=true"], &[])]
#[case::e2e_mock_driver(&["--csi-address=/csi/csi.sock", "--feature-gates=Topology=true", "-v=5", "--default-fstype=ext4", "--worker-threads=5"], &[])]
#[case::e2e_mock_proxy(&["--csi-address=/csi/csi.sock", "--feature-gates=Topology=true", "-v=5", "--timeout=1m", "--default-fstype=ext4", "--worker-threads=5"], &[])]
#[case::gce_pd(&["--v=5", "--csi-address=/csi/csi.sock", "--feature-gates=Topology=true", "--http-endpoint=:22011", "--leader-election-namespace=gce-pd-csi-driver", "--timeout=250s", "--extra-create-metadata", "--leader-election", "--default-fstype=ext4"], &[])]
#[case::kubeconfig_out_of_cluster(&["--kubeconfig=/home/me/.kube/config", "--csi-address=/tmp/csi.sock", "--leader-election-namespace=kube-system", "--leader-election-labels=owner:me", "--metrics-address=:9808"], &[])]
fn upstream_example_command_lines_parse(
    #[case] args: &[&str],
    #[case] env: &'static [(&'static str, &'static str)],
) {
    let o = parse_env(args, env).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(o.positional_args.is_empty());
    assert!(o.csi_address.starts_with('/'));
}

#[test]
fn golden_distributed_provisioning_values() {
    let o = parse_env(
        &[
            "-v=5",
            "--csi-address=/csi/csi.sock",
            "--enable-capacity",
            "--capacity-ownerref-level=0",
            "--node-deployment=true",
            "--strict-topology=true",
            "--immediate-topology=false",
        ],
        &[
            ("NODE_NAME", "kind-worker"),
            ("NAMESPACE", "default"),
            ("POD_NAME", "p"),
        ],
    )
    .unwrap();
    assert_eq!(
        (
            o.logging.verbosity,
            o.enable_capacity,
            o.capacity_ownerref_level,
            o.node_deployment
        ),
        (5, true, Some(0), true)
    );
    assert_eq!((o.strict_topology, o.immediate_topology), (true, false));
    assert_eq!(o.env.node_name.as_deref(), Some("kind-worker"));
    let labels: BTreeMap<String, String> = BTreeMap::new();
    assert_eq!(o.leader_election_labels, labels);
}

proptest::proptest! {
    /// Arbitrary arguments never panic, and every error but help is one line.
    #[test]
    fn arbitrary_command_lines_never_panic(args in proptest::collection::vec("(--?[a-z-]{0,12}(=[ -~]{0,8})?|[ -~]{0,8})", 0..6)) {
        match parse(&args.iter().map(String::as_str).collect::<Vec<_>>()) {
            Ok(_) => {}
            Err(e) if e.is_help() => {}
            Err(e) => proptest::prop_assert!(!e.to_string().contains('\n'), "{e}"),
        }
    }
}
