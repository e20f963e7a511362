//! Scenario 6: capacity tracking under faults. GetCapacity fails for a while; meanwhile nodes
//! are added and removed and the provisioner is killed and started again. Afterwards the
//! CSIStorageCapacity objects must be exactly one per class and node, with the driver's value.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Result;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::{CSINode, CSIStorageCapacity};
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use serde_json::json;

use super::harness::{self, Victim};
use super::{Metric, RECOVERY_S, Run, Sizes};
use crate::bench::cluster::{ensure_nodes, poll};
use crate::bench::ctx::{Ctx, Slot};
use crate::bench::launch::Driver;
use crate::bench::objects::{self, TOPOLOGY_KEY};

const GI: i64 = 1 << 30;
/// How long GetCapacity fails before and after the restart.
const OUTAGE: Duration = Duration::from_secs(10);
/// Both provisioners' `--capacity-poll-interval`.
const POLL: &str = "5s";

pub fn setup(sizes: &Sizes) -> String {
    format!(
        "{} fake nodes, each with its own pool in the mock driver (node-i holds 10+i Gi), two \
         WaitForFirstConsumer classes, capacity tracking on (`--enable-capacity \
         --capacity-poll-interval={POLL}`). Once every object is published, GetCapacity starts \
         failing with Unavailable; two nodes are added and two removed; {} s later the \
         provisioner is killed with SIGKILL and started again; {} s later GetCapacity answers \
         again. Then the run waits (up to {} s) until the objects are exactly one per class \
         and node with the driver's value, and counts what is still wrong.",
        sizes.s6_nodes,
        OUTAGE.as_secs(),
        OUTAGE.as_secs(),
        sizes.settle.as_secs(),
    )
}

pub const METRICS: &[Metric] = &[
    Metric(
        "duplicate_objects",
        "Duplicate objects (class and node)",
        "",
        true,
    ),
    Metric("missing_objects", "Missing objects", "", true),
    Metric(
        "wrong_objects",
        "Wrong objects (value, or a node that is gone)",
        "",
        true,
    ),
    RECOVERY_S,
    Metric("publish_s", "First publication of every object", "s", true),
];

/// What is wrong with the published objects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapacityTally {
    pub duplicates: usize,
    pub missing: usize,
    pub wrong: usize,
}

impl CapacityTally {
    pub fn clean(&self) -> bool {
        *self == CapacityTally::default()
    }
}

/// Compares `objects` (class, node, bytes) with `want` ((class, node) → bytes).
pub fn count(
    objects: &[(String, String, i64)],
    want: &BTreeMap<(String, String), i64>,
) -> CapacityTally {
    let mut seen: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut t = CapacityTally::default();
    for (class, node, bytes) in objects {
        let key = (class.clone(), node.clone());
        *seen.entry(key.clone()).or_default() += 1;
        if want.get(&key) != Some(bytes) {
            t.wrong += 1;
        }
    }
    t.duplicates = seen.values().map(|n| n - 1).sum();
    t.missing = want.keys().filter(|k| !seen.contains_key(*k)).count();
    t
}

/// The slot's objects as (class, node, bytes).
async fn published(ctx: &Ctx, slot: &Slot) -> Result<Vec<(String, String, i64)>> {
    let api: Api<CSIStorageCapacity> = Api::namespaced(ctx.client.clone(), &slot.namespace);
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|o| {
            let node = o
                .node_topology
                .and_then(|t| t.match_labels)
                .and_then(|l| l.get(TOPOLOGY_KEY).cloned())
                .unwrap_or_default();
            let bytes = o
                .capacity
                .and_then(|q| provisioning::quantity::parse_quantity(&q.0).ok())
                .unwrap_or(-1);
            (o.storage_class_name, node, bytes)
        })
        .collect())
}

fn pool_bytes(index: usize) -> i64 {
    (10 + index as i64) * GI
}

fn expected(classes: &[String], nodes: &[(String, i64)]) -> BTreeMap<(String, String), i64> {
    classes
        .iter()
        .flat_map(|c| nodes.iter().map(move |(n, b)| ((c.clone(), n.clone()), *b)))
        .collect()
}

