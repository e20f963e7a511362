//! Periodic samples of a provisioner: RSS and CPU from /proc. Nothing here talks to the
//! provisioner itself, so sampling often does not load it (its `/metrics` can be costly).

use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::procfs::{self, ProcSample};

/// One sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tick {
    /// Seconds since the sampler's reference instant.
    pub secs: f64,
    pub proc: ProcSample,
}

pub struct Sampler {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Vec<Tick>>,
}

impl Sampler {
    pub fn start(pid: u32, t0: Instant, every: Duration) -> Sampler {
        let (tx, mut rx) = oneshot::channel();
        let task = tokio::spawn(async move {
            let mut ticks = Vec::new();
            let mut interval = tokio::time::interval(every);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tokio::select! {
                    _ = &mut rx => break,
                    _ = interval.tick() => {}
                }
                let Some(proc) = procfs::sample(pid) else {
                    break;
                };
                ticks.push(Tick {
                    secs: t0.elapsed().as_secs_f64(),
                    proc,
                });
            }
            ticks
        });
        Sampler {
            stop: Some(tx),
            task,
        }
    }

    /// Stops sampling and returns the samples.
    pub async fn finish(mut self) -> Vec<Tick> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        (&mut self.task).await.unwrap_or_default()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Largest RSS among the ticks from `from` seconds on, MiB.
pub fn peak_rss(ticks: &[Tick], from: f64) -> Option<f64> {
    ticks
        .iter()
        .filter(|t| t.secs >= from)
        .map(|t| t.proc.rss_mib)
        .max_by(f64::total_cmp)
}

/// `(secs, rss MiB)` points for a plot.
pub fn rss_series(ticks: &[Tick]) -> Vec<(f64, f64)> {
    ticks.iter().map(|t| (t.secs, t.proc.rss_mib)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tick(secs: f64, rss: f64) -> Tick {
        Tick {
            secs,
            proc: ProcSample {
                cpu_seconds: 0.0,
                rss_mib: rss,
                hwm_mib: rss,
            },
        }
    }

    #[test]
    fn peaks_and_series() {
        let ticks = [tick(0.0, 50.0), tick(1.0, 80.0), tick(2.0, 60.0)];
        assert_eq!(peak_rss(&ticks, 0.0), Some(80.0));
        assert_eq!(peak_rss(&ticks, 1.5), Some(60.0));
        assert_eq!(peak_rss(&ticks, 9.0), None);
        assert_eq!(rss_series(&ticks).len(), 3);
    }

    #[tokio::test]
    async fn samples_our_own_process() {
        let sampler = Sampler::start(
            std::process::id(),
            Instant::now(),
            Duration::from_millis(10),
        );
        tokio::time::sleep(Duration::from_millis(60)).await;
        let ticks = sampler.finish().await;
        assert!(ticks.len() >= 2, "{ticks:?}");
        assert!(ticks.iter().all(|t| t.proc.rss_mib > 0.0));
    }
}
