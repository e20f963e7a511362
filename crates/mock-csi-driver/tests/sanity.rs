//! The real Go `csi-sanity` (csi-test v5.5.0) against the built driver with topology pools.
//! Only the Node Service suite is skipped: the driver serves no node staging or publishing.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::Driver;

/// `$TESTENV_BIN/csi-sanity`, else `<workspace>/target/testenv-bin/csi-sanity`.
fn csi_sanity() -> PathBuf {
    let dir = match std::env::var_os("TESTENV_BIN") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/testenv-bin"),
    };
    let binary = dir.join("csi-sanity");
    assert!(
        binary.is_file(),
        "csi-sanity not found at {}: run `cargo xtask test`, which builds it into \
         target/testenv-bin (or set TESTENV_BIN to a directory holding csi-sanity)",
        binary.display()
    );
    binary
}

#[test]
#[ignore = "needs the control plane: cargo xtask test"]
fn csi_sanity_passes() {
    let sanity = csi_sanity();
    let dir = tempfile::tempdir().unwrap();
    let driver = Driver::start(
        dir.path(),
        &[
            "--pool=topology.mock.csi/node=node-1:1Ti".into(),
            "--pool=topology.mock.csi/node=node-2:1Ti".into(),
            "--node-id=node-1".into(),
            "--node-topology=topology.mock.csi/node=node-1".into(),
            format!("--call-log={}", dir.path().join("calls.jsonl").display()),
        ],
    );
    let out = Command::new(sanity)
        .arg(format!("--csi.endpoint={}", driver.socket.display()))
        .arg(format!(
            "--csi.mountdir={}",
            dir.path().join("mount").display()
        ))
        .arg(format!(
            "--csi.stagingdir={}",
            dir.path().join("staging").display()
        ))
        .arg("--ginkgo.skip=Node Service")
        .arg("--ginkgo.no-color")
        .output()
        .expect("run csi-sanity");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "csi-sanity failed ({}):\n{stdout}\n{stderr}\ndriver log:\n{}",
        out.status,
        driver.stderr()
    );
    // Guard against a vacuous pass (e.g. everything skipped by a filter).
    let ran = stdout
        .lines()
        .find(|l| l.contains("Passed") && l.contains("Failed"))
        .unwrap_or_default();
    assert!(
        !ran.contains(" 0 Passed"),
        "csi-sanity ran nothing: {ran}\n{stdout}"
    );
    eprintln!("csi-sanity: {ran}");
}
