//! `csi-provisioner`: parse the upstream-compatible command line, set up logging, run.

// No unsafe code here: `forbid`, unlike the workspace's `deny`, cannot be allowed again below.
#![forbid(unsafe_code)]
// Shipped code reports failures instead of panicking; tests are free to unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::process::ExitCode;

use csi_provisioner::subcommand::Subcommand;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match csi_provisioner::subcommand::parse(&args) {
        Some(Ok(command)) => return subcommand(command),
        Some(Err(err)) => {
            // Help goes to stdout (status 0), a refusal to stderr (status 2).
            let _ = err.print();
            return ExitCode::from(err.exit_code() as u8);
        }
        None => {}
    }
    let opts = match cli::parse_from(args.clone(), &cli::process_env) {
        Ok(opts) => opts,
        Err(err) => {
            if err.is_help() {
                println!("{err}");
            } else {
                eprintln!("{err}");
            }
            return ExitCode::from(err.exit_code() as u8);
        }
    };
    if opts.show_version {
        let argv0 = args
            .first()
            .map(String::as_str)
            .unwrap_or("csi-provisioner");
        println!("{}", cli::version_line(argv0, csi_provisioner::VERSION));
        return ExitCode::SUCCESS;
    }
    if let Err(err) = klog::init(
        opts.logging.format,
        opts.logging.klog_verbosity(),
        opts.logging.vmodule.as_deref(),
    ) {
        eprintln!("{err}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            tracing::error!(err = %err, "Cannot start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(csi_provisioner::app::run(opts)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err @ csi_provisioner::app::AppError::DriverLost) => {
            let message = err.to_string();
            tracing::error!("{message}");
            // Best effort, as upstream: Kubernetes shows this file as the termination reason.
            let _ = std::fs::write("/dev/termination-log", &message);
            // Without waiting for in-flight work, as upstream's `os.Exit(1)`.
            runtime.shutdown_background();
            ExitCode::FAILURE
        }
        Err(err) => {
            tracing::error!(err = %anyhow::Error::from(err), "Exiting");
            ExitCode::FAILURE
        }
    }
}

/// Runs a subcommand: `release-node` releases a lost
/// node's volumes (dry run by default), `capacity` prints the capacity view.
fn subcommand(command: Subcommand) -> ExitCode {
    use csi_provisioner::{capacity_view, release_node};
    match command {
        Subcommand::ReleaseNode(args) => {
            one_shot(release_node::SUBCOMMAND, release_node::run(&args), |_| {})
        }
        Subcommand::Capacity(args) => one_shot(
            capacity_view::SUBCOMMAND,
            capacity_view::run(&args),
            |text| print!("{text}"),
        ),
    }
}

/// A one-shot subcommand's async part, on a single-threaded runtime: its result goes to
/// `show`, its error to stderr (status 1).
fn one_shot<T, E>(
    name: &str,
    run: impl std::future::Future<Output = Result<T, E>>,
    show: impl FnOnce(T),
) -> ExitCode
where
    E: Into<anyhow::Error>,
{
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run) {
        Ok(value) => {
            show(value);
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("{name}: {}", err.into());
            ExitCode::FAILURE
        }
    }
}
