//! Controller plumbing shared by the provisioner's controllers.
//!
//! - [`workqueue`]: client-go's rate-limiting work queue (dedup, dirty re-add, per-key
//!   exponential backoff, `workqueue_*` metrics), plus an urgent lane.
//! - [`client`]: a `kube::Client` with client-go's client-side QPS/burst throttling and
//!   request metrics.
//! - [`events`]: a core/v1 Event recorder with client-go's correlation, aggregation and spam
//!   filtering (the stock RBAC grants core `events` only).
//! - [`reflect`]: informer caches over kube-runtime's watcher and reflector.
//! - [`compact`]: a cache that keeps objects as JSON bytes, for kinds counted in tens of
//!   thousands.
//! - [`fresh`]: read-your-writes over those caches: our own writes shown until the cache
//!   catches up.
//! - [`patch`]: writes of objects others own, as the difference alone (JSON merge patch), or
//!   applied to the stored object where only `update` is allowed.

// No unsafe code here: `forbid`, unlike the workspace's `deny`, cannot be allowed again below.
#![forbid(unsafe_code)]
// Shipped code reports failures instead of panicking; tests are free to unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod client;
pub mod compact;
pub mod events;
pub mod fresh;
pub mod patch;
pub mod reflect;
pub mod workqueue;

mod bucket;
