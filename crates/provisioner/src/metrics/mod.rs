//! The provisioning library's metrics and the process metrics of the binary.
//!
//! Everything is registered on the one [`prometheus_client::registry::Registry`] that
//! `app::run` builds and `http::serve` exposes. prometheus-client writes the OpenMetrics text
//! format, which appends `_total` to counter samples: counters are therefore registered under
//! their upstream name without that suffix, so the scraped names are exactly upstream's.

mod controller;
mod process;

pub use controller::{ControllerMetrics, DEFAULT_BUCKETS};
pub use process::register_process_metrics;

#[cfg(test)]
mod tests;
