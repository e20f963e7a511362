//! Scenario 8: restore waits for the snapshot. Claims name VolumeSnapshots that do not exist
//! yet; once the provisioner has failed them for a while, the snapshots are taken at once.
//! Measured per claim: from its snapshot's `readyToUse` to the CreateVolume of its volume in
//! csi-driver-host-path's own log.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::CSINode;
use kube::api::{DeleteParams, DynamicObject, ListParams};
use kube::{Api, ResourceExt};
use testenv::{HOSTPATH_TOPOLOGY_KEY, HostpathPlugin, SnapshotController, Snapshotter};

use super::cluster::{create_all, force_delete, poll};
use super::ctx::{Ctx, Sizes, Slot, api_requests};
use super::hostpathlog::{self, Call};
use super::launch::{Budget, Running};
use super::objects;
use super::observe;
use super::results::{Impl, MetricDef, PlotSpec, RunRecord};
use super::stats;

const SIZE: &str = "1Gi";
/// Upstream's backoff tops out at 5 min: one full step and some.
const BOUND_WAIT: Duration = Duration::from_secs(360);
/// What a user should wait at most from a ready snapshot to its restore starting (the goal
/// our snapshot watch was built for).
pub const TARGET_S: f64 = 2.0;

pub fn setup(s: &Sizes) -> String {
    format!(
        "Per run one csi-driver-host-path `hostpathplugin` (its own driver name and fake node) \
         with external-snapshotter v8.7.0's `csi-snapshotter` beside it; one \
         `snapshot-controller` for the scenario; an Immediate StorageClass and a \
         VolumeSnapshotClass. A {SIZE} source claim is provisioned and Bound. Then {n} claims \
         of {SIZE} are created, each with a `dataSource` naming its own VolumeSnapshot that \
         does not exist yet, and left {w} s so that the provisioner fails them a few times (a \
         restore created before its snapshot is ready). Then the {n} snapshots of the source \
         claim are created at once. Latency per claim = the klog time of the plugin's log line \
         for the successful CreateVolume of `pvc-<claim uid>` (written as the call returns) − \
         the instant the bench's own watch first saw the claim's snapshot with `readyToUse: \
         true` (same clock). Flags: upstream's defaults for both (QPS 5/10, 100 workers, \
         `--retry-interval-start` 1s, `--retry-interval-max` 5m), `-v=2`, no capacity \
         tracking.",
        n = s.s8_claims,
        w = s.s8_wait.as_secs(),
    )
}

pub fn metrics() -> Vec<MetricDef> {
    vec![
        MetricDef::new(
            "ready_to_create_median_s",
            "readyToUse → CreateVolume, median claim",
            "s",
            true,
        ),
        MetricDef::new(
            "ready_to_create_max_s",
            "readyToUse → CreateVolume, slowest claim",
            "s",
            true,
        ),
        MetricDef::new(
            "over_target",
            &format!("Claims whose CreateVolume came over {TARGET_S} s after readyToUse"),
            "",
            true,
        ),
        MetricDef::new(
            "all_bound_s",
            "Last snapshot readyToUse → last claim Bound",
            "s",
            true,
        ),
        MetricDef::new(
            "requests_per_restore",
            "API requests per restore, from the snapshots' creation until quiet",
            "",
            true,
        ),
        MetricDef::new(
            "create_calls",
            "Successful CreateVolume calls for the restores",
            "",
            true,
        ),
        MetricDef::new(
            "failed_events",
            "ProvisioningFailed events (sum of counts)",
            "",
            true,
        ),
        MetricDef::new(
            "snapshots_ready_s",
            "Snapshots created → last readyToUse (snapshot components, not the provisioner)",
            "s",
            true,
        ),
    ]
}

pub fn plot() -> PlotSpec {
    PlotSpec {
        title: "From readyToUse to CreateVolume (CDF over claims)".into(),
        x_label: "seconds".into(),
        y_label: "fraction of claims".into(),
        series: "latency_cdf".into(),
        pick_by: "ready_to_create_median_s".into(),
    }
}

/// One restore: the claim, its snapshot and the volume name its CreateVolume carries.
#[derive(Debug, Clone, PartialEq)]
struct Restore {
    claim: String,
    snapshot: String,
    volume: String,
}

