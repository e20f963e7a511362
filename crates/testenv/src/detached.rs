//! Control planes left running by `cargo xtask cluster up`: the pid file and teardown.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::Error;
use crate::error::IoContext;
use crate::process::Process;

const PID_FILE: &str = "pids";
/// Everything in a cluster directory except `logs/`.
const STATE: &[&str] = &["etcd", "pki", "kubeconfig", PID_FILE];

/// One line of the pid file: a process this directory's command started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Recorded {
    pub name: String,
    pub pid: u32,
    /// Its start time (clock ticks after boot, `/proc/<pid>/stat` field 22): with the pid,
    /// it names the process, not whatever reuses the pid later. `None` in files written
    /// before it was recorded.
    pub start: Option<u64>,
}

impl Recorded {
    pub(crate) fn of(process: &Process) -> Recorded {
        Recorded {
            name: process.name().to_string(),
            pid: process.pid(),
            start: process.start_time(),
        }
    }
}

/// `<pid> <start time> <name>` per line (`<pid> <name>` when the start time is unknown).
pub(crate) fn render_pids(pids: &[Recorded]) -> String {
    pids.iter()
        .map(|r| match r.start {
            Some(start) => format!("{} {start} {}\n", r.pid, r.name),
            None => format!("{} {}\n", r.pid, r.name),
        })
        .collect()
}

pub(crate) fn parse_pids(path: &Path, text: &str) -> Result<Vec<Recorded>, Error> {
    let bad = |line: usize, reason: &str| Error::PidFile {
        path: path.to_path_buf(),
        line,
        reason: reason.to_string(),
    };
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (pid, start, name) = match fields[..] {
            [] => continue,
            [pid, name] => (pid, None, name),
            [pid, start, name] => (pid, Some(start), name),
            _ => return Err(bad(i + 1, "want `<pid> <start time> <name>`")),
        };
        let pid: u32 = pid.parse().map_err(|_| bad(i + 1, "pid is not a number"))?;
        if pid <= 1 {
            return Err(bad(i + 1, "pid must be greater than 1"));
        }
        let start = start
            .map(|s| s.parse::<u64>())
            .transpose()
            .map_err(|_| bad(i + 1, "start time is not a number"))?;
        out.push(Recorded {
            name: name.to_string(),
            pid,
            start,
        });
    }
    Ok(out)
}

