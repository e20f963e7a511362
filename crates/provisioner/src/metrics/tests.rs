use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;

use super::process::{
    Kind, ProcFiles, ProcStat, parse_boot_time, parse_ip_octets, parse_resident_bytes,
    parse_soft_limit, parse_stat, samples,
};
use super::*;

fn scrape(registry: &Registry) -> String {
    let mut out = String::new();
    encode(&mut out, registry).expect("encode");
    out
}

fn assert_lines(out: &str, want: &[String]) {
    for line in want {
        assert!(
            out.lines().any(|l| l == line),
            "missing {line:?} in:\n{out}"
        );
    }
}

// A real line, with the command name made awkward: spaces and a `)` inside the parentheses.
const STAT: &str = "4242 (csi) prov (x)) S 1 4242 4242 0 -1 4194560 5000 0 0 0 \
    1234 567 0 0 20 0 12 0 347058 3133440000 3790 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n";

#[test]
fn stat_fields_are_counted_from_the_last_parenthesis() {
    assert_eq!(
        parse_stat(STAT),
        Some(ProcStat {
            utime: 1234,
            stime: 567,
            starttime: 347058,
            vsize: 3133440000,
        })
    );
}

#[test]
fn malformed_files_parse_to_none() {
    for text in ["", "4242 (csi", "4242 (csi) S 1 2", "4242 (x) S a b c"] {
        assert_eq!(parse_stat(text), None, "{text:?}");
    }
    assert_eq!(parse_boot_time("cpu 1 2 3\nbtime x\n"), None);
    assert_eq!(parse_resident_bytes("VmRSS:\t  12 pages\n"), None);
    assert_eq!(parse_resident_bytes("VmSize:\t  12 kB\n"), None);
    assert_eq!(
        parse_soft_limit("Max open files  lots  lots files\n", "Max open files"),
        None
    );
    assert_eq!(parse_ip_octets("IpExt: InOctets OutOctets\n"), None);
}

#[test]
fn boot_time_resident_memory_limits_and_octets() {
    assert_eq!(
        parse_boot_time("cpu  1 2 3\nintr 5\nbtime 1795313850\nprocesses 9\n"),
        Some(1795313850)
    );
    assert_eq!(
        parse_resident_bytes("Name:\tcsi\nVmRSS:\t    1968 kB\nRssAnon:\t 100 kB\n"),
        Some(1968 * 1024)
    );
    let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                  Max cpu time              unlimited            unlimited            seconds   \n\
                  Max open files            20000                1048576              files     \n\
                  Max address space         unlimited            unlimited            bytes     \n";
    assert_eq!(parse_soft_limit(limits, "Max open files"), Some(20000.0));
    assert_eq!(
        parse_soft_limit(limits, "Max address space"),
        Some(18446744073709551615.0)
    );
    assert_eq!(parse_soft_limit(limits, "Max processes"), None);
    let netstat = "TcpExt: SyncookiesSent InOctets\nTcpExt: 1 2\n\
                   IpExt: InNoRoutes InOctets OutOctets InMcastOctets\n\
                   IpExt: 0 572523992 45685786 7\n";
    assert_eq!(parse_ip_octets(netstat), Some((572523992.0, 45685786.0)));
}

#[test]
fn samples_compute_client_golang_values() {
    let files = ProcFiles {
        stat: Some(STAT.into()),
        system_stat: Some("btime 1700000000\n".into()),
        status: Some("VmRSS:\t 2048 kB\n".into()),
        limits: Some(
            "Max open files  1024  4096  files\nMax address space unlimited unlimited bytes\n"
                .into(),
        ),
        netstat: Some("IpExt: InOctets OutOctets\nIpExt: 10 20\n".into()),
        open_fds: Some(17),
    };
    let got: Vec<(&str, Kind, f64)> = samples(&files)
        .into_iter()
        .map(|s| (s.name, s.kind, s.value))
        .collect();
    assert_eq!(
        got,
        [
            ("process_cpu_seconds_total", Kind::Counter, 18.01),
            ("process_open_fds", Kind::Gauge, 17.0),
            ("process_max_fds", Kind::Gauge, 1024.0),
            ("process_virtual_memory_bytes", Kind::Gauge, 3133440000.0),
            (
                "process_virtual_memory_max_bytes",
                Kind::Gauge,
                18446744073709551615.0
            ),
            ("process_resident_memory_bytes", Kind::Gauge, 2097152.0),
            ("process_start_time_seconds", Kind::Gauge, 1700003470.58),
            ("process_network_receive_bytes_total", Kind::Counter, 10.0),
            ("process_network_transmit_bytes_total", Kind::Counter, 20.0),
        ]
    );
}

