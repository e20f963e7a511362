//! From clap's strings to typed [`Options`]: every value is checked against the grammar Go
//! would apply to that flag, with a one-line error naming the flag and the accepted form.

use std::time::Duration;

use crate::args::RawArgs;
use crate::duration::parse_go_duration;
use crate::error::CliError;
use crate::goparse::{
    NumError, parse_go_bool, parse_go_float, parse_go_float32, parse_go_int, parse_go_uint,
};
use crate::labels::parse_labels;
use crate::options::{Env, LoggingOptions, Options, StaleAction};

const DURATION_FORM: &str = "expected a Go duration such as 10s, 1m30s or 250ms";

fn boolean(flag: &'static str, raw: Option<String>, default: bool) -> Result<bool, CliError> {
    match raw {
        None => Ok(default),
        Some(s) => parse_go_bool(&s).ok_or_else(|| {
            CliError::value(flag, &s, "expected true or false (also accepted: 1, 0, t, f, T, F, TRUE, FALSE, True, False)")
        }),
    }
}

/// A duration in signed nanoseconds.
fn go_duration(flag: &'static str, raw: &str) -> Result<i64, CliError> {
    parse_go_duration(raw).map_err(|e| CliError::value(flag, raw, format!("{DURATION_FORM} ({e})")))
}

/// A duration that must not be negative.
fn duration(
    flag: &'static str,
    raw: Option<String>,
    default: Duration,
) -> Result<Duration, CliError> {
    let Some(s) = raw else { return Ok(default) };
    let nanos = go_duration(flag, &s)?;
    u64::try_from(nanos).map(Duration::from_nanos).map_err(|_| {
        CliError::value(
            flag,
            &s,
            "expected a duration of 0 or more, such as 0, 30s or 5m",
        )
    })
}

fn num_expected(e: NumError, form: &str) -> String {
    match e {
        NumError::Syntax => format!("expected {form}"),
        NumError::Range => format!("value out of range; expected {form}"),
    }
}

fn int(flag: &'static str, raw: Option<String>, default: i64) -> Result<i64, CliError> {
    let Some(s) = raw else { return Ok(default) };
    parse_go_int(&s).map_err(|e| {
        CliError::value(
            flag,
            &s,
            num_expected(e, "an integer such as 5, -1 or 0x10"),
        )
    })
}

fn uint(flag: &'static str, raw: Option<String>, default: usize) -> Result<usize, CliError> {
    let Some(s) = raw else { return Ok(default) };
    let form = "a whole number of 0 or more, such as 1 or 100";
    let n = parse_go_uint(&s).map_err(|e| CliError::value(flag, &s, num_expected(e, form)))?;
    usize::try_from(n).map_err(|_| CliError::value(flag, &s, num_expected(NumError::Range, form)))
}

fn float(flag: &'static str, raw: Option<String>, default: f64) -> Result<f64, CliError> {
    let Some(s) = raw else { return Ok(default) };
    let form = "a number such as 5 or 2.5";
    match parse_go_float(&s) {
        Ok(v) if !v.is_nan() => Ok(v),
        Ok(_) => Err(CliError::value(flag, &s, format!("expected {form}"))),
        Err(e) => Err(CliError::value(flag, &s, num_expected(e, form))),
    }
}

fn float32(flag: &'static str, raw: Option<String>, default: f32) -> Result<f32, CliError> {
    let Some(s) = raw else { return Ok(default) };
    let form = "a number such as 1 or 0.5";
    match parse_go_float32(&s) {
        Ok(v) if !v.is_nan() => Ok(v),
        Ok(_) => Err(CliError::value(flag, &s, format!("expected {form}"))),
        Err(e) => Err(CliError::value(flag, &s, num_expected(e, form))),
    }
}

/// Upstream treats an empty string flag as unset.
fn non_empty(raw: Option<String>) -> Option<String> {
    raw.filter(|s| !s.is_empty())
}

/// `-v`: `strconv.ParseUint(s, 10, 31)`.
fn verbosity(raw: Option<String>) -> Result<u32, CliError> {
    let Some(s) = raw else { return Ok(0) };
    let ok = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    s.parse::<u32>()
        .ok()
        .filter(|v| ok && *v <= i32::MAX as u32)
        .ok_or_else(|| CliError::value("v", &s, "expected a verbosity level from 0 to 2147483647"))
}

fn quantity(flag: &'static str, raw: Option<String>) -> Result<String, CliError> {
    let s = raw.unwrap_or_else(|| "0".to_string());
    match quantity::parse_quantity(&s) {
        Ok(_) => Ok(s),
        Err(_) => Err(CliError::value(
            flag,
            &s,
            "expected a quantity such as 0, 512, 64Ki or 1Mi",
        )),
    }
}

