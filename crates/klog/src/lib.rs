//! klog-style verbosity for `tracing`.
//!
//! Upstream sidecars log through klog, where `-v=N` enables `V(N)` messages. We keep that model:
//! a process-wide verbosity set once from the command line, and the [`v!`] macro that checks it
//! *before* building the event, so expensive fields (sanitised CSI messages) cost nothing when
//! the level is off. Every event carries its level as the field `v`.

use std::sync::atomic::{AtomicU8, Ordering};

#[doc(hidden)]
pub use tracing;

static VERBOSITY: AtomicU8 = AtomicU8::new(0);

/// Sets the process-wide verbosity (the `-v` flag).
pub fn set_verbosity(level: u8) {
    VERBOSITY.store(level, Ordering::Relaxed);
}

/// The current verbosity.
pub fn verbosity() -> u8 {
    VERBOSITY.load(Ordering::Relaxed)
}

/// Whether `V(level)` messages are enabled.
pub fn enabled(level: u8) -> bool {
    level <= verbosity()
}

/// Logs an info event at klog verbosity `level`, like Go's `klog.V(level).InfoS(...)`.
///
/// ```
/// klog::v!(5, method = "/csi.v1.Identity/Probe", "GRPC call");
/// ```
#[macro_export]
macro_rules! v {
    ($level:expr, $($arg:tt)+) => {
        if $crate::enabled($level) {
            $crate::tracing::info!(v = $level as u8, $($arg)+);
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_at_or_below_verbosity_are_enabled() {
        set_verbosity(3);
        assert!(enabled(0));
        assert!(enabled(3));
        assert!(!enabled(4));
        set_verbosity(0);
        assert!(!enabled(1));
    }
}
