//! `cargo xtask`: everything beyond plain cargo.

// The workspace denies unsafe code; xtask reads sysconf(_SC_CLK_TCK) through libc. Every
// block carries a SAFETY comment (clippy::undocumented_unsafe_blocks).
#![allow(unsafe_code)]

mod bench;
mod browser;
mod chaos;
mod cluster;
mod demo;
mod demo_driver;
mod e2e;
mod fuzz;
mod gobuild;
mod msrv;
mod node;
mod recipe;
mod thirdparty;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    about = "Build, cluster and test tasks for csi-provisioner-rs"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// The Go-built test environment.
    Testenv {
        #[command(subcommand)]
        command: TestenvCmd,
    },
    /// A local control plane that keeps running after this command.
    Cluster {
        #[command(subcommand)]
        command: ClusterCmd,
    },
    /// The machine's one real node (containerd and kubelet), joined to a `cluster up` cluster.
    Node {
        #[command(subcommand)]
        command: NodeCmd,
    },
    /// Kubernetes' External Storage e2e suite against csi-driver-host-path on the real node
    /// (needs root): writes `e2e/results/<provisioner>-<deployment>.json` and E2E.md.
    E2e {
        #[arg(long, value_enum, default_value = "ours")]
        provisioner: e2e::Which,
        #[arg(long, value_enum, default_value = "central")]
        deployment: e2e::Deployment,
        /// A ginkgo focus instead of upstream CI's `External.Storage` (for one spec).
        #[arg(long)]
        focus: Option<String>,
        /// Only re-render E2E.md from the results kept.
        #[arg(long)]
        report_only: bool,
    },
    /// Build everything and run all tests, including those needing the control plane.
    Test {
        /// Run against this Kubernetes minor (1.34, 1.35, 1.36) instead of the default 1.37;
        /// its binaries are built and cached beside the default's.
        #[arg(long)]
        kubernetes: Option<String>,
    },
    /// A local control plane, a CSI driver and csi-provisioner: a volume for a claim, then
    /// pods placed only where their volume fits, with CSIStorageCapacity objects shown.
    Demo {
        #[arg(long, default_value = "target/demo")]
        dir: PathBuf,
        /// Leave everything running and print the kubeconfig path.
        #[arg(long)]
        keep: bool,
        /// The CSI driver behind the provisioner.
        #[arg(long, value_enum, default_value = "mock")]
        driver: demo_driver::DemoDriver,
        /// Tell it on the machine's real node (kubelet and containerd; `--driver hostpath`
        /// only, needs root): the pods start and write into their volumes.
        #[arg(long)]
        real_node: bool,
        /// Use the binaries already built (target/debug and TESTENV_BIN or target/testenv-bin)
        /// instead of building them first.
        #[arg(long)]
        no_build: bool,
    },
    /// The cargo-fuzz targets of `fuzz/` (nightly and cargo-fuzz needed), each on its corpus in
    /// `fuzz/corpus/<target>`; fails on a crash, naming the input.
    Fuzz {
        /// Only this target (repeatable); all of them by default.
        #[arg(long = "target")]
        targets: Vec<String>,
        /// Seconds per target.
        #[arg(long = "time", default_value_t = 600)]
        seconds: u64,
    },
    /// The reliability suite, ours and upstream external-provisioner v6.4.0 attacked alike:
    /// writes `reliability/results/<n>.json` and RELIABILITY.md (`--quick`: target/chaos-quick/;
    /// `--kubernetes`: `reliability/kubernetes-<minor>/`).
    Chaos {
        #[command(flatten)]
        suite: SuiteArgs,
        /// Run on this Kubernetes minor (1.34, 1.35, 1.36) instead of the default 1.37, as
        /// `test --kubernetes` does; results and report go to `reliability/kubernetes-<minor>/`.
        #[arg(long)]
        kubernetes: Option<String>,
        /// Run only ours; upstream's runs already in each scenario's results file are kept,
        /// ours' are replaced.
        #[arg(long, conflicts_with = "append")]
        ours_only: bool,
        /// The number of the first run (for runs made by separate invocations, as the soak's
        /// hours are): which provisioner starts alternates by it.
        #[arg(long, default_value_t = 1)]
        first_run: u32,
        /// Keep the runs already in each scenario's results file and add these.
        #[arg(long)]
        append: bool,
        /// A line for the scenario's notes (for example that runs went side by side).
        #[arg(long)]
        note: Option<String>,
    },
    /// Check the workspace with the oldest Rust it declares (`rust-version`), installing that
    /// toolchain with rustup if missing.
    Msrv,
    /// Side-by-side benchmarks with upstream external-provisioner v6.4.0: writes
    /// `bench/results/<n>.json`, BENCHMARKS.md and bench/plots/ (`--quick`: target/bench-quick/).
    Bench {
        #[command(flatten)]
        suite: SuiteArgs,
        /// Scenarios 1 and 2: run only this variant (for example "qps 5/10"), next to the other
        /// variants' runs kept from the results already there.
        #[arg(long)]
        variant: Option<String>,
        /// With --variant: run only ours; upstream's runs of the variant are kept too, ours'
        /// replaced.
        #[arg(long, requires = "variant")]
        ours_only: bool,
    },
}

