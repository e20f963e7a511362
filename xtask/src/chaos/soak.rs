//! Scenario 7: a long steady churn. Memory and open file descriptors at the start and the end
//! show whether anything grows with the number of claims ever seen rather than those alive.

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use anyhow::Result;

use super::{Metric, Run, Sizes, harness};
use crate::bench::procfs;

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

pub const METRICS: &[Metric] = &[
    Metric("rss_start_mib", "RSS after the warm-up", "MiB", true),
    Metric("rss_end_mib", "RSS at the end", "MiB", true),
    Metric("rss_growth_mib", "RSS growth over the soak", "MiB", true),
    Metric(
        "fds_start",
        "Open file descriptors after the warm-up",
        "",
        true,
    ),
    Metric("fds_end", "Open file descriptors at the end", "", true),
    Metric("claims", "Claims created", "", false),
];

fn open_fds(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

/// RSS (MiB) and open descriptors of the running provisioner.
fn look(started: &super::Started) -> Option<(f64, usize)> {
    let pid = started.victim.as_ref()?.running.as_ref()?.pid();
    Some((procfs::sample(pid)?.rss_mib, open_fds(pid)?))
}

pub async fn measure(mut run: Run<'_>) -> Result<()> {
    let stage = harness::begin(&mut run, &harness::slow_creates(0, 1000)).await?;
    let sizes = run.sizes;
    let t0 = Instant::now();
    let mut alive: VecDeque<(Instant, String)> = VecDeque::new();
    let mut first = None;
    let mut created = 0usize;
    while t0.elapsed() < sizes.s7_soak {
        let name = format!("c{created}");
        stage.create(&name).await?;
        alive.push_back((Instant::now(), name));
        created += 1;
        while let Some((born, name)) = alive.front()
            && born.elapsed() >= LIFETIME
        {
            stage.delete(name).await?;
            alive.pop_front();
        }
        if first.is_none() && t0.elapsed() >= WARM_UP {
            first = look(run.started);
        }
        tokio::time::sleep_until((t0 + EVERY * created as u32).into()).await;
    }
    let last = look(run.started);
    run.rec.set("claims", created as f64);
    match (first, last) {
        (Some((rss0, fds0)), Some((rss1, fds1))) => {
            run.rec.set("rss_start_mib", rss0);
            run.rec.set("rss_end_mib", rss1);
            run.rec.set("rss_growth_mib", rss1 - rss0);
            run.rec.set("fds_start", fds0 as f64);
            run.rec.set("fds_end", fds1 as f64);
        }
        _ => run
            .rec
            .notes
            .push("the provisioner was not running when it was sampled".into()),
    }
    let kept: BTreeSet<String> = alive.into_iter().map(|(_, n)| n).collect();
    stage.finish(&kept, Instant::now(), run.rec).await?;
    Ok(())
}