#[test]
fn missing_files_drop_only_their_metrics() {
    let files = ProcFiles {
        stat: Some(STAT.into()),
        open_fds: Some(3),
        ..ProcFiles::default()
    };
    let names: Vec<&str> = samples(&files).into_iter().map(|s| s.name).collect();
    assert_eq!(
        names,
        [
            "process_cpu_seconds_total",
            "process_open_fds",
            "process_virtual_memory_bytes",
        ]
    );
    assert!(samples(&ProcFiles::default()).is_empty());
}

#[test]
fn process_collector_reads_this_process() {
    let mut registry = Registry::default();
    register_process_metrics(&mut registry);
    let out = scrape(&registry);
    assert_lines(
        &out,
        &[
            "# HELP process_cpu_seconds Total user and system CPU time spent in seconds.".into(),
            "# TYPE process_cpu_seconds counter".into(),
            "# TYPE process_resident_memory_bytes gauge".into(),
            "# TYPE process_start_time_seconds gauge".into(),
        ],
    );
    let value = |name: &str| -> f64 {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in:\n{out}"));
        line[name.len() + 1..].parse().expect("a number")
    };
    assert!(value("process_resident_memory_bytes") > 1e6);
    assert!(value("process_virtual_memory_bytes") >= value("process_resident_memory_bytes"));
    assert!(value("process_open_fds") >= 3.0);
    assert!(value("process_max_fds") >= value("process_open_fds"));
    assert!(value("process_start_time_seconds") > 1.5e9);
    assert!(value("process_cpu_seconds_total") >= 0.0);
}

