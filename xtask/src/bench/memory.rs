//! Scenario 3: memory at rest. Fake nodes and bound PVs/PVCs exist before the provisioner
//! starts; measured: start-up time to the first provisioned volume, and RSS once settled.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::cluster::{self, PARALLEL, create_all};
use super::ctx::{Ctx, Sizes, Slot, cpu_seconds};
use super::launch::{self, Budget};
use super::objects::{self, TOPOLOGY_KEY};
use super::procfs;
use super::results::{Impl, MetricDef, PlotSpec, RunRecord};
use super::sampler::{self, Sampler};

/// One driver name for the whole scenario: every run must see the same objects in its caches.
/// Runs never overlap, so no two provisioners ever serve it at once.
const DRIVER: &str = "s3.bench.csi";
const NAMESPACE: &str = "bench-s3-data";

pub fn setup(s: &Sizes) -> String {
    format!(
        "{} fake nodes (each with a 1 Ti pool in the mock driver, so both provisioners watch \
         Nodes and CSINodes) and {} PVs of the driver, each bound to its PVC, exist before the \
         provisioner starts (created and marked Bound by the harness, protection finalizers \
         included, so nothing is written while it runs). The provisioner starts with upstream's \
         default flags (QPS 5/10, 100 workers, no capacity tracking); right after start a probe \
         claim is created. Ready = the probe's PV exists. RSS is read {} s after that.",
        s.s3_nodes,
        s.s3_volumes,
        settle(s).as_secs()
    )
}

fn settle(s: &Sizes) -> Duration {
    if s.s3_volumes >= 10_000 {
        Duration::from_secs(10)
    } else {
        Duration::from_secs(3)
    }
}

pub fn metrics() -> Vec<MetricDef> {
    vec![
        MetricDef::new("rss_mib", "RSS after caches synced", "MiB", true),
        MetricDef::new("hwm_mib", "Peak RSS during start-up", "MiB", true),
        MetricDef::new("ready_s", "Start-up time to ready", "s", true),
        MetricDef::new("cpu_s", "CPU time until settled", "s", true),
    ]
}

pub fn plot() -> PlotSpec {
    PlotSpec {
        title: "RSS during start-up with the cluster's objects cached".into(),
        x_label: "seconds since start".into(),
        y_label: "RSS (MiB)".into(),
        series: "rss".into(),
        pick_by: "rss_mib".into(),
    }
}

/// Creates the nodes and the bound pairs once.
async fn populate(ctx: &Ctx) -> Result<Vec<String>> {
    let nodes = cluster::ensure_nodes(&ctx.client, ctx.sizes.s3_nodes, DRIVER).await?;
    cluster::create_namespace(&ctx.client, NAMESPACE).await?;
    cluster::create_csi_driver(&ctx.client, DRIVER, false).await?;
    let class = objects::storage_class(DRIVER, DRIVER, "Immediate", "Retain");
    create_all(&Api::all(ctx.client.clone()), vec![class]).await?;
    create_bound_pairs(ctx, NAMESPACE, DRIVER, DRIVER, &nodes, ctx.sizes.s3_volumes).await?;
    Ok(nodes)
}