/// The first successful CreateVolume of each volume name.
fn first_created(calls: &[Call]) -> HashMap<&str, Timestamp> {
    let mut out = HashMap::new();
    for c in calls.iter().filter(|c| c.method == "CreateVolume" && c.ok) {
        if let Some(name) = &c.name {
            out.entry(name.as_str()).or_insert(c.at);
        }
    }
    out
}

/// Seconds from each snapshot's readyToUse to its claim's first successful CreateVolume;
/// restores whose snapshot or volume was never seen are left out.
fn latencies(restores: &[Restore], ready: &HashMap<String, Timestamp>, calls: &[Call]) -> Vec<f64> {
    let created = first_created(calls);
    restores
        .iter()
        .filter_map(|r| {
            let made = created.get(r.volume.as_str())?;
            Some(made.duration_since(*ready.get(&r.snapshot)?).as_secs_f64())
        })
        .collect()
}

/// What a run started and must stop.
#[derive(Default)]
struct Started {
    prov: Option<Running>,
    plugin: Option<HostpathPlugin>,
    snapshotter: Option<Snapshotter>,
}

fn node_name(slot: &Slot) -> String {
    format!("{}-node", slot.namespace)
}

fn snapshots(ctx: &Ctx, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        ctx.client.clone(),
        namespace,
        &testenv::volume_snapshot_resource(),
    )
}

