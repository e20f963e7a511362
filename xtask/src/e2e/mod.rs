//! `cargo xtask e2e`: Kubernetes' External Storage e2e suite against csi-driver-host-path on
//! the machine's one real node, with our provisioner or upstream's, in a central or a
//! distributed deployment. Results go to `e2e/results/` and E2E.md.

pub mod driver_file;
pub mod report;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::storage::v1::CSIDriver;
use kube::Api;
use kube::api::PostParams;
use testenv::node::NODE_NAME;
use testenv::{
    ControlPlane, ControlPlaneOptions, HOSTPATH_TOPOLOGY_KEY, HostpathPlugin, RealNode,
    SnapshotController, Snapshotter,
};

pub use driver_file::Deployment;

/// The driver name csi-driver-host-path's deployments use.
const DRIVER: &str = "hostpath.csi.k8s.io";

/// Upstream CI's selection of the suite.
pub const FOCUS: &str = "External.Storage";
pub const SKIP: &str = "Disruptive|Serial|Slow|Feature:SELinux";

/// Specs this machine cannot run, with the reason (appended to the skip expression and
/// listed in E2E.md). Found by the first runs; the reasons were read in their logs.
pub const MACHINE_SKIPS: &[(&str, &str)] = &[(
    "should not mount / map unused volumes in a pod",
    "its hostexec helper runs `nsenter --mount=/rootfs/proc/1/ns/mnt`, and this VM refuses to open PID 1's namespaces (\"nsenter: can't open '/rootfs/proc/1/ns/mnt': Permission denied\")",
)];

/// Failures that come from the driver or the machine, not the provisioner (read in the runs'
/// logs), shown beside the failures they name.
pub const EXPLAINED: &[(&str, &str)] = &[
    (
        "should provision correct filesystem size when restoring snapshot to larger size pvc",
        "csi-driver-host-path's volumes are directories on the host's file system, so the restored volume's file system is the host's, as large as the original's; the driver cannot grow it",
    ),
    MACHINE_SKIPS[0],
];

/// The whole suite run's limit: a hung spec must not hold the machine.
const SUITE_TIMEOUT: Duration = Duration::from_secs(100 * 60);

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Which {
    Ours,
    Upstream,
}

impl Which {
    fn name(self) -> &'static str {
        match self {
            Which::Ours => "ours",
            Which::Upstream => "upstream",
        }
    }
}

pub struct Options {
    pub provisioner: Which,
    pub deployment: Deployment,
    /// Replaces [`FOCUS`] (for trying one spec).
    pub focus: Option<String>,
}

pub fn run(root: &Path, opts: &Options) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting a tokio runtime")?;
    runtime.block_on(run_async(root, opts))
}

