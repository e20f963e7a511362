//! Start-up checks, in upstream main's order. Stage one runs before `--version` is honoured (as
//! upstream validates logging, feature gates and NODE_NAME before printing the version); stage
//! two only when the provisioner is going to run.
//!
//! Where upstream accepts a value that cannot work (zero workers, a zero timeout, leader
//! election timings client-go rejects later, a UUID length that panics), we refuse it up front
//! with a message saying what to change. Checks for flags that only matter together with another
//! flag run only when that flag is on, so command lines upstream accepts stay accepted.

use std::collections::BTreeMap;
use std::time::Duration;

use klog::Format;

use crate::duration::format_go_duration;
use crate::error::CliError;
use crate::gates::GateError;
use crate::options::{Options, StaleAction};

const LOGGING_ALPHA: &str = "needs the LoggingAlphaOptions feature gate, which cannot be enabled; only the default is accepted (as upstream)";

/// client-go's leader election jitter factor (renew deadline must exceed 1.2 retry periods).
const JITTER_FACTOR: f64 = 1.2;

fn go(d: Duration) -> String {
    format_go_duration(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Logging, feature gates, NODE_NAME.
pub(crate) fn stage_one(
    opts: &mut Options,
    gates: &BTreeMap<String, bool>,
) -> Result<(), CliError> {
    let log = &opts.logging;
    if log.flush_frequency.is_zero() {
        return Err(CliError::invalid(
            "log-flush-frequency",
            "must be greater than 0",
        ));
    }
    if log.vmodule.is_some() && log.format != Format::Text {
        return Err(CliError::invalid(
            "vmodule",
            "only supported with --logging-format=text",
        ));
    }
    if log.text_split_stream {
        return Err(CliError::invalid("log-text-split-stream", LOGGING_ALPHA));
    }
    if log.json_split_stream {
        return Err(CliError::invalid("log-json-split-stream", LOGGING_ALPHA));
    }
    for (flag, size) in [
        ("log-text-info-buffer-size", &log.text_info_buffer_size),
        ("log-json-info-buffer-size", &log.json_info_buffer_size),
    ] {
        if quantity::parse_quantity(size).is_ok_and(|v| v != 0) {
            return Err(CliError::invalid(flag, LOGGING_ALPHA));
        }
    }

    opts.feature_gate_warnings = opts.feature_gates.set_from_map(gates).map_err(|e| {
        let value = gates
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        let hint = match e {
            GateError::Unknown(_) => format!(
                "; known gates: AllAlpha, AllBeta, {}",
                crate::gates::Feature::ALL.map(|f| f.name()).join(", ")
            ),
            _ => String::new(),
        };
        CliError::value("feature-gates", &value, format!("{e}{hint}"))
    })?;

    if opts.node_deployment && opts.env.node_name.is_none() {
        return Err(CliError::MissingEnv {
            var: "NODE_NAME",
            when: "--node-deployment is set",
        });
    }
    Ok(())
}

/// Everything else.
pub(crate) fn stage_two(opts: &Options) -> Result<(), CliError> {
    if opts.metrics_address.is_some() && opts.http_endpoint.is_some() {
        return Err(CliError::invalid(
            "metrics-address",
            "only one of --metrics-address and --http-endpoint can be set; drop the deprecated --metrics-address",
        ));
    }
    if opts.http_address().is_some() && !opts.metrics_path.starts_with('/') {
        return Err(CliError::invalid(
            "metrics-path",
            "must be an HTTP path starting with /, such as /metrics",
        ));
    }
    if opts.csi_address.is_empty() {
        return Err(CliError::invalid(
            "csi-address",
            "must not be empty; give the path of the CSI driver's socket",
        ));
    }
    if opts.volume_name_prefix.is_empty() {
        return Err(CliError::invalid("volume-name-prefix", "must not be empty"));
    }
    if opts.worker_threads == 0 {
        return Err(CliError::invalid(
            "worker-threads",
            "must be greater than 0",
        ));
    }
    if opts.timeout.is_zero() {
        return Err(CliError::invalid(
            "timeout",
            "must be greater than 0, every CSI call would time out at once",
        ));
    }
    // client-go refuses a clientset with QPS but no burst; upstream exits on it.
    if opts.kube_api_qps > 0.0 && opts.kube_api_burst <= 0 {
        return Err(CliError::invalid(
            "kube-api-burst",
            "burst is required to be greater than 0 when --kube-api-qps is greater than 0",
        ));
    }
    if opts.enable_capacity {
        capacity(opts)?;
    }
    if opts.leader_election {
        leader_election(opts)?;
    }
    Ok(())
}

fn capacity(opts: &Options) -> Result<(), CliError> {
    if opts.env.namespace.is_none() {
        return Err(CliError::MissingEnv {
            var: "NAMESPACE",
            when: "--enable-capacity is set",
        });
    }
    if opts.capacity_ownerref_level.is_some() && opts.env.pod_name.is_none() {
        return Err(CliError::MissingEnv {
            var: "POD_NAME",
            when: "--enable-capacity is set and --capacity-ownerref-level is 0 or more",
        });
    }
    if opts.capacity_threads == 0 {
        return Err(CliError::invalid(
            "capacity-threads",
            "must be greater than 0",
        ));
    }
    if opts.capacity_poll_interval.is_zero() {
        return Err(CliError::invalid(
            "capacity-poll-interval",
            "must be greater than 0",
        ));
    }
    if opts.capacity_stale_action == StaleAction::Zero && opts.capacity_stale_after.is_none() {
        return Err(CliError::invalid(
            "capacity-stale-action",
            "zero needs --capacity-stale-after (when an object counts as stale)",
        ));
    }
    if opts.kube_api_capacity_qps > 0.0 && opts.kube_api_capacity_burst <= 0 {
        return Err(CliError::invalid(
            "kube-api-capacity-burst",
            "burst is required to be greater than 0 when --kube-api-capacity-qps is greater than 0",
        ));
    }
    Ok(())
}

/// client-go's `NewLeaderElector` checks, which upstream hits only after connecting.
fn leader_election(opts: &Options) -> Result<(), CliError> {
    let lease = opts.leader_election_lease_duration;
    let renew = opts.leader_election_renew_deadline;
    let retry = opts.leader_election_retry_period;
    for (flag, d) in [
        ("leader-election-lease-duration", lease),
        ("leader-election-renew-deadline", renew),
        ("leader-election-retry-period", retry),
    ] {
        if d.is_zero() {
            return Err(CliError::invalid(flag, "must be greater than 0"));
        }
    }
    if lease <= renew {
        return Err(CliError::invalid(
            "leader-election-lease-duration",
            format!(
                "must be greater than --leader-election-renew-deadline ({} <= {})",
                go(lease),
                go(renew)
            ),
        ));
    }
    // Same integer arithmetic as Go: time.Duration(JitterFactor * float64(retry)).
    if renew.as_nanos() <= (JITTER_FACTOR * retry.as_nanos() as f64) as u128 {
        return Err(CliError::invalid(
            "leader-election-renew-deadline",
            format!(
                "must be greater than 1.2 x --leader-election-retry-period ({} <= 1.2 x {})",
                go(renew),
                go(retry)
            ),
        ));
    }
    Ok(())
}
