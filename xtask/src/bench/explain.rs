//! Words around the numbers: setup text shared by scenarios 1 and 2, the machine line, and
//! the one line per scenario on what explains the difference, computed from the results.

use super::ctx::Sizes;
use super::report::fmt_num;
use super::results::{Impl, ScenarioResult};
use super::stats;

pub fn setup_throughput(s: &Sizes, deletion: bool) -> String {
    let what = if deletion {
        "After scenario 1's claims are all Bound, they are deleted at once (one \
         deletecollection); measured until every PV is gone and the driver's ListVolumes is \
         empty. Reclaim policy Delete."
    } else {
        "Measured from the first create until every claim is Bound (kube-controller-manager \
         binds them; it runs with its default client QPS 20/30 for both) and until every PV \
         exists (the provisioner's own part)."
    };
    format!(
        "{} claims of 1 Gi in an Immediate StorageClass, created at once (32 requests in \
         flight), one mock driver with no topology. Both provisioners get `--kube-api-qps` / \
         `--kube-api-burst` of the variant, 100 worker threads, no capacity tracking. A warm-up \
         claim is provisioned and deleted first. {what} API requests are counted by the API \
         server over the phase (the flow-control counter of the run's ServiceAccount, all \
         codes); events are among them. Ours runs with its default, the write-ahead record \
         (each claim's intent recorded in a Lease per driver, in the run's namespace, batched, \
         before CreateVolume; no finalizer on claims); runs measured otherwise say so in the \
         notes.",
        s.s1_claims
    )
}

/// Cores, memory, load and commit, for the reader of numbers from a shared machine.
/// The commit the binaries were built from: read once, on the first call (`bench::run` and
/// `chaos::run` call it before they build anything), so a commit made while a long run goes
/// on is not named for it.
pub fn commit() -> String {
    static COMMIT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    COMMIT
        .get_or_init(|| {
            std::process::Command::new("git")
                .args(["rev-parse", "--short", "HEAD"])
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_else(|| "?".into())
        })
        .clone()
}

pub fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| super::procfs::status_kb(&t, "MemTotal"))
        .map_or(0.0, |kb| kb as f64 / 1048576.0);
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into());
    let commit = commit();
    format!(
        "Machine: {cores} cores, {mem_gib:.0} GiB, 1-minute load average {load} when the \
         scenario ended; commit {commit}."
    )
}

/// Per-verb request counts the throughput scenarios keep for our provisioner.
/// Claim writes: updates, or patches where RBAC allows them.
const PVC_WRITES: [&str; 2] = [
    "requests update persistentvolumeclaims per volume",
    "requests patch persistentvolumeclaims per volume",
];
const EVENTS: &str = "requests create events per volume";

/// Median of one metric.
/// Ours' claim writes per volume, updates and patches together (`None`: neither recorded).
fn pvc_writes(r: &ScenarioResult, variant: &str) -> Option<f64> {
    let counts: Vec<f64> = PVC_WRITES
        .iter()
        .filter_map(|key| med(r, Impl::Ours, variant, key))
        .collect();
    (!counts.is_empty()).then(|| counts.iter().sum())
}

fn med(r: &ScenarioResult, which: Impl, variant: &str, key: &str) -> Option<f64> {
    let v: Vec<f64> = r
        .values(which, variant, key)
        .iter()
        .map(|(_, x)| *x)
        .collect();
    stats::summarize(&v).map(|s| s.median)
}

/// Median of the paired us/upstream ratios of one metric.
fn ratio(r: &ScenarioResult, variant: &str, key: &str) -> Option<f64> {
    let pairs = stats::paired_ratios(
        &r.values(Impl::Ours, variant, key),
        &r.values(Impl::Upstream, variant, key),
    );
    stats::summarize(&pairs).map(|s| s.median)
}

fn n(x: Option<f64>) -> String {
    x.map_or("–".into(), fmt_num)
}

fn r2(x: Option<f64>) -> String {
    x.map_or("–".into(), |v| format!("{v:.2}"))
}

/// Scenarios 1 and 2: the default-budget variant and the raised-budget one.
fn throughput_variants(r: &ScenarioResult) -> (String, String) {
    let v = r.variants();
    let low = v.first().cloned().unwrap_or_default();
    let high = v.last().cloned().unwrap_or_default();
    (low, high)
}