async fn measure(ctx: &Ctx, slot: &Slot, rec: &mut RunRecord, started: &mut Started) -> Result<()> {
    ctx.prepare(slot, false).await?;
    let node = node_name(slot);
    testenv::try_create_fake_nodes(&ctx.client, &slot.driver, HOSTPATH_TOPOLOGY_KEY, &[&node])
        .await?;
    // Both wait for their socket or first log line with a blocking sleep.
    let plugin = tokio::task::block_in_place(|| {
        HostpathPlugin::try_start(&slot.dir, &slot.driver, &node, &[])
    })?;
    let plugin = started.plugin.insert(plugin);
    let (socket, log) = (plugin.socket.clone(), plugin.log_path().to_path_buf());
    started.snapshotter = Some(tokio::task::block_in_place(|| {
        Snapshotter::try_start(&slot.dir, &ctx.kubeconfig, &socket)
    })?);
    let class = slot.driver.trim_end_matches(".bench.csi").to_string();
    let sc = objects::storage_class(&class, &slot.driver, "Immediate", "Delete");
    create_all(&Api::all(ctx.client.clone()), vec![sc]).await?;
    let vsc = objects::volume_snapshot_class(&slot.namespace, &slot.driver);
    let vsc_api: Api<DynamicObject> = Api::all_with(
        ctx.client.clone(),
        &testenv::volume_snapshot_class_resource(),
    );
    create_all(&vsc_api, vec![vsc]).await?;
    let prov = ctx
        .start_provisioner_on(slot, &Budget::defaults(), &socket, &["-v=2"])
        .await?;
    let prov = started.prov.insert(prov);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &slot.namespace);
    ctx.provision_one(slot, prov, "src", &class, Duration::from_secs(120))
        .await?;
    let t0 = Instant::now();
    let bound = observe::watch_claims(claims.clone(), t0);
    // A snapshot needs its source Bound, not only provisioned.
    poll(
        "the source claim Bound",
        Duration::from_secs(60),
        Duration::from_millis(50),
        || async { Ok(bound.with(|b| b.bound.contains_key("src")).then_some(())) },
    )
    .await?;

    let n = ctx.sizes.s8_claims;
    let batch = (0..n)
        .map(|i| {
            let (c, s) = (format!("r-{i}"), format!("snap-{i}"));
            objects::claim_from_snapshot(&c, &class, SIZE, &slot.driver, &s)
        })
        .collect();
    let restores: Vec<Restore> = create_all(&claims, batch)
        .await?
        .iter()
        .enumerate()
        .map(|(i, c)| Restore {
            claim: c.name_any(),
            snapshot: format!("snap-{i}"),
            volume: objects::pv_name_for(&c.uid().unwrap_or_default()),
        })
        .collect();
    tokio::time::sleep(ctx.sizes.s8_wait).await;
    prov.check_alive()?;

    let snaps = snapshots(ctx, &slot.namespace);
    let ready = observe::watch_snapshots(snaps.clone(), t0);
    let requests_before = api_requests(ctx, slot).await?;
    let t_snap = t0.elapsed().as_secs_f64();
    let bodies = restores
        .iter()
        .map(|r| objects::volume_snapshot(&r.snapshot, &slot.namespace, &slot.namespace, "src"))
        .collect();
    create_all(&snaps, bodies).await?;
    let all_bound = || bound.with(|b| restores.iter().all(|r| b.bound.contains_key(&r.claim)));
    let what = format!("{n} restored claims Bound");
    let outcome = poll(&what, BOUND_WAIT, Duration::from_millis(100), || async {
        prov.check_alive()?;
        Ok(all_bound().then_some(()))
    })
    .await;
    if let Err(e) = &outcome {
        rec.notes.push(format!("{e:#}"));
    }
    // Bound implies ready; the bench's watch may only lag a little behind.
    let _ = poll(
        "snapshots readyToUse",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async { Ok((ready.with(|r| r.ready.len()) >= n).then_some(())) },
    )
    .await;

    if outcome.is_ok() {
        let spent = quiet_requests(ctx, slot).await? - requests_before;
        rec.set("requests_per_restore", spent / n as f64);
    }

    let ready_wall: HashMap<String, Timestamp> =
        ready.with(|r| r.ready.iter().map(|(k, s)| (k.clone(), s.wall)).collect());
    let ready_last = ready.with(|r| r.ready.values().map(|s| s.secs).fold(f64::NAN, f64::max));
    let calls = hostpathlog::read(&log, Timestamp::now());
    let lat = latencies(&restores, &ready_wall, &calls);
    let summary = stats::summarize(&lat);
    rec.set(
        "ready_to_create_median_s",
        summary.map_or(f64::NAN, |s| s.median),
    );
    rec.set("ready_to_create_max_s", summary.map_or(f64::NAN, |s| s.max));
    // A claim never created counts as late too.
    let on_time = lat.iter().filter(|l| **l <= TARGET_S).count();
    rec.set("over_target", (n - on_time) as f64);
    if outcome.is_ok() {
        let last_bound = bound.with(|b| {
            restores
                .iter()
                .filter_map(|r| b.bound.get(&r.claim).copied())
                .fold(f64::NAN, f64::max)
        });
        rec.set("all_bound_s", last_bound - ready_last);
    }
    let volumes: Vec<&str> = restores.iter().map(|r| r.volume.as_str()).collect();
    let creates = calls
        .iter()
        .filter(|c| c.method == "CreateVolume" && c.ok)
        .filter(|c| c.name.as_deref().is_some_and(|v| volumes.contains(&v)))
        .count();
    rec.set("create_calls", creates as f64);
    let failed = observe::provisioning_failed(&ctx.client, &slot.namespace, |_| true).await?;
    rec.set("failed_events", failed);
    rec.set("snapshots_ready_s", ready_last - t_snap);
    rec.set("wait_s", ctx.sizes.s8_wait.as_secs_f64());
    rec.set(
        "bound",
        bound.with(|b| {
            restores
                .iter()
                .filter(|r| b.bound.contains_key(&r.claim))
                .count()
        }) as f64,
    );
    rec.series.insert("latency_cdf".into(), stats::cdf(&lat));
    rec.series.insert(
        "latencies_s".into(),
        lat.iter()
            .enumerate()
            .map(|(i, l)| (i as f64, *l))
            .collect(),
    );
    Ok(())
}

/// The run's API request count once it stops growing: writes that can wait (events, dropped
/// finalizers) may still be going out when the last claim is Bound.
async fn quiet_requests(ctx: &Ctx, slot: &Slot) -> Result<f64> {
    let mut last = api_requests(ctx, slot).await?;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = api_requests(ctx, slot).await?;
        if now == last {
            break;
        }
        last = now;
    }
    Ok(last)
}

/// Stops the run's processes and removes what the common sweep does not know: snapshots,
/// their contents and class, the fake node.
async fn teardown(ctx: &Ctx, slot: &Slot, started: Started) {
    let Started {
        prov,
        plugin,
        snapshotter,
    } = started;
    ctx.teardown(slot, prov, None).await;
    drop(snapshotter);
    drop(plugin);
    if let Err(e) = sweep_snapshots(ctx, slot).await {
        eprintln!("bench: cleaning up the snapshots of {}: {e:#}", slot.driver);
    }
}

