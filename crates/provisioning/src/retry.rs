//! Pacing of provisioning attempts: one attempt per backoff step, whatever brings the claim
//! back to the work queue.
//!
//! Any update of a claim (our own finalizer write, the binder's, a user's label) queues it again
//! at once. Without a gate those updates would retry a failed CreateVolume early, and every
//! early retry would still count as a failure, stretching later backoffs: upstream's claims are
//! retried 1, 2, 4, 8 s … after each failure (plus the call's time), and so are ours.

use std::time::{Duration, Instant};

/// A failed attempt's hold on the next one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// No attempt before this instant.
    pub until: Instant,
    /// The StorageClass UID of the failed attempt.
    pub class_uid: Option<String>,
    /// CreateVolume said `InvalidArgument`: upstream's slow set, which a re-created
    /// StorageClass (new UID) lifts at once.
    pub infeasible: bool,
    /// The claim waits for its VolumeSnapshot to be ready: the snapshot watch lifts the hold
    /// then. An ordinary backoff is not lifted by a change of the snapshot (our own finalizer
    /// writes included).
    pub awaits_snapshot: bool,
}

/// How long the next attempt must still wait (`None`: attempt now). `class_uid` is the UID of
/// the claim's StorageClass now.
pub fn wait(hold: &Hold, now: Instant, class_uid: Option<&str>) -> Option<Duration> {
    if hold.infeasible && hold.class_uid.as_deref() != class_uid {
        return None;
    }
    hold.until
        .checked_duration_since(now)
        .filter(|d| !d.is_zero())
}

/// The hold of a restore that waits `wait` for its snapshot (see [`restore_hold`]): lifted by
/// time or by the snapshot turning ready, not by a new StorageClass.
pub fn snapshot_wait(wait: Duration) -> Hold {
    Hold {
        until: Instant::now() + wait,
        class_uid: None,
        infeasible: false,
        awaits_snapshot: true,
    }
}

/// The hold after a failed attempt: the queue's backoff for this failure, and for an infeasible
/// request at least `slow` (`--retry-interval-max`).
pub fn hold_after_failure(
    now: Instant,
    backoff: Duration,
    infeasible: bool,
    slow: Duration,
    class_uid: Option<&str>,
) -> Hold {
    let delay = if infeasible {
        backoff.max(slow)
    } else {
        backoff
    };
    Hold {
        until: now + delay,
        class_uid: class_uid.map(str::to_string),
        infeasible,
        awaits_snapshot: false,
    }
}

/// What a failed restore attempt knew about its VolumeSnapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestoreAttempt {
    /// The source is a VolumeSnapshot (a clone's source claim has no watch).
    pub from_snapshot: bool,
    /// The snapshot became ready while the attempt was reading it.
    pub ready_during_attempt: bool,
    /// The attempt failed because the snapshot is missing or not ready yet.
    pub awaiting_snapshot: bool,
    /// The VolumeSnapshot watch runs, so its readiness will bring the claim back.
    pub watch_running: bool,
}

/// The hold after a failed restore attempt (`None`: the failure's own backoff). An attempt
/// that failed for want of its snapshot retries at once if the snapshot became ready
/// meanwhile, and otherwise waits for the watch, with `slow` (`--retry-interval-max`) as the
/// backstop, rather than retrying on a backoff that could only fail the same way and spend the
/// API budget ready claims need. Any other failure keeps its own backoff, whatever the
/// snapshot's watch saw meanwhile (another claim's write to the snapshot, say).
pub fn restore_hold(attempt: RestoreAttempt, slow: Duration) -> Option<Duration> {
    if !attempt.from_snapshot || !attempt.awaiting_snapshot {
        return None;
    }
    if attempt.ready_during_attempt {
        return Some(Duration::ZERO);
    }
    attempt.watch_running.then_some(slow)
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn only_a_snapshot_wait_is_for_the_snapshot_watch_to_lift() {
        let t0 = Instant::now();
        assert!(snapshot_wait(300 * S).awaits_snapshot);
        for infeasible in [false, true] {
            let hold = hold_after_failure(t0, 4 * S, infeasible, 300 * S, Some("a"));
            assert!(!hold.awaits_snapshot, "infeasible: {infeasible}");
        }
        // Time still lifts a snapshot wait, and a new class does not.
        let hold = snapshot_wait(4 * S);
        assert!(wait(&hold, hold.until, Some("b")).is_none());
        assert!(wait(&hold, hold.until - S, Some("b")).is_some());
    }

    #[test]
    fn an_attempt_waits_for_its_backoff() {
        let t0 = Instant::now();
        let hold = hold_after_failure(t0, 4 * S, false, 300 * S, Some("a"));
        assert_eq!(wait(&hold, t0, Some("a")), Some(4 * S));
        assert_eq!(wait(&hold, t0 + 3 * S, Some("a")), Some(S));
        assert_eq!(wait(&hold, t0 + 4 * S, Some("a")), None);
        assert_eq!(wait(&hold, t0 + 9 * S, Some("a")), None);
        // A new class does not lift an ordinary backoff: one attempt per step.
        assert_eq!(wait(&hold, t0, Some("b")), Some(4 * S));
    }

    #[test]
    fn an_infeasible_request_waits_the_slow_interval_unless_the_class_is_new() {
        let t0 = Instant::now();
        let hold = hold_after_failure(t0, S, true, 300 * S, Some("a"));
        assert_eq!(wait(&hold, t0 + S, Some("a")), Some(299 * S));
        assert_eq!(wait(&hold, t0 + S, Some("b")), None);
        assert_eq!(wait(&hold, t0 + S, None), None);
        // A backoff already longer than the slow interval is kept.
        let long = hold_after_failure(t0, 400 * S, true, 300 * S, Some("a"));
        assert_eq!(wait(&long, t0, Some("a")), Some(400 * S));
    }

    #[rstest::rstest]
    #[case::clone_source(false, true, true, true, None)]
    #[case::ready_during_attempt(true, true, true, true, Some(Duration::ZERO))]
    #[case::ready_during_an_unrelated_failure(true, true, false, true, None)]
    #[case::awaited_with_watch(true, false, true, true, Some(300 * S))]
    #[case::awaited_without_watch(true, false, true, false, None)]
    #[case::other_failure(true, false, false, true, None)]
    fn a_restore_waits_for_its_snapshot(
        #[case] from_snapshot: bool,
        #[case] ready_during_attempt: bool,
        #[case] awaiting_snapshot: bool,
        #[case] watch_running: bool,
        #[case] want: Option<Duration>,
    ) {
        let attempt = RestoreAttempt {
            from_snapshot,
            ready_during_attempt,
            awaiting_snapshot,
            watch_running,
        };
        assert_eq!(restore_hold(attempt, 300 * S), want);
    }
}