async fn run_async(root: &Path, opts: &Options) -> Result<()> {
    let variant = format!("{}-{}", opts.provisioner.name(), opts.deployment);
    let results = root.join("e2e/results");
    let report_dir = testenv::target_dir().join("e2e-runs").join(&variant);
    let _ = std::fs::remove_dir_all(&report_dir);
    std::fs::create_dir_all(&report_dir)
        .with_context(|| format!("creating {}", report_dir.display()))?;
    std::fs::create_dir_all(&results).context("creating e2e/results")?;

    let cp = ControlPlane::start(ControlPlaneOptions {
        // Every namespace of the suite waits for its kube-root-ca.crt.
        extra_controllers: vec!["root-ca-certificate-publisher-controller".into()],
        ..Default::default()
    })
    .await?;
    let node = RealNode::start(&cp, false).await?;
    let client = cp.try_client().await?;
    testenv::install_snapshot_crds(&client).await?;
    create_csi_driver(&client, opts.deployment == Deployment::Distributed).await?;
    // Unix socket paths are short-lived and must stay under 108 bytes.
    let dir = PathBuf::from(format!("/tmp/csi-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let _snapshot_controller = SnapshotController::try_start(&dir, cp.kubeconfig())?;
    let plugin = HostpathPlugin::try_start(&dir.join("hp"), DRIVER, NODE_NAME, &[])?;
    let _registrar = node.start_registrar(&plugin.socket, &dir)?;
    let _snapshotter = Snapshotter::try_start(&dir, cp.kubeconfig(), &plugin.socket)?;
    let _provisioner = start_provisioner(opts, &cp, &plugin, &dir)?;
    testenv::node::wait_driver_registered(&client, DRIVER, Duration::from_secs(60)).await?;

    let block = Path::new("/dev/loop-control").exists();
    let driver_file = report_dir.join("test-driver.yaml");
    std::fs::write(
        &driver_file,
        driver_file::render(DRIVER, HOSTPATH_TOPOLOGY_KEY, opts.deployment, block),
    )
    .context("writing the test-driver file")?;
    let focus = opts.focus.clone().unwrap_or_else(|| FOCUS.to_string());
    let skip = skip_expression();
    let started = Instant::now();
    let status = run_suite(&cp, &driver_file, &report_dir, &focus, &skip)?;
    let seconds = started.elapsed().as_secs();
    let json_path = report_dir.join("ginkgo.json");
    let json = std::fs::read_to_string(&json_path).with_context(|| {
        format!(
            "e2e.test ({status}) wrote no report {}; its log: {}",
            json_path.display(),
            report_dir.join("e2e.log").display()
        )
    })?;
    let specs = report::parse_ginkgo(&json).context("parsing ginkgo's JSON report")?;
    let run = report::Run {
        provisioner: opts.provisioner.name().into(),
        deployment: opts.deployment.to_string(),
        kubernetes: "v1.37.2".into(),
        finished: today(),
        seconds,
        focus,
        skip,
        specs,
    };
    let c = run.counts();
    println!(
        "e2e {variant}: {} specs run, {} passed, {} failed, {} skipped at run time, {:.0} min (log {})",
        c.ran,
        c.passed,
        c.failed,
        c.skipped,
        seconds as f64 / 60.0,
        report_dir.join("e2e.log").display()
    );
    let out = results.join(format!("{variant}.json"));
    std::fs::write(&out, serde_json::to_string_pretty(&run)?)
        .with_context(|| format!("writing {}", out.display()))?;
    render(root)?;
    drop(node);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// E2E.md from every run kept in `e2e/results/`.
pub fn render(root: &Path) -> Result<()> {
    let mut runs = Vec::new();
    let dir = root.join("e2e/results");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    for p in paths {
        let text = std::fs::read_to_string(&p)?;
        runs.push(
            serde_json::from_str::<report::Run>(&text)
                .with_context(|| format!("parsing {}", p.display()))?,
        );
    }
    let mut notes = String::new();
    if !MACHINE_SKIPS.is_empty() {
        notes.push_str("Skipped by name on this machine:\n\n");
        for (spec, why) in MACHINE_SKIPS {
            notes.push_str(&format!("- `{spec}`: {why}.\n"));
        }
    }
    let md = report::render(&runs, driver_file::LEFT_OUT, EXPLAINED, &notes);
    std::fs::write(root.join("E2E.md"), md).context("writing E2E.md")
}

fn skip_expression() -> String {
    let mut skip = SKIP.to_string();
    for (spec, _) in MACHINE_SKIPS {
        skip.push('|');
        skip.push_str(spec);
    }
    skip
}

async fn create_csi_driver(client: &kube::Client, capacity: bool) -> Result<()> {
    // As csi-driver-host-path deploys it: no attach, pod info on mount, fsGroup by the
    // kubelet for any file system.
    let driver: CSIDriver = serde_json::from_value(serde_json::json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
        "metadata": {"name": DRIVER},
        "spec": {
            "attachRequired": false,
            "podInfoOnMount": true,
            "fsGroupPolicy": "File",
            "storageCapacity": capacity,
            "volumeLifecycleModes": ["Persistent", "Ephemeral"],
        },
    }))?;
    Api::<CSIDriver>::all(client.clone())
        .create(&PostParams::default(), &driver)
        .await
        .context("creating the CSIDriver")?;
    Ok(())
}

fn start_provisioner(
    opts: &Options,
    cp: &ControlPlane,
    plugin: &HostpathPlugin,
    dir: &Path,
) -> Result<testenv::Process> {
    let binary = match opts.provisioner {
        Which::Ours => testenv::try_workspace_binary("csi-provisioner")?,
        Which::Upstream => testenv::try_go_binary("csi-provisioner-upstream")?,
    };
    let mut cmd = Command::new(binary);
    cmd.arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
        .arg(format!("--csi-address={}", plugin.socket.display()))
        .args([
            "--v=5",
            "--feature-gates=Topology=true",
            "--extra-create-metadata",
        ])
        .env("NAMESPACE", "default");
    if opts.deployment == Deployment::Distributed {
        cmd.args([
            "--node-deployment",
            "--enable-capacity",
            "--capacity-ownerref-level=-1",
            "--strict-topology",
            "--immediate-topology=false",
            // The suite's class (`FromName`) has no binding mode, which the API server
            // defaults to Immediate; without this flag neither provisioner publishes capacity
            // for it, and the capacity spec fails for both (seen in the first runs).
            "--capacity-for-immediate-binding",
        ])
        .env("NODE_NAME", NODE_NAME);
    }
    Ok(testenv::try_spawn("csi-provisioner", cmd, dir)?)
}

fn run_suite(
    cp: &ControlPlane,
    driver_file: &Path,
    report_dir: &Path,
    focus: &str,
    skip: &str,
) -> Result<std::process::ExitStatus> {
    let mut cmd = Command::new(testenv::try_go_binary("e2e.test")?);
    cmd.arg("--provider=local")
        .arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
        .arg(format!("--storage.testdriver={}", driver_file.display()))
        .arg(format!("--ginkgo.focus={focus}"))
        .arg(format!("--ginkgo.skip={skip}"))
        .arg(format!("--report-dir={}", report_dir.display()))
        .arg(format!(
            "--ginkgo.json-report={}",
            report_dir.join("ginkgo.json").display()
        ))
        .arg(format!("--ginkgo.timeout={}s", SUITE_TIMEOUT.as_secs()))
        .arg("--ginkgo.no-color");
    println!(
        "e2e: running the suite (focus {focus:?}); log {}",
        report_dir.join("e2e.log").display()
    );
    let mut process = testenv::try_spawn("e2e", cmd, report_dir)?;
    let deadline = Instant::now() + SUITE_TIMEOUT + Duration::from_secs(120);
    loop {
        if let Some(status) = process.try_wait()? {
            return Ok(status);
        }
        if Instant::now() > deadline {
            process.kill();
            bail!(
                "e2e.test outlived its time limit; its log: {}",
                process.log_path().display()
            );
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn today() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%d"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}
