//! Ctrl-C for commands that start processes (`cargo xtask demo`, `cluster up`, `bench`,
//! `chaos`, `test`): their children lead their own process groups or sessions, so a
//! terminal's SIGINT never reaches them, and a process killed by a signal runs no `Drop`.
//! [`stop_on_signals`] turns SIGINT, SIGTERM and SIGHUP into a teardown by recorded ids.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::Error;
use crate::detached::stop_detached;
use crate::process::{close_owned, signal_owned};

/// How long owned children get after SIGTERM before SIGKILL.
const GRACE: Duration = Duration::from_secs(5);

const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Directories whose recorded processes ([`crate::record_detached`]) an interrupt stops.
static DETACHED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn detached() -> MutexGuard<'static, Vec<PathBuf>> {
    DETACHED.lock().unwrap_or_else(|e| e.into_inner())
}

/// The write end of the pipe the signal handler reports through (-1 before
/// [`stop_on_signals`]).
static PIPE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    // SAFETY: only async-signal-safe calls (write), and errno is restored for the thread
    // this handler interrupted.
    unsafe {
        let errno = *libc::__errno_location();
        let byte = sig as u8;
        libc::write(PIPE.load(Ordering::Relaxed), (&byte as *const u8).cast(), 1);
        *libc::__errno_location() = errno;
    }
}

/// On SIGINT, SIGTERM or SIGHUP: stop every owned child's process group (SIGTERM, SIGKILL
/// after 5 s) and every process recorded in a [`DetachedGuard`]'s directory, tear down the
/// real node if this process started one, then exit with 128 + the signal's number.
///
/// A handler, not a blocked mask and `sigwait`: children inherit a signal mask across exec
/// (a blocked SIGTERM would make them deaf to it), while caught signals revert to their
/// default there. The handler only writes the signal to a pipe; a thread does the rest.
pub fn stop_on_signals() -> Result<(), Error> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::io(
            "creating the signal pipe",
            io::Error::last_os_error(),
        ));
    }
    let [read_end, write_end] = fds;
    PIPE.store(write_end, Ordering::Relaxed);
    std::thread::Builder::new()
        .name("testenv-signals".into())
        .spawn(move || {
            loop {
                let mut byte = 0u8;
                // SAFETY: reads one byte into a buffer we own from the pipe we created.
                let n = unsafe { libc::read(read_end, (&mut byte as *mut u8).cast(), 1) };
                if n == 1 {
                    let sig = libc::c_int::from(byte);
                    teardown(sig);
                    std::process::exit(128 + sig);
                }
                if n == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                    return;
                }
            }
        })
        .map_err(|e| Error::io("starting the signal thread", e))?;
    for sig in SIGNALS {
        // SAFETY: installs a handler that makes only async-signal-safe calls; the action
        // struct is ours and fully initialised.
        let rc = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(Error::io(
                format!("installing a handler for {}", signal_name(sig)),
                io::Error::last_os_error(),
            ));
        }
    }
    Ok(())
}

fn signal_name(sig: libc::c_int) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

fn teardown(sig: libc::c_int) {
    eprintln!(
        "\n{}: stopping every process this command started",
        signal_name(sig)
    );
    let groups = close_owned();
    signal_owned(&groups, libc::SIGTERM);
    for dir in detached().iter() {
        match stop_detached(dir) {
            Ok(stopped) if !stopped.is_empty() => {
                eprintln!("stopped {} ({})", stopped.join(", "), dir.display())
            }
            Ok(_) => {}
            Err(e) => eprintln!("stopping the processes recorded in {}: {e}", dir.display()),
        }
    }
    let deadline = Instant::now() + GRACE;
    while signal_owned(&groups, 0) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    signal_owned(&groups, libc::SIGKILL);
    if crate::node::started_here() {
        match crate::node::teardown_leftovers() {
            Ok(removed) => eprintln!("real node torn down ({removed:?})"),
            Err(e) => eprintln!("tearing down the real node: {e}"),
        }
    }
}

/// Stops the processes recorded in `dir` (`<dir>/pids`, see [`crate::record_detached`]) when
/// dropped, and on an interrupt ([`stop_on_signals`]), unless [`DetachedGuard::keep`] lets
/// them run on.
#[derive(Debug)]
pub struct DetachedGuard {
    dir: PathBuf,
    keep: bool,
}

impl DetachedGuard {
    pub fn new(dir: &Path) -> DetachedGuard {
        detached().push(dir.to_path_buf());
        DetachedGuard {
            dir: dir.to_path_buf(),
            keep: false,
        }
    }

    /// Stops them now; returns the names of those that were running.
    pub fn stop(mut self) -> Result<Vec<String>, Error> {
        self.keep = true;
        let stopped = stop_detached(&self.dir);
        unregister(&self.dir);
        stopped
    }

    /// Leaves the processes running (`cargo xtask cluster down` stops them).
    pub fn keep(mut self) {
        self.keep = true;
        unregister(&self.dir);
    }
}

fn unregister(dir: &Path) {
    let mut dirs = detached();
    if let Some(i) = dirs.iter().position(|d| d == dir) {
        dirs.remove(i);
    }
}

impl Drop for DetachedGuard {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        // Stopped before it is unregistered, so an interrupt meanwhile still covers it.
        if let Err(e) = stop_detached(&self.dir) {
            eprintln!(
                "stopping the processes recorded in {}: {e}",
                self.dir.display()
            );
        }
        unregister(&self.dir);
    }
}
