//! Scenario 6: placement under a burst. Pods with one WaitForFirstConsumer claim each are
//! created at once; the real kube-scheduler places them using the published capacity. Counted:
//! ResourceExhausted reschedules, time until every pod is bound to a node, pods left pending.
//! Two shapes: a wide burst with room to spare, and a tight one where half the nodes hold two
//! volumes and half one, every slot is needed, volumes take seconds and pods keep coming, so
//! the objects of volumes in flight decide where the later pods go.

use std::time::{Duration, Instant};

use anyhow::Result;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use kube::Api;

use super::calllog;
use super::cluster::{self, create_all, poll};
use super::ctx::{Ctx, Sizes, Slot, cumulative};
use super::freshness::wait_published;
use super::launch::{self, Budget, Driver, Running};
use super::objects::{self, TOPOLOGY_KEY};
use super::observe;
use super::results::{Impl, MetricDef, PlotSpec, RunRecord};

/// Upstream's defaults for both: capacity QPS 1/5, poll 1m, kube QPS 5/10.
pub const CAPACITY_QPS: (u32, u32) = (1, 5);
const POOL_GI: u64 = 100;

/// One shape of burst.
pub(super) struct Shape {
    pub variant: &'static str,
    pub nodes: usize,
    /// Pool sizes in GiB: the nodes, in order, are split into as many equal groups, the first
    /// group gets the first size and so on.
    pub pools: &'static [u64],
    pub pods: usize,
    /// Each claim's size in GiB.
    pub claim: u64,
    /// The driver's CreateVolume takes this long (random in the range), in ms.
    pub create_ms: (u64, u64),
    /// Pods are created in groups of `burst` at once (claims all at once at the start)...
    pub burst: usize,
    /// ...this far apart.
    pub pod_every_ms: u64,
    /// Flags for both provisioners.
    pub extra: &'static [&'static str],
}

impl Shape {
    /// The pool size in GiB of node `i` of `self.nodes`.
    pub fn pool_of(&self, i: usize) -> u64 {
        self.pools[i * self.pools.len() / self.nodes.max(1)]
    }
}

/// Where each pod went, in the order the pods were created (`None`: never bound to a node),
/// and every node with its pool size in GiB.
#[derive(Debug, Default)]
pub(super) struct Placed {
    pub nodes: Vec<(String, u64)>,
    pub pods: Vec<Option<String>>,
}

/// The wide burst: sized by `--quick`; no added latency.
fn wide(s: &Sizes) -> Shape {
    Shape {
        variant: "",
        nodes: s.s6_nodes,
        pools: &[POOL_GI],
        pods: s.s6_pods,
        claim: 9,
        create_ms: (0, 0),
        burst: s.s6_pods,
        pod_every_ms: 0,
        extra: &[],
    }
}

/// Every slot needed: 45Gi claims, three nodes with room for two and three with room for one.
pub const TIGHT: &str = "tight";
const TIGHT_SHAPE: Shape = Shape {
    variant: TIGHT,
    nodes: 6,
    pools: &[100, 50],
    pods: 9,
    claim: 45,
    create_ms: (2000, 4000),
    burst: 1,
    pod_every_ms: 250,
    // Local storage: the driver may make the volume on the selected node only.
    extra: &["--strict-topology"],
};

