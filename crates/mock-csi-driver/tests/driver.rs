//! The real binary over its unix socket, through the generated tonic clients: volumes,
//! capacity, run-time faults and the call log.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use common::Driver;
use csi::v1::controller_client::ControllerClient;
use csi::v1::identity_client::IdentityClient;
use csi::v1::node_client::NodeClient;
use csi::v1::volume_capability::access_mode::Mode;
use csi::v1::volume_capability::{AccessMode, AccessType, MountVolume};
use csi::v1::*;
use serde_json::{Value, json};
use tonic::Code;

const GI: i64 = 1 << 30;
const NODE_KEY: &str = "topology.mock.csi/node";
const SECRET: &str = "s3cr3t-value";

fn topo(node: &str) -> Topology {
    Topology {
        segments: HashMap::from([(NODE_KEY.to_owned(), node.to_owned())]),
    }
}

fn create_request(name: &str, size: i64, preferred: &str) -> CreateVolumeRequest {
    CreateVolumeRequest {
        name: name.into(),
        capacity_range: Some(CapacityRange {
            required_bytes: size,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![VolumeCapability {
            access_type: Some(AccessType::Mount(MountVolume::default())),
            access_mode: Some(AccessMode {
                mode: Mode::SingleNodeWriter.into(),
            }),
        }],
        secrets: HashMap::from([("password".to_owned(), SECRET.to_owned())]),
        accessibility_requirements: Some(TopologyRequirement {
            requisite: vec![topo("node-1"), topo("node-2")],
            preferred: vec![topo(preferred)],
        }),
        ..Default::default()
    }
}

fn capacity_request(node: &str) -> GetCapacityRequest {
    GetCapacityRequest {
        accessible_topology: Some(topo(node)),
        ..Default::default()
    }
}

/// Replaces the faults file the way tests should: write elsewhere, rename over it.
fn set_faults(path: &Path, faults: Value) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, faults.to_string()).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn call_log(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l:?}: {e}")))
        .collect()
}

