//! The claims of one pod, placed together (ours, `--capacity-pod-aware`).
//!
//! kube-scheduler checks each claim of a pod against the published capacity on its own, so a
//! pod with two 60Gi claims passes a 100Gi node; one volume is made there, the other is
//! refused, and the pod stays pinned to a node that cannot hold it. Before the first volume of
//! such a pod is made, the claims that go to one node are added up; if they do not fit, none
//! is made and the node is shown, for a while, as too small for the largest of them, so the
//! scheduler's next try goes elsewhere.

use crate::Capacity;
use crate::ledger::fits;

/// One claim of the pod, as far as the decision goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sibling {
    /// Requested bytes.
    pub bytes: i64,
    /// `selected-node`, if the scheduler wrote it yet.
    pub node: Option<String>,
    /// Its reservation is already counted (CreateVolume running or done, or bound).
    pub counted: bool,
}

/// What to do with a claim of a pod that has others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodCheck {
    /// Nothing to add up: one claim of ours, or the others go to other nodes.
    Alone,
    /// A sibling has no node yet: the scheduler writes them one after the other.
    Wait,
    /// Together they fit.
    Fits,
    /// Together they do not: `total` bytes asked, the largest claim `largest`.
    TooBig {
        /// Bytes of the claims not counted yet.
        total: i64,
        /// The largest claim of the pod.
        largest: i64,
    },
}

/// Decides for the claims of one pod (all of ours, this one included) going to `node`, with
/// `reading` and the `reserved` bytes it certainly does not show (other claims than these).
pub fn check(node: &str, claims: &[Sibling], reading: Capacity, reserved: i64) -> PodCheck {
    // One claim left to make: the per-claim check is all there is.
    let open: Vec<&Sibling> = claims.iter().filter(|c| !c.counted).collect();
    if open.len() < 2 {
        return PodCheck::Alone;
    }
    if open.iter().any(|c| c.node.is_none()) {
        return PodCheck::Wait;
    }
    if open.iter().any(|c| c.node.as_deref() != Some(node)) {
        return PodCheck::Alone;
    }
    let total = open
        .iter()
        .fold(0_i64, |sum, c| sum.saturating_add(c.bytes));
    if fits(reading, reserved, total) {
        return PodCheck::Fits;
    }
    let largest = claims.iter().map(|c| c.bytes).max().unwrap_or(0);
    PodCheck::TooBig { total, largest }
}

/// Bytes to hold on a segment whose published limit is `limit` so that a claim of `largest`
/// bytes no longer passes the scheduler's filter there (smaller claims still do); 0 when it
/// does not pass already.
pub fn block(limit: i64, largest: i64) -> i64 {
    (limit - largest + 1).max(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GI: i64 = 1 << 30;

    fn c(bytes: i64, node: Option<&str>, counted: bool) -> Sibling {
        Sibling {
            bytes: bytes * GI,
            node: node.map(String::from),
            counted,
        }
    }

    #[test]
    fn table() {
        let hundred = Capacity::from_response(100 * GI, None);
        let cases = [
            (vec![c(60, Some("a"), false)], 0, PodCheck::Alone),
            (
                vec![c(60, Some("a"), false), c(60, None, false)],
                0,
                PodCheck::Wait,
            ),
            (
                vec![c(60, Some("a"), false), c(60, Some("b"), false)],
                0,
                PodCheck::Alone,
            ),
            (
                vec![c(40, Some("a"), false), c(50, Some("a"), false)],
                0,
                PodCheck::Fits,
            ),
            (
                vec![c(40, Some("a"), false), c(50, Some("a"), false)],
                20 * GI,
                PodCheck::TooBig {
                    total: 90 * GI,
                    largest: 50 * GI,
                },
            ),
            (
                vec![c(60, Some("a"), false), c(60, Some("a"), false)],
                0,
                PodCheck::TooBig {
                    total: 120 * GI,
                    largest: 60 * GI,
                },
            ),
            // One is made already (its size is in the reading or the reservations).
            (
                vec![c(60, Some("a"), true), c(30, Some("a"), false)],
                0,
                PodCheck::Alone,
            ),
            (
                vec![
                    c(10, Some("a"), true),
                    c(30, Some("a"), false),
                    c(30, Some("a"), false),
                ],
                50 * GI,
                PodCheck::TooBig {
                    total: 60 * GI,
                    largest: 30 * GI,
                },
            ),
            (
                vec![c(60, None, true), c(30, Some("a"), false)],
                0,
                PodCheck::Alone,
            ),
            // Requests of exabytes (parsed to i64::MAX) add up without wrapping.
            (
                vec![
                    Sibling {
                        bytes: i64::MAX,
                        node: Some("a".into()),
                        counted: false,
                    },
                    Sibling {
                        bytes: i64::MAX,
                        node: Some("a".into()),
                        counted: false,
                    },
                ],
                0,
                PodCheck::TooBig {
                    total: i64::MAX,
                    largest: i64::MAX,
                },
            ),
        ];
        for (claims, reserved, want) in cases {
            assert_eq!(check("a", &claims, hundred, reserved), want, "{claims:?}");
        }
    }

    #[test]
    fn block_keeps_the_largest_out() {
        assert_eq!(block(100 * GI, 60 * GI), 40 * GI + 1);
        assert!(!fits(
            Capacity::from_response(100 * GI, None),
            block(100 * GI, 60 * GI),
            60 * GI
        ));
        assert!(fits(
            Capacity::from_response(100 * GI, None),
            block(100 * GI, 60 * GI),
            59 * GI
        ));
        assert_eq!(block(50 * GI, 60 * GI), 0);
    }
}