/// The note on ours' runs that were made before the write-ahead record was our default, and
/// kept (a run's note may go on after it); the explanations read it to say what those runs
/// measured.
pub const WITH_FINALIZER: &str = "measured with the creating-volume finalizer on every claim \
     (two claim writes per volume), our default before the write-ahead record";

/// Whether ours' runs of `variant` carry [`WITH_FINALIZER`].
fn with_finalizer(r: &ScenarioResult, variant: &str) -> bool {
    r.runs.iter().any(|x| {
        x.implementation == Impl::Ours
            && x.variant == variant
            && x.notes.iter().any(|n| n.starts_with(WITH_FINALIZER))
    })
}

/// The per-verb count of the record's writes.
const RECORD_WRITES: &str = "requests update leases per volume";

/// How our default keeps a volume from leaking, for the throughput explanations.
const RECORD: &str = "Ours' default never leaks a volume when the provisioner crashes or the \
     claim is deleted mid-call, and writes no claim for it: each claim's intent goes into the \
     write-ahead record (a Lease per driver) before CreateVolume and leaves it once the PV is \
     saved, batched with the others'; no finalizer goes on claims.";

/// When a claim that failed at once and on every retry since is next tried after `wait`
/// seconds, by a backoff that starts at 1 s and doubles up to 5 min (attempts at 0, 1, 3, 7,
/// ... s): upstream's default `--retry-interval-start` and `--retry-interval-max`.
fn next_retry_s(wait: f64) -> f64 {
    let (mut at, mut step) = (0.0, 1.0_f64);
    while at <= wait {
        at += step;
        step = (step * 2.0).min(300.0);
    }
    at
}