pub(crate) fn read_pids(dir: &Path) -> Result<Vec<Recorded>, Error> {
    let path = dir.join(PID_FILE);
    match fs::read_to_string(&path) {
        Ok(text) => parse_pids(&path, &text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(Error::io(format!("reading {}", path.display()), e)),
    }
}

/// Whether the recorded process still runs: same pid and start time, and not a zombie
/// (a detached child of a command that has not exited yet stays one until that command
/// ends). Lines without a start time fall back to the program name: argv[0] ends in `name`.
fn is_ours(r: &Recorded) -> bool {
    match r.start {
        Some(start) => crate::process::proc_stat(r.pid)
            .is_some_and(|(state, started)| started == start && !matches!(state, 'Z' | 'X')),
        None => argv0_is(r.pid, &r.name),
    }
}

fn argv0_is(pid: u32, name: &str) -> bool {
    let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
    let argv0 = String::from_utf8_lossy(argv0);
    Path::new(argv0.as_ref())
        .file_name()
        .is_some_and(|f| f == name)
}

/// Whether any process recorded in `<dir>/pids` still runs.
pub fn is_running(dir: &Path) -> Result<bool, Error> {
    Ok(read_pids(dir)?.iter().any(is_ours))
}

/// Stops a cluster started by `cargo xtask cluster up` (and whatever was recorded with it):
/// SIGTERM to each recorded process group, SIGKILL after 10 s, then removes the runtime
/// state (keeps `logs/`). Returns the names of the processes that were running.
pub fn stop_detached(dir: &Path) -> Result<Vec<String>, Error> {
    let pids = read_pids(dir)?;
    let live: Vec<Recorded> = pids.into_iter().filter(is_ours).collect();
    signal_all(&live, libc::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(10);
    while live.iter().any(is_ours) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let stubborn: Vec<Recorded> = live.iter().filter(|r| is_ours(r)).cloned().collect();
    signal_all(&stubborn, libc::SIGKILL);
    remove_state(dir)?;
    Ok(live.into_iter().map(|r| r.name).collect())
}

fn signal_all(pids: &[Recorded], signal: libc::c_int) {
    for r in pids.iter().rev() {
        // SAFETY: plain syscalls; each pid leads its own session and group (setsid), and
        // was checked to be the recorded process just before.
        unsafe {
            libc::kill(-(r.pid as libc::pid_t), signal);
        }
    }
}

/// Deletes the runtime state of a cluster directory, keeping its logs.
pub(crate) fn remove_state(dir: &Path) -> Result<(), Error> {
    for entry in STATE {
        let path: PathBuf = dir.join(entry);
        let result = if path.is_dir() {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        match result {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).ctx(|| format!("removing {}", path.display())),
        }
    }
    Ok(())
}

/// Adds a process started with [`crate::spawn_detached`] (e.g. the demo's driver and
/// provisioner) to `<dir>/pids` by pid and start time, then lets it run on: from then on
/// [`stop_detached`] stops it with the cluster. Returns its pid. Recorded before it is
/// disowned, so an interrupt in between still finds it (in the file or among the owned).
pub fn record_detached(dir: &Path, process: Process) -> Result<u32, Error> {
    append_pid(&dir.join(PID_FILE), &Recorded::of(&process))?;
    Ok(process.disown())
}

pub(crate) fn append_pid(path: &Path, r: &Recorded) -> Result<(), Error> {
    use std::io::Write;
    let mut file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .ctx(|| format!("opening {}", path.display()))?;
    file.write_all(render_pids(std::slice::from_ref(r)).as_bytes())
        .ctx(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(name: &str, pid: u32, start: Option<u64>) -> Recorded {
        Recorded {
            name: name.to_string(),
            pid,
            start,
        }
    }

    #[test]
    fn pid_file_round_trip() {
        let pids = vec![
            rec("etcd", 100, Some(5_000)),
            rec("hostpathplugin-node-1", 101, Some(5_010)),
            rec("kube-apiserver", 102, None),
        ];
        let text = render_pids(&pids);
        assert_eq!(
            text,
            "100 5000 etcd\n101 5010 hostpathplugin-node-1\n102 kube-apiserver\n"
        );
        assert_eq!(parse_pids(Path::new("p"), &text).expect("parses"), pids);
    }

    #[test]
    fn pid_file_errors() {
        let cases = [
            ("abc etcd\n", 1, "not a number"),
            ("100 etcd\n\n1 init\n", 3, "greater than 1"),
            ("100\n", 1, "<pid> <start time> <name>"),
            ("100 x etcd\n", 1, "start time is not a number"),
            ("100 1 etcd extra\n", 1, "<pid> <start time> <name>"),
        ];
        for (text, line, reason) in cases {
            let err = parse_pids(Path::new("p"), text).expect_err(text);
            let msg = err.to_string();
            assert!(msg.contains(&format!("line {line}")), "{text:?}: {msg}");
            assert!(msg.contains(reason), "{text:?}: {msg}");
        }
    }

    #[test]
    fn only_live_matching_processes_count_as_ours() {
        let me = std::process::id();
        let exe = std::env::current_exe().expect("exe");
        let argv0 = exe
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let (_, started) = crate::process::proc_stat(me).expect("own stat");
        // A zombie: our child, exited, not reaped.
        let mut child = std::process::Command::new("true").spawn().expect("true");
        let zombie = child.id();
        let (_, zombie_started) = crate::process::proc_stat(zombie).expect("child stat");
        let deadline = Instant::now() + Duration::from_secs(10);
        while crate::process::proc_stat(zombie).is_some_and(|(state, _)| state != 'Z') {
            assert!(Instant::now() < deadline, "`true` did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
        let cases = [
            // The recorded name need not be the program's: the demo's were not (issue 50).
            (rec("hostpathplugin-node-1", me, Some(started)), true),
            (rec(&argv0, me, Some(started + 1)), false),
            (rec(&argv0, me, None), true),
            (rec("kube-apiserver", me, None), false),
            (rec(&argv0, u32::MAX - 1, None), false),
            (rec("x", u32::MAX - 1, Some(started)), false),
            (rec("true", zombie, Some(zombie_started)), false),
            (rec("true", zombie, None), false),
        ];
        for (r, want) in cases {
            assert_eq!(is_ours(&r), want, "{r:?}");
        }
        child.wait().expect("reap");
    }

    #[test]
    fn remove_state_keeps_logs() {
        let dir = std::env::temp_dir().join(format!("testenv-state-{}", std::process::id()));
        fs::create_dir_all(dir.join("logs")).expect("mkdir");
        fs::create_dir_all(dir.join("etcd/member")).expect("mkdir");
        fs::write(dir.join("kubeconfig"), "x").expect("write");
        fs::write(dir.join("logs/etcd.log"), "x").expect("write");
        remove_state(&dir).expect("removes");
        assert!(!dir.join("etcd").exists());
        assert!(!dir.join("kubeconfig").exists());
        assert!(dir.join("logs/etcd.log").exists());
        fs::remove_dir_all(&dir).expect("cleanup");
    }
}
