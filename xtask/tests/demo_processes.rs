//! `cargo xtask demo --driver hostpath`, the distributed form (a control plane, three
//! `hostpathplugin`s and three `--node-deployment` csi-provisioners), run as the real command:
//! nothing it started outlives it, neither after it finishes nor after a SIGINT mid-run
//! (issue 50 item 0: it used to leave its six driver and provisioner processes running). And
//! its `--real-node` form, whose pods really run.
//!
//! Needs `cargo build --workspace --bins` first (the demo runs target/debug/csi-provisioner)
//! and TESTENV_BIN; `--no-build` keeps the demo from building anything itself.

// The workspace denies unsafe code; these tests send signals through libc (SIGINT to the demo,
// SIGKILL to leftovers). Every block carries a SAFETY comment.
#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Every process whose command line names `dir` (all the demo starts get paths in it: etcd's
/// data, the kubeconfig, the plugins' state), except `skip`: pid and program name.
fn started_in(dir: &Path, skip: Option<u32>) -> Vec<(u32, String)> {
    let needle = dir.to_string_lossy().into_owned();
    testenv::host_processes()
        .into_iter()
        .filter(|p| Some(p.pid) != skip && p.args.iter().any(|a| a.contains(&needle)))
        .map(|p| {
            let program = p
                .args
                .first()
                .and_then(|a| Path::new(a).file_name())
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            (p.pid, program)
        })
        .collect()
}

fn count_by_program(procs: &[(u32, String)]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for (_, program) in procs {
        *counts.entry(program.clone()).or_default() += 1;
    }
    counts
}

/// Kills whatever a failed test left behind (only processes naming its own temporary
/// directory, so never anyone else's), the demo first.
struct Cleanup<'a> {
    dir: &'a Path,
    demo: Option<Child>,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        if let Some(demo) = self.demo.as_mut() {
            let _ = demo.kill();
            let _ = demo.wait();
        }
        for (pid, _) in started_in(self.dir, None) {
            // SAFETY: plain syscall on a process that names our temporary directory.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
        }
    }
}

fn demo_command(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xtask"));
    cmd.args(["demo", "--driver", "hostpath", "--no-build", "--dir"])
        .arg(dir)
        .stdin(Stdio::null());
    cmd
}

/// Runs the demo with `args` added to completion: its stdout, after checking it succeeded.
fn run_demo(dir: &Path, args: &[&str]) -> String {
    let out = demo_command(dir)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("running cargo xtask demo");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "demo failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    stdout
}

fn wait_exit(child: &mut Child, timeout: Duration) -> ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("waiting for the demo") {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "the demo did not exit within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Processes gone after their group got SIGTERM may take a moment to leave /proc.
fn left_over(dir: &Path) -> Vec<(u32, String)> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let left = started_in(dir, None);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

const STARTED: &[&str] = &[
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "hostpathplugin-node-1",
    "hostpathplugin-node-2",
    "hostpathplugin-node-3",
    "csi-provisioner-node-1",
    "csi-provisioner-node-2",
    "csi-provisioner-node-3",
];

#[test]
#[ignore = "needs the control plane: cargo xtask test"]
fn demo_stops_every_process_it_started() {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let dir = tmp.path().join("demo");
    let mut cleanup = Cleanup {
        dir: &dir,
        demo: None,
    };
    let stdout = run_demo(&dir, &[]);
    let left = left_over(&dir);
    assert_eq!(
        left.len(),
        0,
        "processes left running after the demo: {:?}",
        count_by_program(&left)
    );
    assert!(
        stdout.contains(&format!(
            "stopped {} processes: {}",
            STARTED.len(),
            STARTED.join(", ")
        )),
        "the demo did not report stopping the ten processes it started:\n{stdout}"
    );
    cleanup.demo = None;
}

#[test]
#[ignore = "needs the control plane: cargo xtask test"]
fn interrupted_demo_stops_every_process_it_started() {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let dir = tmp.path().join("demo");
    let stderr_path = tmp.path().join("demo.stderr");
    let stderr = fs::File::create(&stderr_path).expect("stderr file");
    let mut cleanup = Cleanup {
        dir: &dir,
        demo: None,
    };
    let mut demo = demo_command(&dir)
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("starting cargo xtask demo");
    let stdout = demo.stdout.take().expect("stdout");
    let demo_pid = demo.id();
    cleanup.demo = Some(demo);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Interrupt once everything runs: after the demo says the provisioners are up, before
    // its story ends.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seen = String::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                seen.push_str(&line);
                seen.push('\n');
                if line.contains("one per node") {
                    break;
                }
            }
            Err(_) => panic!(
                "the demo did not start its provisioners within 120s:\n{seen}\n{}",
                fs::read_to_string(&stderr_path).unwrap_or_default()
            ),
        }
    }
    let running = count_by_program(&started_in(&dir, Some(demo_pid)));
    for program in ["hostpathplugin", "csi-provisioner"] {
        assert_eq!(
            running.get(program),
            Some(&3),
            "{program} processes while the demo runs: {running:?}"
        );
    }
    // SAFETY: plain syscall on our unreaped child.
    unsafe {
        libc::kill(demo_pid as libc::pid_t, libc::SIGINT);
    }
    let demo = cleanup.demo.as_mut().expect("demo");
    let status = wait_exit(demo, Duration::from_secs(60));
    cleanup.demo = None;
    let stderr = fs::read_to_string(&stderr_path).unwrap_or_default();
    let left = left_over(&dir);
    assert_eq!(
        left.len(),
        0,
        "processes left running after SIGINT to the demo: {:?}; stderr:\n{stderr}",
        count_by_program(&left)
    );
    assert_eq!(
        (status.code(), status.signal()),
        (Some(130), None),
        "the demo should stop what it started and exit with 130 on SIGINT; stderr:\n{stderr}"
    );
}

/// `--real-node`: the pods that fit start on the machine's real node and write into the
/// volumes we provisioned (the demo reads the files from the host); the one that does not fit
/// stays Pending with the explanation; afterwards neither the demo's processes nor anything of
/// the node is left.
#[test]
#[ignore = "needs the control plane: cargo xtask test"]
fn demo_on_the_real_node_runs_its_pods() {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let dir = tmp.path().join("demo");
    let _cleanup = Cleanup {
        dir: &dir,
        demo: None,
    };
    let stdout = run_demo(&dir, &["--real-node"]);
    for (pod, size) in [("app-1", "5Gi"), ("app-2", "10Gi")] {
        assert!(
            stdout.contains(&format!("pod {pod} with a {size} volume → real-node\n")),
            "{pod} was not placed on the real node:\n{stdout}"
        );
        assert!(
            stdout.contains(&format!("/hello says: {pod} wrote this into its volume\n")),
            "{pod}'s write is not in its volume on the host:\n{stdout}"
        );
    }
    assert_eq!(
        stdout.matches(" wrote this into its volume").count(),
        2,
        "exactly the two pods that fit ran:\n{stdout}"
    );
    assert!(
        stdout.contains("pod app-3 with a 10Gi volume → Pending: no node has room"),
        "the third claim should find only the 5Gi the first two left:\n{stdout}"
    );
    assert!(
        stdout.contains("real node torn down: kubelet, containerd and "),
        "{stdout}"
    );
    let left = left_over(&dir);
    assert!(
        left.is_empty(),
        "processes left running after the demo: {:?}",
        count_by_program(&left)
    );
    let node = testenv::node::leftovers(&testenv::node::NodeLayout::default());
    assert!(node.is_empty(), "the real node left behind: {node:?}");
}
