//! The three Lease calls the elector makes: GET, CREATE and PUT-with-resourceVersion. These are
//! exactly the verbs upstream's RBAC grants (get, create, update); PATCH is never used.

use std::future::Future;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};

/// A failed Lease call. Only logged: every failure means "try again later".
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// 409: someone wrote the Lease since we read it (or created it first).
    #[error("lease {lease} was changed by another writer (409 Conflict)")]
    Conflict { lease: String },
    #[error("lease {lease}: {source}")]
    Api {
        lease: String,
        #[source]
        source: kube::Error,
    },
    /// Failures of test doubles.
    #[error("lease {lease}: {message}")]
    Other { lease: String, message: String },
}

/// Access to one named Lease.
pub trait LeaseStore: Send + Sync + 'static {
    /// The Lease, or `None` if it does not exist.
    fn get(&self) -> impl Future<Output = Result<Option<Lease>, StoreError>> + Send;
    /// Creates the Lease; fails with a conflict if it already exists.
    fn create(&self, lease: &Lease) -> impl Future<Output = Result<Lease, StoreError>> + Send;
    /// Replaces the Lease; `lease.metadata.resource_version` must be the one last read, so that
    /// a concurrent writer makes this fail with a conflict instead of being overwritten.
    fn update(&self, lease: &Lease) -> impl Future<Output = Result<Lease, StoreError>> + Send;
}

/// The Lease on the API server.
#[derive(Clone)]
pub struct KubeLeases {
    api: Api<Lease>,
    name: String,
}

impl KubeLeases {
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
        }
    }

    fn error(&self, source: kube::Error) -> StoreError {
        let lease = self.name.clone();
        match &source {
            kube::Error::Api(status) if status.code == 409 => StoreError::Conflict { lease },
            _ => StoreError::Api { lease, source },
        }
    }
}

impl LeaseStore for KubeLeases {
    async fn get(&self) -> Result<Option<Lease>, StoreError> {
        self.api
            .get_opt(&self.name)
            .await
            .map_err(|e| self.error(e))
    }

    async fn create(&self, lease: &Lease) -> Result<Lease, StoreError> {
        self.api
            .create(&PostParams::default(), lease)
            .await
            .map_err(|e| self.error(e))
    }

    async fn update(&self, lease: &Lease) -> Result<Lease, StoreError> {
        if lease.metadata.resource_version.is_none() {
            // A PUT without resourceVersion would overwrite blindly; never send one.
            return Err(StoreError::Other {
                lease: self.name.clone(),
                message: "refusing to update without a resourceVersion".into(),
            });
        }
        self.api
            .replace(&self.name, &PostParams::default(), lease)
            .await
            .map_err(|e| self.error(e))
    }
}
