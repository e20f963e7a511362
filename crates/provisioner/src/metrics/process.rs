//! client_golang's process collector for Linux, read from `/proc` at scrape time.
//!
//! Same names, help texts and meaning as the Go sidecar's `process_*` metrics (client_golang
//! v1.23 over procfs): CPU time and start time use procfs' fixed `USER_HZ` of 100, the file
//! descriptor limit is the soft `Max open files`, and `unlimited` is 2^64-1. Resident memory
//! comes from `VmRSS` in `/proc/self/status` (the same pages procfs counts, already in bytes,
//! so no page-size lookup is needed). A file that cannot be read or parsed drops only the
//! metrics it feeds; the scrape itself never fails because of it.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// procfs' `userHZ`: clock ticks per second in `/proc/<pid>/stat`.
const USER_HZ: f64 = 100.0;

/// What `unlimited` means in `/proc/<pid>/limits` (procfs parses it as the largest u64).
const UNLIMITED: f64 = u64::MAX as f64;

/// Registers process metrics (`process_cpu_seconds_total`, `process_resident_memory_bytes`, ...).
pub fn register_process_metrics(registry: &mut Registry) {
    registry.register_collector(Box::new(ProcessCollector));
}

/// The raw inputs of one scrape; `None` where a file could not be read.
#[derive(Debug, Default)]
pub(crate) struct ProcFiles {
    /// `/proc/self/stat`.
    pub stat: Option<String>,
    /// `/proc/stat` (for `btime`).
    pub system_stat: Option<String>,
    /// `/proc/self/status`.
    pub status: Option<String>,
    /// `/proc/self/limits`.
    pub limits: Option<String>,
    /// `/proc/self/net/netstat`.
    pub netstat: Option<String>,
    /// Entries in `/proc/self/fd`.
    pub open_fds: Option<usize>,
}

impl ProcFiles {
    fn read() -> Self {
        let read = |path: &str| std::fs::read_to_string(path).ok();
        ProcFiles {
            stat: read("/proc/self/stat"),
            system_stat: read("/proc/stat"),
            status: read("/proc/self/status"),
            limits: read("/proc/self/limits"),
            netstat: read("/proc/self/net/netstat"),
            open_fds: std::fs::read_dir("/proc/self/fd")
                .ok()
                .map(|dir| dir.count()),
        }
    }
}

/// The two metric types the collector exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter,
    Gauge,
}

/// One exported value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    /// The name as scraped (counters end in `_total`).
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub value: f64,
}

/// The fields of `/proc/<pid>/stat` the collector uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcStat {
    pub utime: u64,
    pub stime: u64,
    pub starttime: u64,
    pub vsize: u64,
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) may hold spaces and parentheses, so
/// the numeric fields are counted from its last `)`.
pub(crate) fn parse_stat(text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `fields[0]` is field 3 (state), so field n is at n - 3.
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(ProcStat {
        utime: field(14)?,
        stime: field(15)?,
        starttime: field(22)?,
        vsize: field(23)?,
    })
}

/// `btime` from `/proc/stat`: boot time in seconds since the epoch.
pub(crate) fn parse_boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// `VmRSS` from `/proc/<pid>/status`, in bytes.
pub(crate) fn parse_resident_bytes(text: &str) -> Option<u64> {
    let line = text.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let mut parts = line.split_whitespace();
    let kib: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") => kib.checked_mul(1024),
        _ => None,
    }
}

/// The soft limit of `limit` (e.g. `Max open files`) in `/proc/<pid>/limits`.
pub(crate) fn parse_soft_limit(text: &str, limit: &str) -> Option<f64> {
    let line = text.lines().find_map(|l| l.strip_prefix(limit))?;
    match line.split_whitespace().next()? {
        "unlimited" => Some(UNLIMITED),
        v => v.parse::<u64>().ok().map(|v| v as f64),
    }
}