/// `count` PVs of `driver` (class `class`), each bound to its claim in `namespace`, spread
/// over `nodes` by node affinity, with Bound status written up front.
pub async fn create_bound_pairs(
    ctx: &Ctx,
    namespace: &str,
    class: &str,
    driver: &str,
    nodes: &[String],
    count: usize,
) -> Result<()> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), namespace);
    let pvs: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let names: Vec<String> = (0..count).map(|i| format!("at-rest-{i}")).collect();
    let made = create_all(
        &claims,
        names
            .iter()
            .map(|n| objects::prebound_claim(n, class))
            .collect(),
    )
    .await?;
    let volumes = made
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let node = &nodes[i % nodes.len()];
            objects::prebound_volume(
                &c.name_any(),
                namespace,
                &c.uid().unwrap_or_default(),
                class,
                driver,
                node,
            )
        })
        .collect();
    create_all(&pvs, volumes).await?;
    // Bound status up front: the controller-manager then finds every pair consistent.
    let pv_status = json!({"status": {"phase": "Bound"}});
    let pvc_status = json!({"status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"],
                                       "capacity": {"storage": "1Gi"}}});
    stream::iter(names)
        .map(|name| {
            let (pvs, claims, a, b) = (&pvs, &claims, &pv_status, &pvc_status);
            async move {
                let pp = PatchParams::default();
                pvs.patch_status(&name, &pp, &Patch::Merge(a)).await?;
                claims.patch_status(&name, &pp, &Patch::Merge(b)).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(PARALLEL)
        .try_collect::<Vec<()>>()
        .await
        .context("marking the pairs Bound")?;
    Ok(())
}

async fn measure(ctx: &Ctx, slot: &Slot, nodes: &[String]) -> Result<RunRecord> {
    let mut rec = RunRecord::new(slot.which, "", slot.run);
    let pools = launch::node_pools(TOPOLOGY_KEY, nodes, "1Ti");
    let driver = launch::start_driver(&ctx.bins, &slot.dir, DRIVER, &pools)?;
    let prov = ctx
        .start_provisioner(slot, &Budget::defaults(), &driver)
        .await?;
    let t0 = prov.started;
    let sampler = Sampler::start(prov.pid(), t0, Duration::from_millis(250));
    let probe = format!("probe-{}-r{}", slot.which, slot.run);
    let outcome = ctx
        .provision_one(slot, &prov, &probe, DRIVER, ctx.sizes.long_wait)
        .await;
    let measured = match outcome {
        Ok(uid) => {
            rec.set("ready_s", t0.elapsed().as_secs_f64());
            tokio::time::sleep(settle(&ctx.sizes)).await;
            if let Some(s) = procfs::sample(prov.pid()) {
                rec.set("rss_mib", s.rss_mib);
                rec.set("hwm_mib", s.hwm_mib);
            }
            rec.set("cpu_s", cpu_seconds(&prov));
            Ok(uid)
        }
        Err(e) => Err(e),
    };
    let ticks = sampler.finish().await;
    rec.series.insert("rss".into(), sampler::rss_series(&ticks));
    let _ = tokio::task::spawn_blocking(move || {
        let (mut prov, mut driver) = (prov, driver);
        prov.process.kill();
        driver.process.kill9();
    })
    .await;
    super::identity::delete(&ctx.client, &slot.namespace, &slot.id).await;
    // The probe's claim and volume go; the data set stays for the next run.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), NAMESPACE);
    let _ = claims.delete(&probe, &Default::default()).await;
    if let Ok(uid) = &measured {
        let pvs: Api<PersistentVolume> = Api::all(ctx.client.clone());
        let pv = objects::pv_name_for(uid);
        let _ = pvs.delete(&pv, &Default::default()).await;
        let _ = pvs
            .patch(
                &pv,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await;
    }
    measured.map(|_| rec)
}

/// Every run; setup or run failures become notes. Returns (records, scenario notes).
pub async fn run(ctx: &Ctx) -> (Vec<RunRecord>, Vec<String>) {
    let mut notes = Vec::new();
    let mut records = Vec::new();
    let began = Instant::now();
    let nodes = match populate(ctx).await {
        Ok(n) => n,
        Err(e) => {
            notes.push(format!("setup failed: {e:#}"));
            return (records, notes);
        }
    };
    notes.push(format!(
        "setup (nodes, {} bound pairs) took {:.0} s",
        ctx.sizes.s3_volumes,
        began.elapsed().as_secs_f64()
    ));
    for run in 1..=ctx.runs {
        for which in Impl::order(run) {
            let mut slot = ctx.slot(3, "", which, run);
            slot.namespace = NAMESPACE.into();
            slot.driver = DRIVER.into();
            println!("bench: scenario 3, run {run}, {which}");
            match measure(ctx, &slot, &nodes).await {
                Ok(rec) => {
                    println!("  {:?}", rec.values);
                    records.push(rec);
                }
                Err(e) => {
                    let mut rec = RunRecord::new(which, "", run);
                    rec.notes.push(format!("{e:#}"));
                    records.push(rec);
                }
            }
        }
    }
    if let Err(e) = cluster::sweep(&ctx.client, NAMESPACE, DRIVER).await {
        notes.push(format!("cleanup failed: {e:#}"));
    }
    (records, notes)
}
