//! klog-style logging for `tracing`.
//!
//! Upstream sidecars log through klog, where `-v=N` enables `V(N)` messages. We keep that model:
//! a process-wide verbosity set once from the command line, and the [`v!`] macro that checks it
//! *before* building the event, so expensive fields (sanitised CSI messages) cost nothing when
//! the level is off. Every event carries its level as the field `v`.
//!
//! [`init`] installs a global subscriber that writes klog's text format or component-base's JSON
//! format to stderr (where upstream writes both), and drops every event above the verbosity, even
//! one emitted directly through `tracing`.

// No unsafe code here: `forbid`, unlike the workspace's `deny`, cannot be allowed again below.
#![forbid(unsafe_code)]
// Shipped code reports failures instead of panicking; tests are free to unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use thiserror::Error;
use tracing::Subscriber;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

mod clock;
mod fields;
pub mod filter;
pub mod json;
mod quote;
pub mod text;
pub mod vmodule;

pub use fields::{Fields, Value};
pub use filter::{DEBUG_V, Source, TRACE_V, VerbosityFilter};
pub use quote::go_quote;
pub use vmodule::{VModule, VModuleError};

#[doc(hidden)]
pub use tracing;

static VERBOSITY: AtomicU8 = AtomicU8::new(0);
static VMODULE: RwLock<Option<Arc<VModule>>> = RwLock::new(None);
static VMODULE_MAX: AtomicU32 = AtomicU32::new(0);

/// Sets the process-wide verbosity (the `-v` flag).
pub fn set_verbosity(level: u8) {
    VERBOSITY.store(level, Ordering::Relaxed);
    // Callsites disabled under the old level must be asked again.
    tracing::callsite::rebuild_interest_cache();
}

/// The current verbosity.
pub fn verbosity() -> u8 {
    VERBOSITY.load(Ordering::Relaxed)
}

/// Whether `V(level)` messages are enabled.
pub fn enabled(level: u8) -> bool {
    level <= verbosity()
}

/// Sets the process-wide `--vmodule` rules.
pub fn set_vmodule(vmodule: VModule) {
    VMODULE_MAX.store(vmodule.max_level(), Ordering::Relaxed);
    let value = (!vmodule.is_empty()).then(|| Arc::new(vmodule));
    *VMODULE.write().unwrap_or_else(|e| e.into_inner()) = value;
    tracing::callsite::rebuild_interest_cache();
}

fn vmodule_max() -> u32 {
    VMODULE_MAX.load(Ordering::Relaxed)
}

/// Whether `V(level)` messages from source file `file` are enabled: `-v`, or a `--vmodule` rule
/// for that file. Used by [`v!`]; the vmodule lookup only runs for levels above `-v`.
pub fn enabled_in(level: u8, file: &str) -> bool {
    if enabled(level) {
        return true;
    }
    if u32::from(level) > vmodule_max() {
        return false;
    }
    let rules = VMODULE.read().unwrap_or_else(|e| e.into_inner());
    rules
        .as_ref()
        .and_then(|v| v.level_for(file))
        .is_some_and(|l| u32::from(level) <= l)
}

/// Logs an info event at klog verbosity `level`, like Go's `klog.V(level).InfoS(...)`.
///
/// ```
/// klog::v!(5, method = "/csi.v1.Identity/Probe", "GRPC call");
/// ```
#[macro_export]
macro_rules! v {
    ($level:expr, $($arg:tt)+) => {
        if $crate::enabled_in($level, file!()) {
            $crate::tracing::info!(v = $level as u8, $($arg)+);
        }
    };
}

/// The output format (`--logging-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// klog's text lines.
    #[default]
    Text,
    /// component-base's JSON lines.
    Json,
}

impl Format {
    /// The names `--logging-format` accepts, as upstream lists them.
    pub const NAMES: [&'static str; 2] = ["json", "text"];
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(format!("unsupported log format {other:?}")),
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Text => "text",
            Self::Json => "json",
        })
    }
}

/// Why [`init`] failed.
#[derive(Debug, Error)]
pub enum InitError {
    #[error("invalid --vmodule: {0}")]
    VModule(#[from] VModuleError),
    #[error("--vmodule is only supported with --logging-format=text")]
    VModuleNeedsText,
    #[error("a global tracing subscriber is already installed: {0}")]
    AlreadySet(String),
}

/// Everything [`layer`] needs; [`Config::new`] gives the process-wide settings, the real clock
/// and the real PID.
#[derive(Debug, Clone)]
pub struct Config {
    pub format: Format,
    pub source: Source,
    pub clock: fn() -> SystemTime,
    pub pid: u32,
}

impl Config {
    pub fn new(format: Format) -> Self {
        Self {
            format,
            source: Source::Global,
            clock: SystemTime::now,
            pid: std::process::id(),
        }
    }
}

/// A formatting layer with the verbosity filter attached, writing one line per event to
/// `writer`. [`init`] uses it with stderr; tests use it with a buffer.
pub fn layer<S, W>(config: Config, writer: W) -> Box<dyn Layer<S> + Send + Sync + 'static>
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let filter = VerbosityFilter::new(config.source);
    match config.format {
        Format::Text => tracing_subscriber::fmt::layer()
            .event_format(text::TextFormat {
                clock: config.clock,
                pid: config.pid,
            })
            .fmt_fields(text::TextFields)
            .with_writer(writer)
            .with_filter(filter)
            .boxed(),
        Format::Json => tracing_subscriber::fmt::layer()
            .event_format(json::JsonFormat {
                clock: config.clock,
            })
            .fmt_fields(json::JsonFields)
            .with_writer(writer)
            .with_filter(filter)
            .boxed(),
    }
}

/// Sets `-v` and `--vmodule` and installs the global subscriber writing `format` to stderr.
/// Events from the `log` crate are forwarded too.
pub fn init(format: Format, verbosity: u8, vmodule: Option<&str>) -> Result<(), InitError> {
    let rules = VModule::parse(vmodule.unwrap_or(""))?;
    if !rules.is_empty() && format != Format::Text {
        return Err(InitError::VModuleNeedsText);
    }
    set_verbosity(verbosity);
    set_vmodule(rules);
    tracing_subscriber::registry()
        .with(layer(Config::new(format), std::io::stderr))
        .try_init()
        .map_err(|e| InitError::AlreadySet(e.to_string()))
}

#[cfg(test)]
mod tests;