/// The one line on what explains the difference.
pub fn explain(r: &ScenarioResult) -> String {
    let v = r.variants();
    let first = v.first().cloned().unwrap_or_default();
    match r.scenario {
        1 => {
            let (low, high) = throughput_variants(r);
            let low_line = if with_finalizer(r, &low) {
                format!(
                    "The ours runs at {low} were measured before that default, with the \
                     creating-volume finalizer on every claim instead: {} PVC updates per volume \
                     (added before CreateVolume, removed after binding) besides the one PV create \
                     (ours {} vs upstream {} requests per volume, time ratio {}).",
                    n(pvc_writes(r, &low)),
                    n(med(r, Impl::Ours, &low, "api_per_volume")),
                    n(med(r, Impl::Upstream, &low, "api_per_volume")),
                    r2(ratio(r, &low, "bound_s")),
                )
            } else {
                format!(
                    "At {low} ours writes the PV and little else ({} record writes per volume; \
                     under the burst at most one client burst of Normal events waits for the \
                     budget, the rest are logged, not written): ours {} vs upstream {} requests \
                     per volume, of which {} are events (upstream: the PV and its events); time \
                     ratio until all PVs exist {}, until all Bound {}, where \
                     kube-controller-manager's binder at its default client QPS 20/30 sets the \
                     pace for both.",
                    n(med(r, Impl::Ours, &low, RECORD_WRITES).or(Some(0.0))),
                    n(med(r, Impl::Ours, &low, "api_per_volume")),
                    n(med(r, Impl::Upstream, &low, "api_per_volume")),
                    n(med(r, Impl::Ours, &low, EVENTS).or(Some(0.0))),
                    r2(ratio(r, &low, "provisioned_s")),
                    r2(ratio(r, &low, "bound_s")),
                )
            };
            let also = if with_finalizer(r, &high) {
                ", ours with the finalizer there too"
            } else {
                ""
            };
            format!(
                "at the default QPS the client-side rate limiter sets the pace, so time follows \
                 API requests per volume. {RECORD} {low_line} At {high} kube-controller-manager's \
                 binder is the shared limit (time ratio {}{also}).",
                r2(ratio(r, &high, "bound_s")),
            )
        }
        2 => {
            let (low, high) = throughput_variants(r);
            let low_line = if with_finalizer(r, &low) {
                format!(
                    "The ours runs at {low} were measured before that default: ours also wrote \
                     each deleted claim whose creating-volume finalizer was still on it ({} claim \
                     updates per volume), as scenario 1's PV creates left no free tokens for \
                     those releases, and the claim's deletion waits for its release, which runs \
                     once kube-controller-manager has dropped pvc-protection so it never \
                     conflicts (ours {} vs upstream {} requests per volume, time ratio {}).",
                    n(pvc_writes(r, &low)),
                    n(med(r, Impl::Ours, &low, "api_per_volume")),
                    n(med(r, Impl::Upstream, &low, "api_per_volume")),
                    r2(ratio(r, &low, "pvs_gone_s")),
                )
            } else {
                format!(
                    "At {low} nothing of ours is left on the claims to remove: ours {} vs \
                     upstream {} requests per volume, time ratio {}.",
                    n(med(r, Impl::Ours, &low, "api_per_volume")),
                    n(med(r, Impl::Upstream, &low, "api_per_volume")),
                    r2(ratio(r, &low, "pvs_gone_s")),
                )
            };
            // Per-verb counts are only recorded when they rose, so a missing one means zero.
            let high_line = if with_finalizer(r, &high) {
                let late = match pvc_writes(r, &high) {
                    None | Some(0.0) => "every release was done before the deletion".to_string(),
                    Some(x) => format!("{} claim updates per volume", fmt_num(x)),
                };
                format!(
                    "At {high}, ours with the finalizer too, {late} (time ratio {}).",
                    r2(ratio(r, &high, "pvs_gone_s")),
                )
            } else {
                format!(
                    "At {high} the time ratio is {}.",
                    r2(ratio(r, &high, "pvs_gone_s"))
                )
            };
            format!(
                "both drop the PV's finalizer and delete the PV (2 requests per volume). {RECORD} \
                 {low_line} {high_line}"
            )
        }
        3 => format!(
            "both cache the same Nodes, CSINodes, PVs and PVCs; the RSS ratio ({}) is the cost \
             of each side's cached object representation plus runtime (Go heap and GC headroom \
             vs Rust allocations). Ours keeps each PV and claim as its JSON (about 1 and 0.6 \
             KiB) and decodes it on read, where a decoded PV takes about 6 KiB and a claim 3; \
             upstream keeps Go structs. \
             Start-up time is listing them ({} vs {} s).",
            r2(ratio(r, &first, "rss_mib")),
            n(med(r, Impl::Ours, &first, "ready_s")),
            n(med(r, Impl::Upstream, &first, "ready_s")),
        ),
        4 => {
            let own = med(r, Impl::Ours, &first, "lag_p50_ms");
            let others = format!(
                "all three classes {} vs {} ms",
                n(med(r, Impl::Ours, &first, "all_p50_ms")),
                n(med(r, Impl::Upstream, &first, "all_p50_ms")),
            );
            if own.is_some_and(|l| l < 0.0) {
                format!(
                    "ours lowers the claim's class as soon as the claim names its node \
                     (`--capacity-reservations`, default on), before CreateVolume is called, so \
                     its lag there is negative: the object showed the volume's size that long \
                     before CreateVolume returned (p50 {} ms; upstream {} ms, after its \
                     refresh). The node's other classes share the pool and both refresh them \
                     right after CreateVolume: one GetCapacity and one API update per class \
                     ({others}).",
                    n(own),
                    n(med(r, Impl::Upstream, &first, "lag_p50_ms")),
                )
            } else {
                format!(
                    "both refresh the node's objects right after CreateVolume; the lag is that \
                     refresh's queueing, one GetCapacity and one API update per class (p50 {} \
                     vs {} ms, {others}).",
                    n(own),
                    n(med(r, Impl::Upstream, &first, "lag_p50_ms")),
                )
            }
        }
        5 => format!(
            "one `/metrics` scrape takes upstream {} s (ours {} s): to count obsolete objects \
             it compares every object with every work item while holding the lock its capacity \
             worker needs, so the worker stops while a scrape runs. Upstream's queue keys point \
             to a fresh copy of the work item, so the queue never merges repeats: every poll \
             while objects were still being created (at capacity QPS 100) queued all of them \
             again, and upstream spends its first unscraped intervals working those repeats \
             off ({} GetCapacity calls per second vs ours {}; one call per object per poll is \
             enough). Both refresh every object per 10 s interval (unscraped {}% vs {}%, \
             scraped every 30 s {}% vs {}%), but a scrape that stalls upstream's worker leaves \
             the next poll's items queued behind it (max depth {} vs {}); ours keeps at most \
             one pending refresh per object.",
            n(med(r, Impl::Upstream, &first, "scrape_s")),
            n(med(r, Impl::Ours, &first, "scrape_s")),
            n(med(r, Impl::Upstream, &first, "quiet_getcapacity_per_s")),
            n(med(r, Impl::Ours, &first, "quiet_getcapacity_per_s")),
            n(med(r, Impl::Ours, &first, "quiet_refreshed_pct")),
            n(med(r, Impl::Upstream, &first, "quiet_refreshed_pct")),
            n(med(r, Impl::Ours, &first, "scraped_refreshed_pct")),
            n(med(r, Impl::Upstream, &first, "scraped_refreshed_pct")),
            n(med(r, Impl::Upstream, &first, "scraped_depth_max")),
            n(med(r, Impl::Ours, &first, "scraped_depth_max")),
        ),
        7 => format!(
            "upstream's instances each wait a random part of the base delay before trying to \
             take an unclaimed claim, and all but one of the instances that try lose the race \
             with a conflict; ours ranks the instances for each claim by a hash among those \
             whose published capacity fits, the first takes it at once and the others only \
             after their turn (time until every claim has its node ratio {}, conflicts ours {} \
             vs upstream {}, claims taken by a node without room {} vs {}). Time until all are \
             Bound is kube-controller-manager's binder for both (about 4 claims a second, ratio \
             {}). {} Every upstream instance caches every PV and PVC of the cluster; ours keeps \
             its own node's volumes and the claims it may take (RSS per instance {} vs {} MiB).",
            r2(ratio(r, &first, "selected_s")),
            n(med(r, Impl::Ours, &first, "conflicts")),
            n(med(r, Impl::Upstream, &first, "conflicts")),
            n(med(r, Impl::Ours, &first, "exhausted_calls")),
            n(med(r, Impl::Upstream, &first, "exhausted_calls")),
            r2(ratio(r, &first, "bound_s")),
            claim_writes_line(r, &first),
            n(med(r, Impl::Ours, &first, "rss_median_mib")),
            n(med(r, Impl::Upstream, &first, "rss_median_mib")),
        ),
        8 => {
            let wait = med(r, Impl::Ours, &first, "wait_s");
            let target = fmt_num(super::restore::TARGET_S);
            let median = med(r, Impl::Ours, &first, "ready_to_create_median_s");
            let within = |m: Option<f64>| m.is_some_and(|m| m <= super::restore::TARGET_S);
            let verdict = if within(median) {
                format!("within the {target} s target")
            } else {
                format!(
                    "not the {target} s target: three requests of a restore cannot wait (the \
                     snapshot and claim finalizers, the PV), 0.6 s of QPS 5 each, and the \
                     snapshots became ready faster than that, so the budget sets the pace"
                )
            };
            format!(
                "ours watches VolumeSnapshots: a claim whose snapshot is missing or not ready \
                 fails once and then waits for it (one ProvisioningFailed event each), and is \
                 retried as soon as the snapshot reports readyToUse (median {} s, slowest {} s \
                 from readyToUse to CreateVolume), {verdict}. A restore reads its snapshot and \
                 content from watches, its requests are served before those of claims whose \
                 attempts began later, and what can wait (events, dropping the snapshot and \
                 claim finalizers) goes on the background lane: {} API requests per restore \
                 from the snapshots' creation on, vs upstream's {}. Upstream retries only on \
                 its per-claim backoff, 1 s doubling after each failure: a claim that failed \
                 from its creation on for {} s is next tried about {} s after it was created, \
                 whenever its snapshot got ready (median {} s, slowest {} s), and its retries \
                 spend the same budget meanwhile. Claims over the {target} s target: ours {} vs \
                 upstream {}; last snapshot ready to last claim Bound: {} vs {} s.",
                n(median),
                n(med(r, Impl::Ours, &first, "ready_to_create_max_s")),
                n(med(r, Impl::Ours, &first, "requests_per_restore")),
                n(med(r, Impl::Upstream, &first, "requests_per_restore")),
                n(wait),
                n(wait.map(next_retry_s)),
                n(med(r, Impl::Upstream, &first, "ready_to_create_median_s")),
                n(med(r, Impl::Upstream, &first, "ready_to_create_max_s")),
                n(med(r, Impl::Ours, &first, "over_target")),
                n(med(r, Impl::Upstream, &first, "over_target")),
                n(med(r, Impl::Ours, &first, "all_bound_s")),
                n(med(r, Impl::Upstream, &first, "all_bound_s")),
            )
        }
        9 => {
            let m = |which, key| n(med(r, which, &first, key));
            format!(
                "the scheduler ranks the nodes a pod fits on by the capacity it last saw. \
                 Upstream asks the driver for a node's capacity again only once a volume there \
                 is made (and at each poll), so while CreateVolume runs the node keeps its \
                 older, emptier number and pods arriving meanwhile pile onto it until the \
                 driver refuses (upstream {} ResourceExhausted calls, {} claims sent back, at \
                 most {} volumes on one node). Ours lowers a node's object as soon as a \
                 CreateVolume starts there, so the next pod sees it fuller and goes elsewhere \
                 ({} refused, {} sent back, at most {}). Volumes off the spread of an oracle \
                 that knew the true free space: ours {} vs upstream {} (time ratio {}).",
                m(Impl::Upstream, "exhausted_calls"),
                m(Impl::Upstream, "sent_back"),
                m(Impl::Upstream, "most_on_one"),
                m(Impl::Ours, "exhausted_calls"),
                m(Impl::Ours, "sent_back"),
                m(Impl::Ours, "most_on_one"),
                m(Impl::Ours, "off_oracle"),
                m(Impl::Upstream, "off_oracle"),
                r2(ratio(r, &first, "all_bound_s")),
            ) + &bursts_line(r)
        }
        _ => {
            let ours = med(r, Impl::Ours, &first, "exhausted_calls");
            let upstream = med(r, Impl::Upstream, &first, "exhausted_calls");
            let time = r2(ratio(r, &first, "all_bound_s"));
            let tight = tight_line(r);
            if ours == Some(0.0) && upstream == Some(0.0) {
                format!(
                    "neither sent a pod to a full node (0 ResourceExhausted on both: the \
                     scheduler spread the pods over nodes with room to spare), so time until \
                     bound follows the API writes per volume at QPS 5{} (time ratio \
                     {time}).{tight}",
                    if with_finalizer(r, &first) {
                        ": ours' runs, made before the write-ahead record was the default, wrote \
                         the creating-volume finalizer on the claim before CreateVolume besides \
                         the PV"
                    } else {
                        ""
                    },
                )
            } else {
                format!(
                    "the scheduler places pods on the capacity it last saw; every volume \
                     created before the node's object is updated (capacity QPS 1) can send the \
                     next pod to a full node, which costs a ResourceExhausted and a reschedule \
                     (ours {} vs upstream {} failed CreateVolume calls; time ratio {time}).{tight}",
                    n(ours),
                    n(upstream),
                )
            }
        }
    }
}

