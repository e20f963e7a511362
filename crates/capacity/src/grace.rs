//! Beyond upstream: a node's driver entry that goes away and comes back soon (a driver pod
//! restarting re-registers within seconds) keeps its objects. Upstream deletes them at once, and
//! the scheduler refuses volumes on that node until they are published again.
//!
//! A node whose CSINode entry for the driver vanished while the Node itself still exists keeps
//! its last segment for `grace`; a deleted Node loses it at once.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::Segment;

/// Nodes whose driver entry is gone, with their last segment and when it went.
pub type Lost = HashMap<String, (Segment, Instant)>;

/// The segments to publish for: `current` (node → segment from the CSINode entries now) plus
/// those of nodes in `previous` that lost their entry less than `grace` ago and still exist.
/// Updates `lost`; also returns when the next grace ends (for a resync then).
pub fn with_grace(
    current: HashMap<String, Segment>,
    previous: &HashMap<String, Segment>,
    lost: &mut Lost,
    node_exists: impl Fn(&str) -> bool,
    now: Instant,
    grace: Duration,
) -> (HashMap<String, Segment>, Option<Instant>) {
    lost.retain(|node, _| !current.contains_key(node));
    if !grace.is_zero() {
        for (node, segment) in previous {
            if !current.contains_key(node) {
                lost.entry(node.clone())
                    .or_insert_with(|| (segment.clone(), now));
            }
        }
    }
    lost.retain(|node, (_, since)| node_exists(node) && now.duration_since(*since) < grace);
    let next = lost.values().map(|(_, since)| *since + grace).min();
    let mut effective = current;
    for (node, (segment, _)) in lost.iter() {
        effective.insert(node.clone(), segment.clone());
    }
    (effective, next)
}

/// Whether a change to node `name` (its segment from the caches now) calls for a resync: the
/// segment differs from the published one, or the node's driver entry is back while the node is
/// in its grace. The returning node shows the kept segment, so only `lost` tells: without the
/// resync its grace would go on counting from the first loss, and a second loss soon after
/// would drop the node's objects before that loss had had its own grace.
pub fn node_changed(
    name: &str,
    now: Option<&Segment>,
    published: Option<&Segment>,
    lost: &Lost,
) -> bool {
    now != published || (now.is_some() && lost.contains_key(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(v: &str) -> Segment {
        Segment::from([("node".to_string(), v.to_string())])
    }

    fn map(nodes: &[&str]) -> HashMap<String, Segment> {
        nodes.iter().map(|n| (n.to_string(), seg(n))).collect()
    }

    const GRACE: Duration = Duration::from_secs(30);

    #[test]
    fn a_vanished_entry_is_kept_for_the_grace_and_dropped_after() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut lost = Lost::new();
        let all = |_: &str| true;
        let (eff, next) = with_grace(map(&["a"]), &map(&["a", "b"]), &mut lost, all, at(0), GRACE);
        assert_eq!(eff, map(&["a", "b"]), "b kept");
        assert_eq!(next, Some(at(30)));
        // Later resyncs see b in `previous` (kept): the grace still counts from the loss.
        let (eff, _) = with_grace(map(&["a"]), &eff, &mut lost, all, at(29), GRACE);
        assert_eq!(eff, map(&["a", "b"]));
        let (eff, next) = with_grace(map(&["a"]), &eff, &mut lost, all, at(30), GRACE);
        assert_eq!(eff, map(&["a"]), "grace over");
        assert_eq!(next, None);
        assert!(lost.is_empty());
    }

    #[test]
    fn a_returning_entry_ends_the_grace_with_its_new_segment() {
        let t0 = Instant::now();
        let mut lost = Lost::new();
        let all = |_: &str| true;
        let (eff, _) = with_grace(map(&[]), &map(&["b"]), &mut lost, all, t0, GRACE);
        assert_eq!(eff, map(&["b"]));
        let moved = HashMap::from([("b".to_string(), seg("b2"))]);
        let (eff, next) = with_grace(moved.clone(), &eff, &mut lost, all, t0, GRACE);
        assert_eq!(eff, moved);
        assert_eq!((next, lost.len()), (None, 0));
    }

    #[test]
    fn a_node_returning_within_its_grace_is_a_change() {
        let t0 = Instant::now();
        let mut lost = Lost::new();
        let all = |_: &str| true;
        let (kept, _) = with_grace(map(&[]), &map(&["b"]), &mut lost, all, t0, GRACE);
        let b = seg("b");
        // Back with the segment it had: the same as the kept one, yet its grace must end.
        assert!(node_changed("b", Some(&b), kept.get("b"), &lost));
        let (eff, _) = with_grace(map(&["b"]), &kept, &mut lost, all, t0, GRACE);
        assert!(lost.is_empty());
        // Nothing new once the resync has ended it; a loss is a change.
        assert!(!node_changed("b", Some(&b), eff.get("b"), &lost));
        assert!(node_changed("b", None, eff.get("b"), &lost));
    }

    #[test]
    fn a_deleted_node_or_no_grace_drops_at_once() {
        let t0 = Instant::now();
        let mut lost = Lost::new();
        let gone = |n: &str| n != "b";
        let (eff, next) = with_grace(map(&["a"]), &map(&["a", "b"]), &mut lost, gone, t0, GRACE);
        assert_eq!((eff, next), (map(&["a"]), None));
        let all = |_: &str| true;
        let zero = Duration::ZERO;
        let (eff, next) = with_grace(map(&["a"]), &map(&["a", "b"]), &mut lost, all, t0, zero);
        assert_eq!((eff, next), (map(&["a"]), None), "grace 0 is upstream");
    }
}
