//! Scenario 7: distributed provisioning (`--node-deployment`). One mock driver and one
//! provisioner per fake node, as a local-storage driver's DaemonSet runs them, with bound
//! PV/PVC pairs of the driver spread over the nodes before the instances start. Measured: each
//! instance's RSS at rest, then a burst of unannotated Immediate claims that the instances must
//! share out among themselves (upstream: a random delay, then a race).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use kube::api::ListParams;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};

use super::calllog::{self, Call};
use super::cluster::{self, create_all, poll};
use super::ctx::{Ctx, Sizes, Slot, cumulative, since};
use super::identity;
use super::launch::{self, Budget, Driver, Running};
use super::memory::create_bound_pairs;
use super::objects::{self, SELECTED_NODE, TOPOLOGY_KEY};
use super::observe;
use super::procfs;
use super::prom;
use super::results::{Impl, MetricDef, PlotSpec, RunRecord};
use super::stats;

/// One driver for the whole scenario: every run's instances must see the same pairs.
const DRIVER: &str = "s7.bench.csi";
const DATA_NAMESPACE: &str = "bench-s7-data";
const CLAIM_SIZE: &str = "1Gi";
const BIG_POOL: &str = "100Gi";
/// Every fifth node has room for three claims only, so a node can run out mid-burst.
const SMALL_POOL: &str = "3Gi";
/// Upstream's defaults for the immediate-binding race, given explicitly to both, and capacity
/// objects for the Immediate class (without them no instance knows where a claim fits; ours
/// then falls back to upstream's random delay).
const NODE_FLAGS: [&str; 5] = [
    "--node-deployment",
    "--capacity-for-immediate-binding=true",
    "--node-deployment-immediate-binding=true",
    "--node-deployment-base-delay=20s",
    "--node-deployment-max-delay=60s",
];

pub fn setup(s: &Sizes) -> String {
    format!(
        "{} fake nodes, each with its own mock driver (one {BIG_POOL} pool; every fifth node \
         {SMALL_POOL}, room for three claims) and its own `--node-deployment` provisioner \
         (`NODE_NAME` set, capacity tracking on with upstream's defaults, capacity QPS 1/5 and \
         poll 1m, plus `--capacity-for-immediate-binding` so that the Immediate class has \
         objects; QPS 5/10, 100 workers, immediate binding with base delay 20s and max delay \
         60s, all given explicitly). {} PVs of the driver, each bound to its claim and pinned \
         to one node, exist before the instances start. Ready = every instance has published \
         its node's CSIStorageCapacity; RSS at rest is read from every instance {} s later. Then \
         {} unannotated {CLAIM_SIZE} claims of an Immediate class are created at once; the \
         instances share them out themselves. Claim writes and their conflicts (409) are \
         counted from the API server's audit log, for the instances' ServiceAccount only \
         (all instances share one); so are API requests (flow-control counter). A claim taken by a node without room is a CreateVolume that \
         failed with ResourceExhausted in a driver's call log.",
        s.s7_nodes,
        s.s7_volumes,
        settle(s).as_secs(),
        s.s7_claims,
    )
}

fn settle(s: &Sizes) -> Duration {
    if s.s7_volumes >= 10_000 {
        Duration::from_secs(10)
    } else {
        Duration::from_secs(3)
    }
}

pub fn metrics() -> Vec<MetricDef> {
    vec![
        MetricDef::new(
            "selected_s",
            "Time until every claim has its node",
            "s",
            true,
        ),
        MetricDef::new("bound_s", "Time until all claims Bound", "s", true),
        MetricDef::new(
            "conflicts",
            "Claim write conflicts (409) of the instances",
            "",
            true,
        ),
        MetricDef::new(
            "claim_writes_per_volume",
            "Claim writes per volume (all instances)",
            "",
            true,
        ),
        MetricDef::new(
            "api_per_volume",
            "API requests per volume (all instances)",
            "",
            true,
        ),
        MetricDef::new(
            "exhausted_calls",
            "Claims taken by a node without room",
            "",
            true,
        ),
        MetricDef::new("on_two_nodes", "Claims provisioned on two nodes", "", true),
        MetricDef::new("not_bound", "Claims not Bound", "", true),
        MetricDef::new(
            "rss_median_mib",
            "RSS per instance at rest (median)",
            "MiB",
            true,
        ),
        MetricDef::new("rss_max_mib", "RSS per instance at rest (max)", "MiB", true),
        MetricDef::new(
            "hwm_max_mib",
            "Peak RSS of any instance after the burst",
            "MiB",
            true,
        ),
        MetricDef::new(
            "ready_s",
            "Time until every instance published its capacity",
            "s",
            true,
        ),
    ]
}

