//! Scenario 9: placement under capacity scoring. From Kubernetes 1.37 kube-scheduler ranks the
//! nodes a pod fits on by published free capacity (StorageCapacityScoring, the emptiest first
//! by default), so capacity that lags misplaces pods even where they fit. Local storage on
//! nodes of unequal free space, pods arriving close together while their volumes are made;
//! counted besides scenario 6's numbers: how far the volumes' spread over the nodes is from
//! the spread of an oracle that knew the true free space when each pod came.

use std::collections::BTreeMap;

use super::ctx::{Ctx, Sizes};
use super::placement::{self, Placed, Shape};
use super::results::{MetricDef, PlotSpec, RunRecord};

/// Four nodes of 100, 80, 60 and 40 GiB, twelve 20 GiB claims (14 slots): the oracle fills
/// the emptiest node first, which spreads the volumes; a scheduler shown stale capacity sends
/// every pod to the node that looked emptiest at the last poll. Pods come one by one 400 ms
/// apart.
const STEADY: Shape = Shape {
    variant: "",
    nodes: 4,
    pools: &[100, 80, 60, 40],
    pods: 12,
    claim: 20,
    create_ms: (2000, 4000),
    burst: 1,
    pod_every_ms: 400,
    // Local storage: the driver may make the volume on the selected node only.
    extra: &["--strict-topology"],
};

/// The same pods in three bursts of four created together, 3 s apart: within a burst the
/// scheduler places pods faster than any object can change, so only what happened between
/// bursts can count.
pub const BURSTS: &str = "bursts";
const BURSTS_SHAPE: Shape = Shape {
    variant: BURSTS,
    burst: 4,
    pod_every_ms: 3000,
    ..STEADY
};

/// Both shapes (the same with `--quick`: they are small already).
fn shapes(_: &Sizes) -> [Shape; 2] {
    [STEADY, BURSTS_SHAPE]
}

pub fn setup(s: &Sizes) -> String {
    let [sh, b] = shapes(s);
    let pools: Vec<String> = sh.pools.iter().map(|p| format!("{p}Gi")).collect();
    let oracle = oracle(&pool_list(&sh), sh.claim, sh.pods);
    format!(
        "Kubernetes 1.37's kube-scheduler with its defaults: StorageCapacityScoring on, \
         VolumeBinding's default shape (the node with the most published room for the pod \
         first). {} fake nodes with pools of {} (one node each), one WaitForFirstConsumer \
         StorageClass, both provisioners with `--strict-topology` (local storage: a volume \
         only on the selected node). {} pods, each with its own {}Gi claim, created one by one \
         {} ms apart while the driver's CreateVolume takes {}–{} ms; variant `{BURSTS}`: the \
         same pods in bursts of {} created together, {} ms apart. Flags: upstream's \
         defaults (QPS 5/10, capacity QPS {}/{}, poll 1m; ours with its default \
         `--capacity-reservations`). The oracle places each pod, in the order they were \
         created, on the node with the most true free space that fits it (the default \
         shape's choice with fresh capacity): volumes per node {:?}. \"Volumes off the \
         oracle's spread\" compares the free space left per node, both sides sorted (which of \
         two equally empty nodes the oracle picks does not matter): half the sum of the \
         differences, in claims. ResourceExhausted and claims sent back are \
         counted as in scenario 6.",
        sh.nodes,
        pools.join(", "),
        sh.pods,
        sh.claim,
        sh.pod_every_ms,
        sh.create_ms.0,
        sh.create_ms.1,
        b.burst,
        b.pod_every_ms,
        placement::CAPACITY_QPS.0,
        placement::CAPACITY_QPS.1,
        counts(&oracle, sh.nodes),
    )
}

pub fn metrics() -> Vec<MetricDef> {
    let mut m = placement::metrics();
    m.insert(
        1,
        MetricDef::new("off_oracle", "Volumes off the oracle's spread", "", true),
    );
    m.insert(
        2,
        MetricDef::new("most_on_one", "Most volumes on one node", "", true),
    );
    m
}

pub fn plot() -> PlotSpec {
    PlotSpec {
        title: "Pods bound to a node, capacity scoring on".into(),
        ..placement::plot()
    }
}

pub async fn run(ctx: &Ctx) -> (Vec<RunRecord>, Vec<String>) {
    let mut notes = Vec::new();
    match ctx.client.apiserver_version().await {
        Ok(v) if v.major == "1" && v.minor.trim_end_matches('+').parse::<u32>().unwrap_or(0) >= 37 => {}
        Ok(v) => notes.push(format!(
            "the control plane is {}.{}: capacity scoring is off by default before 1.37, so this is not the scenario described",
            v.major, v.minor
        )),
        Err(e) => notes.push(format!("the API server's version is unknown: {e}")),
    }
    let mut records = Vec::new();
    for sh in shapes(&ctx.sizes) {
        records
            .extend(placement::runs_of(ctx, 9, &sh, |placed, rec| spread(&sh, placed, rec)).await);
    }
    (records, notes)
}