#[test]
fn controller_metrics_expose_upstream_names_labels_and_buckets() {
    let metrics = ControllerMetrics::new();
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    metrics.provision_succeeded("fast", "", 0.3);
    metrics.clone().provision_succeeded("fast", "", 20.0);
    metrics.provision_succeeded("fast", "VolumeSnapshot", 1.0);
    metrics.provision_failed("fast", "");
    metrics.delete_succeeded("slow", 0.001);
    metrics.delete_failed("slow");
    metrics.delete_failed("slow");
    let out = scrape(&registry);
    let p = "controller_persistentvolumeclaim_provision";
    let d = "controller_persistentvolume_delete";
    let mut want: Vec<String> = vec![
        format!(
            "# HELP {p} Total number of persistent volumes provisioned succesfully. Broken down by storage class name and source of the claim."
        ),
        format!("# TYPE {p} counter"),
        format!(r#"{p}_total{{class="fast",source=""}} 2"#),
        format!(r#"{p}_total{{class="fast",source="VolumeSnapshot"}} 1"#),
        format!(
            "# HELP {p}_failed Total number of persistent volume provision failed attempts. Broken down by storage class name and source of the claim."
        ),
        format!(r#"{p}_failed_total{{class="fast",source=""}} 1"#),
        format!(
            "# HELP {p}_duration_seconds Latency in seconds to provision persistent volumes. Failed provisioning attempts are ignored. Broken down by storage class name and source of the claim."
        ),
        format!("# TYPE {p}_duration_seconds histogram"),
        format!(r#"{p}_duration_seconds_sum{{class="fast",source=""}} 20.3"#),
        format!(r#"{p}_duration_seconds_count{{class="fast",source=""}} 2"#),
        format!(r#"{p}_duration_seconds_bucket{{le="0.25",class="fast",source=""}} 0"#),
        format!(r#"{p}_duration_seconds_bucket{{le="0.5",class="fast",source=""}} 1"#),
        format!(r#"{p}_duration_seconds_bucket{{le="10.0",class="fast",source=""}} 1"#),
        format!(r#"{p}_duration_seconds_bucket{{le="+Inf",class="fast",source=""}} 2"#),
        format!(
            "# HELP {d} Total number of persistent volumes deleted succesfully. Broken down by storage class name."
        ),
        format!(r#"{d}_total{{class="slow"}} 1"#),
        format!(
            "# HELP {d}_failed Total number of persistent volume delete failed attempts. Broken down by storage class name."
        ),
        format!(r#"{d}_failed_total{{class="slow"}} 2"#),
        format!(
            "# HELP {d}_duration_seconds Latency in seconds to delete persistent volumes. Failed deletion attempts are ignored. Broken down by storage class name."
        ),
        format!(r#"{d}_duration_seconds_count{{class="slow"}} 1"#),
    ];
    // Prometheus' default buckets, each present once per label set.
    for le in [
        "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1.0", "2.5", "5.0", "10.0",
    ] {
        want.push(format!(
            r#"{d}_duration_seconds_bucket{{le="{le}",class="slow"}} 1"#
        ));
    }
    assert_lines(&out, &want);
    let buckets = out
        .lines()
        .filter(|l| l.starts_with(&format!("{d}_duration_seconds_bucket{{")))
        .count();
    assert_eq!(buckets, DEFAULT_BUCKETS.len() + 1, "{out}");
}

/// The whole exposition the binary builds (minus leader election, which needs a client):
/// every sample name is one upstream also exports, counters end in `_total` exactly once and
/// histograms only in `_bucket`, `_sum` and `_count`.
#[test]
fn whole_exposition_uses_upstream_sample_names() {
    let mut registry = Registry::default();
    controller_kit::client::RequestMetrics::new().register(&mut registry);
    let calls = csi::CallMetrics::new();
    calls.register(&mut registry);
    let queues = controller_kit::workqueue::WorkQueueMetrics::new();
    queues.register(&mut registry);
    // Families without a label set are not printed: give the queue family one member.
    let limiter = controller_kit::workqueue::RateLimiter::new(
        std::time::Duration::from_secs(1),
        std::time::Duration::from_secs(300),
    );
    let queue = controller_kit::workqueue::WorkQueue::new("claims", limiter, Some(&queues));
    queue.add("ns/claim".to_string());
    let controller = ControllerMetrics::new();
    controller.register(&mut registry);
    register_process_metrics(&mut registry);
    calls.set_driver_name("d");
    calls.record(
        "/csi.v1.Controller/CreateVolume",
        tonic::Code::Ok,
        std::time::Duration::from_millis(5),
        false,
    );
    controller.provision_succeeded("c", "", 1.0);
    controller.provision_failed("c", "");
    controller.delete_succeeded("c", 1.0);
    controller.delete_failed("c");
    let out = scrape(&registry);
    assert!(out.ends_with("# EOF\n"), "{out}");
    let mut types = std::collections::BTreeMap::new();
    for line in out.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("name and type");
            types.insert(name.to_string(), kind.to_string());
        }
    }
    let sample_names: std::collections::BTreeSet<&str> = out
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(['{', ' ']).next().unwrap_or(l))
        .collect();
    for name in &sample_names {
        let (family, suffixes): (&str, &[&str]) = if let Some(f) = name.strip_suffix("_total") {
            (f, &["counter"])
        } else if let Some(f) = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
        {
            (f, &["histogram"])
        } else {
            (name, &["gauge"])
        };
        let kind = types.get(family).map(String::as_str);
        assert!(
            kind.is_some_and(|k| suffixes.contains(&k)),
            "sample {name} of family {family} has type {kind:?}"
        );
        assert!(!name.ends_with("_total_total"), "{name}");
    }
    for name in [
        "csi_sidecar_operations_seconds_count",
        "controller_persistentvolumeclaim_provision_total",
        "controller_persistentvolumeclaim_provision_failed_total",
        "controller_persistentvolumeclaim_provision_duration_seconds_bucket",
        "controller_persistentvolume_delete_total",
        "controller_persistentvolume_delete_failed_total",
        "controller_persistentvolume_delete_duration_seconds_sum",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
        "workqueue_adds_total",
        "workqueue_depth",
    ] {
        assert!(sample_names.contains(name), "no {name} in:\n{out}");
    }
    for family in [
        "workqueue_depth",
        "workqueue_adds",
        "workqueue_queue_duration_seconds",
        "workqueue_work_duration_seconds",
        "workqueue_retries",
    ] {
        assert!(types.contains_key(family), "no family {family} in:\n{out}");
    }
}
