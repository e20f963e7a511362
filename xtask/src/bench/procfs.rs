//! CPU time and memory of a local process from /proc.

/// One look at a process.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ProcSample {
    /// User plus system CPU time, seconds.
    pub cpu_seconds: f64,
    /// Resident set size now, MiB.
    pub rss_mib: f64,
    /// Peak resident set size since start (VmHWM), MiB.
    pub hwm_mib: f64,
}

/// utime + stime (fields 14 and 15, in clock ticks) of a `/proc/<pid>/stat` line. The command
/// name (field 2) may hold spaces and parentheses, so fields are counted after its last ')'.
pub fn cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state), so field N is at index N - 3.
    let utime: u64 = fields.get(14 - 3)?.parse().ok()?;
    let stime: u64 = fields.get(15 - 3)?.parse().ok()?;
    Some(utime + stime)
}

/// A `kB` field of `/proc/<pid>/status` (e.g. `VmHWM`), in kB.
pub fn status_kb(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        if name != field {
            return None;
        }
        value.split_whitespace().next()?.parse().ok()
    })
}

fn ticks_per_second() -> f64 {
    // SAFETY: sysconf only reads a configuration value.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// Reads `/proc/<pid>`; `None` once the process is gone.
pub fn sample(pid: u32) -> Option<ProcSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |field| status_kb(&status, field).map(|kb| kb as f64 / 1024.0);
    Some(ProcSample {
        cpu_seconds: cpu_ticks(&stat)? as f64 / ticks_per_second(),
        rss_mib: kib("VmRSS")?,
        hwm_mib: kib("VmHWM")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_table() {
        let tail = "S 1 2 3 4 5 6 7 8 9 10 250 40 13 14 15 16 17";
        let cases: Vec<(String, Option<u64>)> = vec![
            (format!("42 (csi-provisioner) {tail}"), Some(290)),
            (format!("42 (a) b (c)) {tail}"), Some(290)),
            ("42 (x) S 1 2".into(), None),
            ("no parenthesis".into(), None),
            (format!("42 (x) {}", tail.replace("250", "x")), None),
        ];
        for (stat, want) in cases {
            assert_eq!(cpu_ticks(&stat), want, "{stat}");
        }
    }

    #[test]
    fn status_fields() {
        let status = "Name:\tcsi\nVmPeak:\t  9000 kB\nVmHWM:\t    2048 kB\nVmRSS:\t    1024 kB\n";
        let cases = [
            ("VmHWM", Some(2048)),
            ("VmRSS", Some(1024)),
            ("VmSwap", None),
            ("Name", None),
        ];
        for (field, want) in cases {
            assert_eq!(status_kb(status, field), want, "{field}");
        }
    }

    #[test]
    fn own_process_is_readable() {
        let s = sample(std::process::id()).expect("our own /proc entry");
        assert!(s.rss_mib > 0.0 && s.hwm_mib >= s.rss_mib, "{s:?}");
        assert!(sample(u32::MAX).is_none());
    }
}
