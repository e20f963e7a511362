//! Scenario 2: every claim is deleted 0–3 s after it was created, while CreateVolume is slow
//! (2–5 s), so most deletions land in the middle of the call (external-provisioner #1469).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::Result;
use futures::StreamExt;

use super::{CREATE_CALLS, DELETE_CALLS, Metric, Run, Sizes, harness};

const DELETE_WITHIN: Duration = Duration::from_secs(3);

pub fn setup(sizes: &Sizes) -> String {
    format!(
        "{} claims of 1 Gi in an Immediate class (reclaim Delete) are created over {} s; each \
         is deleted a random 0–3 s after its creation. The mock driver's CreateVolume takes a \
         random 2–5 s, so most deletions come while the volume is being made. Then the run \
         waits (up to {} s) until no claim, no PV and no volume is left.",
        sizes.s2_claims,
        sizes.s2_spread.as_secs(),
        sizes.settle.as_secs(),
    )
}

pub const METRICS: &[Metric] = &[CREATE_CALLS, DELETE_CALLS];

pub async fn measure(mut run: Run<'_>) -> Result<()> {
    let stage = harness::begin(&mut run, &harness::slow_creates(2000, 5000)).await?;
    let sizes = run.sizes;

    let t0 = Instant::now();
    let every = sizes.s2_spread.div_f64(sizes.s2_claims as f64);
    // Each claim's life: created on its slot in the spread, deleted 0–3 s later.
    let lives = futures::stream::iter(0..sizes.s2_claims)
        .map(|i| {
            let stage = &stage;
            async move {
                tokio::time::sleep_until((t0 + every.mul_f64(i as f64)).into()).await;
                let name = format!("c{i}");
                stage.create(&name).await?;
                tokio::time::sleep(DELETE_WITHIN.mul_f64(rand::random::<f64>())).await;
                stage.delete(&name).await
            }
        })
        .buffer_unordered(1024)
        .collect::<Vec<Result<()>>>()
        .await;
    lives.into_iter().collect::<Result<Vec<()>>>()?;
    stage
        .finish(&BTreeSet::new(), Instant::now(), run.rec)
        .await?;
    Ok(())
}
