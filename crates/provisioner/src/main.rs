//! `csi-provisioner`: parse the upstream-compatible command line, set up logging, run.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if csi_provisioner::admission_policy::requested(&args) {
        return admission_policy(&args[2..]);
    }
    if csi_provisioner::release_node::requested(&args) {
        return release_node(&args[2..]);
    }
    if csi_provisioner::capacity_view::requested(&args) {
        return capacity_view(&args[2..]);
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

/// `csi-provisioner admission-policy ...`: print the policy, or say what is wrong (status 2).
fn admission_policy(args: &[String]) -> ExitCode {
    use csi_provisioner::admission_policy::{parse, render};
    match parse(args) {
        Ok(args) => {
            print!("{}", render(&args));
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("{err}");
            ExitCode::from(2)
        }
    }
}

/// `csi-provisioner release-node ...`: release a lost node's volumes (dry run by default).
fn release_node(args: &[String]) -> ExitCode {
    use csi_provisioner::release_node::{parse, run};
    subcommand(
        "release-node",
        parse(args),
        |a| async move { run(&a).await },
        |_| {},
    )
}

/// `csi-provisioner capacity ...`: print the capacity view.
fn capacity_view(args: &[String]) -> ExitCode {
    use csi_provisioner::capacity_view::{parse, run};
    subcommand(
        "capacity",
        parse(args),
        |a| async move { run(&a).await },
        |text| print!("{text}"),
    )
}

/// A one-shot subcommand: refused arguments are status 2; the async part runs on a
/// single-threaded runtime, its result goes to `show`, its error to stderr (status 1).
fn subcommand<A, T, E, Fut>(
    name: &str,
    parsed: Result<A, impl std::fmt::Display>,
    run: impl FnOnce(A) -> Fut,
    show: impl FnOnce(T),
) -> ExitCode
where
    Fut: std::future::Future<Output = Result<T, E>>,
    E: Into<anyhow::Error>,
{
    let args = match parsed {
        Ok(args) => args,
        Err(err) => {
            eprintln!("{err}");
            return ExitCode::from(2);
        }
    };
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
    match runtime.block_on(run(args)) {
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
