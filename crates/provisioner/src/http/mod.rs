//! The HTTP endpoint (`--http-endpoint` / `--metrics-address`): metrics, leader-election
//! health, optional profiling. It runs on every replica, leader or not, as upstream's.
//!
//! What is served:
//! - `--metrics-path` (default `/metrics`): every registered metric in the OpenMetrics text
//!   format (`application/openmetrics-text; version=1.0.0`, which Prometheus scrapes natively).
//!   Upstream serves the classic Prometheus text format; sample names, labels and values are
//!   the same, the format adds `# EOF` and prints counter families' `# TYPE` without `_total`.
//! - `/healthz/leader-election` (only with `--leader-election`): `200 ok`, or `500` with
//!   `internal server error: <reason>` when this replica believes it leads but has not renewed
//!   its Lease for longer than the lease duration plus 20 s (csi-lib-utils' watchdog).
//! - `--enable-pprof`: see the `pprof` module for `/debug/pprof/`, `/debug/pprof/cmdline` and
//!   `/debug/pprof/profile` (CPU, pprof protobuf) and what is not available (heap, trace, ...).
//! - Anything else: `404 page not found`, as Go's mux. Every route answers any method.
//!
//! The listen address takes Go's forms (`:8080` = all interfaces, `127.0.0.1:8080`,
//! `[::1]:8080`, `localhost:8080`); it is bound before [`serve`] returns, so a bad address or a
//! port in use stops start-up with an error naming the address.

mod address;
mod pprof;
mod profile;
mod routes;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use http::{StatusCode, header};
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use routes::{Route, Routes};

/// What the endpoint serves.
pub struct HttpOptions {
    /// Go listen address: `:8080`, `127.0.0.1:8080`, `[::1]:8080`.
    pub address: String,
    /// `--metrics-path`.
    pub metrics_path: String,
    /// `--enable-pprof`.
    pub enable_pprof: bool,
    /// `--enable-capacity`: the capacity view (`/capacity`, ours).
    pub capacity: Option<crate::capacity_controller::CapacityMetrics>,
}

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: String,
        source: std::io::Error,
    },
}

/// The content type of prometheus-client's text encoding.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const PLAIN: &str = "text/plain; charset=utf-8";

/// The health check as the handler sees it (a closure so tests can make it fail).
type Health = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

struct Shared {
    routes: Routes,
    registry: Arc<Registry>,
    leader_health: Option<Health>,
    capacity: Option<crate::capacity_controller::CapacityMetrics>,
    shutdown: CancellationToken,
}

/// Binds the listener now (so a bad address fails start-up) and returns the server future,
/// which ends after `shutdown` once open requests are answered.
pub async fn serve(
    opts: HttpOptions,
    registry: Arc<Registry>,
    leader_health: Option<leader_election::HealthCheck>,
    shutdown: CancellationToken,
) -> Result<impl std::future::Future<Output = ()> + Send + 'static, HttpError> {
    let health = leader_health.map(|check| Arc::new(move || check.healthy()) as Health);
    let (_, server) = start(opts, registry, health, shutdown).await?;
    Ok(server)
}

/// [`serve`], also returning the bound address.
async fn start(
    opts: HttpOptions,
    registry: Arc<Registry>,
    leader_health: Option<Health>,
    shutdown: CancellationToken,
) -> Result<
    (
        std::net::SocketAddr,
        impl std::future::Future<Output = ()> + Send + 'static,
    ),
    HttpError,
