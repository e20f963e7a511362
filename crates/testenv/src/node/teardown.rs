//! Leaving the machine as the real node found it: every process, mount, network namespace,
//! bridge, iptables chain and cgroup it made goes, found from the fixed layout and the
//! kernel's own tables, never from a record, so that it works after a `kill -9` too.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::config::{self, NodeLayout};
use crate::Error;
use crate::error::IoContext;

/// What one teardown removed (for the caller's log and the tests' counts).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Removed {
    pub processes: usize,
    pub mounts: usize,
    pub netns: usize,
    pub links: usize,
    pub chains: usize,
    pub cgroups: usize,
}

/// Everything the node left on this machine now (what a teardown must bring to zero).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Leftovers {
    pub processes: Vec<u32>,
    pub mounts: Vec<PathBuf>,
    pub netns: Vec<String>,
    pub bridge: bool,
    pub cgroups: Vec<PathBuf>,
}

impl Leftovers {
    pub fn is_empty(&self) -> bool {
        *self == Leftovers::default()
    }
}

/// Looks for what the node leaves behind when it is not torn down.
pub fn leftovers(layout: &NodeLayout) -> Leftovers {
    Leftovers {
        processes: node_processes(layout),
        mounts: mounts_under(&read_mountinfo(), &layout.mount_roots()),
        netns: cni_netns(),
        bridge: Path::new("/sys/class/net").join(config::BRIDGE).exists(),
        cgroups: kubepods_cgroups(),
    }
}

/// Tears the node down (idempotent: with nothing there, it removes nothing). Refuses when the
/// kubelet root exists without our marker: then it belongs to someone else's kubelet.
pub fn teardown(layout: &NodeLayout) -> Result<Removed, Error> {
    check_ours(layout)?;
    let mut removed = Removed {
        processes: kill_node_processes(layout),
        ..Removed::default()
    };
    removed.mounts = unmount_under(&layout.mount_roots())?;
    removed.netns = remove_cni_netns()?;
    removed.links = usize::from(delete_bridge());
    removed.chains = delete_kubelet_chains();
    removed.cgroups = remove_kubepods_cgroups();
    restore_host_settings(layout)?;
    let left = mounts_under(&read_mountinfo(), &layout.mount_roots());
    if !left.is_empty() {
        // Removing the directories now would delete through a mount into a volume's data.
        return Err(Error::NotReady(format!(
            "real node teardown: these mounts would not go, so {} and {} are kept: {left:?}",
            layout.kubelet_root.display(),
            layout.run.display()
        )));
    }
    for dir in [&layout.run, &layout.kubelet_root] {
        match fs::remove_dir_all(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(format!("removing {}", dir.display()), e)),
        }
    }
    Ok(removed)
}

fn check_ours(layout: &NodeLayout) -> Result<(), Error> {
    if layout.kubelet_root.exists() && !layout.marker().exists() {
        return Err(Error::NotReady(format!(
            "{} exists but was not made by the test environment (no {}): this machine runs \
             another kubelet, so the real node will neither start nor tear anything down here",
            layout.kubelet_root.display(),
            layout.marker().display()
        )));
    }
    Ok(())
}

/// Marks the kubelet root as ours (before kubelet starts).
pub(crate) fn mark_ours(layout: &NodeLayout) -> Result<(), Error> {
    fs::create_dir_all(&layout.kubelet_root)
        .ctx(|| format!("creating {}", layout.kubelet_root.display()))?;
    fs::write(
        layout.marker(),
        "made by the csi-provisioner-rs test environment\n",
    )
    .ctx(|| format!("writing {}", layout.marker().display()))
}

/// The node's own processes: those whose command line names one of its directories (kubelet,
/// containerd, the shims, the CSI processes on the node), and those in its pods' cgroups.
fn node_processes(layout: &NodeLayout) -> Vec<u32> {
    let marks: Vec<String> = [&layout.state, &layout.run, &layout.kubelet_root]
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    crate::process::host_processes()
        .into_iter()
        .filter(|p| {
            p.args
                .iter()
                .any(|a| marks.iter().any(|m| a.contains(m.as_str())))
                || in_kubepods(&p.cgroups)
        })
        .map(|p| p.pid)
        .collect()
}

/// True when a `/proc/<pid>/cgroup` text puts the process in a pod's cgroup.
pub(crate) fn in_kubepods(cgroup_file: &str) -> bool {
    cgroup_file
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .any(|path| path == "/kubepods" || path.starts_with("/kubepods/"))
}

