//! Scenario 7: a long steady churn. Memory and open file descriptors at the start and the end
//! show whether anything grows with the number of claims ever seen rather than those alive.

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use anyhow::Result;

use super::Sizes;
use super::harness;
use crate::bench::ctx::{Ctx, Slot};
use crate::bench::procfs;
use crate::bench::results::{MetricDef, RunRecord};

/// One claim is created every `EVERY` and deleted `LIFETIME` later.
const EVERY: Duration = Duration::from_secs(1);
const LIFETIME: Duration = Duration::from_secs(30);
/// The first sample is taken once the churn has reached its steady number of live claims.
const WARM_UP: Duration = Duration::from_secs(60);

pub fn setup(sizes: &Sizes) -> String {
    format!(
        "For {} minutes a claim of 1 Gi in an Immediate class (reclaim Delete) is created every \
         {} s and deleted {} s after its creation, so about {} claims are alive at any time; \
         CreateVolume takes a random 0–1 s. RSS (VmRSS) and open file descriptors of the \
         provisioner are read {} s after the start and at the end of the churn; then the run \
         waits (up to {} s) until the claims left are Bound and the driver holds exactly their \
         volumes.",
        sizes.s7_soak.as_secs() / 60,
        EVERY.as_secs(),
        LIFETIME.as_secs(),
        LIFETIME.as_secs() / EVERY.as_secs(),
        WARM_UP.as_secs(),
        sizes.settle.as_secs(),
    )
}

pub fn metrics() -> Vec<MetricDef> {
    super::with_losses([
        MetricDef::new("rss_start_mib", "RSS after the warm-up", "MiB", true),
        MetricDef::new("rss_end_mib", "RSS at the end", "MiB", true),
        MetricDef::new("rss_growth_mib", "RSS growth over the soak", "MiB", true),
        MetricDef::new(
            "fds_start",
            "Open file descriptors after the warm-up",
            "",
            true,
        ),
        MetricDef::new("fds_end", "Open file descriptors at the end", "", true),
        MetricDef::new("claims", "Claims created", "", false),
    ])
}

fn open_fds(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

/// RSS (MiB) and open descriptors of the running provisioner.
fn look(started: &super::Started) -> Option<(f64, usize)> {
    let pid = started.victim.as_ref()?.running.as_ref()?.pid();
    Some((procfs::sample(pid)?.rss_mib, open_fds(pid)?))
}

pub async fn measure(
    ctx: &Ctx,
    sizes: &Sizes,
    slot: &Slot,
    rec: &mut RunRecord,
    started: &mut super::Started,
) -> Result<()> {
    let faults = harness::slow_creates(0, 1000);
    let (socket, call_log) = harness::begin(ctx, slot, &faults, started).await?;
    let claims = harness::claims_api(ctx, slot);
    let t0 = Instant::now();
    let mut alive: VecDeque<(Instant, String)> = VecDeque::new();
    let mut first = None;
    let mut created = 0usize;
    while t0.elapsed() < sizes.s7_soak {
        let name = format!("c{created}");
        harness::create_claim(&claims, slot, &name).await?;
        alive.push_back((Instant::now(), name));
        created += 1;
        while let Some((born, name)) = alive.front()
            && born.elapsed() >= LIFETIME
        {
            harness::delete_claim(&claims, name).await?;
            alive.pop_front();
        }
        if first.is_none() && t0.elapsed() >= WARM_UP {
            first = look(started);
        }
        tokio::time::sleep_until((t0 + EVERY * created as u32).into()).await;
    }
    let last = look(started);
    rec.set("claims", created as f64);
    match (first, last) {
        (Some((rss0, fds0)), Some((rss1, fds1))) => {
            rec.set("rss_start_mib", rss0);
            rec.set("rss_end_mib", rss1);
            rec.set("rss_growth_mib", rss1 - rss0);
            rec.set("fds_start", fds0 as f64);
            rec.set("fds_end", fds1 as f64);
        }
        _ => rec
            .notes
            .push("the provisioner was not running when it was sampled".into()),
    }
    let kept: BTreeSet<String> = alive.into_iter().map(|(_, n)| n).collect();
    let paths = (socket.as_path(), call_log.as_path());
    harness::settle_and_count(ctx, slot, paths, &kept, sizes.settle, Instant::now(), rec)
        .await?
        .record(rec);
    Ok(())
}
