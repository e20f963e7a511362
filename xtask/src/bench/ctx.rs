//! What every scenario shares: the cluster, the binaries, sizes, and one measured run's slot
//! (driver name, namespace, log directory) with its start and teardown.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};

use super::cluster::{self, poll};
use super::identity;
use super::launch::{self, Binaries, Budget, Driver, Running};
use super::objects;
use super::procfs;
use super::results::Impl;

/// Problem sizes; `--quick` shrinks them for development.
#[derive(Debug, Clone, PartialEq)]
pub struct Sizes {
    pub s1_claims: usize,
    pub s3_nodes: usize,
    pub s3_volumes: usize,
    pub s4_nodes: usize,
    pub s4_volumes: usize,
    pub s5_nodes: usize,
    pub s5_intervals: u32,
    pub s6_nodes: usize,
    pub s6_pods: usize,
    pub s7_nodes: usize,
    pub s7_claims: usize,
    pub s7_volumes: usize,
    pub s8_claims: usize,
    /// How long scenario 8's claims wait for their snapshots (so that backoff has grown).
    pub s8_wait: Duration,
    /// Upper bound for any one wait, so a stuck provisioner cannot hang the run.
    pub long_wait: Duration,
}

impl Sizes {
    pub fn full() -> Sizes {
        Sizes {
            s1_claims: 1000,
            s3_nodes: 1000,
            s3_volumes: 10_000,
            s4_nodes: 200,
            s4_volumes: 200,
            s5_nodes: 2000,
            s5_intervals: 10,
            s6_nodes: 20,
            s6_pods: 200,
            s7_nodes: 20,
            s7_claims: 500,
            s7_volumes: 10_000,
            s8_claims: 20,
            s8_wait: Duration::from_secs(40),
            long_wait: Duration::from_secs(1800),
        }
    }

    pub fn quick() -> Sizes {
        Sizes {
            s1_claims: 60,
            s3_nodes: 50,
            s3_volumes: 300,
            s4_nodes: 10,
            s4_volumes: 12,
            s5_nodes: 100,
            s5_intervals: 3,
            s6_nodes: 4,
            s6_pods: 40,
            s7_nodes: 5,
            s7_claims: 40,
            s7_volumes: 400,
            s8_claims: 5,
            s8_wait: Duration::from_secs(20),
            long_wait: Duration::from_secs(300),
        }
    }
}

pub struct Ctx {
    pub client: Client,
    pub kubeconfig: PathBuf,
    /// The API server's audit log of claim writes (`testenv::audit`).
    pub audit_log: PathBuf,
    pub bins: Binaries,
    pub runs: u32,
    pub quick: bool,
    pub sizes: Sizes,
    /// Logs of every measured run: `<work>/s<N>/<driver>/`.
    pub work: PathBuf,
    /// The command line that reproduces this scenario (with this run count and size).
    pub command: Box<dyn Fn(u8) -> String + Send + Sync>,
    /// The control plane's version, as its API server reports it (`v1.37.2`).
    pub kubernetes: String,
}

/// One measured run: which provisioner, its driver name, namespace and log directory.
#[derive(Debug, Clone)]
pub struct Slot {
    /// Unique per measured run (the driver name unless a scenario shares one driver).
    pub id: String,
    pub which: Impl,
    pub variant: String,
    pub run: u32,
    pub driver: String,
    pub namespace: String,
    pub dir: PathBuf,
}

impl Ctx {
    pub fn slot(&self, scenario: u8, variant: &str, which: Impl, run: u32) -> Slot {
        let driver = objects::driver_name(scenario, variant, which, run);
        Slot {
            id: driver.clone(),
            which,
            variant: variant.into(),
            run,
            namespace: objects::namespace_name(&driver),
            dir: self.work.join(format!("s{scenario}")).join(&driver),
            driver,
        }
    }

    /// Namespace and CSIDriver of a slot.
    pub async fn prepare(&self, slot: &Slot, storage_capacity: bool) -> Result<()> {
        cluster::create_namespace(&self.client, &slot.namespace).await?;
        cluster::create_csi_driver(&self.client, &slot.driver, storage_capacity).await
    }

    pub fn start_driver(&self, slot: &Slot, args: &[String]) -> Result<Driver> {
        launch::start_driver(&self.bins, &slot.dir, &slot.driver, args)
    }