pub fn setup(s: &Sizes) -> String {
    let w = wide(s);
    let t = TIGHT_SHAPE;
    format!(
        "{} fake nodes, a {POOL_GI}Gi pool per node, CSIDriver with `storageCapacity: true`, \
         one WaitForFirstConsumer StorageClass. {} pods, each with its own {}Gi claim, \
         are created at once (room for 11 volumes per node, so all fit if placed well); the \
         real kube-scheduler places them. Variant `{TIGHT}`: {} nodes, half with a {}Gi pool and \
         half with {}Gi, {} pods of {}Gi each created {} ms apart (every slot is needed) and the \
         driver's CreateVolume taking {}–{} ms, both provisioners with `--strict-topology` (local \
         storage: a volume only on the selected node). Flags: upstream's defaults (QPS 5/10, capacity QPS {}/{}, poll 1m; ours \
         with its default `--capacity-reservations`). ResourceExhausted is counted in the \
         driver's call log (failed CreateVolume calls) and in ProvisioningFailed events (sum \
         of their counts); claims sent back to the scheduler are all ProvisioningFailed \
         events (the driver's refusals, and ours without a driver call).",
        w.nodes,
        w.pods,
        w.claim,
        t.nodes,
        t.pools[0],
        t.pools[1],
        t.pods,
        t.claim,
        t.pod_every_ms,
        t.create_ms.0,
        t.create_ms.1,
        CAPACITY_QPS.0,
        CAPACITY_QPS.1
    )
}

pub fn metrics() -> Vec<MetricDef> {
    vec![
        MetricDef::new(
            "all_bound_s",
            "Time until every pod is bound to a node",
            "s",
            true,
        ),
        MetricDef::new("pending", "Pods left pending", "", true),
        MetricDef::new(
            "exhausted_calls",
            "ResourceExhausted CreateVolume calls",
            "",
            true,
        ),
        MetricDef::new("exhausted_events", "ResourceExhausted events", "", true),
        MetricDef::new("sent_back", "Claims sent back to the scheduler", "", true),
        MetricDef::new("create_calls", "CreateVolume calls", "", true),
        MetricDef::new("publish_s", "First publication of the objects", "s", true),
    ]
}

pub fn plot() -> PlotSpec {
    PlotSpec {
        title: "Pods bound to a node after a burst".into(),
        x_label: "seconds".into(),
        y_label: "pods bound".into(),
        series: "scheduled".into(),
        pick_by: "all_bound_s".into(),
    }
}

