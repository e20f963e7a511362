//! Every provisioning decision of the external-provisioner as a pure function: no I/O, no async,
//! no clocks, no randomness (the caller passes in what upstream would draw at random).
//!
//! # Map: which function answers which question
//!
//! | Question | Answer |
//! |---|---|
//! | Is this claim ours, and should it be provisioned now? | [`claim::should_provision`] |
//! | What does the claim controller do next with a claim? | [`claim_step::next_step`] |
//! | Which provisioner / node / StorageClass does the claim name? | [`claim::provisioner_of`], [`claim::selected_node`], [`claim::class_name`] |
//! | How many bytes does the claim request? | [`claim::requested_bytes`] ([`quantity::parse_quantity`]) |
//! | Everything before CreateVolume, in upstream's order, with error states | [`prepare::prepare`] |
//! | What is the PV / volume name? | [`volume_name::make_volume_name`] (flags: [`volume_name::validate_flags`]) |
//! | Which parameters go to the driver? | [`parameters::strip_reserved`], [`parameters::add_extra_create_metadata`] |
//! | Which file system type? | [`fstype::resolve_fs_type`] |
//! | Which secret does each CSI call use? | [`secrets::secret_reference`], [`secrets::secret_references`] |
//! | What does `${pvc.name}` expand to? | [`secrets::template::expand`] (Go's `os.Expand`) |
//! | Which CSI access mode / capabilities? | [`capabilities::csi_access_mode`], [`capabilities::claim_volume_capabilities`] |
//! | Where may and should the volume be created? | [`topology::accessibility_requirements`] |
//! | Which node affinity does the PV get? | [`topology::volume_node_affinity`] |
//! | What is the CreateVolumeRequest? | [`request::build_create_volume_request`], [`prepare::ProvisionPlan::create_volume_request`] |
//! | Is the reported size acceptable? | [`pv::capacity_decision`] |
//! | What PV object is created? | [`pv::build_persistent_volume`] |
//! | What does a CreateVolume error mean (retry, background, reschedule)? | [`errors::classify_create_volume_error`] |
//! | May a volume exist for this claim, and what does cleaning it up take? | [`attempt::after_call`], [`attempt::after_failure`], [`attempt::cleanup`], [`attempt::after_probe`] |
//! | When may a failed claim be attempted again? | [`retry::hold_after_failure`], [`retry::wait`] |
//! | How is a byte count written as a quantity? | [`quantity::format_binary_si`] |
//! | Does a PV get our finalizer, lose it, get deleted or ignored? | [`volume::decide::decide`] (ours: [`volume::decide::is_ours`]) |
//! | Which in-tree plugin does our driver replace (CSI migration)? | [`volume::decide::migrated_from`], [`migration::in_tree_name`] |
//! | Is this class / PV an in-tree one, and what is its CSI / in-tree form? | [`migration::class_to_csi`], [`migration::csi_pv_to_in_tree`], [`migration::in_tree_pv_to_csi`] |
//! | Which secret does DeleteVolume use? | [`volume::decide::deletion_secret`] |
//! | Which deletion steps of a released PV remain? | [`volume::steps::remaining`] |
//! | Which annotation, finalizer, event reason? | [`names`] |
//!
//! # Typical flow for the claim controller
//!
//! 1. [`claim::should_provision`]; only `Provision` goes on.
//! 2. [`prepare::prepare`] with the StorageClass, flags, driver capabilities and, when the driver
//!    supports topology, [`prepare::TopologyFacts`] from the informer caches. A
//!    [`prepare::Prepared::ExternalPopulator`] is ignored after a Normal `Provisioning` event.
//! 3. Fetch `plan.secrets.provisioner` (failure: [`prepare::secret_fetch_error`]) and the
//!    VolumeAttributesClass (check it with [`prepare::check_volume_attributes_class`]).
//! 4. [`prepare::ProvisionPlan::create_volume_request`], then CreateVolume. The request holds
//!    secrets: never log it with `{:?}`, only through `csi::sanitize`.
//! 5. On error: [`errors::classify_create_volume_error`] (or
//!    [`errors::classify_non_grpc_error`]), with [`errors::may_reschedule`].
//! 6. On success: [`pv::capacity_decision`], then [`pv::build_persistent_volume`].
//!
//! Deviations from upstream are documented on the items concerned, each in a paragraph starting
//! "Differs from upstream:".

// No unsafe code here: `forbid`, unlike the workspace's `deny`, cannot be allowed again below.
#![forbid(unsafe_code)]
// Shipped code reports failures instead of panicking; tests are free to unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
// A decision crate: every public item says what it decides (denied in CI by clippy -D warnings).
#![warn(missing_docs)]

pub mod attempt;
pub mod capabilities;
pub mod claim;
pub mod claim_step;
pub mod data_source;
pub mod distributed;
pub mod errors;
pub mod fstype;
pub mod lifecycle;
pub mod lost_node;
pub mod migration;
pub mod names;
pub mod parameters;
pub mod prepare;
pub mod pv;
pub mod quantity;
pub mod record;
pub mod request;
pub mod retry;
pub mod secrets;
pub mod topology;
pub mod validation;
pub mod volume;
pub mod volume_name;

#[cfg(test)]
pub(crate) mod testutil;

pub use errors::{ProvisionError, ProvisioningState};
