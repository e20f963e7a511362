//! `node-registrar`: registers a CSI driver with kubelet (see the library docs).

// No unsafe code here: `forbid`, unlike the workspace's `deny`, cannot be allowed again below.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use anyhow::Context as _;
use node_registrar::cli::{Config, parse_args};
use node_registrar::{Listener, Stopped, driver_name, plugin_info, socket_file_name};
use tokio::signal::unix::{SignalKind, signal};

fn main() -> ExitCode {
    let cfg = match parse_args(std::env::args_os()) {
        Ok(cfg) => cfg,
        Err(e) => {
            // Usage errors exit 2 and help/version 0, as clap decides.
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    // Two workers at most: this is a sidecar on a shared test machine.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("node-registrar: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cfg)) {
        Ok(Stopped::Shutdown) => ExitCode::SUCCESS,
        // Upstream exits here so that its container restarts and registration is retried.
        Ok(Stopped::Rejected(error)) => {
            eprintln!("node-registrar: kubelet rejected the registration: {error}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("node-registrar: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cfg: Config) -> anyhow::Result<Stopped> {
    // Installed first: a stop request while the driver is still starting is a clean stop too.
    let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let stop = async {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
    };
    tokio::pin!(stop);

    let name = tokio::select! {
        name = driver_name(&cfg.csi_address, cfg.timeout, cfg.connection_timeout) => name?,
        () = &mut stop => return Ok(Stopped::Shutdown),
    };
    tracing::info!(driver = %name, csi_address = %cfg.csi_address, "CSI driver found");
    let socket = cfg.plugin_registration_path.join(socket_file_name(&name)?);
    let endpoint = cfg.kubelet_registration_path.display().to_string();
    let listener = Listener::bind(&socket)?;
    Ok(listener.serve(plugin_info(&name, &endpoint), stop).await?)
}
