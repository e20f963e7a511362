//! The `/healthz/leader-election` check and the state it reads.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::config::HEALTH_CHECK_TOLERANCE;
use crate::decide::health_verdict;

/// What the elector last observed, shared with [`HealthCheck`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Observation {
    pub believes_leader: bool,
    pub observed_at: Instant,
}

pub(crate) type SharedObservation = Arc<Mutex<Observation>>;

/// client-go's `HealthzAdaptor` with csi-lib-utils' 20 s tolerance. Cheap to clone and call
/// from an HTTP handler; healthy before the elector runs and while standing by.
#[derive(Clone, Debug)]
pub struct HealthCheck {
    pub(crate) observation: SharedObservation,
    pub(crate) lease_duration: Duration,
    pub(crate) name: String,
}

impl HealthCheck {
    /// `Err(message)` when we believe we lead but have not renewed for longer than
    /// `lease_duration + 20s`: the elector is stuck and the process should be restarted.
    pub fn healthy(&self) -> Result<(), String> {
        let obs = *self
            .observation
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        health_verdict(
            obs.believes_leader,
            obs.observed_at,
            Instant::now(),
            self.lease_duration,
            HEALTH_CHECK_TOLERANCE,
            &self.name,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn stuck_leader_turns_unhealthy() {
        let observation = Arc::new(Mutex::new(Observation {
            believes_leader: true,
            observed_at: Instant::now(),
        }));
        let check = HealthCheck {
            observation: observation.clone(),
            lease_duration: Duration::from_secs(15),
            name: String::new(),
        };
        assert_eq!(check.healthy(), Ok(()));
        tokio::time::advance(Duration::from_secs(35)).await;
        assert_eq!(check.healthy(), Ok(()));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(
            check.healthy(),
            Err("failed election to renew leadership on lease ".to_string())
        );
        observation.lock().expect("lock").believes_leader = false;
        assert_eq!(check.healthy(), Ok(()));
    }
}
