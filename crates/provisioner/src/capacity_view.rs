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

/// The subcommand's arguments.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct Args {
    /// The CSI driver whose capacity to show
    #[arg(long = "driver-name", value_name = "NAME", required = true, allow_hyphen_values = true,
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub driver: String,
    /// Namespace of the CSIStorageCapacity objects [default: all namespaces]
    #[arg(long, short = 'n', value_name = "NS", allow_hyphen_values = true)]
    pub namespace: Option<String>,
    #[command(flatten)]
    pub cluster: crate::subcommand::Cluster,
    /// A running provisioner's --http-endpoint, for its own view: adds the driver's last
    /// answer, its age and the reservations of volumes being created
    #[arg(long, value_name = "http://HOST:PORT", allow_hyphen_values = true,
          value_parser = endpoint)]
    pub endpoint: Option<String>,
}

/// An `--endpoint`: the endpoint serves plain HTTP only.
fn endpoint(url: &str) -> Result<String, String> {
    match url.starts_with("http://") {
        true => Ok(url.to_string()),
        false => Err("give the provisioner's HTTP endpoint as http://HOST:PORT".into()),
    }
}

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

/// The text to print.
pub async fn run(args: &Args) -> Result<String, ViewError> {
    if let Some(url) = &args.endpoint {
        let view = fetch(url).await?;
        return Ok(capacity::view::text(&view));
    }
    let config = crate::kubeconfig::load(args.cluster.kubeconfig.as_deref(), None).await?;
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

    fn args(words: &[&str]) -> Result<Args, String> {
        let line = [&[SUBCOMMAND], words].concat();
        match crate::subcommand::tests::parse_words(&line) {
            Some(Ok(crate::subcommand::Subcommand::Capacity(args))) => Ok(args),
            Some(Err(err)) => Err(err.to_string()),
            other => panic!("{words:?}: {other:?}"),
        }
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
        let a = args(&["--driver-name", "d", "--kubeconfig=/k", "--namespace=x"]).unwrap();
        assert_eq!(
            (a.cluster.kubeconfig.as_deref(), a.namespace.as_deref()),
            (Some("/k"), Some("x"))
        );
        let cases: &[(&[&str], &str)] = &[
            (&[], "required arguments were not provided"),
            (&["--driver-name"], "a value is required for '--driver-name"),
            (
                &["--driver-name="],
                "a value is required for '--driver-name",
            ),
            (
                &["--driver-name=d", "--endpoint=127.0.0.1:1"],
                "http://HOST:PORT",
            ),
            (&["--driver-name=d", "extra"], "unexpected argument 'extra'"),
        ];
        for (a, says) in cases {
            let e = args(a).unwrap_err();
            assert!(e.contains(says) && e.contains("try '--help'"), "{a:?}: {e}");
        }
    }
}
