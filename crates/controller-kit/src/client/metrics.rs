//! Request counters for parity and benchmarks.
//!
//! - `rest_client_requests_total{code, host, method}`: client-go's metric. `code` is the HTTP
//!   status or `<error>` when no response came back; `method` the HTTP method.
//! - `csi_provisioner_api_requests_total{verb, resource}`: ours. One count per request sent,
//!   by Kubernetes verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
//!   `deletecollection`) and resource (`persistentvolumes`, `events`,
//!   `persistentvolumeclaims/status`, ...), so benchmarks can report API requests per volume
//!   per kind of call.
//!
//! Both count at our outermost layer: retries kube makes internally (429/503/504) are not
//! counted again, unlike client-go which counts every attempt.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    code: String,
    host: String,
    method: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiLabels {
    verb: String,
    resource: String,
}

/// Request counters, shared by every client built with them. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct RequestMetrics {
    requests: Family<RequestLabels, Counter>,
    api_requests: Family<ApiLabels, Counter>,
}

impl RequestMetrics {
    /// Creates the counters; nothing is exposed until [`register`](Self::register).
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers both families (prometheus-client appends `_total`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host",
            self.requests.clone(),
        );
        registry.register(
            "csi_provisioner_api_requests",
            "Number of Kubernetes API requests sent, partitioned by verb and resource",
            self.api_requests.clone(),
        );
    }

    pub(crate) fn sent(&self, verb: &str, resource: &str) {
        self.api_requests
            .get_or_create(&ApiLabels {
                verb: verb.to_string(),
                resource: resource.to_string(),
            })
            .inc();
    }

    /// Counts a finished request; `status` is `None` when the request failed without a response.
    pub(crate) fn finished(&self, status: Option<http::StatusCode>, host: &str, method: &str) {
        let code = status.map_or_else(|| "<error>".to_string(), |s| s.as_str().to_string());
        self.requests
            .get_or_create(&RequestLabels {
                code,
                host: host.to_string(),
                method: method.to_string(),
            })
            .inc();
    }
}
