//! `--enable-pprof`: the parts of Go's `net/http/pprof` that have a Rust equivalent.
//!
//! - `/debug/pprof/`: a plain-text index of what is served.
//! - `/debug/pprof/cmdline`: the command line, arguments separated by NUL bytes (as Go).
//! - `/debug/pprof/profile?seconds=N`: a CPU profile in pprof's protobuf format (readable by
//!   `go tool pprof` and other pprof tools), sampled at 100 Hz by the `pprof` crate
//!   (SIGPROF timer, stack unwinding in the signal handler). `seconds` defaults to 30, as in
//!   Go, when missing, not a number or not positive. One profile at a time; a second request
//!   meanwhile gets 500. Function names need symbols: a binary built with
//!   `strip = "symbols"` (our release profile) yields unnamed frames.
//! - Everything else under `/debug/pprof/` (`heap`, `allocs`, `goroutine`, `block`, `mutex`,
//!   `threadcreate`, `symbol`, `trace`) answers 404 naming what is missing: heap profiles would
//!   need a profiling allocator (jemalloc) compiled into the binary, and the others describe
//!   Go runtime internals that have no counterpart.

use std::time::{Duration, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;

use super::profile::{self, Stack, Symbol, Timing};

/// Go's default profile length.
pub(crate) const DEFAULT_SECONDS: u64 = 30;
/// Samples per second (Go's CPU profiler also uses 100 Hz).
const FREQUENCY_HZ: i32 = 100;
/// Libraries not to unwind through from the signal handler (they may hold locks or lack
/// unwind tables), as the `pprof` crate recommends.
const BLOCKLIST: [&str; 4] = ["libc", "libgcc", "pthread", "vdso"];

/// The profiler is process-wide: tests that start it take turns.
#[cfg(test)]
pub(crate) static PROFILER_TEST_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Plain-text index of `/debug/pprof/`.
pub(crate) const INDEX: &str = "csi-provisioner profiling endpoints (--enable-pprof)\n\n\
/debug/pprof/cmdline              the command line, arguments separated by NUL bytes\n\
/debug/pprof/profile?seconds=30   CPU profile in pprof protobuf format (go tool pprof)\n\n\
Not available in this implementation: heap, allocs, goroutine, block, mutex, threadcreate,\n\
symbol, trace (Go runtime profiles).\n";

/// The `seconds` query parameter as Go's handler reads it: a positive integer, else 30.
pub(crate) fn profile_seconds(query: Option<&str>) -> u64 {
    query
        .unwrap_or("")
        .split('&')
        .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
        .find(|(key, _)| *key == "seconds")
        .and_then(|(_, value)| value.parse::<i64>().ok())
        .filter(|s| *s > 0)
        .map_or(DEFAULT_SECONDS, |s| s as u64)
}

/// The body of `/debug/pprof/cmdline`.
pub(crate) fn cmdline(args: &[String]) -> String {
    args.join("\0")
}

/// The 404 text for a Go profile we do not have.
pub(crate) fn missing(name: &str) -> String {
    format!(
        "Unknown profile: {name}. Only /debug/pprof/profile (CPU) and /debug/pprof/cmdline are available here; see /debug/pprof/\n"
    )
}

/// Why no profile came back.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProfileError {
    #[error("Could not enable CPU profiling: {0}")]
    Start(String),
    #[error("Could not build the CPU profile: {0}")]
    Report(String),
}

/// Samples this process for `seconds` (less if `shutdown` fires) and returns the encoded
/// profile.
pub(crate) async fn cpu_profile(
    seconds: u64,
    shutdown: &CancellationToken,
) -> Result<Vec<u8>, ProfileError> {
    // Building the guard scans the loaded libraries for the blocklist: keep it off the
    // async workers.
    let guard = tokio::task::spawn_blocking(|| {
        pprof::ProfilerGuardBuilder::default()
            .frequency(FREQUENCY_HZ)
            .blocklist(&BLOCKLIST)
            .build()
    })
    .await
    .map_err(|e| ProfileError::Start(e.to_string()))?
    .map_err(|e| ProfileError::Start(e.to_string()))?;
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_secs(seconds)) => {}
        _ = shutdown.cancelled() => {}
    }
    // Symbolising is CPU-heavy: off the async workers too.
    tokio::task::spawn_blocking(move || {
        let report = guard
            .report()
            .build()
            .map_err(|e| ProfileError::Report(e.to_string()))?;
        drop(guard);
        Ok(encode(&report))
    })
    .await
    .map_err(|e| ProfileError::Report(e.to_string()))?
}

fn encode(report: &pprof::Report) -> Vec<u8> {
    use prost::Message as _;
    let stacks: Vec<Stack> = report
        .data
        .iter()
        .map(|(frames, count)| {
            let mut symbols: Vec<Vec<Symbol>> = frames
                .frames
                .iter()
                .map(|frame| {
                    frame
                        .iter()
                        .map(|s| Symbol {
                            name: s.name(),
                            system_name: s.sys_name().into_owned(),
                            file: s.filename().into_owned(),
                            line: i64::from(s.lineno()),
                        })
                        .collect()
                })
                .collect();
            profile::trim_profiler_frames(&mut symbols);
            Stack {
                thread: frames.thread_name_or_id(),
                frames: symbols,
                count: *count as i64,
            }
        })
        .collect();
    let timing = &report.timing;
    let start = timing
        .start_time
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    profile::build(
        &stacks,
        Timing {
            start_unix_nanos: i64::try_from(start.as_nanos()).unwrap_or(i64::MAX),
            duration_nanos: i64::try_from(timing.duration.as_nanos()).unwrap_or(i64::MAX),
            frequency_hz: i64::from(timing.frequency),
        },
    )
    .encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_parameter_reads_like_go() {
        let cases: &[(Option<&str>, u64)] = &[
            (None, 30),
            (Some(""), 30),
            (Some("seconds=5"), 5),
            (Some("debug=1&seconds=2"), 2),
            (Some("seconds=0"), 30),
            (Some("seconds=-3"), 30),
            (Some("seconds=abc"), 30),
            (Some("seconds=1.5"), 30),
            (Some("seconds"), 30),
            (Some("second=5"), 30),
        ];
        for (query, want) in cases {
            assert_eq!(profile_seconds(*query), *want, "{query:?}");
        }
    }

    #[test]
    fn cmdline_joins_with_nul_and_missing_names_the_profile() {
        assert_eq!(
            cmdline(&["csi-provisioner".into(), "--v=5".into()]),
            "csi-provisioner\0--v=5"
        );
        assert!(missing("heap").starts_with("Unknown profile: heap."));
    }

    /// A real, short profile of this test process: it decodes, and the busy function shows up.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cpu_profile_samples_a_busy_thread() {
        use prost::Message as _;
        let _one_profiler = PROFILER_TEST_LOCK.lock().await;
        let stop = CancellationToken::new();
        let busy = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.is_cancelled() {
                    x = std::hint::black_box(spin(x));
                }
                x
            })
        };
        let bytes = cpu_profile(1, &CancellationToken::new())
            .await
            .expect("profile");
        stop.cancel();
        busy.join().expect("busy thread");
        let p = profile::Profile::decode(bytes.as_slice()).expect("decode");
        let total: i64 = p.sample.iter().map(|s| s.value[0]).sum();
        assert!(total > 10, "only {total} samples");
        assert!(
            p.string_table.iter().any(|s| s.contains("spin")),
            "no frame names the busy function"
        );
    }

    #[inline(never)]
    fn spin(mut x: u64) -> u64 {
        for i in 0..100_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i ^ (x >> 3));
        }
        x
    }
}
