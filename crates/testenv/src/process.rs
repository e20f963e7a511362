//! Child processes owned by a test: output to a log file, own process group, killed on drop,
//! and killed by the kernel if the test process dies (`PR_SET_PDEATHSIG`).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::Error;
use crate::error::IoContext;

/// How long [`Process::kill`] waits after SIGTERM before it sends SIGKILL.
const GRACE: Duration = Duration::from_secs(10);

type Job = (Command, mpsc::Sender<io::Result<Child>>);

/// PDEATHSIG fires when the *thread* that forked the child exits, not the process. Test
/// threads come and go, so every owned child is forked by this one thread, which lives until
/// the process ends.
fn spawner() -> &'static mpsc::Sender<Job> {
    static SPAWNER: OnceLock<mpsc::Sender<Job>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("testenv-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    // The requester may have given up; nothing to do then.
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("cannot start the testenv spawner thread");
        tx
    })
}

/// A child process with stdout and stderr appended to `<log_dir>/<name>.log`.
///
/// The child leads its own process group, so kills reach anything it forks. Dropping an owned
/// `Process` kills the group with SIGKILL and reaps the child.
#[derive(Debug)]
pub struct Process {
    name: String,
    pid: u32,
    child: Child,
    log: PathBuf,
    owned: bool,
    reaped: bool,
}

/// Starts `cmd` as an owned child; see [`Process`].
///
/// # Panics
/// When the log file cannot be created or the program cannot be started.
pub fn spawn(name: &str, cmd: Command, log_dir: &Path) -> Process {
    try_spawn(name, cmd, log_dir).unwrap_or_else(|e| panic!("{e}"))
}

/// Like [`spawn`], returning an error instead of panicking.
pub fn try_spawn(name: &str, mut cmd: Command, log_dir: &Path) -> Result<Process, Error> {
    let log = prepare_log(name, &mut cmd, log_dir)?;
    let parent = std::process::id() as libc::pid_t;
    cmd.process_group(0);
    // SAFETY: the closure only makes async-signal-safe calls (prctl, getppid) and builds
    // errors from raw OS codes without allocating.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl; then nobody would kill us.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    let (tx, rx) = mpsc::channel();
    let program = cmd.get_program().to_string_lossy().into_owned();
    spawner()
        .send((cmd, tx))
        .map_err(|_| Error::io("spawner thread", io::Error::other("it has stopped")))?;
    let child = rx
        .recv()
        .map_err(|_| Error::io("spawner thread", io::Error::other("no reply")))?
        .ctx(|| format!("starting {name} ({program})"))?;
    Ok(Process::new(name, child, log, true))
}

/// Starts `cmd` in a new session without PDEATHSIG, so it can outlive this process once
/// [`Process::disown`]ed (until then, drop still kills it). Used by `cargo xtask cluster up`.
pub fn spawn_detached(name: &str, mut cmd: Command, log_dir: &Path) -> Result<Process, Error> {
    let log = prepare_log(name, &mut cmd, log_dir)?;
    // SAFETY: setsid is async-signal-safe. It also makes the child a process group leader.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let program = cmd.get_program().to_string_lossy().into_owned();
    let child = cmd.spawn().ctx(|| format!("starting {name} ({program})"))?;
    Ok(Process::new(name, child, log, true))
}

/// Opens the log (appending, so restarts of the same name keep history) and wires it to the
/// child's stdout and stderr.
fn prepare_log(name: &str, cmd: &mut Command, log_dir: &Path) -> Result<PathBuf, Error> {
    fs::create_dir_all(log_dir).ctx(|| format!("creating {}", log_dir.display()))?;
    let path = log_dir.join(format!("{name}.log"));
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .ctx(|| format!("opening {}", path.display()))?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    writeln!(file, "--- testenv: starting at unix time {now}: {cmd:?}")
        .ctx(|| format!("writing {}", path.display()))?;
    let err = file
        .try_clone()
        .ctx(|| format!("cloning {}", path.display()))?;
    cmd.stdin(Stdio::null()).stdout(file).stderr(err);
    Ok(path)
}

impl Process {
    fn new(name: &str, child: Child, log: PathBuf, owned: bool) -> Process {
        Process {
            name: name.to_string(),
            pid: child.id(),
            child,
            log,
            owned,
            reaped: false,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The log file receiving the child's stdout and stderr.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `n` lines of the log file.
    pub fn log_tail(&self, n: usize) -> String {
        log_tail(&self.log, n)
    }

    /// True until the child has exited.
    pub fn is_running(&self) -> bool {
        !self.reaped && !exited(self.pid)
    }

    /// Exit status if the child has exited, without blocking.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if !self.reaped && !exited(self.pid) {
            return Ok(None);
        }
        self.wait().map(Some)
    }

    /// Waits for the child to exit.
    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        let status = self.child.wait()?;
        self.reaped = true;
        Ok(status)
    }

    /// SIGTERM to the process group, SIGKILL after a grace period, then reap.
    pub fn kill(&mut self) {
        if self.reaped {
            return;
        }
        self.signal_group(libc::SIGTERM);
        let deadline = Instant::now() + GRACE;
        while !exited(self.pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill9();
    }

    /// SIGKILL to the process group, then reap.
    pub fn kill9(&mut self) {
        if self.reaped {
            return;
        }
        // Until the leader is reaped its pid (= the group id) cannot be reused, so the group
        // signal cannot hit a stranger; it also takes out anything the child forked.
        self.signal_group(libc::SIGKILL);
        let _ = self.wait();
    }

    /// Sends `signal` to the child's process group (e.g. SIGSTOP/SIGCONT in fault tests).
    pub fn signal_group(&self, signal: libc::c_int) {
        if self.reaped {
            return;
        }
        // SAFETY: plain syscall; the group id is our unreaped child's pid.
        unsafe {
            libc::kill(-(self.pid as libc::pid_t), signal);
        }
    }

    /// Lets the child run on after this handle is gone; returns its pid.
    pub fn disown(mut self) -> u32 {
        self.owned = false;
        self.pid
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.owned {
            self.kill9();
        }
    }
}

/// Whether the child has exited, without reaping it (the pid stays reserved).
fn exited(pid: u32) -> bool {
    // SAFETY: waitid writes into the zeroed siginfo we own; WNOWAIT leaves the child reapable.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let rc = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        // ECHILD: already reaped (or not our child): either way it is gone.
        rc != 0 || info.si_pid() != 0
    }
}

/// The last `n` lines of a log file (reads at most its final 64 KiB).
pub fn log_tail(path: &Path, n: usize) -> String {
    let mut buf = Vec::new();
    let read = File::open(path).and_then(|mut f| {
        let len = f.metadata()?.len();
        f.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)))?;
        f.read_to_end(&mut buf)
    });
    match read {
        Ok(_) => tail_lines(&String::from_utf8_lossy(&buf), n),
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// The last `n` lines of `text`.
pub(crate) fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_lines_table() {
        let cases: &[(&str, usize, &str)] = &[
            ("", 3, ""),
            ("a", 3, "a"),
            ("a\nb\nc\nd\n", 2, "c\nd"),
            ("a\nb", 0, ""),
            ("a\nb\n", 5, "a\nb"),
        ];
        for (text, n, want) in cases {
            assert_eq!(tail_lines(text, *n), *want, "tail_lines({text:?}, {n})");
        }
    }
}