fn kill_node_processes(layout: &NodeLayout) -> usize {
    let mut killed = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pids = node_processes(layout);
        if pids.is_empty() || Instant::now() > deadline {
            return killed.len();
        }
        for pid in pids {
            // SAFETY: plain syscall. A pid recycled between the scan and the kill would be
            // hit; the scan is a moment old and these are a test node's processes only.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
            killed.insert(pid);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The mount points in a `/proc/self/mountinfo` text (octal escapes decoded).
pub(crate) fn parse_mountinfo(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|m| PathBuf::from(unescape_octal(m)))
        .collect()
}

fn unescape_octal(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let v = bytes[i + 1..i + 4]
                .iter()
                .fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
            out.push(v as u8);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mounts at or under any of `roots`, deepest first (the order they can be unmounted
/// in), each once.
pub(crate) fn mounts_under(mounts: &[PathBuf], roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = mounts
        .iter()
        .filter(|m| roots.iter().any(|r| m.starts_with(r)))
        .cloned()
        .collect();
    found.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    found.dedup();
    found
}

fn read_mountinfo() -> Vec<PathBuf> {
    parse_mountinfo(&fs::read_to_string("/proc/self/mountinfo").unwrap_or_default())
}

fn unmount_under(roots: &[PathBuf]) -> Result<usize, Error> {
    let mut count = 0;
    // A mount may hide another at the same point: read again until none is left.
    for _ in 0..20 {
        let mounts = mounts_under(&read_mountinfo(), roots);
        if mounts.is_empty() {
            break;
        }
        for m in mounts {
            umount(&m)?;
            count += 1;
        }
    }
    Ok(count)
}

fn umount(path: &Path) -> Result<(), Error> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::NotReady(format!("a mount point with a NUL: {}", path.display())))?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let rc = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        // Already gone (a parent's lazy unmount took it along).
        if e.raw_os_error() != Some(libc::EINVAL) && e.raw_os_error() != Some(libc::ENOENT) {
            return Err(Error::io(format!("unmounting {}", path.display()), e));
        }
    }
    Ok(())
}

const NETNS_DIR: &str = "/run/netns";

/// The network namespaces containerd made for pods (`cni-<uuid>`).
fn cni_netns() -> Vec<String> {
    let Ok(entries) = fs::read_dir(NETNS_DIR) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| n.starts_with("cni-"))
        .collect();
    names.sort();
    names
}

fn remove_cni_netns() -> Result<usize, Error> {
    let names = cni_netns();
    for name in &names {
        let path = Path::new(NETNS_DIR).join(name);
        umount(&path)?;
        fs::remove_file(&path).ctx(|| format!("removing {}", path.display()))?;
    }
    Ok(names.len())
}

fn delete_bridge() -> bool {
    if !Path::new("/sys/class/net").join(config::BRIDGE).exists() {
        return false;
    }
    Command::new("ip")
        .args(["link", "delete", config::BRIDGE])
        .status()
        .is_ok_and(|s| s.success())
}

/// The chains kubelet makes to watch for iptables flushes; the CNI config makes none.
const KUBELET_CHAINS: &[&str] = &["KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT"];

/// The chains of `KUBELET_CHAINS` declared in an `iptables -S` listing.
pub(crate) fn declared_chains(listing: &str) -> Vec<String> {
    listing
        .lines()
        .filter_map(|l| l.strip_prefix("-N "))
        .map(str::trim)
        .filter(|c| KUBELET_CHAINS.contains(c))
        .map(str::to_string)
        .collect()
}

fn delete_kubelet_chains() -> usize {
    let mut count = 0;
    for tool in ["iptables", "ip6tables"] {
        for table in ["mangle", "nat", "filter"] {
            let Ok(out) = Command::new(tool).args(["-w", "-t", table, "-S"]).output() else {
                continue;
            };
            for chain in declared_chains(&String::from_utf8_lossy(&out.stdout)) {
                let flushed = Command::new(tool)
                    .args(["-w", "-t", table, "-F", &chain])
                    .status();
                let deleted = Command::new(tool)
                    .args(["-w", "-t", table, "-X", &chain])
                    .status();
                if flushed.is_ok() && deleted.is_ok_and(|s| s.success()) {
                    count += 1;
                }
            }
        }
    }
    count
}

const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Every `kubepods` cgroup directory and those below it, in every hierarchy, deepest first.
fn kubepods_cgroups() -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(hierarchies) = fs::read_dir(CGROUP_ROOT) else {
        return found;
    };
    for h in hierarchies.flatten() {
        let top = h.path().join("kubepods");
        if top.is_dir() {
            collect_dirs(&top, &mut found);
        }
    }
    found.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    found
}

