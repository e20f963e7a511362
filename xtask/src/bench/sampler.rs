//! Periodic samples of a provisioner: RSS and CPU from /proc, optionally one metric from its
//! `/metrics` (e.g. the capacity work queue's depth).

use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::procfs::{self, ProcSample};
use super::prom;

/// One sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tick {
    /// Seconds since the sampler's reference instant.
    pub secs: f64,
    pub proc: ProcSample,
    /// The scraped metric, when asked for and the scrape worked.
    pub metric: Option<f64>,
}

/// What to scrape on every tick: address, metric name, label filter.
#[derive(Debug, Clone)]
pub struct Scrape {
    pub addr: String,
    pub name: String,
    pub labels: Vec<(String, String)>,
}

pub struct Sampler {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Vec<Tick>>,
}

impl Sampler {
    pub fn start(pid: u32, t0: Instant, every: Duration, scrape: Option<Scrape>) -> Sampler {
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
                let metric = match &scrape {
                    Some(s) => scrape_one(s).await,
                    None => None,
                };
                ticks.push(Tick {
                    secs: t0.elapsed().as_secs_f64(),
                    proc,
                    metric,
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

async fn scrape_one(s: &Scrape) -> Option<f64> {
    let samples = prom::scrape(&s.addr).await.ok()?;
    let filter: Vec<(&str, &str)> = s
        .labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    Some(prom::sum(&samples, &s.name, &filter))
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

/// `(secs, metric)` points of the ticks whose scrape worked.
pub fn metric_series(ticks: &[Tick]) -> Vec<(f64, f64)> {
    ticks
        .iter()
        .filter_map(|t| t.metric.map(|m| (t.secs, m)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tick(secs: f64, rss: f64, metric: Option<f64>) -> Tick {
        Tick {
            secs,
            proc: ProcSample {
                cpu_seconds: 0.0,
                rss_mib: rss,
                hwm_mib: rss,
            },
            metric,
        }
    }

    #[test]
    fn peaks_and_series() {
        let ticks = [
            tick(0.0, 50.0, None),
            tick(1.0, 80.0, Some(3.0)),
            tick(2.0, 60.0, Some(1.0)),
        ];
        assert_eq!(peak_rss(&ticks, 0.0), Some(80.0));
        assert_eq!(peak_rss(&ticks, 1.5), Some(60.0));
        assert_eq!(peak_rss(&ticks, 9.0), None);
        assert_eq!(metric_series(&ticks), vec![(1.0, 3.0), (2.0, 1.0)]);
        assert_eq!(rss_series(&ticks).len(), 3);
    }

    #[tokio::test]
    async fn samples_our_own_process() {
        let sampler = Sampler::start(
            std::process::id(),
            Instant::now(),
            Duration::from_millis(10),
            None,
        );
        tokio::time::sleep(Duration::from_millis(60)).await;
        let ticks = sampler.finish().await;
        assert!(ticks.len() >= 2, "{ticks:?}");
        assert!(ticks.iter().all(|t| t.proc.rss_mib > 0.0));
    }
}
