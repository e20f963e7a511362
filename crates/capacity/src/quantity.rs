//! Byte counts ⇄ Kubernetes quantities, with Go's canonical BinarySI formatting.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Bytes of a quantity; `None` for an unparsable one (treated as "no value").
pub fn to_bytes(q: &Quantity) -> Option<i64> {
    provisioning::quantity::parse_quantity(&q.0).ok()
}

/// The quantity Go's `resource.NewQuantity(bytes, BinarySI)` would publish.
pub fn from_bytes(bytes: i64) -> Quantity {
    Quantity(provisioning::quantity::format_binary_si(bytes))
}