fn collect_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    out.push(dir.to_path_buf());
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                collect_dirs(&e.path(), out);
            }
        }
    }
}

fn remove_kubepods_cgroups() -> usize {
    let mut count = 0;
    for dir in kubepods_cgroups() {
        // cgroup directories go with rmdir only (their files are the kernel's).
        if fs::remove_dir(&dir).is_ok() {
            count += 1;
        }
    }
    count
}

/// Records the host settings the node is about to change, unless a record is already there
/// (from a node that was killed: that one holds the values from before it).
pub(crate) fn record_host_settings(layout: &NodeLayout) -> Result<(), Error> {
    let path = layout.host_record();
    if path.exists() {
        return Ok(());
    }
    let values: Vec<(String, String)> = config::HOST_SETTINGS
        .iter()
        .filter_map(|s| {
            fs::read_to_string(s)
                .ok()
                .map(|v| (s.to_string(), v.trim().to_string()))
        })
        .collect();
    fs::create_dir_all(&layout.run).ctx(|| format!("creating {}", layout.run.display()))?;
    fs::write(&path, config::render_host_record(&values))
        .ctx(|| format!("writing {}", path.display()))
}

fn restore_host_settings(layout: &NodeLayout) -> Result<(), Error> {
    let path = layout.host_record();
    let Ok(text) = fs::read_to_string(&path) else {
        return Ok(());
    };
    for (setting, value) in config::parse_host_record(&text) {
        let now = fs::read_to_string(&setting).unwrap_or_default();
        if now.trim() != value {
            fs::write(&setting, format!("{value}\n")).ctx(|| format!("restoring {setting}"))?;
        }
    }
    fs::remove_file(&path).ctx(|| format!("removing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_under_the_roots_come_deepest_first() {
        let info = "\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
400 22 254:0 /var/lib/kubelet /var/lib/kubelet rw shared:1 - ext4 /dev/vda rw
401 400 254:0 /x /var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pvc-1/mount rw - ext4 /dev/vda rw
402 22 0:50 / /run/csi-provisioner-rs-node/containerd/io.containerd.grpc.v1.cri/sandboxes/a/shm rw - tmpfs shm rw
403 22 0:51 / /var/lib/kubelet2 rw - tmpfs t rw
404 22 0:52 / /var/lib/kubelet/pods/with\\040space rw - tmpfs t rw
";
        let mounts = parse_mountinfo(info);
        assert_eq!(mounts.len(), 6);
        let roots = NodeLayout::default().mount_roots();
        let found = mounts_under(&mounts, &roots);
        assert_eq!(
            found,
            [
                "/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pvc-1/mount",
                "/run/csi-provisioner-rs-node/containerd/io.containerd.grpc.v1.cri/sandboxes/a/shm",
                "/var/lib/kubelet/pods/with space",
                "/var/lib/kubelet",
            ]
            .map(PathBuf::from),
            "not the host's root, not a sibling that only shares a prefix"
        );
    }

    #[test]
    fn a_kubelet_root_without_our_marker_is_never_torn_down() {
        let tmp = std::env::temp_dir().join(format!("node-marker-{}", std::process::id()));
        let layout = NodeLayout {
            state: tmp.join("state"),
            run: tmp.join("run"),
            kubelet_root: tmp.join("kubelet"),
        };
        assert!(
            check_ours(&layout).is_ok(),
            "no kubelet root: nothing to guard"
        );
        fs::create_dir_all(&layout.kubelet_root).unwrap();
        let refused = teardown(&layout).unwrap_err().to_string();
        assert!(refused.contains("another kubelet"), "{refused}");
        mark_ours(&layout).unwrap();
        assert!(check_ours(&layout).is_ok());
        fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn only_pod_cgroups_count() {
        assert!(in_kubepods(
            "9:pids:/kubepods/besteffort/pod1/abc\n1:name=systemd:/kubepods/besteffort/pod1/abc\n"
        ));
        assert!(in_kubepods("3:memory:/kubepods\n"));
        assert!(!in_kubepods("9:pids:/\n1:name=systemd:/user.slice\n"));
        assert!(!in_kubepods("9:pids:/kubepods-other\n"));
    }

    #[test]
    fn only_kubelets_own_chains_are_deleted() {
        let listing = "-P PREROUTING ACCEPT\n-N KUBE-IPTABLES-HINT\n-N KUBE-KUBELET-CANARY\n-N DOCKER\n-A DOCKER -j RETURN\n";
        assert_eq!(
            declared_chains(listing),
            ["KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"]
        );
    }
}
