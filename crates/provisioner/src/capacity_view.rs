//! `csi-provisioner capacity --driver-name NAME [--namespace NS] [--kubeconfig PATH]
//! [--endpoint URL]` (ours): per (segment, class), what is published for the driver and how
//! many of its claims wait for a node. With `--endpoint` (a running provisioner's
//! `--http-endpoint`), the provisioner's own view instead, which adds the driver's last answer,
//! its age and the reservations of volumes being created.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use kube::api::ListParams;
use kube::{Api, Client};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The subcommand's name, the first argument.
pub const SUBCOMMAND: &str = "capacity";

const USAGE: &str = "usage: csi-provisioner capacity --driver-name NAME [--namespace NS] [--kubeconfig PATH] [--endpoint http://HOST:PORT]";

/// The subcommand's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    pub driver: String,
    /// Namespace of the objects; all namespaces when `None`.
    pub namespace: Option<String>,
    pub kubeconfig: Option<String>,
    /// `http://host:port` of a running provisioner's HTTP endpoint.
    pub endpoint: Option<String>,
}

/// Why the arguments were refused (exit status 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}\n{USAGE}")]
pub struct UsageError(String);

/// Why the view could not be shown (exit status 1).
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Kubeconfig(#[from] crate::kubeconfig::KubeconfigError),
    #[error("cannot create a Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    #[error(
        "cannot read {url}: {reason}; is the provisioner running with --enable-capacity and --http-endpoint?"
    )]
    Endpoint { url: String, reason: String },
}

/// Whether the command line asks for this subcommand.
pub fn requested(args: &[String]) -> bool {
    crate::subcommand::requested(args, SUBCOMMAND)
}

/// Parses the arguments after the subcommand.
pub fn parse(args: &[String]) -> Result<Args, UsageError> {
    let mut driver = None;
    let mut namespace = None;
    let mut endpoint = None;
    let mut kubeconfig = std::env::var("KUBECONFIG").ok().filter(|k| !k.is_empty());
    let mut walk = crate::subcommand::Walk::new(args);
    while let Some((flag, inline)) = walk.next_arg() {
        let mut value = || walk.value(flag, inline).map_err(UsageError);
        match flag {
            "--driver-name" => driver = Some(value()?),
            "--namespace" | "-n" => namespace = Some(value()?),
            "--kubeconfig" => kubeconfig = Some(value()?),
            "--endpoint" => {
                let url = value()?;
                if !url.starts_with("http://") {
                    return Err(UsageError(format!(
                        "--endpoint {url:?}: give the provisioner's HTTP endpoint as http://HOST:PORT"
                    )));
                }
                endpoint = Some(url);
            }
            other => return Err(UsageError(format!("unexpected argument: {other}"))),
        }
    }
    match driver {
        Some(driver) if !driver.is_empty() => Ok(Args {
            driver,
            namespace,
            kubeconfig,
            endpoint,
        }),
        _ => Err(UsageError("--driver-name is required".into())),
    }
}

/// The text to print.
pub async fn run(args: &Args) -> Result<String, ViewError> {
    if let Some(url) = &args.endpoint {
        let view = fetch(url).await?;
        return Ok(capacity::view::text(&view));
    }
    let config = crate::kubeconfig::load(args.kubeconfig.as_deref(), None).await?;
    let client = Client::try_from(config).map_err(ViewError::Client)?;
    let api_err = |what: &str| {
        let what = what.to_string();
        move |source| ViewError::Api { what, source }
    };
    let objects: Api<CSIStorageCapacity> = match &args.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let ours =
        ListParams::default().labels(&format!("{}={}", capacity::DRIVER_NAME_LABEL, args.driver));
    let objects = objects
        .list(&ours)
        .await
        .map_err(api_err("list CSIStorageCapacity objects"))?
        .items;
    let claims = Api::<PersistentVolumeClaim>::all(client)
        .list(&ListParams::default())
        .await
        .map_err(api_err("list PersistentVolumeClaims"))?
        .items;
    let waiting = claims
        .iter()
        .filter_map(|c| capacity::view::waiting_class(c, &args.driver));
    let view = capacity::view::from_api(&args.driver, &objects, waiting);
    let mut out = capacity::view::text(&view);
    out.push_str(
        "(the driver's last answer, its age and reservations are known to the running \
         provisioner: add --endpoint http://HOST:PORT of its --http-endpoint)\n",
    );
    Ok(out)
}

/// `GET <url>/capacity.json` over plain HTTP/1.0 (the endpoint serves nothing else).
async fn fetch(url: &str) -> Result<capacity::view::View, ViewError> {
    let fail = |reason: String| ViewError::Endpoint {
        url: url.to_string(),
        reason,
    };
    let host = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let mut stream = tokio::net::TcpStream::connect(&host)
        .await
        .map_err(|e| fail(e.to_string()))?;
    let request =
        format!("GET /capacity.json HTTP/1.0\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| fail(e.to_string()))?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .map_err(|e| fail(e.to_string()))?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| fail("not an HTTP response".into()))?;
    let status = head.lines().next().unwrap_or_default();
    if !status.contains(" 200 ") {
        return Err(fail(format!("{status}: {}", body.trim())));
    }
    serde_json::from_str(body).map_err(|e| fail(format!("not a capacity view: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Result<Args, UsageError> {
        parse(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn parses_and_refuses() {
        let a = args(&[
            "--driver-name=d",
            "-n",
            "ns",
            "--endpoint",
            "http://127.0.0.1:8080",
        ])
        .unwrap();
        assert_eq!(
            (
                a.driver.as_str(),
                a.namespace.as_deref(),
                a.endpoint.as_deref()
            ),
            ("d", Some("ns"), Some("http://127.0.0.1:8080"))
        );
        let cases: &[(&[&str], &str)] = &[
            (&[], "--driver-name is required"),
            (&["--driver-name"], "flag needs an argument"),
            (
                &["--driver-name=d", "--endpoint=127.0.0.1:1"],
                "http://HOST:PORT",
            ),
            (&["--driver-name=d", "extra"], "unexpected argument: extra"),
        ];
        for (a, says) in cases {
            let e = args(a).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("usage:"), "{a:?}: {e}");
        }
    }
}