async fn sweep_snapshots(ctx: &Ctx, slot: &Slot) -> Result<()> {
    let snaps = snapshots(ctx, &slot.namespace);
    let names = snaps.list_metadata(&ListParams::default()).await?;
    force_delete(&snaps, names.items.iter().map(|s| s.name_any()).collect()).await?;
    let contents: Api<DynamicObject> = Api::all_with(
        ctx.client.clone(),
        &testenv::volume_snapshot_content_resource(),
    );
    let ours = contents
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|c| c.data["spec"]["driver"] == slot.driver.as_str())
        .map(|c| c.name_any())
        .collect();
    force_delete(&contents, ours).await?;
    let classes: Api<DynamicObject> = Api::all_with(
        ctx.client.clone(),
        &testenv::volume_snapshot_class_resource(),
    );
    let _ = classes
        .delete(&slot.namespace, &DeleteParams::default())
        .await;
    // A node left behind would widen the scheduler's choice in the placement scenarios.
    let node = node_name(slot);
    force_delete(&Api::<Node>::all(ctx.client.clone()), vec![node.clone()]).await?;
    force_delete(&Api::<CSINode>::all(ctx.client.clone()), vec![node]).await
}

pub async fn run(ctx: &Ctx) -> (Vec<RunRecord>, Vec<String>) {
    // The CRDs first: a provisioner that starts without them may leave snapshots out.
    let controller = async {
        testenv::install_snapshot_crds(&ctx.client)
            .await
            .context("installing the snapshot CRDs")?;
        let dir = ctx.work.join("s8").join("snapshot-controller");
        tokio::task::block_in_place(|| SnapshotController::try_start(&dir, &ctx.kubeconfig))
            .context("starting snapshot-controller")
    };
    let _controller = match controller.await {
        Ok(c) => c,
        Err(e) => return (Vec::new(), vec![format!("{e:#}")]),
    };
    let mut records = Vec::new();
    for run in 1..=ctx.runs {
        for which in Impl::order(run) {
            let slot = ctx.slot(8, "", which, run);
            println!("bench: scenario 8, run {run}, {which}");
            let mut rec = RunRecord::new(which, "", run);
            let mut started = Started::default();
            if let Err(e) = measure(ctx, &slot, &mut rec, &mut started).await {
                rec.notes.push(format!("{e:#}"));
            }
            teardown(ctx, &slot, started).await;
            println!("  {:?} {:?}", rec.values, rec.notes);
            records.push(rec);
        }
    }
    (records, Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn call(name: &str, ok: bool, at: &str) -> Call {
        Call {
            method: "CreateVolume".into(),
            name: Some(name.into()),
            ok,
            at: ts(at),
        }
    }

    #[test]
    fn latency_is_first_successful_create_minus_ready() {
        let restore = |i: u32| Restore {
            claim: format!("r-{i}"),
            snapshot: format!("snap-{i}"),
            volume: format!("pvc-{i}"),
        };
        let restores = [restore(0), restore(1), restore(2), restore(3)];
        let ready = HashMap::from([
            ("snap-0".to_string(), ts("2026-11-26T00:00:10Z")),
            ("snap-1".to_string(), ts("2026-11-26T00:00:11Z")),
            ("snap-2".to_string(), ts("2026-11-26T00:00:12Z")),
        ]);
        let calls = [
            // A failed call before the successful one does not count.
            call("pvc-0", false, "2026-11-26T00:00:10.2Z"),
            call("pvc-0", true, "2026-11-26T00:00:10.5Z"),
            // A repeated (idempotent) success later does not count either.
            call("pvc-0", true, "2026-11-26T00:00:30Z"),
            call("pvc-1", true, "2026-11-26T00:00:31Z"),
            // snap-3 was never seen ready; pvc-2 was never created.
            call("pvc-3", true, "2026-11-26T00:00:12Z"),
            call("pvc-other", true, "2026-11-26T00:00:12Z"),
            Call {
                method: "DeleteVolume".into(),
                ..call("pvc-2", true, "2026-11-26T00:00:13Z")
            },
        ];
        assert_eq!(latencies(&restores, &ready, &calls), vec![0.5, 20.0]);
        assert!(latencies(&restores, &HashMap::new(), &calls).is_empty());
    }
}
