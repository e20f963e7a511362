//! Flags upstream acts on that this implementation accepts (so upstream command lines keep
//! working) but does not act on, at least not yet. The binary logs one start-up warning each.

use crate::options::Options;

/// `(flag, why)` for flags that take effect upstream but not here. A flag appears when it was
/// given on the command line, or when its value switches on something we lack.
const RULES: &[(&str, &str)] = &[
    (
        "automaxprocs",
        "it tunes the Go runtime (GOMAXPROCS) and has no meaning for this Rust binary; accepted as a no-op by design",
    ),
    (
        "log-flush-frequency",
        "log lines are written to stderr unbuffered as they happen, so there is nothing to flush periodically",
    ),
    (
        "log-text-split-stream",
        "alpha option behind the LoggingAlphaOptions gate, which cannot be enabled (as upstream); all logs go to stderr",
    ),
    (
        "log-json-split-stream",
        "alpha option behind the LoggingAlphaOptions gate, which cannot be enabled (as upstream); all logs go to stderr",
    ),
    (
        "log-text-info-buffer-size",
        "alpha option behind the LoggingAlphaOptions gate; only 0 (no buffering) is accepted, as upstream",
    ),
    (
        "log-json-info-buffer-size",
        "alpha option behind the LoggingAlphaOptions gate; only 0 (no buffering) is accepted, as upstream",
    ),
    (
        "cloning-protection-threads",
        "cloning protection runs inside the claim workers (--worker-threads), not in a pool of its own",
    ),
];

impl Options {
    /// Flags that were accepted but are not acted on, with the reason, for a start-up warning.
    /// Listed when given on the command line.
    pub fn accepted_but_ignored(&self) -> Vec<(&'static str, &'static str)> {
        let out: Vec<(&'static str, &'static str)> = RULES
            .iter()
            .filter(|(flag, _)| self.is_explicit(flag))
            .copied()
            .collect();
        out
    }
}
