//! Why a waiting claim fits nowhere: the explanation we put on the PVC.

use crate::published::format_bytes;
use crate::segment::{Segment, display};
use crate::value::Capacity;

/// Event reason of the explanation (ours; upstream emits nothing here).
pub const REASON: &str = "NotEnoughCapacity";

/// How many places to name when several share the largest capacity.
const MAX_PLACES: usize = 3;

/// The message for a claim of `class` requesting `requested` bytes when no published segment
/// of the class can hold it, or `None` when at least one can.
///
/// `published` holds the readings of the class's objects. The scheduler compares the request
/// with each object's volume limit (`maximumVolumeSize` if set, else `capacity`), so we do too.
pub fn explain_exhaustion(
    class: &str,
    requested: i64,
    published: &[(Segment, Capacity)],
) -> Option<String> {
    let largest = published.iter().map(|(_, c)| c.limit()).max();
    let Some(largest) = largest else {
        return Some(format!(
            "no node can provision this volume: storage class {class:?} has no published storage \
             capacity, so the scheduler places no pod that needs {} from it",
            format_bytes(requested)
        ));
    };
    if requested <= largest {
        return None;
    }
    let mut places: Vec<String> = published
        .iter()
        .filter(|(_, c)| c.limit() == largest)
        .map(|(s, _)| display(s))
        .collect();
    places.sort();
    let more = places.len().saturating_sub(MAX_PLACES);
    places.truncate(MAX_PLACES);
    let mut where_ = places.join("; ");
    if more > 0 {
        where_.push_str(&format!(" and {more} more"));
    }
    Some(format!(
        "no node can provision this volume: storage class {class:?} needs {} but the largest \
         published capacity is {} (on {where_}); free space or add capacity, or request less",
        format_bytes(requested),
        format_bytes(largest),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(node: &str) -> Segment {
        Segment::from([("topology.mock.csi/node".to_string(), node.to_string())])
    }

    const GI: i64 = 1 << 30;

    #[test]
    fn fits_somewhere_means_no_message() {
        let p = [
            (seg("a"), Capacity::from_response(10 * GI, None)),
            (seg("b"), Capacity::from_response(100 * GI, None)),
        ];
        assert_eq!(explain_exhaustion("fast", 50 * GI, &p), None);
        assert_eq!(
            explain_exhaustion("fast", 100 * GI, &p),
            None,
            "equality fits, as in the scheduler"
        );
    }

    #[test]
    fn names_class_size_largest_and_where() {
        let p = [
            (seg("a"), Capacity::from_response(10 * GI, None)),
            (seg("b"), Capacity::from_response(10 * GI, None)),
            (seg("c"), Capacity::from_response(5 * GI, None)),
        ];
        let msg = explain_exhaustion("fast", 50 * GI, &p).unwrap();
        assert_eq!(
            msg,
            "no node can provision this volume: storage class \"fast\" needs 50Gi but the largest \
             published capacity is 10Gi (on topology.mock.csi/node=a; topology.mock.csi/node=b); \
             free space or add capacity, or request less"
        );
    }

    #[test]
    fn maximum_volume_size_is_the_limit() {
        let p = [(seg("a"), Capacity::from_response(100 * GI, Some(20 * GI)))];
        let msg = explain_exhaustion("fast", 50 * GI, &p).unwrap();
        assert!(msg.contains("largest published capacity is 20Gi"), "{msg}");
    }

    #[test]
    fn many_places_are_summarised() {
        let p: Vec<_> = (0..5)
            .map(|i| (seg(&format!("n{i}")), Capacity::from_response(GI, None)))
            .collect();
        let msg = explain_exhaustion("fast", 2 * GI, &p).unwrap();
        assert!(msg.contains("and 2 more"), "{msg}");
    }

    #[test]
    fn nothing_published() {
        let msg = explain_exhaustion("fast", GI, &[]).unwrap();
        assert!(msg.contains("has no published storage capacity"), "{msg}");
    }
}
