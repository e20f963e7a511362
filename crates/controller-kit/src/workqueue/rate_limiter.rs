//! Per-item exponential failure backoff, as client-go's `ItemExponentialFailureRateLimiter`,
//! optionally with the external-provisioner's `rateLimiterWithJitter` on top.
//!
//! Pure: no clock, no global state. Randomness for the jitter is drawn from `rand` by
//! [`RateLimiter::when`], or passed in by [`RateLimiter::when_with`] so tests can pin it.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

/// Exponential per-key backoff: the n-th consecutive failure of a key waits `base * 2^n`,
/// capped at `max` (`--retry-interval-start` / `--retry-interval-max`).
#[derive(Debug, Clone)]
pub struct RateLimiter<K> {
    base: Duration,
    max: Duration,
    jitter: bool,
    failures: HashMap<K, u32>,
}

impl<K: Eq + Hash + Clone> RateLimiter<K> {
    /// Plain exponential backoff, as the `claims`, `volumes` and capacity queues use.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            jitter: false,
            failures: HashMap::new(),
        }
    }

    /// Exponential backoff minus a random jitter in `[0, base)`, floored at zero, as the
    /// distributed-provisioning limiter upstream (`newItemExponentialFailureRateLimiterWithJitter`).
    /// The jitter keeps nodes that lose the same race from retrying in lockstep.
    pub fn with_jitter(base: Duration, max: Duration) -> Self {
        Self {
            jitter: true,
            ..Self::new(base, max)
        }
    }

    /// The delay before retrying `key`; counts one more failure for it.
    pub fn when(&mut self, key: &K) -> Duration {
        let r = if self.jitter {
            rand::random::<f64>()
        } else {
            0.0
        };
        self.when_with(key, r)
    }

    /// [`when`](Self::when) with the jitter fraction `r` in `[0, 1)` given by the caller.
    /// Without jitter `r` is ignored.
    pub fn when_with(&mut self, key: &K, r: f64) -> Duration {
        let failures = self.failures.entry(key.clone()).or_insert(0);
        let exp = *failures;
        *failures = failures.saturating_add(1);
        let delay = exponential(self.base, self.max, exp);
        if !self.jitter {
            return delay;
        }
        let jitter = self.base.mul_f64(r.clamp(0.0, 1.0));
        delay.saturating_sub(jitter)
    }

    /// Clears the failure count of `key`, typically after it was processed successfully.
    pub fn forget(&mut self, key: &K) {
        self.failures.remove(key);
    }

    /// How many times `key` has failed since it was last forgotten.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.failures.get(key).copied().unwrap_or(0)
    }
}

/// `base * 2^exp`, capped at `max`. Computed in floating point like client-go, so huge
/// exponents saturate at `max` instead of overflowing.
pub fn exponential(base: Duration, max: Duration, exp: u32) -> Duration {
    let nanos = base.as_nanos() as f64 * 2f64.powi(exp.min(i32::MAX as u32) as i32);
    if !nanos.is_finite() || nanos >= max.as_nanos() as f64 {
        return max;
    }
    Duration::from_nanos(nanos as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn doubles_per_failure_and_caps_at_max() {
        let mut rl = RateLimiter::new(Duration::from_secs(1), Duration::from_secs(300));
        let got: Vec<u64> = (0..12).map(|_| rl.when(&"a").as_secs()).collect();
        assert_eq!(got, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
        assert_eq!(rl.num_requeues(&"a"), 12);
    }

    #[test]
    fn keys_are_independent_and_forget_resets() {
        let mut rl = RateLimiter::new(5 * MS, Duration::from_secs(1));
        assert_eq!(rl.when(&"a"), 5 * MS);
        assert_eq!(rl.when(&"a"), 10 * MS);
        assert_eq!(rl.when(&"b"), 5 * MS);
        assert_eq!(rl.num_requeues(&"a"), 2);
        assert_eq!(rl.num_requeues(&"b"), 1);
        rl.forget(&"a");
        assert_eq!(rl.num_requeues(&"a"), 0);
        assert_eq!(rl.when(&"a"), 5 * MS);
        assert_eq!(rl.num_requeues(&"b"), 1);
    }

    #[test]
    fn huge_exponents_saturate_at_max() {
        for exp in [40, 63, 64, 1000, 1100, u32::MAX] {
            assert_eq!(
                exponential(Duration::from_secs(1), Duration::from_secs(300), exp),
                Duration::from_secs(300),
                "exp {exp}"
            );
        }
        // A max beyond u64 nanoseconds still caps instead of wrapping.
        assert_eq!(
            exponential(Duration::from_secs(1), Duration::MAX, 2000),
            Duration::MAX
        );
    }

    #[test]
    fn jitter_subtracts_a_fraction_of_base_and_floors_at_zero() {
        // (failures before, r, expected ms) with base 20 s, max 60 s as --node-deployment-*.
        let cases = [
            (0, 0.0, 20_000),  // no jitter drawn
            (0, 0.5, 10_000),  // 20 s - 10 s
            (0, 0.75, 5_000),  // 20 s - 15 s
            (1, 0.5, 30_000),  // 40 s - 10 s
            (2, 0.25, 55_000), // capped 60 s - 5 s
            (5, 1.0, 40_000),  // r is clamped to 1
        ];
        for (before, r, want) in cases {
            let mut rl = RateLimiter::with_jitter(Duration::from_secs(20), Duration::from_secs(60));
            for _ in 0..before {
                rl.when_with(&"pvc", 0.0);
            }
            assert_eq!(
                rl.when_with(&"pvc", r),
                Duration::from_millis(want),
                "failures {before}, r {r}"
            );
        }
    }

    #[test]
    fn jitter_never_goes_negative() {
        // max below base: the jitter may exceed the delay, which then floors at zero.
        let mut rl = RateLimiter::with_jitter(Duration::from_secs(10), Duration::from_secs(1));
        assert_eq!(rl.when_with(&1, 0.9), Duration::ZERO);
    }

    #[test]
    fn random_jitter_stays_in_range() {
        let mut rl = RateLimiter::with_jitter(Duration::from_secs(20), Duration::from_secs(60));
        for _ in 0..100 {
            rl.forget(&"k");
            let d = rl.when(&"k");
            assert!(d <= Duration::from_secs(20), "{d:?}");
        }
    }
}
