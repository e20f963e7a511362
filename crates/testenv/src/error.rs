use std::path::PathBuf;

/// Everything that can go wrong while preparing or running the test environment.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what} not found at {path}: {hint}")]
    MissingBinary {
        what: String,
        path: PathBuf,
        hint: &'static str,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("generating certificates: {0}")]
    Pki(#[from] rcgen::Error),
    #[error("kubernetes client: {0}")]
    Kube(#[from] kube::Error),
    #[error("kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    #[error("{0}")]
    NotReady(String),
    #[error("{path}: {source}")]
    Yaml {
        path: PathBuf,
        #[source]
        source: serde_yaml::Error,
    },
    #[error("pid file {path}: line {line}: {reason}")]
    PidFile {
        path: PathBuf,
        line: usize,
        reason: String,
    },
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// Attaches a description of the failed operation to an `io::Error`.
pub(crate) trait IoContext<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, Error>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, Error> {
        self.map_err(|e| Error::io(context(), e))
    }
}