    /// A finished scenario's result: its runs with the fixed description (`setup` gets the
    /// machine line appended), finished now; no plot and no notes yet.
    pub fn result(
        &self,
        scenario: u8,
        title: &str,
        setup: String,
        metrics: Vec<super::results::MetricDef>,
        runs: Vec<super::results::RunRecord>,
        wall_seconds: f64,
    ) -> super::results::ScenarioResult {
        super::results::ScenarioResult {
            scenario,
            title: title.into(),
            quick: self.quick,
            finished_at: jiff::Timestamp::now()
                .strftime("%Y-%m-%d %H:%M UTC")
                .to_string(),
            wall_seconds,
            command: (self.command)(scenario),
            setup: format!("{setup}\n\n{}", super::explain::machine()),
            metrics,
            runs,
            plot: None,
            notes: Vec::new(),
            upstream: super::results::UPSTREAM.into(),
            kubernetes: self.kubernetes.clone(),
        }
    }

    /// Starts the provisioner under the run's own identity (see [`identity`]).
    pub async fn start_provisioner(
        &self,
        slot: &Slot,
        budget: &Budget,
        driver: &Driver,
    ) -> Result<Running> {
        self.start_provisioner_on(slot, budget, &driver.socket, &[])
            .await
    }

    /// [`Ctx::start_provisioner`] for any driver's socket, with `extra` flags for both.
    pub async fn start_provisioner_on(
        &self,
        slot: &Slot,
        budget: &Budget,
        socket: &std::path::Path,
        extra: &[&str],
    ) -> Result<Running> {
        let args = self.provisioner_args(slot, budget, socket, extra).await?;
        self.spawn_provisioner(slot, &args)
    }

    /// Starts (or starts again, with the same flags) the slot's provisioner.
    pub fn spawn_provisioner(&self, slot: &Slot, args: &[String]) -> Result<Running> {
        self.spawn_provisioner_env(slot, args, &[])
    }

    /// [`Ctx::spawn_provisioner`] with `extra` added to its environment.
    pub fn spawn_provisioner_env(
        &self,
        slot: &Slot,
        args: &[String],
        extra: &[(&str, &str)],
    ) -> Result<Running> {
        // POD_NAMESPACE: ours keeps its write-ahead record's Lease there, in the run's
        // namespace, which the teardown deletes (else it would go to `default`).
        let mut env = vec![
            ("NAMESPACE", slot.namespace.as_str()),
            ("POD_NAMESPACE", slot.namespace.as_str()),
        ];
        env.extend_from_slice(extra);
        launch::start_provisioner(&self.bins, slot.which, &slot.dir, args, &env)
    }

    /// The run's identity (created here, once per slot) and the flags both provisioners get.
    pub async fn provisioner_args(
        &self,
        slot: &Slot,
        budget: &Budget,
        socket: &std::path::Path,
        extra: &[&str],
    ) -> Result<Vec<String>> {
        let kubeconfig = identity::create(
            &self.client,
            &self.kubeconfig,
            &slot.namespace,
            &slot.id,
            &slot.dir,
        )
        .await?;
        let addr = launch::free_addr()?;
        let mut args = launch::provisioner_args(budget, &kubeconfig, socket, &addr);
        args.extend(extra.iter().map(|a| a.to_string()));
        Ok(args)
    }

    /// Stops the provisioner (SIGTERM, then SIGKILL) and the driver, then sweeps the slot's
    /// objects. Errors are reported, not returned: the next run must still happen.
    pub async fn teardown(&self, slot: &Slot, prov: Option<Running>, driver: Option<Driver>) {
        let stop = tokio::task::spawn_blocking(move || {
            if let Some(mut p) = prov {
                p.process.kill();
            }
            if let Some(mut d) = driver {
                d.process.kill9();
            }
        });
        let _ = stop.await;
        identity::delete(&self.client, &slot.namespace, &slot.id).await;
        if let Err(e) = cluster::sweep(&self.client, &slot.namespace, &slot.driver).await {
            eprintln!("bench: cleaning up {}: {e:#}", slot.driver);
        }
    }

    /// Creates an Immediate claim and waits for its volume: proof that the provisioner has
    /// synced its caches and works. Returns the claim's uid.
    pub async fn provision_one(
        &self,
        slot: &Slot,
        prov: &Running,
        name: &str,
        class: &str,
        timeout: Duration,
    ) -> Result<String> {
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(self.client.clone(), &slot.namespace);
        let claim = objects::claim(name, class, "1Gi", &slot.driver, None);
        let created = claims
            .create(&PostParams::default(), &claim)
            .await
            .with_context(|| format!("creating claim {name}"))?;
        let uid = created.uid().unwrap_or_default();
        let pvs: Api<PersistentVolume> = Api::all(self.client.clone());
        let pv = objects::pv_name_for(&uid);
        let what = format!("{} to provision {}/{name}", slot.which, slot.namespace);
        poll(&what, timeout, Duration::from_millis(50), || async {
            prov.check_alive()?;
            Ok(pvs.get_opt(&pv).await?.map(|_| ()))
        })
        .await?;
        Ok(uid)
    }
}