/// What `bench` and `chaos` share: which scenarios, how often, how big.
#[derive(clap::Args)]
struct SuiteArgs {
    /// Scenarios to run (comma-separated); all when omitted.
    #[arg(long, value_delimiter = ',')]
    scenario: Vec<u8>,
    /// Runs per provisioner (and variant); the tables show median and min–max.
    #[arg(long, default_value_t = 3)]
    runs: u32,
    /// Smaller sizes, for developing the harness; results go under target/.
    #[arg(long)]
    quick: bool,
    /// Only re-render the report from the JSON results.
    #[arg(long)]
    report_only: bool,
    /// Use the release binaries already in target/release instead of building them.
    #[arg(long)]
    no_build: bool,
}

#[derive(Subcommand)]
enum TestenvCmd {
    /// Build missing Go binaries into ~/.cache/csi-provisioner-rs/bin and link them into
    /// target/testenv-bin.
    Build {
        /// Also build the upstream Go external-provisioner (benchmark baseline).
        #[arg(long)]
        with_upstream: bool,
        /// The control plane of this Kubernetes minor instead of the default (see `test`).
        #[arg(long)]
        kubernetes: Option<String>,
    },
}

#[derive(Subcommand)]
enum ClusterCmd {
    /// Start etcd, kube-apiserver, kube-controller-manager and kube-scheduler, detached.
    Up {
        #[arg(long, default_value = "target/cluster")]
        dir: PathBuf,
        /// Fake nodes to create (node-1 .. node-N).
        #[arg(long, default_value_t = 3)]
        nodes: usize,
        /// CSI driver recorded in the nodes' CSINode objects (a CSIDriver is created too).
        #[arg(long, default_value = "mock.csi.test")]
        driver: String,
        /// Topology label key set on each node (`<key>=<node name>`).
        #[arg(long, default_value = "topology.mock.csi/node")]
        topology_key: String,
    },
    /// Kill the processes started by `cluster up` and remove the runtime state (keeps logs).
    Down {
        #[arg(long, default_value = "target/cluster")]
        dir: PathBuf,
    },
}

#[derive(Subcommand)]
enum NodeCmd {
    /// Build kubelet and the images if missing, start containerd and kubelet, detached, and
    /// wait for the Node to be Ready (needs root and Debian's containerd, runc,
    /// containernetworking-plugins and busybox-static).
    Up {
        #[arg(long, default_value = "target/cluster")]
        dir: PathBuf,
    },
    /// Stop the node's processes and remove every mount, network namespace, link, iptables
    /// chain and cgroup it made (also after a kill); delete the Node if the cluster is up.
    Down {
        #[arg(long, default_value = "target/cluster")]
        dir: PathBuf,
    },
}

