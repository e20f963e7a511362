//! Scenario 1: kill -9 the provisioner at random moments while claims are created and deleted
//! (CreateVolume taking 0–3 s), restarting it a second later each time.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;

use super::{CREATE_CALLS, Metric, Run, Sizes, harness};

/// How long a killed provisioner stays down before it is started again.
const DOWN: Duration = Duration::from_secs(1);

pub fn setup(sizes: &Sizes) -> String {
    format!(
        "{} claims of 1 Gi in an Immediate class (reclaim Delete) are created over {} s, one \
         every {:.2} s; after every second creation a random earlier claim (Bound or not) is \
         deleted. The mock driver's CreateVolume takes a random 0–3 s. During the churn the \
         provisioner is killed with SIGKILL {} times at random moments and started again {} s \
         later with the same flags. Then the run waits (up to {} s) until the claims left are \
         Bound and the driver holds exactly their volumes.",
        sizes.s1_claims,
        sizes.s1_churn.as_secs(),
        sizes.s1_churn.as_secs_f64() / sizes.s1_claims as f64,
        sizes.s1_kills,
        DOWN.as_secs(),
        sizes.settle.as_secs(),
    )
}

pub const METRICS: &[Metric] = &[
    Metric("kills", "Provisioner kills (the same for both)", "", true),
    CREATE_CALLS,
];

pub async fn measure(mut run: Run<'_>) -> Result<()> {
    let stage = harness::begin(&mut run, &harness::slow_creates(0, 3000)).await?;
    let (ctx, sizes, slot) = (run.ctx, run.sizes, run.slot);
    let victim = run.started.victim.as_mut().expect("begin started it");
    let kept = Arc::new(Mutex::new(BTreeSet::new()));

    let every = sizes.s1_churn.div_f64(sizes.s1_claims as f64);
    let churn = {
        let (kept, stage) = (kept.clone(), &stage);
        async move {
            for i in 0..sizes.s1_claims {
                let name = format!("c{i}");
                stage.create(&name).await?;
                kept.lock().unwrap().insert(name);
                if i % 2 == 1 {
                    let victim_name = {
                        let k = kept.lock().unwrap();
                        let pick = rand::random_range(0..k.len());
                        k.iter().nth(pick).cloned()
                    };
                    if let Some(v) = victim_name {
                        stage.delete(&v).await?;
                        kept.lock().unwrap().remove(&v);
                    }
                }
                tokio::time::sleep(every).await;
            }
            anyhow::Ok(())
        }
    };
    let t0 = Instant::now();
    let kills = harness::random_offsets(sizes.s1_kills, sizes.s1_churn);
    let killer = async {
        let mut kills_done = 0;
        for at in &kills {
            tokio::time::sleep_until((t0 + *at).into()).await;
            victim.kill9();
            kills_done += 1;
            tokio::time::sleep(DOWN).await;
            victim.restart(ctx, slot)?;
        }
        anyhow::Ok(kills_done)
    };
    let (churned, killed) = tokio::join!(churn, killer);
    churned?;
    run.rec.set("kills", killed? as f64);
    let kept = kept.lock().unwrap().clone();
    // Timed from the end of the churn, which is after the last kill's restart too.
    stage.finish(&kept, Instant::now(), run.rec).await?;
    Ok(())
}
