//! Preparing a control-plane directory: state, credentials, ports, health clients.

use std::fs;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::error::IoContext;
use crate::flags::Layout;
use crate::{Error, detached, pki};

pub(crate) fn absolute(dir: &Path) -> Result<PathBuf, Error> {
    std::path::absolute(dir).ctx(|| format!("resolving {}", dir.display()))
}

/// Makes `dir` ready for a fresh cluster: refuses a live detached one, drops old state, keeps
/// old logs (new output is appended).
pub(crate) fn prepare_dir(layout: &Layout) -> Result<(), Error> {
    if detached::is_running(&layout.dir)? {
        return Err(Error::NotReady(format!(
            "a cluster is already running in {}: run `cargo xtask cluster down --dir {}` first",
            layout.dir.display(),
            layout.dir.display()
        )));
    }
    detached::remove_state(&layout.dir)?;
    for d in [layout.logs(), layout.pki()] {
        fs::create_dir_all(&d).ctx(|| format!("creating {}", d.display()))?;
    }
    Ok(())
}

pub(crate) fn write_credentials(layout: &Layout, server_url: &str) -> Result<(), Error> {
    let pki = pki::generate()?;
    let token = pki::random_token();
    let files = [
        (layout.ca_cert(), pki.ca_cert.clone()),
        (layout.serving_cert(), pki.serving_cert),
        (layout.serving_key(), pki.serving_key),
        (layout.sa_key(), pki.sa_key),
        (layout.sa_pub(), pki.sa_pub),
        (layout.tokens(), pki::tokens_csv(&token)),
        (layout.audit_policy(), crate::audit::POLICY.to_string()),
        (
            layout.kubeconfig(),
            pki::kubeconfig(server_url, &pki.ca_cert, &token),
        ),
    ];
    for (path, content) in files {
        fs::write(&path, content).ctx(|| format!("writing {}", path.display()))?;
        let private = fs::Permissions::from_mode(0o600);
        fs::set_permissions(&path, private).ctx(|| format!("chmod {}", path.display()))?;
    }
    Ok(())
}

/// Distinct ports that were free a moment ago: bind to port 0, read it, and release all of
/// them only at the end so the kernel cannot hand out one twice.
pub(crate) fn free_ports<const N: usize>() -> Result<[u16; N], Error> {
    let mut listeners = Vec::with_capacity(N);
    let mut ports = [0u16; N];
    for port in &mut ports {
        let listener = TcpListener::bind("127.0.0.1:0").ctx(|| "binding 127.0.0.1:0".into())?;
        *port = listener
            .local_addr()
            .ctx(|| "reading the bound port".into())?
            .port();
        listeners.push(listener);
    }
    Ok(ports)
}

/// A client for the controller manager's and scheduler's self-signed `/healthz`, which
/// needs no credentials.
pub(crate) fn insecure_client(port: u16) -> Result<kube::Client, Error> {
    let url: http::Uri = format!("https://127.0.0.1:{port}")
        .parse()
        .map_err(|e: http::uri::InvalidUri| Error::NotReady(e.to_string()))?;
    let mut config = kube::Config::new(url);
    config.accept_invalid_certs = true;
    config.default_retry = false;
    Ok(kube::Client::try_from(config)?)
}
