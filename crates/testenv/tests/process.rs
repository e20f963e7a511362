//! Process hygiene: children started through `testenv::spawn` never outlive their guard or
//! the test process. Needs nothing outside Rust and coreutils, so it is not ignored.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Gone, or a zombie waiting for init to reap it: either way no longer running.
fn is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

fn wait_dead(pid: u32, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !is_dead(pid) {
        assert!(
            Instant::now() < deadline,
            "{what} (pid {pid}) is still running"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("testenv-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn dropping_a_process_kills_it_and_its_group() {
    let dir = temp_dir("drop");
    let mut cmd = Command::new("sh");
    // The shell forks a grandchild and reports its pid; both must die with the guard.
    cmd.args(["-c", "sleep 1000 & echo grandchild=$!; wait"]);
    let process = testenv::spawn("sleeper", cmd, &dir);
    let pid = process.pid();
    let log = process.log_path().to_path_buf();
    assert_eq!(log, dir.join("sleeper.log"));
    let grandchild = wait_for_line(&log, "grandchild=");
    assert!(
        !is_dead(pid) && !is_dead(grandchild),
        "children should run before the drop"
    );

    drop(process);
    // The guard reaps its child, so the pid is gone at once.
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "child {pid} survived the drop"
    );
    wait_dead(grandchild, "grandchild");
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(
        text.starts_with("--- testenv: starting"),
        "log header missing: {text}"
    );
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn kill_and_wait_report_the_exit() {
    let dir = temp_dir("kill");
    let mut p = testenv::spawn("sleeper", sleep_cmd(), &dir);
    assert!(p.is_running());
    assert!(p.try_wait().expect("try_wait").is_none());
    p.kill();
    assert!(!p.is_running());

    let mut quick = testenv::spawn("quick", Command::new("true"), &dir);
    let status = quick.wait().expect("wait");
    assert!(status.success(), "{status}");
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn missing_programs_are_errors_not_zombies() {
    let dir = temp_dir("missing");
    let err = testenv::try_spawn("nope", Command::new("/no/such/program"), &dir).unwrap_err();
    assert!(err.to_string().contains("starting nope"), "{err}");
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

const CHILD_ENV: &str = "TESTENV_PDEATHSIG_CHILD";

/// Runs twice: as the test, it re-runs itself as a helper process and SIGKILLs it; as the
/// helper, it spawns `sleep` and waits forever. PDEATHSIG must take the `sleep` down.
#[test]
fn children_die_when_the_test_process_is_killed() {
    if std::env::var_os(CHILD_ENV).is_some() {
        // Spawn from a short-lived thread: PDEATHSIG must not fire when it exits.
        let dir = temp_dir("pdeathsig");
        let p = std::thread::spawn(move || testenv::spawn("sleeper", sleep_cmd(), &dir))
            .join()
            .expect("spawn thread");
        println!("SLEEP_PID={}", p.pid());
        std::thread::sleep(Duration::from_secs(1000));
        return;
    }
    let mut helper = Command::new(std::env::current_exe().expect("exe"))
        .args([
            "--exact",
            "children_die_when_the_test_process_is_killed",
            "--nocapture",
        ])
        .env(CHILD_ENV, "1")
        .stdout(Stdio::piped())
        .spawn()
        .expect("helper");
    let stdout = helper.stdout.take().expect("stdout");
    let pid: u32 = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|l| {
            l.strip_prefix("SLEEP_PID=")
                .map(|p| p.parse().expect("pid"))
        })
        .expect("helper printed no SLEEP_PID");
    // The short-lived spawning thread is gone by now; the child must still run.
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !is_dead(pid),
        "sleep died with its spawning thread instead of its process"
    );
    helper.kill().expect("SIGKILL helper");
    helper.wait().expect("reap helper");
    wait_dead(pid, "sleep started by the SIGKILLed helper");
}

fn sleep_cmd() -> Command {
    let mut cmd = Command::new("sleep");
    cmd.arg("1000");
    cmd
}

fn wait_for_line(log: &Path, prefix: &str) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(v) = text.lines().find_map(|l| l.strip_prefix(prefix)) {
            return v.trim().parse().expect("pid");
        }
        assert!(
            Instant::now() < deadline,
            "no {prefix} line in {}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