#[tokio::test]
async fn volumes_capacity_faults_and_call_log() {
    let dir = tempfile::tempdir().unwrap();
    let faults = dir.path().join("faults.json");
    let calls = dir.path().join("calls.jsonl");
    let mut driver = Driver::start(
        dir.path(),
        &[
            "--driver-name=test.mock.csi".into(),
            format!("--pool={NODE_KEY}=node-1:10Gi"),
            format!("--pool={NODE_KEY}=node-2:20Gi"),
            "--max-volume-size=1Pi".into(),
            "--node-id=node-1".into(),
            format!("--node-topology={NODE_KEY}=node-1"),
            format!("--faults={}", faults.display()),
            format!("--call-log={}", calls.display()),
        ],
    );
    let channel = driver.channel().await;
    let mut identity = IdentityClient::new(channel.clone());
    let mut controller = ControllerClient::new(channel.clone());
    let mut node = NodeClient::new(channel);

    let info = identity
        .get_plugin_info(GetPluginInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.name, "test.mock.csi");
    let caps = identity
        .get_plugin_capabilities(GetPluginCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        caps.capabilities.len(),
        2,
        "controller + topology: {caps:?}"
    );
    let info = node
        .node_get_info(NodeGetInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (info.node_id.as_str(), info.accessible_topology),
        ("node-1", Some(topo("node-1")))
    );

    // Placement follows `preferred`; capacity of that node drops by the volume size.
    let created = controller
        .create_volume(create_request("pvc-1", 3 * GI, "node-2"))
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(created.accessible_topology, vec![topo("node-2")]);
    assert_eq!(created.capacity_bytes, 3 * GI);
    let cap = controller
        .get_capacity(capacity_request("node-2"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(cap.available_capacity, 17 * GI);
    assert_eq!(cap.maximum_volume_size, Some(1 << 50), "reported verbatim");

    // A fault written while the driver runs hits the next call only (times = 1).
    set_faults(
        &faults,
        json!({"CreateVolume": {"code": "Unavailable", "message": "injected outage", "times": 1}}),
    );
    let err = controller
        .create_volume(create_request("pvc-2", GI, "node-1"))
        .await
        .unwrap_err();
    assert_eq!(
        (err.code(), err.message()),
        (Code::Unavailable, "injected outage")
    );
    let second = controller
        .create_volume(create_request("pvc-2", GI, "node-1"))
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(second.accessible_topology, vec![topo("node-1")]);

    // Too big for every node: RESOURCE_EXHAUSTED names the largest free space.
    let err = controller
        .create_volume(create_request("pvc-3", 18 * GI, "node-2"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert!(err.message().contains(&(17 * GI).to_string()), "{err:?}");

    controller
        .delete_volume(DeleteVolumeRequest {
            volume_id: created.volume_id.clone(),
            secrets: HashMap::new(),
        })
        .await
        .unwrap();
    let cap = controller
        .get_capacity(capacity_request("node-2"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(cap.available_capacity, 20 * GI, "delete frees the space");

    let status = driver.terminate();
    assert!(status.success(), "SIGTERM is a clean exit: {status}");
    assert!(!driver.socket.exists(), "socket removed on shutdown");
    assert!(
        !driver.stderr().contains(SECRET),
        "stderr must not show secrets"
    );

    let log = call_log(&calls);
    let methods: Vec<&str> = log.iter().map(|l| l["method"].as_str().unwrap()).collect();
    assert_eq!(
        methods,
        [
            "GetPluginInfo",
            "GetPluginCapabilities",
            "NodeGetInfo",
            "CreateVolume",
            "GetCapacity",
            "CreateVolume",
            "CreateVolume",
            "CreateVolume",
            "DeleteVolume",
            "GetCapacity"
        ]
    );
    for line in &log {
        let time = line["time"].as_str().unwrap();
        assert!(
            time.parse::<jiff::Timestamp>().is_ok() && time.ends_with('Z'),
            "{time}"
        );
        assert_eq!(
            time.split('.').nth(1).map(str::len),
            Some(4),
            "millis + Z: {time}"
        );
    }
    let first_create = &log[3];
    assert_eq!(first_create["request"]["name"], "pvc-1");
    assert_eq!(
        first_create["request"]["secrets"]["password"], SECRET,
        "test driver records secrets"
    );
    assert_eq!(
        first_create["request"]["accessibility_requirements"]["preferred"],
        json!([{"segments": {NODE_KEY: "node-2"}}])
    );
    assert_eq!(first_create["response"]["volume"]["capacity_bytes"], 3 * GI);
    assert_eq!(
        first_create["response"]["volume"]["volume_id"],
        created.volume_id.as_str()
    );
    assert_eq!(log[4]["response"]["maximum_volume_size"], 1_i64 << 50);
    assert_eq!(
        log[5]["error"],
        json!({"code": "Unavailable", "message": "injected outage"})
    );
    assert!(log[5].get("response").is_none());
    assert_eq!(log[7]["error"]["code"], "ResourceExhausted");
}

#[tokio::test]
async fn delay_only_fault_then_normal_answer() {
    let dir = tempfile::tempdir().unwrap();
    let faults = dir.path().join("faults.json");
    let driver = Driver::start(dir.path(), &[format!("--faults={}", faults.display())]);
    let mut controller = ControllerClient::new(driver.channel().await);
    set_faults(&faults, json!({"GetCapacity": {"delay_ms": 50}}));
    // No timing assertion: the call still answers normally after the delay.
    let cap = controller
        .get_capacity(GetCapacityRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(cap.available_capacity, 1 << 50, "default pool is 1Pi");
    assert_eq!(cap.maximum_volume_size, None);
}

/// A caller that gives up (a deadline, a killed provisioner) does not stop the call: the
/// volume is made and the call logged, as a real driver's backend would.
#[tokio::test]
async fn a_call_whose_caller_gave_up_still_makes_its_volume() {
    let dir = tempfile::tempdir().unwrap();
    let faults = dir.path().join("faults.json");
    let log = dir.path().join("calls.jsonl");
    let driver = Driver::start(
        dir.path(),
        &[
            format!("--faults={}", faults.display()),
            format!("--call-log={}", log.display()),
        ],
    );
    set_faults(&faults, json!({"CreateVolume": {"delay_ms": 1000}}));
    let mut controller = ControllerClient::new(driver.channel().await);
    let request = CreateVolumeRequest {
        accessibility_requirements: None,
        ..create_request("abandoned", GI, "")
    };
    let gave_up = tokio::time::timeout(
        std::time::Duration::from_millis(100),
        controller.create_volume(request),
    )
    .await;
    assert!(
        gave_up.is_err(),
        "the caller stops waiting before the delay ends"
    );
    drop(controller);
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let mut controller = ControllerClient::new(driver.channel().await);
    let listed = controller
        .list_volumes(ListVolumesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.entries.len(), 1, "{listed:?}");
    let creates: Vec<Value> = call_log(&log)
        .into_iter()
        .filter(|c| c["method"] == "CreateVolume")
        .collect();
    assert_eq!(creates.len(), 1);
    assert_eq!(creates[0]["request"]["name"], "abandoned");
    assert!(
        creates[0]["response"]["volume"]["volume_id"].is_string(),
        "{creates:?}"
    );
}

/// While a call works on a volume, a second CreateVolume or DeleteVolume for it answers
/// ABORTED at once (and uses up no fault); other volumes go on, and so does the same volume
/// once the first call is done.
#[tokio::test]
async fn a_second_call_for_a_busy_volume_is_aborted() {
    let dir = tempfile::tempdir().unwrap();
    let faults = dir.path().join("faults.json");
    let driver = Driver::start(dir.path(), &[format!("--faults={}", faults.display())]);
    set_faults(
        &faults,
        json!({"CreateVolume": {"delay_ms": 1000, "times": 1}}),
    );
    let no_topology = |name: &str| CreateVolumeRequest {
        accessibility_requirements: None,
        ..create_request(name, GI, "")
    };
    let mut first = ControllerClient::new(driver.channel().await);
    let mut second = ControllerClient::new(driver.channel().await);
    let mut controller = ControllerClient::new(driver.channel().await);
    // Whichever reaches the driver first takes the one-second delay; the other comes while
    // it waits.
    let one = tokio::spawn(async move { first.create_volume(no_topology("busy")).await });
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let two = tokio::spawn(async move { second.create_volume(no_topology("busy")).await });
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    // Another volume is not held up.
    let other = controller
        .create_volume(no_topology("other"))
        .await
        .unwrap()
        .into_inner();
    let (one, two) = (one.await.unwrap(), two.await.unwrap());
    let (made, aborted) = match (one, two) {
        (Ok(made), Err(aborted)) | (Err(aborted), Ok(made)) => (made, aborted),
        other => panic!("one answer and one ABORTED expected: {other:?}"),
    };
    assert_eq!(aborted.code(), Code::Aborted, "{aborted:?}");
    assert!(aborted.message().contains("busy"), "{aborted:?}");
    let made = made.into_inner().volume.unwrap();
    // Done: the same name answers with the same volume, and it can be deleted.
    let same = controller
        .create_volume(no_topology("busy"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(same.volume.unwrap().volume_id, made.volume_id);
    controller
        .delete_volume(DeleteVolumeRequest {
            volume_id: made.volume_id,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(other.volume.is_some());
}

/// `reply` faults: the volume really exists, the answer (and the call log) lies, only for
/// requests whose parameters match.
#[tokio::test]
async fn reply_faults_rewrite_matching_answers() {
    let dir = tempfile::tempdir().unwrap();
    let faults = dir.path().join("faults.json");
    let log = dir.path().join("calls.jsonl");
    let driver = Driver::start(
        dir.path(),
        &[
            format!("--faults={}", faults.display()),
            format!("--call-log={}", log.display()),
        ],
    );
    let mut controller = ControllerClient::new(driver.channel().await);
    set_faults(
        &faults,
        json!({
            "CreateVolume": {"match_parameters": {"case": "lie"}, "times": 1,
                             "reply": {"volume_id": "", "capacity_bytes": -1}},
            "GetCapacity": {"reply": {"available_capacity": -5}},
        }),
    );
    let request = |name: &str, case: &str| CreateVolumeRequest {
        name: name.into(),
        parameters: HashMap::from([("case".to_owned(), case.to_owned())]),
        volume_capabilities: create_request(name, GI, "").volume_capabilities,
        ..Default::default()
    };
    let lie = controller
        .create_volume(request("a", "lie"))
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap();
    assert_eq!((lie.volume_id.as_str(), lie.capacity_bytes), ("", -1));
    // The retry (times used up) and other parameters get the truth: one volume, made once.
    let truth = controller
        .create_volume(request("a", "lie"))
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(
        (truth.volume_id.as_str(), truth.capacity_bytes),
        ("mock-vol-0", GI)
    );
    let other = controller
        .create_volume(request("b", "honest"))
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(other.capacity_bytes, GI);
    let cap = controller
        .get_capacity(GetCapacityRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(cap.available_capacity, -5);
    let logged = call_log(&log);
    assert_eq!(logged[0]["response"]["volume"]["capacity_bytes"], json!(-1));
    assert!(logged[0]["response"]["volume"].get("volume_id").is_none());
}

#[test]
fn bad_flag_exits_2_with_one_line_naming_it() {
    let out = Command::new(env!("CARGO_BIN_EXE_mock-csi-driver"))
        .args(["--endpoint=/tmp/never.sock", "--pool=fast@node=a"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--pool") && stderr.contains("[KIND@]SEGMENT:SIZE"),
        "{stderr}"
    );
}

/// SIGUSR1: the socket goes away (the open connection is dropped, the file removed) for
/// `--socket-outage-ms`, then comes back with the volumes made before.
#[tokio::test]
async fn sigusr1_takes_the_socket_away_and_brings_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let driver = Driver::start(dir.path(), &["--socket-outage-ms=1500".into()]);
    let mut controller = ControllerClient::new(driver.channel().await);
    let request = CreateVolumeRequest {
        accessibility_requirements: None,
        ..create_request("kept", GI, "")
    };
    controller.create_volume(request).await.unwrap();

    let pid = driver.child.id().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-USR1", &pid])
        .status();
    assert!(sent.is_ok_and(|s| s.success()));
    let gone = wait_for(|| !driver.socket.exists()).await;
    assert!(gone, "socket file still there: {}", driver.stderr());
    let back = wait_for(|| std::os::unix::net::UnixStream::connect(&driver.socket).is_ok()).await;
    assert!(back, "socket never came back: {}", driver.stderr());
    let mut controller = ControllerClient::new(driver.channel().await);
    let listed = controller
        .list_volumes(ListVolumesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.entries.len(), 1, "the volume survived: {listed:?}");
}

/// Polls `ok` for up to 10 s.
async fn wait_for(ok: impl Fn() -> bool) -> bool {
    for _ in 0..200 {
        if ok() {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    false
}