/// Scenario 7: ours' claim writes, and what the write-ahead record changed about them.
fn claim_writes_line(r: &ScenarioResult, variant: &str) -> String {
    let ours = n(med(r, Impl::Ours, variant, "claim_writes_per_volume"));
    let upstream = n(med(r, Impl::Upstream, variant, "claim_writes_per_volume"));
    if with_finalizer(r, variant) {
        format!(
            "Ours' runs here were made before the write-ahead record was the default and wrote \
             each claim three times (selected-node, then the creating-volume finalizer on and \
             off: {ours} writes per volume vs upstream's {upstream}); with the record, a Lease per \
             node, no finalizer goes on claims."
        )
    } else {
        format!(
            "Ours makes {ours} claim writes per volume vs upstream's {upstream}: the write-ahead \
             record, a Lease per node, holds a claim's intent instead of a finalizer on it."
        )
    }
}

/// Scenario 9's `bursts` variant, when it ran.
fn bursts_line(r: &ScenarioResult) -> String {
    let bursts = super::scoring::BURSTS;
    if !r.variants().iter().any(|v| v == bursts) {
        return String::new();
    }
    let m = |which, key| n(med(r, which, bursts, key));
    format!(
        " In `{bursts}` (pods created together, so the scheduler may place a whole burst \
         before any object changes): refused calls ours {} vs upstream {}, claims sent back {} vs {}, volumes off the \
         oracle's spread {} vs {} (time ratio {}).",
        m(Impl::Ours, "exhausted_calls"),
        m(Impl::Upstream, "exhausted_calls"),
        m(Impl::Ours, "sent_back"),
        m(Impl::Upstream, "sent_back"),
        m(Impl::Ours, "off_oracle"),
        m(Impl::Upstream, "off_oracle"),
        r2(ratio(r, bursts, "all_bound_s")),
    )
}