fn main() -> ExitCode {
    // Ctrl-C (SIGINT, SIGTERM, SIGHUP) stops what this command started, by recorded ids.
    if let Err(e) = testenv::stop_on_signals() {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    let root = testenv::workspace_root();
    // Relative paths (like the --dir defaults) are relative to the workspace, wherever
    // `cargo xtask` was run from.
    std::env::set_current_dir(&root).with_context(|| format!("cd {}", root.display()))?;
    match cli.command {
        Cmd::Testenv {
            command:
                TestenvCmd::Build {
                    with_upstream,
                    kubernetes,
                },
        } => gobuild::build(&root, with_upstream, kubernetes.as_deref()).map(drop),
        Cmd::Cluster { command } => match command {
            ClusterCmd::Up {
                dir,
                nodes,
                driver,
                topology_key,
            } => {
                gobuild::build(&root, false, None)?;
                cluster::up(&cluster::Up {
                    dir: &dir,
                    nodes,
                    driver: &driver,
                    topology_key: &topology_key,
                })
            }
            ClusterCmd::Down { dir } => cluster::down(&dir),
        },
        Cmd::Node { command } => match command {
            NodeCmd::Up { dir } => {
                node::ensure_packages()?;
                gobuild::build(&root, false, None)?;
                node::up(&dir)
            }
            NodeCmd::Down { dir } => node::down(&dir),
        },
        Cmd::E2e {
            provisioner,
            deployment,
            focus,
            report_only,
        } => {
            if report_only {
                return e2e::render(&root);
            }
            node::ensure_packages()?;
            // The suite, agnhost and the upstream provisioner are optional components.
            gobuild::build(&root, true, None)?;
            build_our_binaries(false)?;
            e2e::run(
                &root,
                &e2e::Options {
                    provisioner,
                    deployment,
                    focus,
                },
            )
        }
        Cmd::Test { kubernetes } => test(&root, kubernetes.as_deref()),
        Cmd::Msrv => msrv::check(&root),
        Cmd::Fuzz { targets, seconds } => fuzz::run(&root, &targets, seconds),
        Cmd::Demo {
            dir,
            keep,
            driver,
            real_node,
            no_build,
        } => {
            if real_node {
                node::ensure_packages()?;
            }
            if !no_build {
                gobuild::build(&root, false, None)?;
                build_our_binaries(false)?;
            }
            let opts = demo::Options {
                dir,
                keep,
                driver,
                real_node,
            };
            demo::run(&root, &opts)
        }
        Cmd::Chaos {
            suite,
            kubernetes,
            ours_only,
            first_run,
            append,
            note,
        } => {
            // Checked before anything is built; `None` for the default version.
            let kubernetes =
                recipe::other_kubernetes(kubernetes.as_deref()).map_err(anyhow::Error::msg)?;
            let opts = chaos::Options {
                scenarios: suite.scenario.clone(),
                runs: suite.runs,
                quick: suite.quick,
                report_only: suite.report_only,
                first_run,
                append,
                note,
                ours_only,
                kubernetes: kubernetes.clone(),
            };
            if !suite.report_only {
                // A refusal must not wait for a control plane to be built.
                chaos::preflight(&root, &opts)?;
            }
            let run = |bin_dir: &Path| chaos::run(&root, bin_dir, &opts);
            run_suite(&root, &suite, kubernetes.as_deref(), run)
        }
        Cmd::Bench {
            suite,
            variant,
            ours_only,
        } => {
            let opts = bench::Options {
                scenarios: suite.scenario.clone(),
                runs: suite.runs,
                quick: suite.quick,
                report_only: suite.report_only,
                variant,
                ours_only,
            };
            if !suite.report_only {
                bench::preflight(&root, &opts)?;
            }
            let run = |bin_dir: &Path| bench::run(&root, bin_dir, &opts);
            run_suite(&root, &suite, None, run)
        }
    }
}

/// Builds what a suite needs (the upstream provisioner, the control plane of Kubernetes
/// `kubernetes` (`None`: the default) and, unless `--no-build`, our release binaries: debug
/// builds would measure the compiler, not the design), then runs it.
fn run_suite(
    root: &Path,
    suite: &SuiteArgs,
    kubernetes: Option<&str>,
    run: impl Fn(&Path) -> Result<()>,
) -> Result<()> {
    if suite.report_only {
        return run(root);
    }
    // The commit the results will name: the one built now, not the one checked out at the end.
    bench::explain::commit();
    let bin_dir = gobuild::build(root, true, kubernetes)?;
    if !suite.no_build {
        build_our_binaries(true)?;
    }
    run(&bin_dir)
}

/// Builds the `csi-provisioner` and `mock-csi-driver` binaries (debug or release).
fn build_our_binaries(release: bool) -> Result<()> {
    let mut args = vec!["build"];
    if release {
        args.push("--release");
    }
    args.extend([
        "--package",
        "csi-provisioner",
        "--package",
        "mock-csi-driver",
        "--bins",
    ]);
    cargo(&args, None)
}

fn test(root: &std::path::Path, kubernetes: Option<&str>) -> Result<()> {
    let bin_dir = gobuild::build(root, false, kubernetes)?;
    browser::ensure()?;
    // The real-node test runs containerd and kubelet from Debian's packages.
    node::ensure_packages()?;
    cargo(&["build", "--workspace", "--bins", "--tests"], None)?;
    // --no-fail-fast: one failing test binary must not hide the others' results.
    let args = [
        "test",
        "--workspace",
        "--no-fail-fast",
        "--",
        "--include-ignored",
    ];
    let result = cargo_with_deadline(&args, &bin_dir, test_timeout()?);
    if result.is_err() {
        let runs = testenv::target_dir().join("testenv-runs");
        eprintln!(
            "control-plane logs of the test binaries: {}/<test>-<time>-p<pid>/logs/",
            runs.display()
        );
    }
    result
}

/// The whole test run must finish within this (`XTASK_TEST_TIMEOUT_MINUTES`, default 40): a
/// hung test must fail CI with a message, not eat its whole time budget.
fn test_timeout() -> Result<std::time::Duration> {
    let minutes = match std::env::var("XTASK_TEST_TIMEOUT_MINUTES") {
        Ok(v) => v.parse::<u64>().with_context(|| {
            format!("XTASK_TEST_TIMEOUT_MINUTES={v:?} is not a number of minutes")
        })?,
        Err(_) => 40,
    };
    Ok(std::time::Duration::from_secs(minutes * 60))
}

/// Runs `cargo <args>` in its own process group and kills the group if it outlives `deadline`
/// or this command is interrupted (test binaries' own children die with them through
/// PDEATHSIG).
fn cargo_with_deadline(
    args: &[&str],
    testenv_bin: &std::path::Path,
    deadline: std::time::Duration,
) -> Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.args(args).env("TESTENV_BIN", testenv_bin);
    println!(
        "xtask: cargo {} (time limit {} min)",
        args.join(" "),
        deadline.as_secs() / 60
    );
    let mut child = testenv::spawn_foreground("cargo", cmd)
        .with_context(|| format!("running cargo {}", args.join(" ")))?;
    let started = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            if !status.success() {
                bail!("cargo {} failed ({status})", args.join(" "));
            }
            return Ok(());
        }
        if started.elapsed() > deadline {
            child.kill9();
            bail!(
                "cargo {} did not finish within {} minutes and was killed: a test hangs (the last \"Running\" line above names its binary)",
                args.join(" "),
                deadline.as_secs() / 60
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

fn cargo(args: &[&str], testenv_bin: Option<&std::path::Path>) -> Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.args(args);
    if let Some(dir) = testenv_bin {
        cmd.env("TESTENV_BIN", dir);
    }
    println!("xtask: cargo {}", args.join(" "));
    let status = cmd
        .status()
        .with_context(|| format!("running cargo {}", args.join(" ")))?;
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    Ok(())
}