/// `IpExt` `InOctets` and `OutOctets` from `/proc/<pid>/net/netstat` (a header line of names
/// followed by a line of values with the same prefix).
pub(crate) fn parse_ip_octets(text: &str) -> Option<(f64, f64)> {
    let mut lines = text.lines().filter(|l| l.starts_with("IpExt:"));
    let names: Vec<&str> = lines.next()?.split_whitespace().collect();
    let values: Vec<&str> = lines.next()?.split_whitespace().collect();
    let get = |name: &str| -> Option<f64> {
        let i = names.iter().position(|n| *n == name)?;
        values.get(i)?.parse().ok()
    };
    Some((get("InOctets")?, get("OutOctets")?))
}

/// Turns one scrape's files into samples, in client_golang's order.
pub(crate) fn samples(files: &ProcFiles) -> Vec<Sample> {
    let mut out = Vec::new();
    let mut push = |name, help, kind, value: Option<f64>| {
        if let Some(value) = value {
            out.push(Sample {
                name,
                help,
                kind,
                value,
            });
        }
    };
    let stat = files.stat.as_deref().and_then(parse_stat);
    push(
        "process_cpu_seconds_total",
        "Total user and system CPU time spent in seconds.",
        Kind::Counter,
        stat.map(|s| (s.utime + s.stime) as f64 / USER_HZ),
    );
    push(
        "process_open_fds",
        "Number of open file descriptors.",
        Kind::Gauge,
        files.open_fds.map(|n| n as f64),
    );
    let limits = files.limits.as_deref();
    push(
        "process_max_fds",
        "Maximum number of open file descriptors.",
        Kind::Gauge,
        limits.and_then(|l| parse_soft_limit(l, "Max open files")),
    );
    push(
        "process_virtual_memory_bytes",
        "Virtual memory size in bytes.",
        Kind::Gauge,
        stat.map(|s| s.vsize as f64),
    );
    push(
        "process_virtual_memory_max_bytes",
        "Maximum amount of virtual memory available in bytes.",
        Kind::Gauge,
        limits.and_then(|l| parse_soft_limit(l, "Max address space")),
    );
    push(
        "process_resident_memory_bytes",
        "Resident memory size in bytes.",
        Kind::Gauge,
        files
            .status
            .as_deref()
            .and_then(parse_resident_bytes)
            .map(|b| b as f64),
    );
    let boot = files.system_stat.as_deref().and_then(parse_boot_time);
    push(
        "process_start_time_seconds",
        "Start time of the process since unix epoch in seconds.",
        Kind::Gauge,
        stat.zip(boot)
            .map(|(s, boot)| boot as f64 + s.starttime as f64 / USER_HZ),
    );
    let octets = files.netstat.as_deref().and_then(parse_ip_octets);
    push(
        "process_network_receive_bytes_total",
        "Number of bytes received by the process over the network.",
        Kind::Counter,
        octets.map(|(rx, _)| rx),
    );
    push(
        "process_network_transmit_bytes_total",
        "Number of bytes sent by the process over the network.",
        Kind::Counter,
        octets.map(|(_, tx)| tx),
    );
    out
}

/// Reads `/proc/self` whenever the registry is encoded.
#[derive(Debug)]
struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for sample in samples(&ProcFiles::read()) {
            // The encoder appends `_total` to counters itself.
            match sample.kind {
                Kind::Counter => {
                    let name = sample.name.trim_end_matches("_total");
                    let metric =
                        encoder.encode_descriptor(name, sample.help, None, MetricType::Counter)?;
                    ConstCounter::new(sample.value).encode(metric)?;
                }
                Kind::Gauge => {
                    let metric = encoder.encode_descriptor(
                        sample.name,
                        sample.help,
                        None,
                        MetricType::Gauge,
                    )?;
                    ConstGauge::new(sample.value).encode(metric)?;
                }
            }
        }
        Ok(())
    }
}