/// Scenario 6's `tight` variant, when it ran: what the reservations changed.
fn tight_line(r: &ScenarioResult) -> String {
    let tight = super::placement::TIGHT;
    if !r.variants().iter().any(|v| v == tight) {
        return String::new();
    }
    let m = |which, key| n(med(r, which, tight, key));
    format!(
        " In the `{tight}` variant (local storage, every slot needed, pods arriving while volumes \
         are made) the driver refused {} CreateVolume calls of upstream's and {} of ours, and \
         ours {} vs upstream {} claims went back to the scheduler: ours takes a volume's size from its node's \
         object while it is made, so later pods go to nodes with room, and a claim the \
         scheduler had already sent to a full node goes back without a driver call (time ratio \
         {}).",
        m(Impl::Upstream, "exhausted_calls"),
        m(Impl::Ours, "exhausted_calls"),
        m(Impl::Ours, "sent_back"),
        m(Impl::Upstream, "sent_back"),
        r2(ratio(r, tight, "all_bound_s")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::results::RunRecord;

    fn result(scenario: u8, key: &str, ours: f64, upstream: f64) -> ScenarioResult {
        let mut a = RunRecord::new(Impl::Ours, "", 1);
        a.set(key, ours);
        let mut b = RunRecord::new(Impl::Upstream, "", 1);
        b.set(key, upstream);
        ScenarioResult {
            scenario,
            title: String::new(),
            quick: false,
            finished_at: String::new(),
            wall_seconds: 0.0,
            command: String::new(),
            setup: String::new(),
            metrics: vec![],
            runs: vec![a, b],
            plot: None,
            notes: vec![],
            upstream: crate::bench::results::UPSTREAM.into(),
            kubernetes: "v1.37.2".into(),
        }
    }

    #[test]
    fn lines_quote_the_measured_numbers() {
        let cases = [
            (1, "api_per_volume", 3.0, 4.5, "ours 3.00 vs upstream 4.50"),
            (3, "rss_mib", 20.0, 80.0, "RSS ratio (0.25)"),
            (4, "lag_p50_ms", 12.0, 900.0, "p50 12.0 vs 900 ms"),
            (
                4,
                "lag_p50_ms",
                -374.0,
                90.0,
                "p50 -374 ms; upstream 90.0 ms",
            ),
            (
                5,
                "scrape_s",
                0.04,
                6.4,
                "takes upstream 6.40 s (ours 0.040 s)",
            ),
            (
                6,
                "exhausted_calls",
                2.0,
                40.0,
                "ours 2.00 vs upstream 40.0",
            ),
            (
                8,
                "ready_to_create_median_s",
                0.4,
                21.0,
                "(median 0.400 s, slowest – s from",
            ),
            (
                7,
                "conflicts",
                3.0,
                120.0,
                "conflicts ours 3.00 vs upstream 120",
            ),
        ];
        for (s, key, a, b, want) in cases {
            let line = explain(&result(s, key, a, b));
            assert!(line.contains(want), "scenario {s}: {line}");
        }
        let none_exhausted = explain(&result(6, "exhausted_calls", 0.0, 0.0));
        assert!(none_exhausted.starts_with("neither"), "{none_exhausted}");
        let empty = explain(&result(4, "other", 1.0, 1.0));
        assert!(empty.contains("p50 – vs – ms"), "{empty}");
    }

    #[test]
    fn backoff_steps() {
        for (wait, next) in [(0.5, 1.0), (20.0, 31.0), (40.0, 63.0), (63.0, 127.0)] {
            assert_eq!(next_retry_s(wait), next, "{wait}");
        }
        // The step stops doubling at 5 min: 511 s, then 811 s, 1111 s.
        assert_eq!(next_retry_s(1000.0), 1111.0);
    }

    #[test]
    fn setup_names_the_size() {
        let s = setup_throughput(&Sizes::full(), false);
        assert!(s.contains("1000 claims"), "{s}");
        assert!(setup_throughput(&Sizes::full(), true).contains("deletecollection"));
        assert!(machine().starts_with("Machine: "));
    }
}