fn logging(raw: &mut RawArgs) -> Result<LoggingOptions, CliError> {
    let d = LoggingOptions::default();
    let format = match raw.logging_format.take() {
        None => d.format,
        Some(s) => s
            .parse()
            .map_err(|_| CliError::value("logging-format", &s, "expected text or json"))?,
    };
    let vmodule = std::mem::take(&mut raw.vmodule);
    for item in &vmodule {
        klog::VModule::parse(item).map_err(|e| {
            CliError::value(
                "vmodule",
                item,
                format!("expected comma-separated pattern=N such as controller=5 ({e})"),
            )
        })?;
    }
    let vmodule = (!vmodule.is_empty())
        .then(|| vmodule.join(","))
        .filter(|v| !v.is_empty());
    Ok(LoggingOptions {
        format,
        verbosity: verbosity(raw.v.take())?,
        vmodule,
        flush_frequency: duration(
            "log-flush-frequency",
            raw.log_flush_frequency.take(),
            d.flush_frequency,
        )?,
        text_split_stream: boolean(
            "log-text-split-stream",
            raw.log_text_split_stream.take(),
            false,
        )?,
        json_split_stream: boolean(
            "log-json-split-stream",
            raw.log_json_split_stream.take(),
            false,
        )?,
        text_info_buffer_size: quantity(
            "log-text-info-buffer-size",
            raw.log_text_info_buffer_size.take(),
        )?,
        json_info_buffer_size: quantity(
            "log-json-info-buffer-size",
            raw.log_json_info_buffer_size.take(),
        )?,
    })
}

