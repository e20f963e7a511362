//! A token bucket with fractional rates, as `golang.org/x/time/rate.Limiter` behind client-go's
//! `flowcontrol` limiters. Pure: times are offsets from an origin the caller picks, so the
//! API client (tokio's clock) and the event spam filter (event timestamps) share it.

use std::time::Duration;

/// Starts full; refills `rate` tokens per second up to `burst`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Duration,
}

impl TokenBucket {
    pub(crate) fn new(rate: f64, burst: u32, now: Duration) -> Self {
        let burst = f64::from(burst);
        Self {
            rate,
            burst,
            tokens: burst,
            last: now,
        }
    }

    fn advance(&mut self, now: Duration) {
        // A clock that goes backwards refills nothing, as in x/time/rate.
        if now > self.last {
            let refill = (now - self.last).as_secs_f64() * self.rate;
            self.tokens = (self.tokens + refill).min(self.burst);
            self.last = now;
        }
    }

    /// Takes a token if one is available now (client-go's `TryAccept`).
    pub(crate) fn try_take(&mut self, now: Duration) -> bool {
        self.advance(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// How long until a whole token is available (zero if one is there now). A non-positive
    /// rate never refills, so the wait is capped at an hour rather than infinite; callers
    /// treat such limits as "unlimited" before getting here.
    pub(crate) fn until_available(&mut self, now: Duration) -> Duration {
        self.advance(now);
        if self.tokens >= 1.0 {
            return Duration::ZERO;
        }
        let secs = (1.0 - self.tokens) / self.rate;
        if secs.is_finite() && secs >= 0.0 {
            Duration::from_secs_f64(secs.min(3600.0))
        } else {
            Duration::from_secs(3600)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn burst_then_refill_at_rate() {
        let mut b = TokenBucket::new(5.0, 10, ms(0));
        for i in 0..10 {
            assert!(b.try_take(ms(0)), "burst token {i}");
        }
        assert!(!b.try_take(ms(0)));
        assert!(!b.try_take(ms(199)));
        assert!(b.try_take(ms(200)));
        assert!(!b.try_take(ms(200)));
    }

    #[test]
    fn refill_never_exceeds_burst() {
        let mut b = TokenBucket::new(1.0, 2, ms(0));
        assert!(b.try_take(ms(0)));
        // An hour idle refills to 2, not 3600.
        let hour = Duration::from_secs(3600);
        assert!(b.try_take(hour));
        assert!(b.try_take(hour));
        assert!(!b.try_take(hour));
    }

    #[test]
    fn fractional_rates_refill_slowly() {
        // The event spam filter: burst 25, one token per 300 s.
        let mut b = TokenBucket::new(1.0 / 300.0, 25, Duration::ZERO);
        let taken = (0..30).filter(|_| b.try_take(Duration::ZERO)).count();
        assert_eq!(taken, 25);
        assert!(!b.try_take(Duration::from_secs(299)));
        assert!(b.try_take(Duration::from_secs(300)));
        assert!(!b.try_take(Duration::from_secs(301)));
    }

    #[test]
    fn clock_going_backwards_is_ignored() {
        let mut b = TokenBucket::new(1.0, 1, ms(5000));
        assert!(b.try_take(ms(5000)));
        assert!(!b.try_take(ms(1000)));
        assert!(b.try_take(ms(6000)));
    }

    #[test]
    fn zero_rate_waits_are_bounded() {
        let mut b = TokenBucket::new(0.0, 1, ms(0));
        assert!(b.try_take(ms(0)));
        assert_eq!(b.until_available(ms(0)), Duration::from_secs(3600));
    }
}