/// The pool sizes of the shape's nodes, in node order.
fn pool_list(sh: &Shape) -> Vec<u64> {
    (0..sh.nodes).map(|i| sh.pool_of(i)).collect()
}

/// Records how far `placed` is from the oracle.
fn spread(sh: &Shape, placed: &Placed, rec: &mut RunRecord) {
    let pools: Vec<u64> = placed.nodes.iter().map(|(_, gi)| *gi).collect();
    let index: BTreeMap<&str, usize> = placed
        .nodes
        .iter()
        .enumerate()
        .map(|(i, (n, _))| (n.as_str(), i))
        .collect();
    let actual: Vec<Option<usize>> = placed
        .pods
        .iter()
        .map(|p| p.as_deref().and_then(|n| index.get(n).copied()))
        .collect();
    let want = oracle(&pools, sh.claim, sh.pods);
    let (have, want) = (counts(&actual, pools.len()), counts(&want, pools.len()));
    rec.set("off_oracle", off_by(&pools, sh.claim, &have, &want));
    rec.set(
        "most_on_one",
        have.iter().copied().max().unwrap_or(0) as f64,
    );
}

/// Where an oracle that knew the true free space would put `pods` claims of `claim` GiB, one
/// after the other, on nodes with `pools` GiB: the node with the most room left that fits
/// (the lowest index among equals), or nowhere.
fn oracle(pools: &[u64], claim: u64, pods: usize) -> Vec<Option<usize>> {
    let mut free = pools.to_vec();
    (0..pods)
        .map(|_| {
            let best = (0..free.len())
                .filter(|&i| free[i] >= claim)
                .max_by(|&a, &b| free[a].cmp(&free[b]).then(b.cmp(&a)))?;
            free[best] -= claim;
            Some(best)
        })
        .collect()
}

/// Volumes per node from each pod's node.
fn counts(placed: &[Option<usize>], nodes: usize) -> Vec<usize> {
    let mut c = vec![0; nodes];
    for i in placed.iter().flatten() {
        c[*i] += 1;
    }
    c
}

/// How many volumes sit elsewhere than the oracle's: half the L1 distance between the free
/// space left on the nodes, each side sorted, in claims. Sorted because an oracle choosing
/// among nodes of equal room may pick any of them: the multiset of what is left is the same
/// whichever it picks, where the node holding each volume is not.
fn off_by(pools: &[u64], claim: u64, have: &[usize], want: &[usize]) -> f64 {
    let left = |c: &[usize]| {
        let mut l: Vec<u64> = pools
            .iter()
            .zip(c)
            .map(|(p, n)| p.saturating_sub(*n as u64 * claim))
            .collect();
        l.sort_unstable();
        l
    };
    let (h, w) = (left(have), left(want));
    let total: u64 = h.iter().zip(&w).map(|(a, b)| a.abs_diff(*b)).sum();
    total as f64 / (2 * claim.max(1)) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oracle_fills_the_emptiest_node_first() {
        // 100 → 80, then 80 vs 80 (the lower index), ...; 20Gi left on two nodes at the end.
        let o = oracle(&[100, 80, 60, 40], 20, 12);
        assert_eq!(counts(&o, 4), vec![5, 4, 2, 1]);
        assert_eq!(&o[..4], &[Some(0), Some(0), Some(1), Some(0)]);
        // Past every slot: nowhere.
        let full = oracle(&[40, 20], 20, 4);
        assert_eq!(full, vec![Some(0), Some(0), Some(1), None]);
        assert_eq!(oracle(&[10], 20, 1), vec![None]);
    }

    #[test]
    fn the_distance_counts_moved_volumes_whichever_tie_the_oracle_broke() {
        let pools = [100, 80, 60, 40];
        let want = [5, 4, 2, 1];
        assert_eq!(off_by(&pools, 20, &want, &want), 0.0);
        // The last two pods on the other two nodes left at 20Gi: as good.
        assert_eq!(off_by(&pools, 20, &[4, 4, 2, 2], &want), 0.0);
        // Piled on each node in turn until full: 40Gi left on one node instead of 20 on two.
        assert_eq!(off_by(&pools, 20, &[5, 4, 3, 0], &want), 1.0);
        // Three pods never placed and the two small nodes left empty.
        assert_eq!(off_by(&pools, 20, &[5, 4, 0, 0], &want), 1.5);
        // A pod never placed counts half (its volume is missing, not moved).
        assert_eq!(off_by(&[60], 20, &[1], &[2]), 0.5);
    }

    #[test]
    fn the_shape_gives_each_node_its_pool() {
        assert_eq!(pool_list(&STEADY), vec![100, 80, 60, 40]);
        assert_eq!(pool_list(&BURSTS_SHAPE), vec![100, 80, 60, 40]);
        let setup = setup(&Sizes::full());
        assert!(setup.contains("100Gi, 80Gi, 60Gi, 40Gi"), "{setup}");
        assert!(setup.contains("[5, 4, 2, 1]"), "{setup}");
    }
}
