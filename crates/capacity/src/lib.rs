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
//! | What does the capacity view show? | [`view::text`], [`view::html`] |
//! | Which foreign objects overlap ours? | [`conflicts::overlaps`] |
//! | Do the claims of one pod fit one node together? | [`pod::check`] |
//! | What do in-flight volumes take from a reading? | [`ledger::apply`], [`ledger::Ledger`] |
//! | Which objects belong to nodes that are gone (distributed)? | [`orphans::orphans`] |

// No unsafe code here: `forbid`, unlike the workspace's `deny`, cannot be allowed again below.
#![forbid(unsafe_code)]
// Shipped code reports failures instead of panicking; tests are free to unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
// A decision crate: every public item says what it decides (denied in CI by clippy -D warnings).
#![warn(missing_docs)]

pub mod class;
pub mod conflicts;
pub mod desired;
pub mod explain;
pub mod grace;
pub mod ledger;
pub mod orphans;
pub mod plan;
pub mod pod;
pub mod published;
mod quantity;
pub mod refresh;
pub mod resync;
pub mod scheduler;
pub mod segment;
pub mod value;
pub mod view;

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

/// `managed-by` value of the instance on `node` in distributed provisioning:
/// `external-provisioner-<node>`, shortened like upstream (which took the rule from OpenShift's
/// name helper) when longer than a label value may be: the base is cut and an FNV-32a hash
/// keeps it unique.
pub fn managed_by_node(node: &str) -> String {
    const MAX: usize = 63;
    let base = MANAGED_BY_CENTRAL;
    let name = format!("{base}-{node}");
    if name.len() <= MAX {
        return name;
    }
    // Room for the base after `-<8 hex>-<node>`; none at all (upstream's `<= 0`) takes the
    // short form, or the value would start with `-`.
    match (MAX - 10).checked_sub(node.len()) {
        Some(keep) if keep > 0 => format!("{}-{}-{node}", &base[..keep], fnv32a_hex(base)),
        _ => {
            let short = format!("{}-{}", &base[..base.len().min(MAX - 9)], fnv32a_hex(&name));
            short.chars().take(MAX).collect()
        }
    }
}

/// Go's `hash/fnv.New32a` sum as eight hex digits.
fn fnv32a_hex(s: &str) -> String {
    let hash = s.bytes().fold(2_166_136_261u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(16_777_619)
    });
    format!("{hash:08x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn managed_by_of_a_node_instance() {
        assert_eq!(managed_by_node("node-1"), "external-provisioner-node-1");
        let n42 = "n".repeat(42);
        assert_eq!(managed_by_node(&n42), format!("external-provisioner-{n42}"));
        // 43 characters: the base is cut to 10 and the base's hash joins it.
        let n43 = "n".repeat(43);
        let v = managed_by_node(&n43);
        assert_eq!(v.len(), 63, "{v}");
        assert!(v.starts_with("external-p-") && v.ends_with(&n43), "{v}");
        // Longer than the label itself: base plus the hash of the whole name.
        let long = "x".repeat(80);
        let v = managed_by_node(&long);
        assert!(
            v.starts_with("external-provisioner-") && v.len() == 29,
            "{v}"
        );
        assert_ne!(v, managed_by_node(&"y".repeat(80)));
        // 52 characters leave one of the base; 53 leave none, and the short form is taken
        // (not `-<hash>-<node>`, which no label value may be).
        let v = managed_by_node(&"n".repeat(52));
        assert!(v.starts_with("e-") && v.len() == 63, "{v}");
        let n53 = "n".repeat(53);
        let want = format!(
            "external-provisioner-{}",
            fnv32a_hex(&format!("external-provisioner-{n53}"))
        );
        assert_eq!(managed_by_node(&n53), want);
        // FNV-32a of the empty string is the offset basis.
        assert_eq!(fnv32a_hex(""), "811c9dc5");
        assert_eq!(fnv32a_hex("a"), "e40c292c");
    }
}