pub fn plot() -> PlotSpec {
    PlotSpec {
        title: "Immediate claims Bound, shared out by the node instances".into(),
        x_label: "seconds".into(),
        y_label: "claims Bound".into(),
        series: "bound".into(),
        pick_by: "bound_s".into(),
    }
}

/// Each node's pool size: every fifth node small.
pub fn pools(nodes: &[String]) -> Vec<(String, &'static str)> {
    nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.clone(), if i % 5 == 4 { SMALL_POOL } else { BIG_POOL }))
        .collect()
}

/// Volume names that more than one node's driver created successfully.
pub fn provisioned_twice(per_node: &[Vec<Call>]) -> usize {
    let mut nodes_of: BTreeMap<&str, BTreeSet<usize>> = BTreeMap::new();
    for (i, calls) in per_node.iter().enumerate() {
        for c in calls {
            if let (true, None, Some(name)) = (c.method == "CreateVolume", &c.error, &c.name) {
                nodes_of.entry(name).or_default().insert(i);
            }
        }
    }
    nodes_of.values().filter(|n| n.len() > 1).count()
}

/// The instances' claim writes in the run's namespace (the audit log's `user` is the run's
/// ServiceAccount): (writes, of which conflicts).
fn instance_claim_writes(ctx: &Ctx, slot: &Slot) -> Result<(usize, usize)> {
    let user = format!(
        "system:serviceaccount:{}:{}",
        slot.namespace,
        identity::object_name(&slot.id)
    );
    let writes = testenv::audit::claim_writes(&ctx.audit_log, &slot.namespace)?;
    let mine: Vec<_> = writes.iter().filter(|w| w.user == user).collect();
    let conflicts = mine.iter().filter(|w| w.code == Some(409)).count();
    Ok((mine.len(), conflicts))
}

/// 409 answers to PVC writes the API server has given so far (every client).
async fn pvc_conflicts(client: &Client) -> Result<f64> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = client
        .request_text(request)
        .await
        .context("reading the API server's metrics")?;
    Ok(prom::sum(
        &prom::parse(&text),
        "apiserver_request_total",
        &[("resource", "persistentvolumeclaims"), ("code", "409")],
    ))
}

/// When each claim of the burst was first seen with a node, and Bound.
#[derive(Debug, Default)]
struct Burst {
    selected: HashMap<String, f64>,
    bound: HashMap<String, f64>,
}

fn watch_burst(api: Api<PersistentVolumeClaim>, t0: Instant) -> observe::Observer<Burst> {
    observe::observe(
        api,
        watcher::Config::default(),
        t0,
        Burst::default(),
        |s, c, deleted, at| {
            if deleted {
                return;
            }
            let node = c.annotations().get(SELECTED_NODE);
            if node.is_some_and(|n| !n.is_empty()) {
                s.selected.entry(c.name_any()).or_insert(at.secs);
            }
            if c.status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Bound") {
                s.bound.entry(c.name_any()).or_insert(at.secs);
            }
        },
    )
}

/// The instances of one measured run.
#[derive(Default)]
struct Fleet {
    provisioners: Vec<Running>,
    drivers: Vec<Driver>,
}

impl Fleet {
    fn check_alive(&self) -> Result<()> {
        self.provisioners.iter().try_for_each(Running::check_alive)
    }

    fn samples(&self) -> Vec<procfs::ProcSample> {
        self.provisioners
            .iter()
            .filter_map(|p| procfs::sample(p.pid()))
            .collect()
    }
}

/// Starts a driver and a provisioner for every node, all under the run's one identity.
async fn start_fleet(ctx: &Ctx, slot: &Slot, nodes: &[String], fleet: &mut Fleet) -> Result<()> {
    let kubeconfig = identity::create(
        &ctx.client,
        &ctx.kubeconfig,
        &slot.namespace,
        &slot.id,
        &slot.dir,
    )
    .await?;
    let budget = Budget::defaults().with_capacity(1, 5, "1m");
    for (node, pool) in pools(nodes) {
        let dir = slot.dir.join(&node);
        let driver = launch::start_driver(
            &ctx.bins,
            &dir,
            DRIVER,
            &[
                format!("--pool={TOPOLOGY_KEY}={node}:{pool}"),
                format!("--node-id={node}"),
                format!("--node-topology={TOPOLOGY_KEY}={node}"),
            ],
        )?;
        let addr = launch::free_addr()?;
        let mut args = launch::provisioner_args(&budget, &kubeconfig, &driver.socket, &addr);
        args.extend(NODE_FLAGS.iter().map(|f| f.to_string()));
        let env = [
            ("NAMESPACE", slot.namespace.as_str()),
            // Ours' write-ahead record: a Lease per node, in the run's namespace.
            ("POD_NAMESPACE", slot.namespace.as_str()),
            ("NODE_NAME", node.as_str()),
        ];
        let started = launch::start_provisioner(&ctx.bins, slot.which, &dir, &args, &env);
        fleet.drivers.push(driver);
        fleet.provisioners.push(started?);
    }
    Ok(())
}