/// API requests the API server has dispatched for the run's provisioner so far.
pub async fn api_requests(ctx: &Ctx, slot: &Slot) -> Result<f64> {
    identity::requests(&ctx.client, &slot.id).await
}

/// Our provisioner's own request counter by verb and resource
/// (`csi_provisioner_api_requests_total`); empty for upstream, which has none.
pub async fn request_breakdown(prov: &Running) -> BTreeMap<String, f64> {
    let Ok(samples) = super::prom::scrape(&prov.http_addr).await else {
        return BTreeMap::new();
    };
    let mut out = BTreeMap::new();
    for s in samples
        .iter()
        .filter(|s| s.name == "csi_provisioner_api_requests_total")
    {
        let label = |k: &str| {
            s.labels
                .iter()
                .find(|(lk, _)| lk == k)
                .map_or("", |(_, v)| v.as_str())
        };
        let key = format!("requests {} {}", label("verb"), label("resource"));
        *out.entry(key).or_insert(0.0) += s.value;
    }
    out
}

/// Per-volume increase of each counter between two [`request_breakdown`]s, as extra values
/// (kept in the JSON for diagnosis, not shown in the tables).
pub fn record_breakdown(
    rec: &mut super::results::RunRecord,
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    volumes: usize,
) {
    for (k, v) in after {
        let delta = v - before.get(k).copied().unwrap_or(0.0);
        if delta > 0.0 {
            rec.set(&format!("{k} per volume"), delta / volumes as f64);
        }
    }
}

/// CPU seconds used so far by a provisioner (0 if it is gone).
pub fn cpu_seconds(prov: &Running) -> f64 {
    procfs::sample(prov.pid()).map_or(0.0, |s| s.cpu_seconds)
}

/// Seconds since `t0` as f64.
pub fn since(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64()
}

/// Cumulative count over time, from event times: `(t, 1), (t, 2), ...` sorted, starting at 0.
pub fn cumulative(times: impl IntoIterator<Item = f64>) -> Vec<(f64, f64)> {
    let mut t: Vec<f64> = times.into_iter().filter(|x| x.is_finite()).collect();
    t.sort_by(f64::total_cmp);
    std::iter::once((0.0, 0.0))
        .chain(t.iter().enumerate().map(|(i, x)| (*x, (i + 1) as f64)))
        .collect()
}

/// Remaining count over time, from removal times, starting at `total`.
pub fn remaining(total: usize, times: impl IntoIterator<Item = f64>) -> Vec<(f64, f64)> {
    cumulative(times)
        .into_iter()
        .map(|(t, n)| (t, total as f64 - n))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cumulative_and_remaining_curves() {
        assert_eq!(cumulative([]), vec![(0.0, 0.0)]);
        assert_eq!(
            cumulative([3.0, 1.0, f64::NAN, 2.0]),
            vec![(0.0, 0.0), (1.0, 1.0), (2.0, 2.0), (3.0, 3.0)]
        );
        assert_eq!(
            remaining(3, [2.0, 1.0]),
            vec![(0.0, 3.0), (1.0, 2.0), (2.0, 1.0)]
        );
    }

    #[test]
    fn breakdown_records_per_volume_increases() {
        let before = BTreeMap::from([("requests create events".to_string(), 2.0)]);
        let after = BTreeMap::from([
            ("requests create events".to_string(), 12.0),
            ("requests get nodes".to_string(), 0.0),
            ("requests update persistentvolumeclaims".to_string(), 20.0),
        ]);
        let mut rec = super::super::results::RunRecord::new(Impl::Ours, "", 1);
        record_breakdown(&mut rec, &before, &after, 10);
        assert_eq!(rec.values.len(), 2, "{:?}", rec.values);
        assert_eq!(rec.values["requests create events per volume"], 1.0);
        assert_eq!(
            rec.values["requests update persistentvolumeclaims per volume"],
            2.0
        );
    }

    #[test]
    fn quick_sizes_are_smaller_everywhere() {
        let (f, q) = (Sizes::full(), Sizes::quick());
        assert!(q.s1_claims < f.s1_claims && q.s3_volumes < f.s3_volumes);
        assert!(q.s4_volumes < f.s4_volumes && q.s5_nodes < f.s5_nodes);
        assert!(q.s6_pods < f.s6_pods && q.long_wait < f.long_wait);
        assert!(q.s7_claims < f.s7_claims && q.s7_volumes < f.s7_volumes);
        assert!(q.s8_claims < f.s8_claims && q.s8_wait < f.s8_wait);
        // Scenario 6 must fit: 9 Gi claims, 11 per 100 Gi node.
        for s in [f, q] {
            assert!(s.s6_pods <= s.s6_nodes * 11, "{s:?}");
            assert!(s.s4_volumes <= s.s4_nodes * 100, "{s:?}");
        }
    }
}