pub async fn measure(run: Run<'_>) -> Result<()> {
    let (ctx, sizes, slot) = (run.ctx, run.sizes, run.slot);
    let all = objects::node_names(sizes.s6_nodes + 2);
    let first = ensure_nodes(&ctx.client, sizes.s6_nodes, &slot.driver).await?;
    let classes: Vec<String> = ["a", "b"]
        .iter()
        .map(|c| format!("{}-{c}", harness::class_name(slot)))
        .collect();
    harness::prepare_classes(ctx, slot, true, &classes, "WaitForFirstConsumer").await?;
    let pools: Vec<String> = all
        .iter()
        .enumerate()
        .map(|(i, n)| format!("--pool={TOPOLOGY_KEY}={n}:{}", pool_bytes(i)))
        .collect();
    std::fs::create_dir_all(&slot.dir)?;
    let faults_path = harness::faults_path(slot);
    harness::write_faults(&faults_path, &json!({}))?;
    let mut args = pools;
    args.push(format!("--faults={}", faults_path.display()));
    let driver: &Driver = run.started.driver.insert(ctx.start_driver(slot, &args)?);
    let budget = harness::budget().with_capacity(100, 200, POLL);
    let t0 = Instant::now();
    let victim = run
        .started
        .victim
        .insert(Victim::start_with(ctx, slot, driver, &budget).await?);
    let bytes_of = |name: &str| pool_bytes(all.iter().position(|n| n == name).unwrap_or(0));
    let want_first = expected(
        &classes,
        &first
            .iter()
            .map(|n| (n.clone(), bytes_of(n)))
            .collect::<Vec<_>>(),
    );
    poll(
        "every object published",
        sizes.settle,
        Duration::from_millis(200),
        || async {
            Ok(count(&published(ctx, slot).await?, &want_first)
                .clean()
                .then_some(()))
        },
    )
    .await?;
    run.rec.set("publish_s", t0.elapsed().as_secs_f64());

    harness::write_faults(
        &faults_path,
        &json!({"GetCapacity": {"code": "Unavailable", "message": "backend down"}}),
    )?;
    let added: Vec<&str> = all[sizes.s6_nodes..].iter().map(String::as_str).collect();
    testenv::try_create_fake_nodes(&ctx.client, &slot.driver, TOPOLOGY_KEY, &added).await?;
    let removed = &first[..2];
    let (nodes, csi_nodes): (Api<Node>, Api<CSINode>) =
        (Api::all(ctx.client.clone()), Api::all(ctx.client.clone()));
    for name in removed {
        nodes.delete(name, &DeleteParams::default()).await?;
        csi_nodes.delete(name, &DeleteParams::default()).await?;
    }
    tokio::time::sleep(OUTAGE).await;
    victim.kill9();
    tokio::time::sleep(Duration::from_secs(1)).await;
    victim.restart(ctx, slot)?;
    tokio::time::sleep(OUTAGE).await;
    harness::write_faults(&faults_path, &json!({}))?;
    let healed = Instant::now();

    let now: Vec<(String, i64)> = all
        .iter()
        .filter(|n| !removed.contains(n))
        .map(|n| (n.clone(), bytes_of(n)))
        .collect();
    let want = expected(&classes, &now);
    let deadline = healed + sizes.settle;
    let tally = loop {
        let t = count(&published(ctx, slot).await?, &want);
        if t.clean() {
            run.rec.set("recovery_s", healed.elapsed().as_secs_f64());
            break t;
        }
        if Instant::now() >= deadline {
            run.rec.notes.push(format!(
                "objects still wrong {} s after GetCapacity answered again: {t:?}",
                sizes.settle.as_secs()
            ));
            break t;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    run.rec.set("duplicate_objects", tally.duplicates as f64);
    run.rec.set("missing_objects", tally.missing as f64);
    run.rec.set("wrong_objects", tally.wrong as f64);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(c: &str, n: &str) -> (String, String) {
        (c.to_string(), n.to_string())
    }

    #[test]
    fn objects_are_checked_against_one_per_class_and_node() {
        let want = BTreeMap::from([(key("a", "n1"), 10), (key("a", "n2"), 20)]);
        let exact = vec![("a".into(), "n1".into(), 10), ("a".into(), "n2".into(), 20)];
        assert!(count(&exact, &want).clean());
        let messy = vec![
            ("a".into(), "n1".into(), 10),
            ("a".into(), "n1".into(), 10),
            ("a".into(), "n3".into(), 5),
        ];
        assert_eq!(
            count(&messy, &want),
            CapacityTally {
                duplicates: 1,
                missing: 1,
                wrong: 1
            }
        );
        let stale = vec![("a".into(), "n1".into(), 7), ("a".into(), "n2".into(), 20)];
        assert_eq!(count(&stale, &want).wrong, 1);
    }
}
