use super::*;
use rstest::rstest;

fn parse(extra: &[&str]) -> Result<Config, clap::Error> {
    let mut args = vec!["mock-csi-driver"];
    args.extend_from_slice(extra);
    parse_args(args)
}

#[test]
fn minimal_command_line_is_a_working_driver() {
    let cfg = parse(&["--endpoint", "unix:///tmp/x.sock"]).unwrap();
    assert_eq!(cfg.socket, PathBuf::from("/tmp/x.sock"));
    assert_eq!(cfg.driver, DriverConfig::default());
    assert_eq!(cfg.pools, vec![default_pool()]);
    assert_eq!(cfg.faults, None);
    assert_eq!(cfg.call_log, None);
    assert!(!cfg.overcommit);
}

#[test]
fn every_flag() {
    let cfg = parse(&[
        "--endpoint=/run/csi.sock",
        "--driver-name=hostpath.csi.k8s.io",
        "--pool=topology.mock.csi/node=node-1:10Gi",
        "--pool",
        "fast@topology.mock.csi/node=node-2:100Gi",
        "--max-volume-size=2Ti",
        "--node-id=node-1",
        "--node-topology=topology.mock.csi/node=node-1",
        "--faults=/tmp/faults.json",
        "--call-log=/tmp/calls.jsonl",
        "--publish-unpublish",
        "--single-node-multi-writer",
        "--modify-volume",
        "--clone-volume",
        "--omit-content-source",
        "--restore-snapshots",
        "--no-topology",
        "--no-capacity",
        "--reject-access-mode=MULTI_NODE_MULTI_WRITER",
        "--overcommit",
    ])
    .unwrap();
    let want = DriverConfig {
        driver_name: "hostpath.csi.k8s.io".into(),
        max_volume_size: Some(2 << 40),
        node_id: "node-1".into(),
        node_topology: parse_segment("topology.mock.csi/node=node-1").unwrap(),
        empty_node_topology: false,
        publish_unpublish: true,
        single_node_multi_writer: true,
        modify_volume: true,
        clone_volume: true,
        omit_content_source: true,
        restore_snapshots: true,
        no_topology: true,
        no_capacity: true,
        reject_access_modes: vec![
            csi::v1::volume_capability::access_mode::Mode::MultiNodeMultiWriter,
        ],
    };
    assert_eq!(cfg.driver, want);
    assert_eq!(cfg.socket, PathBuf::from("/run/csi.sock"));
    let kinds: Vec<&str> = cfg.pools.iter().map(|p| p.kind.as_str()).collect();
    assert_eq!(kinds, ["", "fast"]);
    assert_eq!(cfg.faults, Some(PathBuf::from("/tmp/faults.json")));
    assert_eq!(cfg.call_log, Some(PathBuf::from("/tmp/calls.jsonl")));
    assert!(cfg.overcommit);
}

/// Bad input: the one-line error names the flag and the expected form; exit code 2.
#[rstest]
#[case(&[], "--endpoint")]
#[case(&["--endpoint=relative.sock"], "--endpoint")]
#[case(&["--endpoint=tcp://h:1"], "unix:///absolute/path.sock")]
#[case(&["--endpoint=/s", "--pool=10Gi"], "--pool")]
#[case(&["--endpoint=/s", "--pool=a=b:huge"], "[KIND@]SEGMENT:SIZE")]
#[case(&["--endpoint=/s", "--max-volume-size=lots"], "--max-volume-size")]
#[case(&["--endpoint=/s", "--max-volume-size=lots"], "10Gi")]
#[case(&["--endpoint=/s", "--node-topology=zone"], "--node-topology")]
#[case(&["--endpoint=/s", "--node-topology=zone"], "key=value")]
#[case(&["--endpoint=/s", "--driver-name=-bad"], "--driver-name")]
#[case(&["--endpoint=/s", "--driver-name="], "CSI driver name")]
#[case(&["--endpoint=/s", "--node-id="], "--node-id")]
#[case(&["--endpoint=/s", "--unknown"], "--unknown")]
#[case(&["--endpoint=/s", "--omit-content-source"], "--clone-volume")]
fn rejects(#[case] args: &[&str], #[case] fragment: &str) {
    let err = parse(args).expect_err("must be rejected");
    assert_eq!(err.exit_code(), 2);
    let line = one_line(&err);
    assert!(!line.contains('\n'));
    assert!(line.contains(fragment), "{line}");
}

#[test]
fn long_driver_names_are_rejected() {
    let name = format!("--driver-name={}", "a".repeat(64));
    assert!(parse(&["--endpoint=/s", &name]).is_err());
    let name = format!("--driver-name={}", "a".repeat(63));
    assert!(parse(&["--endpoint=/s", &name]).is_ok());
}

#[test]
fn help_is_not_an_error_exit() {
    let err = parse(&["--help"]).expect_err("help is reported through clap::Error");
    assert_eq!(err.exit_code(), 0);
}
