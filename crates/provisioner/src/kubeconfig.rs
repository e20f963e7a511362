//! Where the Kubernetes API is: `--kubeconfig` / `KUBECONFIG`, `--master`, or in-cluster.

use kube::config::{KubeConfigOptions, Kubeconfig};

/// Why the API server configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    #[error("cannot read kubeconfig {path}: {source}")]
    Read {
        path: String,
        source: kube::config::KubeconfigError,
    },
    #[error("invalid --master URL {url:?}: {reason}")]
    Master { url: String, reason: String },
    #[error(
        "no --kubeconfig or --master given and not running in a pod: {0}; pass --kubeconfig=PATH or set KUBECONFIG"
    )]
    InCluster(kube::config::InClusterError),
}

/// Builds the client configuration as upstream's `buildConfig`: the `KUBECONFIG` environment
/// variable overrides `--kubeconfig` (already folded into `kubeconfig` by the cli crate),
/// `--master` overrides the server URL, and with neither the in-cluster service account is used.
pub async fn load(
    kubeconfig: Option<&str>,
    master: Option<&str>,
) -> Result<kube::Config, KubeconfigError> {
    let mut config = match kubeconfig.filter(|p| !p.is_empty()) {
        Some(path) => {
            let read = Kubeconfig::read_from(path).map_err(|source| KubeconfigError::Read {
                path: path.to_string(),
                source,
            })?;
            kube::Config::from_custom_kubeconfig(read, &KubeConfigOptions::default())
                .await
                .map_err(|source| KubeconfigError::Read {
                    path: path.to_string(),
                    source,
                })?
        }
        None if master.is_some_and(|m| !m.is_empty()) => {
            let url = master.unwrap_or_default();
            kube::Config::new(url.parse().map_err(|e: http::uri::InvalidUri| {
                KubeconfigError::Master {
                    url: url.to_string(),
                    reason: e.to_string(),
                }
            })?)
        }
        None => kube::Config::incluster().map_err(KubeconfigError::InCluster)?,
    };
    if let Some(url) = master.filter(|m| !m.is_empty()) {
        config.cluster_url =
            url.parse()
                .map_err(|e: http::uri::InvalidUri| KubeconfigError::Master {
                    url: url.to_string(),
                    reason: e.to_string(),
                })?;
    }
    Ok(config)
}
