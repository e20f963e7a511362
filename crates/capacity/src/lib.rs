//! Storage capacity tracking, as pure functions.
//!
//! The capacity controller (an async shell in the `csi-provisioner` binary) feeds these
//! functions with what its caches hold and applies what they return:
//!
//! | Question | Answer |
//! |---|---|
//! | Which topology segments exist? | [`segment::segments`] from CSINodes + Node labels |
//! | Which classes get objects? | [`class::eligible`] |
//! | Which (segment, class) pairs should be published? | [`desired::desired_keys`] |
//! | What does an existing object say? | [`published::Published::from_object`] |
//! | What must be written for one pair? | [`plan::plan_key`] |
//! | Which objects are obsolete? | [`plan::obsolete`] |
//! | What object do we create? | [`published::build_object`] |
//! | Which pairs does a new or deleted volume touch? | [`refresh::keys_for_volume`] |
//! | Which segment does one node contribute? | [`resync::node_segment`], [`resync::node_driver`] |
//! | Does a changed StorageClass need a resync? | [`resync::class_matters`] |
//! | What must a resync refresh, and which keys left? | [`resync::diff`] |
//! | How long does a key wait after failed GetCapacity calls? | [`resync::backoff`] |
//! | Why can a waiting claim not be placed anywhere? | [`explain::explain_exhaustion`] |

// A decision crate: every public item says what it decides (denied in CI by clippy -D warnings).
#![warn(missing_docs)]

pub mod class;
pub mod desired;
pub mod explain;
pub mod plan;
pub mod published;
mod quantity;
pub mod refresh;
pub mod resync;
pub mod segment;
pub mod value;

pub use desired::Key;
pub use segment::Segment;
pub use value::Capacity;

/// Label naming the driver on every object we publish.
pub const DRIVER_NAME_LABEL: &str = "csi.storage.k8s.io/drivername";
/// Label naming the instance that manages an object.
pub const MANAGED_BY_LABEL: &str = "csi.storage.k8s.io/managed-by";
/// `managed-by` value of a central (not per-node) provisioner.
pub const MANAGED_BY_CENTRAL: &str = "external-provisioner";
/// Prefix of the server-generated object names.
pub const GENERATE_NAME: &str = "csisc-";