async fn measure(
    ctx: &Ctx,
    slot: &Slot,
    nodes: &[String],
    rec: &mut RunRecord,
    fleet: &mut Fleet,
) -> Result<()> {
    cluster::create_namespace(&ctx.client, &slot.namespace).await?;
    let t_start = Instant::now();
    start_fleet(ctx, slot, nodes, fleet).await?;
    let caps: Api<CSIStorageCapacity> = Api::namespaced(ctx.client.clone(), &slot.namespace);
    let mine = ListParams::default().labels(&format!("csi.storage.k8s.io/drivername={DRIVER}"));
    poll(
        "every instance to publish its capacity",
        ctx.sizes.long_wait,
        Duration::from_millis(500),
        || async {
            fleet.check_alive()?;
            let n = caps.list_metadata(&mine).await?.items.len();
            Ok((n >= nodes.len()).then_some(()))
        },
    )
    .await?;
    rec.set("ready_s", since(t_start));
    tokio::time::sleep(settle(&ctx.sizes)).await;
    let rss: Vec<f64> = fleet.samples().iter().map(|s| s.rss_mib).collect();
    if let Some(m) = stats::percentile(&rss, 50.0) {
        rec.set("rss_median_mib", m);
        rec.set("rss_max_mib", rss.iter().copied().fold(0.0, f64::max));
    }

    let n = ctx.sizes.s7_claims;
    let requests_before = identity::requests(&ctx.client, &slot.id).await?;
    let conflicts_before = pvc_conflicts(&ctx.client).await?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &slot.namespace);
    let t0 = Instant::now();
    let bound = watch_burst(claims.clone(), t0);
    let batch = (0..n).map(|i| objects::claim(&format!("c-{i}"), DRIVER, CLAIM_SIZE, DRIVER, None));
    create_all(&claims, batch.collect()).await?;
    let outcome = poll(
        &format!("{n} claims Bound"),
        ctx.sizes.long_wait.min(Duration::from_secs(900)),
        Duration::from_millis(250),
        || async {
            fleet.check_alive()?;
            Ok((bound.with(|b| b.bound.len()) >= n).then_some(()))
        },
    )
    .await;
    let times: Vec<f64> = bound.with(|b| b.bound.values().copied().collect());
    let selected: Vec<f64> = bound.with(|b| b.selected.values().copied().collect());
    if selected.len() >= n {
        rec.set("selected_s", selected.iter().copied().fold(0.0, f64::max));
    }
    match outcome {
        Ok(()) => rec.set("bound_s", times.iter().copied().fold(0.0, f64::max)),
        Err(e) => rec.notes.push(format!("{e:#}")),
    }
    rec.set("not_bound", (n - times.len().min(n)) as f64);
    let requests = identity::requests(&ctx.client, &slot.id).await? - requests_before;
    rec.set("api_per_volume", requests / n as f64);
    rec.set(
        "conflicts_all_clients",
        pvc_conflicts(&ctx.client).await? - conflicts_before,
    );
    let (writes, conflicts) = instance_claim_writes(ctx, slot)?;
    rec.set("conflicts", conflicts as f64);
    rec.set("claim_writes_per_volume", writes as f64 / n as f64);
    let calls: Vec<Vec<Call>> = fleet
        .drivers
        .iter()
        .map(|d| calllog::read(&d.call_log))
        .collect();
    let total = |f: &dyn Fn(&[Call]) -> usize| calls.iter().map(|c| f(c)).sum::<usize>() as f64;
    rec.set(
        "exhausted_calls",
        total(&|c| calllog::count_errors(c, "CreateVolume", "ResourceExhausted")),
    );
    rec.set(
        "create_calls",
        total(&|c| calllog::count(c, "CreateVolume")),
    );
    rec.set("on_two_nodes", provisioned_twice(&calls) as f64);
    let hwm = fleet
        .samples()
        .iter()
        .map(|s| s.hwm_mib)
        .fold(0.0, f64::max);
    rec.set("hwm_max_mib", hwm);
    rec.series.insert("bound".into(), cumulative(times));
    Ok(())
}