> {
    let bind_error = |source| HttpError::Bind {
        address: opts.address.clone(),
        source,
    };
    let listener = address::bind(&opts.address).await.map_err(bind_error)?;
    let local = listener.local_addr().map_err(bind_error)?;
    tracing::info!(address = %local, metrics_path = %opts.metrics_path, "Serving HTTP");
    let shared = Arc::new(Shared {
        routes: Routes {
            metrics_path: opts.metrics_path.clone(),
            leader_health: leader_health.is_some(),
            pprof: opts.enable_pprof,
            capacity: opts.capacity.is_some(),
        },
        registry,
        leader_health,
        capacity: opts.capacity,
        shutdown: shutdown.clone(),
    });
    let app = axum::Router::new().fallback(handle).with_state(shared);
    let server = axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await });
    Ok((local, async move {
        if let Err(err) = server.await {
            tracing::error!(err = %err, "HTTP server failed");
        }
    }))
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let uri = request.uri();
    match shared.routes.route(uri.path()) {
        Route::Metrics => metrics(&shared.registry),
        Route::LeaderHealth => match shared.leader_health.as_ref().map(|healthy| healthy()) {
            Some(Err(reason)) => error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("internal server error: {reason}\n"),
            ),
            _ => text(StatusCode::OK, PLAIN, "ok".into()),
        },
        Route::PprofIndex => text(StatusCode::OK, PLAIN, pprof::INDEX.into()),
        Route::PprofCmdline => {
            let args: Vec<String> = std::env::args().collect();
            text(StatusCode::OK, PLAIN, pprof::cmdline(&args))
        }
        Route::PprofProfile => {
            let seconds = pprof::profile_seconds(uri.query());
            match pprof::cpu_profile(seconds, &shared.shutdown).await {
                Ok(bytes) => profile_response(bytes),
                Err(err) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("{err}\n")),
            }
        }
        Route::PprofMissing(name) => error(StatusCode::NOT_FOUND, pprof::missing(&name)),
        Route::CapacityPage | Route::CapacityJson => capacity_view(&shared, uri.path()),
        Route::Redirect(root) => redirect(request.method(), &root, uri.query()),
        Route::NotFound => error(StatusCode::NOT_FOUND, "404 page not found\n".into()),
    }
}

/// Go's `http.Redirect` with 301, as its mux sends it: the query kept, and for GET a short
/// HTML body naming the target.
fn redirect(method: &http::Method, root: &str, query: Option<&str>) -> Response {
    let location = match query {
        Some(q) => format!("{root}?{q}"),
        None => root.to_string(),
    };
    let Ok(value) = header::HeaderValue::from_str(&location) else {
        return internal();
    };
    let status = StatusCode::MOVED_PERMANENTLY;
    let mut r = if method == http::Method::GET || method == http::Method::HEAD {
        let body = format!(
            "<a href=\"{}\">Moved Permanently</a>.\n\n",
            gofmt::html_escape(&location)
        );
        text(status, "text/html; charset=utf-8", body)
    } else {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = status;
        r
    };
    r.headers_mut().insert(header::LOCATION, value);
    r
}

/// How often the capacity page reloads itself.
const CAPACITY_PAGE_REFRESH_SECONDS: u32 = 5;

fn capacity_view(shared: &Shared, path: &str) -> Response {
    let Some(view) = shared.capacity.as_ref().and_then(|c| c.view()) else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the capacity controller is not running here (not started yet, or not the leader)\n"
                .into(),
        );
    };
    if path == routes::CAPACITY_JSON_PATH {
        return match serde_json::to_string(&view) {
            Ok(body) => text(StatusCode::OK, "application/json", body),
            Err(_) => internal(),
        };
    }
    let page = capacity::view::html(&view, CAPACITY_PAGE_REFRESH_SECONDS);
    text(StatusCode::OK, "text/html; charset=utf-8", page)
}

fn metrics(registry: &Registry) -> Response {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, registry) {
        Ok(()) => text(StatusCode::OK, OPENMETRICS, body),
        Err(err) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode metrics: {err}\n"),
        ),
    }
}

/// As Go's handler: a download named `profile`.
fn profile_response(bytes: Vec<u8>) -> Response {
    let Some(mut r) = response(StatusCode::OK, "application/octet-stream", bytes.into()) else {
        return internal();
    };
    r.headers_mut().insert(
        header::CONTENT_DISPOSITION,
        header::HeaderValue::from_static("attachment; filename=\"profile\""),
    );
    r
}

/// Go's `http.Error`: plain text with `nosniff`.
fn error(status: StatusCode, body: String) -> Response {
    let mut r = text(status, PLAIN, body);
    r.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    r
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response {
    response(status, content_type, body.into()).unwrap_or_else(internal)
}

fn response(status: StatusCode, content_type: &'static str, body: Body) -> Option<Response> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(body)
        .ok()
}

/// Only reachable if a static header were invalid.
fn internal() -> Response {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    r
}

#[cfg(test)]
mod tests;
