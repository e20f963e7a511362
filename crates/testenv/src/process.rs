//! Child processes owned by a test: output to a log file, own process group, killed on drop,
//! and killed by the kernel if the test process dies (`PR_SET_PDEATHSIG`).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::Error;
use crate::error::IoContext;

/// How long [`Process::kill`] waits after SIGTERM before it sends SIGKILL.
const GRACE: Duration = Duration::from_secs(10);

type Job = (Command, mpsc::Sender<io::Result<Child>>);

/// The process groups of every owned, unreaped child of this process, for
/// [`crate::stop_on_signals`]. A group leaves it (under the lock) before its leader is reaped,
/// so a group id read from it never names a recycled pid. `closed`: an interrupt is stopping
/// everything, no new child may start.
struct Owned {
    closed: bool,
    groups: Vec<u32>,
}

static OWNED: Mutex<Owned> = Mutex::new(Owned {
    closed: false,
    groups: Vec::new(),
});

fn owned() -> MutexGuard<'static, Owned> {
    OWNED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts `cmd` and records its group as owned, unless an interrupt is stopping everything.
fn spawn_owned(cmd: &mut Command) -> io::Result<Child> {
    let mut reg = owned();
    if reg.closed {
        return Err(io::Error::other(
            "interrupted: this command is stopping its processes, it starts no new ones",
        ));
    }
    let child = cmd.spawn()?;
    reg.groups.push(child.id());
    Ok(child)
}

/// Stops taking new children and returns the owned groups now.
pub(crate) fn close_owned() -> Vec<u32> {
    let mut reg = owned();
    reg.closed = true;
    reg.groups.clone()
}

/// Sends `signal` to each of `groups` still owned and unreaped; returns how many it reached.
pub(crate) fn signal_owned(groups: &[u32], signal: libc::c_int) -> usize {
    let reg = owned();
    let mut sent = 0;
    for pid in groups.iter().filter(|p| reg.groups.contains(p)) {
        if !exited(*pid) {
            // SAFETY: plain syscall; the group's leader is our unreaped child (the lock keeps
            // it from being reaped meanwhile), so the id is not recycled.
            unsafe {
                libc::kill(-(*pid as libc::pid_t), signal);
            }
            sent += 1;
        }
    }
    sent
}

/// State (`R`, `S`, `Z`, ...) and start time (clock ticks after boot) of a process, from
/// `/proc/<pid>/stat`; `None` when there is no such process.
pub(crate) fn proc_stat(pid: u32) -> Option<(char, u64)> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Fields after the command name (which may hold spaces and parentheses): field 3 is the
/// state, field 22 the start time.
fn parse_stat(text: &str) -> Option<(char, u64)> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((state, start))
}

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
                    let _ = reply.send(spawn_owned(&mut cmd));
                }
            })
            .expect("cannot start the testenv spawner thread");
        tx
    })
}

/// A child process with stdout and stderr appended to `<log_dir>/<name>.log`.
///
/// The child leads its own process group, so kills reach anything it forks. Dropping an owned
/// `Process` kills the group with SIGKILL and reaps the child; so does a SIGINT or SIGTERM to
/// a command that called [`crate::stop_on_signals`].
#[derive(Debug)]
pub struct Process {
    name: String,
    pid: u32,
    start_time: Option<u64>,
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
    let child = spawn_owned(&mut cmd).ctx(|| format!("starting {name} ({program})"))?;
    Ok(Process::new(name, child, log, true))
}

/// Starts `cmd` as an owned child in its own process group that shares this process's
/// stdin, stdout and stderr (no log file): for `cargo test` under `cargo xtask test`, whose
/// test binaries an interrupt must stop with it.
pub fn spawn_foreground(name: &str, mut cmd: Command) -> Result<Process, Error> {
    cmd.process_group(0);
    let program = cmd.get_program().to_string_lossy().into_owned();
    let child = spawn_owned(&mut cmd).ctx(|| format!("starting {name} ({program})"))?;
    Ok(Process::new(name, child, PathBuf::new(), true))
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
        // Read while the child is unreaped: the pid cannot name anything else yet.
        let start_time = proc_stat(child.id()).map(|(_, start)| start);
        Process {
            name: name.to_string(),
            pid: child.id(),
            start_time,
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

    /// Its start time in clock ticks after boot: with the pid, what names it in a pid file.
    pub fn start_time(&self) -> Option<u64> {
        self.start_time
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
        if !self.reaped {
            wait_exited(self.pid);
        }
        let status = {
            // Out of the owned groups before the pid is freed (see `Owned`).
            let mut reg = owned();
            reg.groups.retain(|p| *p != self.pid);
            self.child.wait()?
        };
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
        owned().groups.retain(|p| *p != self.pid);
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

/// Blocks until the child has exited, without reaping it; returns at once if it is not our
/// child (any more).
fn wait_exited(pid: u32) {
    loop {
        // SAFETY: as in `exited`, without WNOHANG.
        let rc = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if rc == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return;
        }
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
    fn stat_parsing() {
        let fields = "S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 4242 20 21";
        let cases: &[(String, Option<(char, u64)>)] = &[
            (format!("123 (hostpathplugin) {fields}"), Some(('S', 4242))),
            // The name may hold spaces and parentheses; the last `)` ends it.
            (format!("7 (a b) (c)) {fields}"), Some(('S', 4242))),
            ("7 (x) Z 1 2".to_string(), None),
            ("garbage".to_string(), None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_stat(text), *want, "{text:?}");
        }
        let (_, start) = proc_stat(std::process::id()).expect("own stat");
        assert!(start > 0);
    }

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

/// A process of this machine as `/proc` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostProcess {
    pub pid: u32,
    /// The command line's arguments (`argv[0]` first).
    pub args: Vec<String>,
    /// `/proc/<pid>/cgroup`.
    pub cgroups: String,
}

/// Every process of this machine but this one (for tests and teardowns that find processes
/// by what their command line names).
pub fn host_processes() -> Vec<HostProcess> {
    let me = std::process::id();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            if pid == me {
                return None;
            }
            let cmdline = fs::read(entry.path().join("cmdline")).ok()?;
            let args = cmdline
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let cgroups = fs::read_to_string(entry.path().join("cgroup")).unwrap_or_default();
            Some(HostProcess { pid, args, cgroups })
        })
        .collect()
}
