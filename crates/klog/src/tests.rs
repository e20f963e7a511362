//! End-to-end tests: real tracing events through the layer into a buffer.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;

use super::*;

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Capture {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

impl io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Capture {
    type Writer = Capture;
    fn make_writer(&'a self) -> Capture {
        self.clone()
    }
}

fn fixed_clock() -> SystemTime {
    // 2023-11-22 02:07:00.123456 UTC
    UNIX_EPOCH + Duration::from_micros(1_700_618_820_123_456)
}

/// Runs `f` under a subscriber with fixed settings and returns what it wrote.
fn capture(format: Format, verbosity: u8, vmodule: &str, f: impl FnOnce()) -> String {
    let out = Capture::default();
    let config = Config {
        format,
        source: Source::Fixed {
            verbosity,
            vmodule: Arc::new(VModule::parse(vmodule).unwrap()),
        },
        clock: fixed_clock,
        pid: 12345,
    };
    let subscriber = tracing_subscriber::registry().with(layer(config, out.clone()));
    tracing::subscriber::with_default(subscriber, f);
    out.text()
}

#[test]
fn text_golden_lines() {
    let mut lines = Vec::new();
    let out = capture(Format::Text, 5, "", || {
        lines.push(line!() + 1);
        tracing::info!(
            v = 2u8,
            driver = "hostpath.csi.k8s.io",
            "Detected CSI driver"
        );
        lines.push(line!() + 1);
        tracing::warn!(count = 3, ratio = 0.5, ok = false, "Something odd");
        lines.push(line!() + 1);
        tracing::error!(err = %"rpc error: code = Unavailable", claim = "default/pvc-1", "Failed");
    });
    let want = format!(
        "I1122 02:07:00.123456   12345 tests.rs:{}] \"Detected CSI driver\" driver=\"hostpath.csi.k8s.io\"\n\
         W1122 02:07:00.123456   12345 tests.rs:{}] \"Something odd\" count=3 ratio=0.5 ok=false\n\
         E1122 02:07:00.123456   12345 tests.rs:{}] \"Failed\" err=\"rpc error: code = Unavailable\" claim=\"default/pvc-1\"\n",
        lines[0], lines[1], lines[2]
    );
    assert_eq!(out, want);
}

#[test]
fn text_includes_span_fields_before_event_fields() {
    let out = capture(Format::Text, 0, "", || {
        let span = tracing::info_span!("claim", claim = "ns/pvc", attempt = 2);
        let _guard = span.enter();
        tracing::info!(node = "n1", "Provisioning");
    });
    let body = out.split_once("] ").unwrap().1;
    assert_eq!(
        body,
        "\"Provisioning\" claim=\"ns/pvc\" attempt=2 node=\"n1\"\n"
    );
}

#[test]
fn text_multiline_values_use_klog_blocks() {
    let out = capture(Format::Text, 0, "", || {
        tracing::info!(spec = "a: 1\nb: 2", "PV");
    });
    let body = out.split_once("] ").unwrap().1;
    assert_eq!(body, "\"PV\" spec=<\n\ta: 1\n\tb: 2\n >\n");
}

#[test]
fn json_golden_lines() {
    let mut lines = Vec::new();
    let out = capture(Format::Json, 5, "", || {
        lines.push(line!() + 1);
        tracing::info!(
            v = 5u8,
            method = "/csi.v1.Controller/CreateVolume",
            "GRPC call"
        );
        lines.push(line!() + 1);
        tracing::info!("Version");
        lines.push(line!() + 1);
        tracing::error!(err = %"timeout", pvc = "a/b", "Failed to provision");
    });
    let want = format!(
        "{{\"ts\":1700618820123.456,\"caller\":\"src/tests.rs:{}\",\"msg\":\"GRPC call\",\"v\":5,\"method\":\"/csi.v1.Controller/CreateVolume\"}}\n\
         {{\"ts\":1700618820123.456,\"caller\":\"src/tests.rs:{}\",\"msg\":\"Version\",\"v\":0}}\n\
         {{\"ts\":1700618820123.456,\"caller\":\"src/tests.rs:{}\",\"msg\":\"Failed to provision\",\"pvc\":\"a/b\",\"err\":\"timeout\"}}\n",
        lines[0], lines[1], lines[2]
    );
    assert_eq!(out, want);
}

#[test]
fn json_span_fields_become_members() {
    let out = capture(Format::Json, 0, "", || {
        let span = tracing::info_span!("op", op = "create");
        let _guard = span.enter();
        tracing::info!(size = 10u64, "done");
    });
    assert!(
        out.ends_with(",\"msg\":\"done\",\"v\":0,\"op\":\"create\",\"size\":10}\n"),
        "{out}"
    );
}

#[test]
fn events_above_the_verbosity_never_reach_the_output() {
    let out = capture(Format::Text, 3, "", || {
        tracing::info!(v = 3u8, "kept v3");
        tracing::info!(v = 4u8, "dropped v4");
        tracing::info!(v = 9i32, "dropped v9 as i32");
        tracing::debug!("dropped debug");
        tracing::trace!("dropped trace");
        tracing::warn!("kept warning");
    });
    assert!(out.contains("\"kept v3\""), "{out}");
    assert!(out.contains("\"kept warning\""), "{out}");
    assert!(!out.contains("dropped"), "{out}");
    assert_eq!(out.lines().count(), 2);
}

#[test]
fn debug_and_trace_map_to_high_levels() {
    let at_debug = capture(Format::Text, DEBUG_V, "", || {
        tracing::debug!("a debug line");
        tracing::trace!("a trace line");
    });
    assert!(at_debug.contains("a debug line") && !at_debug.contains("a trace line"));
    let at_trace = capture(Format::Json, TRACE_V, "", || tracing::trace!("t"));
    assert!(at_trace.contains("\"msg\":\"t\",\"v\":9"), "{at_trace}");
}

#[test]
fn vmodule_raises_the_level_for_matching_files() {
    let out = capture(Format::Text, 1, "tests=4", || {
        tracing::info!(v = 4u8, "this file at v4");
        tracing::info!(v = 5u8, "this file at v5");
    });
    assert!(
        out.contains("this file at v4") && !out.contains("at v5"),
        "{out}"
    );
    let other = capture(Format::Text, 1, "elsewhere=9", || {
        tracing::info!(v = 4u8, "no")
    });
    assert_eq!(other, "");
}

#[test]
fn format_names_round_trip() {
    for name in Format::NAMES {
        assert_eq!(name.parse::<Format>().unwrap().to_string(), name);
    }
    assert_eq!(
        "xml".parse::<Format>().unwrap_err(),
        "unsupported log format \"xml\""
    );
}

/// The process-wide settings, in one test because they are global.
#[test]
fn global_verbosity_vmodule_and_the_v_macro() {
    set_verbosity(3);
    assert!(enabled(0) && enabled(3) && !enabled(4));
    assert!(!enabled_in(5, file!()));
    set_vmodule(VModule::parse("tests=5").unwrap());
    assert!(enabled_in(5, file!()));
    assert!(!enabled_in(6, file!()));
    assert!(!enabled_in(5, "src/other.rs"));

    let out = Capture::default();
    let config = Config {
        clock: fixed_clock,
        pid: 1,
        ..Config::new(Format::Text)
    };
    let subscriber = tracing_subscriber::registry().with(layer(config, out.clone()));
    tracing::subscriber::with_default(subscriber, || {
        v!(5, method = "Probe", "via vmodule");
        v!(6, "too verbose");
        v!(2, "plain");
    });
    let text = out.text();
    assert!(text.contains("\"via vmodule\" method=\"Probe\""), "{text}");
    assert!(
        text.contains("\"plain\"") && !text.contains("too verbose"),
        "{text}"
    );

    set_vmodule(VModule::default());
    set_verbosity(0);
    assert!(!enabled(1));
    assert!(!enabled_in(5, file!()));
}

#[test]
fn init_rejects_vmodule_with_json() {
    assert!(matches!(
        init(Format::Json, 0, Some("a=1")),
        Err(InitError::VModuleNeedsText)
    ));
    assert!(matches!(
        init(Format::Text, 0, Some("a")),
        Err(InitError::VModule(_))
    ));
}

#[test]
fn log_crate_records_use_their_own_location_and_hide_bridge_fields() {
    // Field names the `log` bridge (tracing-log) attaches to forwarded records.
    let out = capture(Format::Text, 0, "", || {
        tracing::info!(
            log.target = "h2::codec",
            log.module_path = "h2::codec",
            log.file = "/src/h2-0.4/src/codec/framed_write.rs",
            log.line = 214u64,
            "send frame"
        );
    });
    assert_eq!(
        out,
        "I1122 02:07:00.123456   12345 framed_write.rs:214] \"send frame\"\n"
    );
}

#[test]
fn json_error_without_err_field_has_no_err_member() {
    let out = capture(Format::Json, 0, "", || {
        tracing::error!(pvc = "a/b", "Lost lease")
    });
    assert!(
        out.ends_with(",\"msg\":\"Lost lease\",\"pvc\":\"a/b\"}\n"),
        "{out}"
    );
}
