//! Properties of retry pacing: one attempt per backoff step, whatever brings the claim back.

use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// No attempt before the backoff (and, for an infeasible request, `slow`) has passed;
    /// none held back after it; only a new StorageClass lifts an infeasible hold early.
    #[test]
    fn a_hold_lasts_its_backoff_and_no_longer(
        backoff_ms in 0u64..600_000,
        slow_ms in 0u64..600_000,
        infeasible in any::<bool>(),
        elapsed_ms in 0u64..1_200_000,
        same_class in any::<bool>(),
    ) {
        let now = Instant::now();
        let (backoff, slow) = (Duration::from_millis(backoff_ms), Duration::from_millis(slow_ms));
        let hold = hold_after_failure(now, backoff, infeasible, slow, Some("class-1"));
        let delay = if infeasible { backoff.max(slow) } else { backoff };
        let later = now + Duration::from_millis(elapsed_ms);
        let class = if same_class { Some("class-1") } else { Some("class-2") };
        let left = wait(&hold, later, class);
        if infeasible && !same_class {
            prop_assert_eq!(left, None, "a re-created class lifts an infeasible hold");
        } else if later < now + delay {
            prop_assert_eq!(left, Some(now + delay - later));
        } else {
            prop_assert_eq!(left, None);
        }
        prop_assert!(left.unwrap_or_default() <= delay);
    }

    /// A restore waiting for its snapshot never holds longer than `slow`, and any other
    /// failure keeps its own backoff.
    #[test]
    fn a_restore_waits_at_most_the_slow_interval(
        flags in proptest::collection::vec(any::<bool>(), 4),
        slow_ms in 0u64..600_000,
    ) {
        let attempt = RestoreAttempt {
            from_snapshot: flags[0],
            ready_during_attempt: flags[1],
            awaiting_snapshot: flags[2],
            watch_running: flags[3],
        };
        let slow = Duration::from_millis(slow_ms);
        let hold = restore_hold(attempt, slow);
        prop_assert!(hold.is_none_or(|h| h <= slow));
        if !(attempt.from_snapshot && attempt.awaiting_snapshot) {
            prop_assert_eq!(hold, None);
        }
    }
}
