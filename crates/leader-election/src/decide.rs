//! The pure decision core: client-go's `tryAcquireOrRenew`, `release`, the watchdog check and
//! the retry jitter, over plain values and an injected clock.
//!
//! Expiry is judged only by *local* time: a record is valid until `observed_at +
//! leaseDurationSeconds`, where `observed_at` is when this process last saw the record change.
//! The timestamps inside the record are never compared with our clock, so clock skew between
//! candidates does not matter (only skew *rate* does).

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

use crate::record::LeaseRecord;

/// The present moment on both clocks: monotonic for expiry, wall for the times we write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Now {
    pub instant: Instant,
    pub wall: Timestamp,
}

/// What to do after looking at the Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// There is no Lease: create it with this record.
    Create(LeaseRecord),
    /// We hold it: write this record (same acquire time and transitions, new renew time).
    Renew(LeaseRecord),
    /// It is free or expired: write this record (new acquire time, transitions + 1).
    TakeOver(LeaseRecord),
    /// Someone else holds it and it has not expired by our clock.
    Wait { holder: String, expires_at: Instant },
}

/// When a record observed at `observed_at` expires by our clock. A zero or negative duration
/// expires at once; an absurdly long one never overflows.
pub fn expires_at(record: &LeaseRecord, observed_at: Instant) -> Instant {
    let secs = u64::try_from(record.lease_duration_seconds).unwrap_or(0);
    observed_at
        .checked_add(Duration::from_secs(secs))
        .unwrap_or_else(|| observed_at + Duration::from_secs(86_400 * 365 * 30))
}

/// client-go's `isLeaseValid`: strictly before expiry.
pub fn is_valid(record: &LeaseRecord, observed_at: Instant, now: Instant) -> bool {
    expires_at(record, observed_at) > now
}

/// Decides what to do with the Lease as just read from the API server (`None`: it does not
/// exist). `observed_at` is when this record was first seen in its current form.
///
/// We "are leader" when the record names us, as client-go's `IsLeader`; then we renew even if
/// our own lease has lapsed by our clock, because nobody else has written since.
pub fn decide(
    current: Option<&LeaseRecord>,
    observed_at: Instant,
    me: &str,
    now: Now,
    lease_duration_seconds: i32,
) -> Decision {
    let fresh = LeaseRecord {
        holder_identity: me.to_string(),
        lease_duration_seconds,
        acquire_time: Some(now.wall),
        renew_time: Some(now.wall),
        lease_transitions: 0,
        preferred_holder: None,
        strategy: None,
    };
    let Some(current) = current else {
        return Decision::Create(fresh);
    };
    if current.holder_identity == me {
        return Decision::Renew(LeaseRecord {
            acquire_time: current.acquire_time,
            lease_transitions: current.lease_transitions,
            ..fresh
        });
    }
    if !current.holder_identity.is_empty() && is_valid(current, observed_at, now.instant) {
        return Decision::Wait {
            holder: current.holder_identity.clone(),
            expires_at: expires_at(current, observed_at),
        };
    }
    Decision::TakeOver(LeaseRecord {
        lease_transitions: current.lease_transitions.saturating_add(1),
        ..fresh
    })
}

/// client-go's fast path: a leader whose last observed record is still valid writes its
/// renewal straight away with the cached object, and reads the Lease only if that fails.
pub fn may_renew_without_reading(
    observed: &LeaseRecord,
    observed_at: Instant,
    me: &str,
    now: Instant,
) -> bool {
    observed.holder_identity == me && is_valid(observed, observed_at, now)
}

/// The record that gives the Lease up (client-go's `release`): no holder, a 1 s lease so the
/// next candidate takes over at once, transitions unchanged. `None` if we do not hold it.
pub fn release_record(observed: &LeaseRecord, me: &str, now: Timestamp) -> Option<LeaseRecord> {
    (observed.holder_identity == me).then(|| LeaseRecord {
        holder_identity: String::new(),
        lease_duration_seconds: 1,
        acquire_time: Some(now),
        renew_time: Some(now),
        lease_transitions: observed.lease_transitions,
        preferred_holder: None,
        strategy: None,
    })
}

/// client-go's `HealthzAdaptor` check: a candidate that believes it leads but has not seen its
/// record change for longer than `lease_duration + tolerance` is stuck (it should have exited).
/// Standbys are always healthy.
pub fn health_verdict(
    believes_leader: bool,
    observed_at: Instant,
    now: Instant,
    lease_duration: Duration,
    tolerance: Duration,
    name: &str,
) -> Result<(), String> {
    if believes_leader && now.saturating_duration_since(observed_at) > lease_duration + tolerance {
        return Err(format!(
            "failed election to renew leadership on lease {name}"
        ));
    }
    Ok(())
}

/// `wait.Jitter`: `period + unit * factor * period`, with `unit` drawn from `[0, 1)`.
pub fn jittered(period: Duration, factor: f64, unit: f64) -> Duration {
    let unit = if unit.is_finite() {
        unit.clamp(0.0, 1.0)
    } else {
        0.0
    };
    period + period.mul_f64(factor * unit)
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
