//! Leader election on a `coordination.k8s.io/v1` Lease, behaving like client-go's
//! `LeaderElector` + `LeaseLock` as csi-lib-utils configures them for the CSI sidecars.
//!
//! - Only GET, CREATE and PUT (with resourceVersion) are used, so upstream's RBAC for leases
//!   (get, watch, list, delete, update, create; no patch) is enough. A lost race is a 409.
//! - Expiry is judged by local observation time, never by the timestamps in the Lease.
//! - Every decision is a pure function in [`decide`]; [`LeaderElector`] only performs I/O.
//!
//! Typical use in the binary:
//!
//! ```no_run
//! # async fn demo(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use leader_election::*;
//! let cfg = LeaderElectionConfig::new(
//!     lock_name("hostpath.csi.k8s.io"),
//!     namespace_from_environment(None),
//!     identity_from_host(None)?,
//! );
//! let elector = LeaderElector::new(client, cfg)?;
//! let health = elector.health_check(); // serve at /healthz/leader-election
//! let cancel = tokio_util::sync::CancellationToken::new();
//! match elector.run(cancel, |token| async move { token.cancelled().await }).await {
//!     Outcome::Lost => std::process::exit(1),
//!     _ => {}
//! }
//! # let _ = health; Ok(()) }
//! ```

// No unsafe code here: `forbid`, unlike the workspace's `deny`, cannot be allowed again below.
#![forbid(unsafe_code)]
// Shipped code reports failures instead of panicking; tests are free to unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod attempt;
mod config;
pub mod decide;
mod elector;
mod health;
mod metrics;
mod names;
mod record;
mod store;

pub use config::{ConfigError, HEALTH_CHECK_TOLERANCE, JITTER_FACTOR, LeaderElectionConfig};
pub use decide::{Decision, Now};
pub use elector::{EventHook, LeaderElector, LeaderEvent, Outcome};
pub use health::HealthCheck;
pub use metrics::Metrics;
pub use names::{
    SERVICE_ACCOUNT_NAMESPACE_FILE, event_component, identity, identity_from_host, lock_name,
    namespace_from_environment, resolve_namespace, sanitize_name,
};
pub use record::{LeaseRecord, micro_now};
pub use store::{KubeLeases, LeaseStore, StoreError};

/// Path of the health endpoint (csi-lib-utils `HealthCheckerAddress`).
pub const HEALTH_CHECK_PATH: &str = "/healthz/leader-election";

#[cfg(test)]
mod elector_tests;
