//! `cargo xtask cluster up|down`: a control plane that outlives the command, for the demo
//! and for running single tests by hand.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use testenv::{ControlPlane, ControlPlaneOptions};

pub struct Up<'a> {
    pub dir: &'a Path,
    pub nodes: usize,
    pub driver: &'a str,
    pub topology_key: &'a str,
}

pub fn up(args: &Up<'_>) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting a tokio runtime")?;
    let opts = ControlPlaneOptions {
        dir: Some(args.dir.to_path_buf()),
        nodes: args.nodes,
        driver: args.driver.to_string(),
        topology_key: args.topology_key.to_string(),
        detached: true,
        startup_timeout: Duration::from_secs(60),
        apiserver_args: Vec::new(),
        extra_controllers: Vec::new(),
    };
    let cp = runtime.block_on(async {
        let cp = ControlPlane::start(opts).await?;
        let client = cp.try_client().await?;
        testenv::try_create_csi_driver(&client, args.driver, true).await?;
        Ok::<_, testenv::Error>(cp)
    })?;
    let startup = cp.startup_time();
    let kubeconfig = cp.kubeconfig().to_path_buf();
    let server = cp.server_url().to_string();
    let dir = cp.detach()?;
    println!("cluster up in {:.1}s: {server}", startup.as_secs_f64());
    println!(
        "  {} fake node(s) node-1..node-{} for driver {} (topology key {}), CSIDriver with storageCapacity: true",
        args.nodes, args.nodes, args.driver, args.topology_key
    );
    println!("  logs: {}/logs/", dir.display());
    println!("  stop: cargo xtask cluster down --dir {}", dir.display());
    println!("kubeconfig: {}", kubeconfig.display());
    println!("export KUBECONFIG={}", kubeconfig.display());
    Ok(())
}

pub fn down(dir: &Path) -> Result<()> {
    let stopped = testenv::stop_detached(dir)?;
    if stopped.is_empty() {
        println!(
            "no cluster was running in {}; runtime state removed",
            dir.display()
        );
    } else {
        println!(
            "stopped {} in {}; logs kept in {}/logs/",
            stopped.join(", "),
            dir.display(),
            dir.display()
        );
    }
    Ok(())
}