/// One run of `shape`: every count in `rec`, and where the pods went.
async fn measure(
    ctx: &Ctx,
    shape: &Shape,
    slot: &Slot,
    rec: &mut RunRecord,
    started: &mut (Option<Running>, Option<Driver>),
) -> Result<Placed> {
    let nodes = cluster::ensure_nodes(&ctx.client, shape.nodes, &slot.driver).await?;
    ctx.prepare(slot, true).await?;
    let class = slot.driver.trim_end_matches(".bench.csi").to_string();
    let sc = objects::storage_class(&class, &slot.driver, "WaitForFirstConsumer", "Delete");
    create_all(&Api::all(ctx.client.clone()), vec![sc]).await?;
    let sized: Vec<(String, u64)> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.clone(), shape.pool_of(i)))
        .collect();
    let mut args: Vec<String> = sized
        .iter()
        .flat_map(|(n, gi)| {
            launch::node_pools(TOPOLOGY_KEY, std::slice::from_ref(n), &format!("{gi}Gi"))
        })
        .collect();
    if shape.create_ms != (0, 0) {
        let (min, max) = shape.create_ms;
        let faults = serde_json::json!({"CreateVolume": {"delay_ms": min, "delay_max_ms": max}});
        let path = slot.dir.join("faults.json");
        std::fs::create_dir_all(&slot.dir)?;
        std::fs::write(&path, faults.to_string())?;
        args.push(format!("--faults={}", path.display()));
    }
    let driver = started.1.insert(ctx.start_driver(slot, &args)?);
    let call_log = driver.call_log.clone();
    let budget = Budget::defaults().with_capacity(CAPACITY_QPS.0, CAPACITY_QPS.1, "1m");
    let t_start = Instant::now();
    let caps_api: Api<CSIStorageCapacity> = Api::namespaced(ctx.client.clone(), &slot.namespace);
    let caps = observe::watch_capacities(caps_api, t_start, &slot.driver);
    let prov = started.0.insert(
        ctx.start_provisioner_on(slot, &budget, &driver.socket, shape.extra)
            .await?,
    );
    let published = wait_published(&caps, prov, nodes.len(), ctx.sizes.long_wait, t_start).await?;
    rec.set("publish_s", published);

    let n = shape.pods;
    let t0 = Instant::now();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &slot.namespace);
    let placed = observe::watch_pods(pods.clone(), t0);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &slot.namespace);
    let size = format!("{}Gi", shape.claim);
    let batch =
        (0..n).map(|i| objects::claim(&format!("d-{i}"), &class, &size, &slot.driver, None));
    create_all(&claims, batch.collect()).await?;
    let all_pods: Vec<Pod> = (0..n)
        .map(|i| objects::pod(&format!("p-{i}"), &format!("d-{i}")))
        .collect();
    let mut groups = all_pods.chunks(shape.burst.max(1)).peekable();
    while let Some(group) = groups.next() {
        create_all(&pods, group.to_vec()).await?;
        if groups.peek().is_some() {
            tokio::time::sleep(Duration::from_millis(shape.pod_every_ms)).await;
        }
    }
    let what = format!("{n} pods bound to nodes");
    let outcome = poll(
        &what,
        ctx.sizes.long_wait.min(Duration::from_secs(900)),
        Duration::from_millis(250),
        || async {
            prov.check_alive()?;
            Ok((placed.with(|p| p.scheduled.len()) >= n).then_some(()))
        },
    )
    .await;
    let times: Vec<f64> = placed.with(|p| p.scheduled.values().map(|(t, _)| *t).collect());
    match outcome {
        Ok(()) => rec.set("all_bound_s", times.iter().copied().fold(0.0, f64::max)),
        Err(e) => rec.notes.push(format!("{e:#}")),
    }
    rec.set("pending", (n - times.len()) as f64);
    let calls = calllog::read(&call_log);
    rec.set(
        "exhausted_calls",
        calllog::count_errors(&calls, "CreateVolume", "ResourceExhausted") as f64,
    );
    rec.set(
        "create_calls",
        calllog::count(&calls, "CreateVolume") as f64,
    );
    rec.set(
        "exhausted_events",
        observe::provisioning_failed(&ctx.client, &slot.namespace, |m| {
            m.contains("ResourceExhausted")
        })
        .await?,
    );
    rec.set(
        "sent_back",
        observe::provisioning_failed(&ctx.client, &slot.namespace, |_| true).await?,
    );
    rec.series.insert("scheduled".into(), cumulative(times));
    let pods = placed.with(|p| {
        (0..n)
            .map(|i| {
                p.scheduled
                    .get(&format!("p-{i}"))
                    .map(|(_, node)| node.clone())
            })
            .collect()
    });
    Ok(Placed { nodes: sized, pods })
}

pub async fn run(ctx: &Ctx) -> (Vec<RunRecord>, Vec<String>) {
    let mut records = Vec::new();
    for shape in [wide(&ctx.sizes), TIGHT_SHAPE] {
        records.extend(runs_of(ctx, 6, &shape, |_, _| {}).await);
    }
    (records, Vec::new())
}

/// Every run of `shape` for both provisioners, as scenario `n`; `then` adds what a scenario
/// reads from where the pods went.
pub(super) async fn runs_of(
    ctx: &Ctx,
    n: u8,
    shape: &Shape,
    then: impl Fn(&Placed, &mut RunRecord),
) -> Vec<RunRecord> {
    let mut records = Vec::new();
    for run in 1..=ctx.runs {
        for which in Impl::order(run) {
            let slot = ctx.slot(n, shape.variant, which, run);
            let named = if shape.variant.is_empty() {
                String::new()
            } else {
                format!(" {}", shape.variant)
            };
            println!("bench: scenario {n}{named}, run {run}, {which}");
            let mut rec = RunRecord::new(which, shape.variant, run);
            let mut started = (None, None);
            match measure(ctx, shape, &slot, &mut rec, &mut started).await {
                Ok(placed) => then(&placed, &mut rec),
                Err(e) => rec.notes.push(format!("{e:#}")),
            }
            ctx.teardown(&slot, started.0, started.1).await;
            println!("  {:?} {:?}", rec.values, rec.notes);
            records.push(rec);
        }
    }
    records
}
