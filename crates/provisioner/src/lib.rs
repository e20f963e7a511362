//! The `csi-provisioner` binary as a library: the async shells that connect the pure decision
//! crates (`provisioning`, `capacity`) to the Kubernetes API and the CSI driver.
//!
//! Start at [`app::run`]: it follows upstream's start-up sequence and then runs the
//! controllers ([`claims`], [`volumes`], [`capacity_controller`]) under leader election.

// No unsafe code here: `forbid`, unlike the workspace's `deny`, cannot be allowed again below.
#![forbid(unsafe_code)]
// Shipped code reports failures instead of panicking; tests are free to unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod api_error;
pub mod app;
mod base;
pub mod caches;
pub mod capacity_controller;
pub mod capacity_view;
pub mod claims;
pub mod context;
pub mod controllers;
mod data_source_api;
pub mod driver;
pub mod http;
pub mod kubeconfig;
pub mod metrics;
pub mod node;
pub mod orphans;
pub mod release_node;
pub mod secrets;
pub mod snapshot_caches;
pub mod snapshot_sweep;
pub mod snapshot_watch;
pub mod stopped;
pub mod subcommand;
mod supervise;
pub mod unsettled;
pub mod volumes;
pub mod write_ahead;

/// Version reported by `--version` and in the user agent.
pub const VERSION: &str = concat!("v", env!("CARGO_PKG_VERSION"));