/// Stops every instance, then removes the run's claims, their volumes and its namespace; the
/// pairs stay for the next run.
async fn teardown(ctx: &Ctx, slot: &Slot, fleet: Fleet) {
    let stop = tokio::task::spawn_blocking(move || {
        for mut p in fleet.provisioners {
            p.process.kill();
        }
        for mut d in fleet.drivers {
            d.process.kill9();
        }
    });
    let _ = stop.await;
    identity::delete(&ctx.client, &slot.namespace, &slot.id).await;
    if let Err(e) = sweep_run(&ctx.client, &slot.namespace).await {
        eprintln!("bench: cleaning up {}: {e:#}", slot.namespace);
    }
}

async fn sweep_run(client: &Client, namespace: &str) -> Result<()> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let names = claims.list_metadata(&ListParams::default()).await?;
    cluster::force_delete(&claims, names.items.iter().map(|c| c.name_any()).collect()).await?;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let of_run: Vec<String> = pvs
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|pv| {
            let claim_ns = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
            claim_ns.and_then(|r| r.namespace.as_deref()) == Some(namespace)
        })
        .map(|pv| pv.name_any())
        .collect();
    cluster::force_delete(&pvs, of_run).await?;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .delete(namespace, &Default::default())
        .await
        .with_context(|| format!("deleting namespace {namespace}"))?;
    Ok(())
}

/// The nodes, the driver's class and CSIDriver, and the bound pairs, once.
async fn populate(ctx: &Ctx) -> Result<Vec<String>> {
    let nodes = cluster::ensure_nodes(&ctx.client, ctx.sizes.s7_nodes, DRIVER).await?;
    cluster::create_namespace(&ctx.client, DATA_NAMESPACE).await?;
    cluster::create_csi_driver(&ctx.client, DRIVER, true).await?;
    let class = objects::storage_class(DRIVER, DRIVER, "Immediate", "Delete");
    create_all(&Api::all(ctx.client.clone()), vec![class]).await?;
    let count = ctx.sizes.s7_volumes;
    create_bound_pairs(ctx, DATA_NAMESPACE, DRIVER, DRIVER, &nodes, count).await?;
    Ok(nodes)
}

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
        "setup ({} nodes, {} bound pairs) took {:.0} s",
        nodes.len(),
        ctx.sizes.s7_volumes,
        began.elapsed().as_secs_f64()
    ));
    for run in 1..=ctx.runs {
        for which in Impl::order(run) {
            let slot = ctx.slot(7, "", which, run);
            println!("bench: scenario 7, run {run}, {which}");
            let mut rec = RunRecord::new(which, "", run);
            let mut fleet = Fleet::default();
            if let Err(e) = measure(ctx, &slot, &nodes, &mut rec, &mut fleet).await {
                rec.notes.push(format!("{e:#}"));
            }
            teardown(ctx, &slot, fleet).await;
            println!("  {:?} {:?}", rec.values, rec.notes);
            records.push(rec);
        }
    }
    if let Err(e) = cluster::sweep(&ctx.client, DATA_NAMESPACE, DRIVER).await {
        notes.push(format!("cleanup failed: {e:#}"));
    }
    (records, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(method: &str, name: &str, error: Option<&str>) -> Call {
        Call {
            method: method.into(),
            start: jiff::Timestamp::UNIX_EPOCH,
            duration_ms: 0,
            error: error.map(str::to_string),
            name: Some(name.into()),
            volume_id: None,
            capacity_key: None,
        }
    }

    #[test]
    fn every_fifth_pool_is_small() {
        let p = pools(&objects::node_names(10));
        let small: Vec<&str> = p
            .iter()
            .filter(|(_, s)| *s == SMALL_POOL)
            .map(|(n, _)| n.as_str())
            .collect();
        assert_eq!(small, ["node-5", "node-10"]);
        assert_eq!(p.len(), 10);
    }

    #[test]
    fn a_volume_created_by_two_drivers_counts_once() {
        let per_node = vec![
            vec![
                call("CreateVolume", "pvc-a", None),
                call("CreateVolume", "pvc-b", None),
                // Retried on the same node: not a second node.
                call("CreateVolume", "pvc-b", None),
            ],
            vec![
                call("CreateVolume", "pvc-a", None),
                // Refused: the node had no room, nothing was created.
                call("CreateVolume", "pvc-b", Some("ResourceExhausted")),
                call("DeleteVolume", "pvc-c", None),
            ],
            vec![call("CreateVolume", "pvc-a", None)],
        ];
        assert_eq!(provisioned_twice(&per_node), 1);
        assert_eq!(provisioned_twice(&per_node[..1]), 0);
    }
}
