//! Election settings and their validation (client-go's `NewLeaderElector` checks).

use std::collections::BTreeMap;
use std::time::Duration;

/// client-go's `JitterFactor`: acquire retries wait `retry_period * (1 + 1.2 * rand[0,1))`, and
/// the renew deadline must exceed `1.2 * retry_period`.
pub const JITTER_FACTOR: f64 = 1.2;

/// How far past lease expiry a leader that has not renewed still reports healthy
/// (csi-lib-utils `DefaultHealthCheckTimeout`).
pub const HEALTH_CHECK_TOLERANCE: Duration = Duration::from_secs(20);

/// Settings of one candidate. Upstream defaults: 15 s / 10 s / 5 s.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaderElectionConfig {
    /// The Lease name, already sanitised (see [`crate::lock_name`]).
    pub lock_name: String,
    pub namespace: String,
    /// This candidate's identity, already sanitised (see [`crate::identity`]).
    pub identity: String,
    /// How long others wait, from the last change they observed, before taking over.
    pub lease_duration: Duration,
    /// How long the leader keeps retrying a failing renewal before giving up.
    pub renew_deadline: Duration,
    /// Pause between attempts.
    pub retry_period: Duration,
    /// Set on the Lease on create and re-applied on every update (`--leader-election-labels`).
    pub labels: BTreeMap<String, String>,
    /// On cancellation, hand the Lease over at once (holder `""`, duration 1 s) instead of
    /// letting it expire.
    pub release_on_cancel: bool,
    /// client-go's `LeaderElectionConfig.Name`: the `name` label of the
    /// `leader_election_*` metrics and the lease named in the health-check error.
    /// csi-lib-utils never sets it, so upstream exports `name=""`; keep it empty for parity.
    pub name: String,
}

impl LeaderElectionConfig {
    /// A config with upstream's default timing, no labels, no release and an empty `name`.
    pub fn new(lock_name: String, namespace: String, identity: String) -> Self {
        Self {
            lock_name,
            namespace,
            identity,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(5),
            labels: BTreeMap::new(),
            release_on_cancel: false,
            name: String::new(),
        }
    }

    /// Rejects settings client-go rejects, plus a lease shorter than one second: the Lease
    /// stores whole seconds, so it would be written as 0 and expire on sight.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.lock_name.is_empty() {
            return Err(ConfigError::Empty("lock name"));
        }
        if self.namespace.is_empty() {
            return Err(ConfigError::Empty("namespace"));
        }
        if self.identity.is_empty() {
            return Err(ConfigError::Empty("identity"));
        }
        if self.retry_period.is_zero() {
            return Err(ConfigError::Timing(
                "retry period must be greater than zero".into(),
            ));
        }
        if self.lease_duration < Duration::from_secs(1) {
            return Err(ConfigError::Timing(format!(
                "lease duration {:?} must be at least 1s",
                self.lease_duration
            )));
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(ConfigError::Timing(format!(
                "lease duration {:?} must be greater than renew deadline {:?}",
                self.lease_duration, self.renew_deadline
            )));
        }
        if self.renew_deadline <= self.retry_period.mul_f64(JITTER_FACTOR) {
            return Err(ConfigError::Timing(format!(
                "renew deadline {:?} must be greater than retry period {:?} * {JITTER_FACTOR}",
                self.renew_deadline, self.retry_period
            )));
        }
        Ok(())
    }

    /// The `leaseDurationSeconds` we write: whole seconds, truncated like Go's integer division.
    pub fn lease_duration_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }

    /// `namespace/name`, client-go's `Describe()` of a Lease lock, used in log lines.
    pub fn describe(&self) -> String {
        format!("{}/{}", self.namespace, self.lock_name)
    }
}

/// A setting the elector cannot run with; the message names the flag's meaning.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("leader election: the {0} must not be empty")]
    Empty(&'static str),
    #[error(
        "leader election: {0} (check --leader-election-lease-duration, --leader-election-renew-deadline and --leader-election-retry-period)"
    )]
    Timing(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(lease: u64, renew: u64, retry_ms: u64) -> LeaderElectionConfig {
        LeaderElectionConfig {
            lease_duration: Duration::from_secs(lease),
            renew_deadline: Duration::from_secs(renew),
            retry_period: Duration::from_millis(retry_ms),
            ..LeaderElectionConfig::new("lock".into(), "ns".into(), "me".into())
        }
    }

    #[test]
    fn timing_validation() {
        let table = [
            (cfg(15, 10, 5000), true),
            (cfg(137, 107, 26000), true),
            (cfg(10, 10, 5000), false), // lease must exceed renew deadline
            (cfg(15, 6, 5000), false),  // 6 <= 5 * 1.2
            (cfg(15, 7, 5000), true),   // 7 > 6
            (cfg(15, 10, 0), false),    // zero retry
            (cfg(0, 0, 100), false),    // sub-second lease
            (cfg(3, 2, 500), true),     // the integration tests' timing
        ];
        for (c, ok) in table {
            assert_eq!(c.validate().is_ok(), ok, "{c:?}: {:?}", c.validate());
        }
    }

    #[test]
    fn empty_fields_are_rejected() {
        let base = LeaderElectionConfig::new("lock".into(), "ns".into(), "me".into());
        let table = [
            (
                LeaderElectionConfig {
                    lock_name: String::new(),
                    ..base.clone()
                },
                "lock name",
            ),
            (
                LeaderElectionConfig {
                    namespace: String::new(),
                    ..base.clone()
                },
                "namespace",
            ),
            (
                LeaderElectionConfig {
                    identity: String::new(),
                    ..base.clone()
                },
                "identity",
            ),
        ];
        for (c, what) in table {
            assert_eq!(c.validate(), Err(ConfigError::Empty(what)));
        }
        assert_eq!(base.validate(), Ok(()));
    }

    #[test]
    fn lease_seconds_truncate() {
        let mut c = cfg(15, 10, 5000);
        c.lease_duration = Duration::from_millis(15_999);
        assert_eq!(c.lease_duration_seconds(), 15);
        assert_eq!(c.describe(), "ns/lock");
    }
}
