//! `mock-csi-driver`: see the library docs for flags, the faults file and the call log.

// No unsafe code here: `forbid`, unlike the workspace's `deny`, cannot be allowed again below.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use tokio::signal::unix::{SignalKind, signal};

fn main() -> ExitCode {
    let cfg = match mock_csi_driver::cli::parse_args(std::env::args_os()) {
        Ok(cfg) => cfg,
        Err(e) if e.use_stderr() => {
            eprintln!("{}", mock_csi_driver::cli::one_line(&e));
            return ExitCode::from(2);
        }
        Err(e) => {
            // --help / --version
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mock-csi-driver: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cfg)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mock-csi-driver: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cfg: mock_csi_driver::cli::Config) -> anyhow::Result<()> {
    let driver = mock_csi_driver::server::driver(&cfg)?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut outage = signal(SignalKind::user_defined1())?;
    loop {
        // Which signal ended this round of serving: SIGUSR1 only pauses it.
        let mut paused = false;
        let stop = async {
            tokio::select! {
                _ = term.recv() => tracing::info!("shutting down"),
                _ = int.recv() => tracing::info!("shutting down"),
                _ = outage.recv() => {
                    tracing::info!(ms = cfg.socket_outage.as_millis() as u64, "socket outage");
                    paused = true;
                }
            }
        };
        mock_csi_driver::server::serve(driver.clone(), &cfg.socket, stop).await?;
        if !paused {
            return Ok(());
        }
        tokio::time::sleep(cfg.socket_outage).await;
    }
}
