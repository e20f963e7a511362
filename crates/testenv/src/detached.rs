//! Control planes left running by `cargo xtask cluster up`: the pid file and teardown.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::Error;
use crate::error::IoContext;

const PID_FILE: &str = "pids";
/// Everything in a cluster directory except `logs/`.
const STATE: &[&str] = &["etcd", "pki", "kubeconfig", PID_FILE];

/// `<pid> <name>` per line.
pub(crate) fn render_pids(pids: &[(String, u32)]) -> String {
    pids.iter()
        .map(|(name, pid)| format!("{pid} {name}\n"))
        .collect()
}

pub(crate) fn parse_pids(path: &Path, text: &str) -> Result<Vec<(String, u32)>, Error> {
    let bad = |line: usize, reason: &str| Error::PidFile {
        path: path.to_path_buf(),
        line,
        reason: reason.to_string(),
    };
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let (pid, name) = line
            .split_once(' ')
            .ok_or_else(|| bad(i + 1, "want `<pid> <name>`"))?;
        let pid: u32 = pid.parse().map_err(|_| bad(i + 1, "pid is not a number"))?;
        if pid <= 1 {
            return Err(bad(i + 1, "pid must be greater than 1"));
        }
        out.push((name.trim().to_string(), pid));
    }
    Ok(out)
}

pub(crate) fn read_pids(dir: &Path) -> Result<Vec<(String, u32)>, Error> {
    let path = dir.join(PID_FILE);
    match fs::read_to_string(&path) {
        Ok(text) => parse_pids(&path, &text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(Error::io(format!("reading {}", path.display()), e)),
    }
}

/// Whether `pid` is alive and still the program we started (its argv[0] ends in `name`),
/// so a recycled pid is never signalled.
fn is_ours(pid: u32, name: &str) -> bool {
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
    Ok(read_pids(dir)?
        .iter()
        .any(|(name, pid)| is_ours(*pid, name)))
}

/// Stops a cluster started by `cargo xtask cluster up`: SIGTERM to each recorded process
/// group, SIGKILL after 10 s, then removes the runtime state (keeps `logs/`). Returns the
/// names of the processes that were running.
pub fn stop_detached(dir: &Path) -> Result<Vec<String>, Error> {
    let pids = read_pids(dir)?;
    let live: Vec<(String, u32)> = pids.into_iter().filter(|(n, p)| is_ours(*p, n)).collect();
    signal_all(&live, libc::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(10);
    while live.iter().any(|(n, p)| is_ours(*p, n)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let stubborn: Vec<(String, u32)> = live
        .iter()
        .filter(|(n, p)| is_ours(*p, n))
        .cloned()
        .collect();
    signal_all(&stubborn, libc::SIGKILL);
    remove_state(dir)?;
    Ok(live.into_iter().map(|(n, _)| n).collect())
}

fn signal_all(pids: &[(String, u32)], signal: libc::c_int) {
    for (_, pid) in pids.iter().rev() {
        // SAFETY: plain syscalls; each pid leads its own session and group (setsid).
        unsafe {
            libc::kill(-(*pid as libc::pid_t), signal);
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

/// Adds a detached process (e.g. the demo's driver and provisioner) to `<dir>/pids`, so that
/// [`stop_detached`] stops it with the cluster.
pub fn record_detached(dir: &Path, name: &str, pid: u32) -> Result<(), Error> {
    use std::io::Write;
    let path = dir.join(PID_FILE);
    let mut file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .ctx(|| format!("opening {}", path.display()))?;
    file.write_all(render_pids(&[(name.to_string(), pid)]).as_bytes())
        .ctx(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_file_round_trip() {
        let pids = vec![
            ("etcd".to_string(), 100),
            ("kube-apiserver".to_string(), 101),
        ];
        let text = render_pids(&pids);
        assert_eq!(text, "100 etcd\n101 kube-apiserver\n");
        assert_eq!(parse_pids(Path::new("p"), &text).expect("parses"), pids);
    }

    #[test]
    fn pid_file_errors() {
        let cases = [
            ("abc etcd\n", 1, "not a number"),
            ("100 etcd\n\n1 init\n", 3, "greater than 1"),
            ("100\n", 1, "<pid> <name>"),
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
        let name = exe
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        assert!(is_ours(me, &name));
        assert!(!is_ours(me, "kube-apiserver"));
        assert!(!is_ours(u32::MAX - 1, &name));
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