/// Converts every flag; returns the options and the merged `--feature-gates` map, which
/// validation applies (unknown gates are a start-up error upstream, not a parse error).
pub(crate) fn convert(
    mut raw: RawArgs,
    env: Env,
) -> Result<(Options, std::collections::BTreeMap<String, bool>), CliError> {
    let d = Options::default();
    let gate_values = std::mem::take(&mut raw.feature_gates);
    let gates = crate::gates::parse_gate_map(&gate_values).map_err(|e| {
        CliError::value(
            "feature-gates",
            &gate_values.join(","),
            format!("expected Name=true|false pairs ({e})"),
        )
    })?;
    let label_values = std::mem::take(&mut raw.leader_election_labels);
    let labels = parse_labels(&label_values).map_err(|bad| {
        CliError::value(
            "leader-election-labels",
            &label_values.join(","),
            format!("expected key:value pairs separated by commas, such as app:csi,tier:storage (malformed item {bad:?})"),
        )
    })?;
    let logging = logging(&mut raw)?;

    let uuid_raw = raw.volume_name_uuid_length.take();
    let uuid = int("volume-name-uuid-length", uuid_raw.clone(), -1)?;
    let volume_name_uuid_length = match uuid {
        -1 => None,
        1..=32 => Some(uuid as usize),
        _ => {
            let s = uuid_raw.unwrap_or_default();
            return Err(CliError::value(
                "volume-name-uuid-length",
                &s,
                "expected -1 (whole UID) or 1 to 32",
            ));
        }
    };
    let capacity_stale_after = Some(duration(
        "capacity-stale-after",
        raw.capacity_stale_after.take(),
        Duration::ZERO,
    )?)
    .filter(|d| !d.is_zero());
    let capacity_stale_action = match raw.capacity_stale_action.take().as_deref() {
        None | Some("keep") => StaleAction::Keep,
        Some("zero") => StaleAction::Zero,
        Some(s) => {
            return Err(CliError::value(
                "capacity-stale-action",
                s,
                "expected keep or zero",
            ));
        }
    };
    let level_raw = raw.capacity_ownerref_level.take();
    let level = int("capacity-ownerref-level", level_raw.clone(), 1)?;
    let capacity_ownerref_level = if level < 0 {
        None
    } else {
        Some(u32::try_from(level).map_err(|_| {
            CliError::value(
                "capacity-ownerref-level",
                &level_raw.unwrap_or_default(),
                "expected -1, 0, 1, 2 or another small level",
            )
        })?)
    };
    let sweep = match raw.snapshot_orphan_sweep_interval.take() {
        None => d.snapshot_orphan_sweep_interval,
        Some(s) => {
            let n = go_duration("snapshot-orphan-sweep-interval", &s)?;
            // Upstream runs the sweep only for a positive interval.
            u64::try_from(n)
                .ok()
                .filter(|n| *n > 0)
                .map(Duration::from_nanos)
        }
    };
    let kubeconfig = env
        .kubeconfig
        .clone()
        .or_else(|| non_empty(raw.kubeconfig.take()));

    Ok((
        Options {
            master: non_empty(raw.master),
            volume_name_prefix: raw.volume_name_prefix.unwrap_or(d.volume_name_prefix),
            volume_name_uuid_length,
            retry_interval_start: duration(
                "retry-interval-start",
                raw.retry_interval_start,
                d.retry_interval_start,
            )?,
            retry_interval_max: duration(
                "retry-interval-max",
                raw.retry_interval_max,
                d.retry_interval_max,
            )?,
            worker_threads: uint("worker-threads", raw.worker_threads, d.worker_threads)?,
            cloning_protection_threads: uint(
                "cloning-protection-threads",
                raw.cloning_protection_threads,
                d.cloning_protection_threads,
            )?,
            snapshot_orphan_sweep_interval: sweep,
            capacity_threads: uint("capacity-threads", raw.capacity_threads, d.capacity_threads)?,
            timeout: duration("timeout", raw.timeout, d.timeout)?,
            strict_topology: boolean("strict-topology", raw.strict_topology, d.strict_topology)?,
            immediate_topology: boolean(
                "immediate-topology",
                raw.immediate_topology,
                d.immediate_topology,
            )?,
            extra_create_metadata: boolean(
                "extra-create-metadata",
                raw.extra_create_metadata,
                d.extra_create_metadata,
            )?,
            enable_pprof: boolean("enable-pprof", raw.enable_pprof, d.enable_pprof)?,
            default_fstype: non_empty(raw.default_fstype),
            kube_api_capacity_qps: float32(
                "kube-api-capacity-qps",
                raw.kube_api_capacity_qps,
                d.kube_api_capacity_qps,
            )?,
            kube_api_capacity_burst: int(
                "kube-api-capacity-burst",
                raw.kube_api_capacity_burst,
                d.kube_api_capacity_burst,
            )?,
            enable_capacity: boolean("enable-capacity", raw.enable_capacity, d.enable_capacity)?,
            capacity_reservations: boolean(
                "capacity-reservations",
                raw.capacity_reservations,
                d.capacity_reservations,
            )?,
            capacity_pod_aware: boolean(
                "capacity-pod-aware",
                raw.capacity_pod_aware,
                d.capacity_pod_aware,
            )?,
            capacity_foreign_check: boolean(
                "capacity-foreign-check",
                raw.capacity_foreign_check,
                d.capacity_foreign_check,
            )?,
            capacity_for_immediate_binding: boolean(
                "capacity-for-immediate-binding",
                raw.capacity_for_immediate_binding,
                d.capacity_for_immediate_binding,
            )?,
            capacity_poll_interval: duration(
                "capacity-poll-interval",
                raw.capacity_poll_interval,
                d.capacity_poll_interval,
            )?,
            capacity_stale_after,
            capacity_driver_grace: duration(
                "capacity-driver-grace",
                raw.capacity_driver_grace.take(),
                d.capacity_driver_grace,
            )?,
            capacity_stale_action,
            capacity_ownerref_level,
            node_deployment: boolean("node-deployment", raw.node_deployment, d.node_deployment)?,
            node_deployment_immediate_binding: boolean(
                "node-deployment-immediate-binding",
                raw.node_deployment_immediate_binding,
                d.node_deployment_immediate_binding,
            )?,
            node_deployment_base_delay: duration(
                "node-deployment-base-delay",
                raw.node_deployment_base_delay,
                d.node_deployment_base_delay,
            )?,
            node_deployment_max_delay: duration(
                "node-deployment-max-delay",
                raw.node_deployment_max_delay,
                d.node_deployment_max_delay,
            )?,
            controller_publish_readonly: boolean(
                "controller-publish-readonly",
                raw.controller_publish_readonly,
                d.controller_publish_readonly,
            )?,
            prevent_volume_mode_conversion: boolean(
                "prevent-volume-mode-conversion",
                raw.prevent_volume_mode_conversion,
                d.prevent_volume_mode_conversion,
            )?,
            feature_gates: d.feature_gates,
            show_version: boolean("version", raw.version, false)?,
            kubeconfig,
            csi_address: raw.csi_address.unwrap_or(d.csi_address),
            leader_election: boolean("leader-election", raw.leader_election, d.leader_election)?,
            leader_election_namespace: non_empty(raw.leader_election_namespace),
            leader_election_lease_duration: duration(
                "leader-election-lease-duration",
                raw.leader_election_lease_duration,
                d.leader_election_lease_duration,
            )?,
            leader_election_renew_deadline: duration(
                "leader-election-renew-deadline",
                raw.leader_election_renew_deadline,
                d.leader_election_renew_deadline,
            )?,
            leader_election_retry_period: duration(
                "leader-election-retry-period",
                raw.leader_election_retry_period,
                d.leader_election_retry_period,
            )?,
            leader_election_labels: labels,
            kube_api_qps: float("kube-api-qps", raw.kube_api_qps, d.kube_api_qps)?,
            kube_api_burst: int("kube-api-burst", raw.kube_api_burst, d.kube_api_burst)?,
            http_endpoint: non_empty(raw.http_endpoint),
            metrics_address: non_empty(raw.metrics_address),
            metrics_path: raw.metrics_path.unwrap_or(d.metrics_path),
            // A Go BoolFunc upstream: an empty value turns it on.
            automaxprocs: match raw.automaxprocs {
                Some(s) if s.is_empty() => true,
                raw => boolean("automaxprocs", raw, false)?,
            },
            logging,
            env,
            feature_gate_warnings: Vec::new(),
            positional_args: raw.positional,
            explicit: Default::default(),
        },
        gates,
    ))
}
