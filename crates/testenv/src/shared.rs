//! One control plane per test process, started on first use and killed at exit; and, for
//! groups of tests that must not share it, one more per group name.

use std::sync::{Mutex, Once, OnceLock};

use crate::{ControlPlane, ControlPlaneOptions};

type Cell = OnceLock<Result<ControlPlane, String>>;

static SHARED: Cell = OnceLock::new();
/// The groups' control planes by name (a handful per process, so a list).
static GROUPS: Mutex<Vec<(&'static str, &'static Cell)>> = Mutex::new(Vec::new());
static TEARDOWN: Once = Once::new();

/// Set to a `cargo xtask cluster up` directory to run tests against that cluster.
pub const CLUSTER_ENV: &str = "TESTENV_CLUSTER";

/// The process-wide control plane (no fake nodes; tests create what they need, isolated by
/// namespace and by unique cluster-scoped names).
///
/// Started on first use from a dedicated thread and runtime, so it may be called from sync
/// code and from inside any tokio runtime. Torn down by an `atexit` handler when the test
/// binary exits, and by PDEATHSIG if it is killed. With `TESTENV_CLUSTER=<dir>` set, attaches
/// to the cluster `cargo xtask cluster up --dir <dir>` started instead (relative paths are
/// relative to the workspace root), and leaves it running.
///
/// # Panics
/// When the control plane cannot start (every caller gets the same message, with log tails).
pub(crate) fn get() -> &'static ControlPlane {
    get_in(&SHARED)
}

/// The control plane of test group `name`, as [`get`] but its own: for tests that run
/// something acting on the whole cluster (a snapshot controller watches every namespace),
/// which the other tests of the process must not meet. With `TESTENV_CLUSTER` set, the
/// attached cluster, as for [`get`].
pub(crate) fn get_group(name: &'static str) -> &'static ControlPlane {
    let cell = {
        let mut groups = GROUPS.lock().unwrap_or_else(|e| e.into_inner());
        match groups.iter().find(|(n, _)| *n == name) {
            Some((_, cell)) => *cell,
            None => {
                // Leaked on purpose: it lives as long as the process, like `SHARED`.
                let cell: &'static Cell = Box::leak(Box::new(OnceLock::new()));
                groups.push((name, cell));
                cell
            }
        }
    };
    get_in(cell)
}

fn get_in(cell: &'static Cell) -> &'static ControlPlane {
    let result = cell.get_or_init(|| {
        if let Some(dir) = std::env::var_os(CLUSTER_ENV).filter(|d| !d.is_empty()) {
            let dir = crate::workspace_root().join(dir);
            return ControlPlane::attach(&dir).map_err(|e| format!("{CLUSTER_ENV}: {e}"));
        }
        let started = std::thread::Builder::new()
            .name("testenv-start".into())
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("tokio runtime: {e}"))?;
                runtime
                    .block_on(ControlPlane::start(ControlPlaneOptions::default()))
                    .map_err(|e| e.to_string())
            })
            .map_err(|e| format!("starting thread: {e}"))
            .and_then(|h| {
                h.join()
                    .map_err(|_| "control-plane start panicked".to_string())
            })
            .and_then(|r| r);
        if let Ok(cp) = &started {
            TEARDOWN.call_once(|| {
                // SAFETY: registering a plain extern "C" function; it only reads the cells.
                unsafe {
                    libc::atexit(teardown);
                }
            });
            eprintln!(
                "testenv: control plane ready in {:.1}s at {}, logs in {}",
                cp.startup_time().as_secs_f64(),
                cp.server_url(),
                cp.log_dir().display()
            );
        }
        started
    });
    match result {
        Ok(cp) => cp,
        Err(e) => panic!("testenv: shared control plane failed to start: {e}"),
    }
}

extern "C" fn teardown() {
    if let Some(Ok(cp)) = SHARED.get() {
        cp.kill_all_now();
    }
    // try_lock: an exit while another thread holds the list must not hang; a group started
    // then is still killed by PDEATHSIG.
    if let Ok(groups) = GROUPS.try_lock() {
        for (_, cell) in groups.iter() {
            if let Some(Ok(cp)) = cell.get() {
                cp.kill_all_now();
            }
        }
    }
}
