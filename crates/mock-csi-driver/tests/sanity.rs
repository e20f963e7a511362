//! The real Go `csi-sanity` (csi-test v5.5.0) against the built driver with topology pools.
//! Only the Node Service suite is skipped: the driver serves no node staging or publishing.

mod common;

use common::Driver;

#[test]
#[ignore = "needs the control plane: cargo xtask test"]
fn csi_sanity_passes() {
    let dir = tempfile::tempdir().unwrap();
    let driver = Driver::start(
        dir.path(),
        &[
            "--pool=topology.mock.csi/node=node-1:1Ti".into(),
            "--pool=topology.mock.csi/node=node-2:1Ti".into(),
            "--node-id=node-1".into(),
            "--node-topology=topology.mock.csi/node=node-1".into(),
            // So that csi-sanity's clone tests run too.
            "--clone-volume".into(),
            format!("--call-log={}", dir.path().join("calls.jsonl").display()),
        ],
    );
    let run = testenv::run_csi_sanity(&driver.socket, dir.path(), Some("Node Service"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        run.success,
        "csi-sanity failed:\n{}\ndriver log:\n{}",
        run.output,
        driver.stderr()
    );
    // Guard against a vacuous pass (e.g. everything skipped by a filter).
    assert!(
        !run.summary.is_empty() && !run.summary.contains(" 0 Passed"),
        "csi-sanity ran nothing: {}\n{}",
        run.summary,
        run.output
    );
    eprintln!("csi-sanity: {}", run.summary);
}
