//! Run directories of live control planes: where they go, pruning of old ones, and a panic
//! hook that points a failing test at the logs.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::Error;
use crate::error::IoContext;
use crate::flags::COMPONENTS;

/// How many old run directories (logs) to keep under `<target>/testenv-runs`.
const KEEP_RUNS: usize = 20;

static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn register(dir: &Path) {
    install_panic_hook();
    live().push(dir.to_path_buf());
}

pub(crate) fn unregister(dir: &Path) {
    live().retain(|d| d != dir);
}

/// On any panic (a failed assertion) while a control plane is up, print where its logs are.
fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            previous(info);
            // try_lock: never deadlock inside a panic.
            if let Ok(dirs) = LIVE.try_lock() {
                for dir in dirs.iter() {
                    eprintln!("testenv: control-plane logs: {}", log_paths(dir).join(" "));
                }
            }
        }));
    });
}

fn log_paths(dir: &Path) -> Vec<String> {
    COMPONENTS
        .iter()
        .map(|c| {
            dir.join("logs")
                .join(format!("{c}.log"))
                .display()
                .to_string()
        })
        .collect()
}

/// A new directory `<target>/testenv-runs/<program>-<unix secs>-p<pid>`, after pruning old ones.
pub(crate) fn new_run_dir() -> Result<PathBuf, Error> {
    let runs = crate::target_dir().join("testenv-runs");
    fs::create_dir_all(&runs).ctx(|| format!("creating {}", runs.display()))?;
    prune(&runs);
    let program = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "test".into());
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let pid = std::process::id();
    // Several control planes in one process need distinct directories.
    let mut n = 0;
    loop {
        let dir = runs.join(run_dir_name(&program, secs, pid, n));
        match fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
            Err(e) => return Err(Error::io(format!("creating {}", dir.display()), e)),
        }
    }
}

fn run_dir_name(program: &str, secs: u64, pid: u32, n: u32) -> String {
    // Test binaries are named `<name>-<16 hex hash>`; the hash only makes names long.
    let short = match program.rsplit_once('-') {
        Some((stem, hash)) if hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()) => {
            stem
        }
        _ => program,
    };
    if n == 0 {
        format!("{short}-{secs}-p{pid}")
    } else {
        format!("{short}-{secs}-p{pid}-{n}")
    }
}

/// The pid encoded in a run directory name (the `p<pid>` part), if any.
fn run_dir_pid(name: &str) -> Option<u32> {
    name.rsplit('-').find_map(|part| {
        part.strip_prefix('p')
            .and_then(|digits| digits.parse().ok())
    })
}

/// Deletes all but the newest [`KEEP_RUNS`] run directories whose process is gone.
fn prune(runs: &Path) {
    let Ok(entries) = fs::read_dir(runs) else {
        return;
    };
    let mut dirs: Vec<(SystemTime, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let modified = e.metadata().ok()?.modified().ok()?;
            Some((modified, e.path()))
        })
        .collect();
    dirs.sort_by_key(|d| std::cmp::Reverse(d.0));
    for (_, dir) in dirs.into_iter().skip(KEEP_RUNS) {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let alive =
            run_dir_pid(&name).is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
        if !alive {
            let _ = fs::remove_dir_all(&dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_dir_names_drop_the_cargo_hash() {
        let cases = [
            (
                "control_plane-0123456789abcdef",
                10,
                42,
                0,
                "control_plane-10-p42",
            ),
            (
                "control_plane-0123456789abcdef",
                10,
                42,
                2,
                "control_plane-10-p42-2",
            ),
            ("xtask", 10, 42, 0, "xtask-10-p42"),
            ("my-tool", 10, 42, 0, "my-tool-10-p42"),
        ];
        for (program, secs, pid, n, want) in cases {
            assert_eq!(run_dir_name(program, secs, pid, n), want, "{program}");
        }
    }

    #[test]
    fn run_dir_pid_round_trips() {
        let cases = [
            ("control_plane-10-p42", Some(42)),
            ("control_plane-10-p42-2", Some(42)),
            ("my-tool-10-p42", Some(42)),
            ("cluster", None),
            ("pods-10-p", None),
        ];
        for (name, want) in cases {
            assert_eq!(run_dir_pid(name), want, "{name}");
        }
    }
}
