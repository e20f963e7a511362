//! What one Probe answer means for the wait-until-ready loop.

use tonic::{Code, Status};

use crate::v1::ProbeResponse;

/// The verdict on one Probe call.
#[derive(Debug, Clone)]
pub enum ProbeOutcome {
    /// Ready, or `ready` left unset (which the CSI spec defines as ready).
    Ready,
    /// The driver answered `ready: false`; probe again.
    NotReady,
    /// The call timed out; upstream treats this as "not ready yet" and probes again.
    TimedOut,
    /// Any other error. Upstream (`rpc.ProbeForever`) gives up and the sidecar exits.
    Failed(Status),
}

/// Classifies one Probe result the way csi-lib-utils' `ProbeForever` does.
pub fn probe_outcome(result: Result<ProbeResponse, Status>) -> ProbeOutcome {
    match result {
        Ok(ProbeResponse {
            ready: None | Some(true),
        }) => ProbeOutcome::Ready,
        Ok(ProbeResponse { ready: Some(false) }) => ProbeOutcome::NotReady,
        Err(status) if status.code() == Code::DeadlineExceeded => ProbeOutcome::TimedOut,
        Err(status) => ProbeOutcome::Failed(status),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_probe_results() {
        let cases = [
            (Ok(ProbeResponse { ready: None }), "ready"),
            (Ok(ProbeResponse { ready: Some(true) }), "ready"),
            (Ok(ProbeResponse { ready: Some(false) }), "not-ready"),
            (Err(Status::deadline_exceeded("slow")), "timed-out"),
            (Err(Status::unavailable("gone")), "failed"),
            (Err(Status::internal("broken")), "failed"),
            (Err(Status::cancelled("cancelled")), "failed"),
        ];
        for (result, want) in cases {
            let shown = format!("{result:?}");
            let code = result.as_ref().err().map(Status::code);
            let got = match probe_outcome(result) {
                ProbeOutcome::Ready => "ready",
                ProbeOutcome::NotReady => "not-ready",
                ProbeOutcome::TimedOut => "timed-out",
                ProbeOutcome::Failed(s) => {
                    assert_eq!(Some(s.code()), code, "the status is passed on");
                    "failed"
                }
            };
            assert_eq!(got, want, "{shown}");
        }
    }
}
