//! The tower layer that gives a `kube::Client` client-go's client-side throttling.
//!
//! It sits outermost in the client's stack, so a request waits for its token before any
//! timeout starts, as in client-go. The token is reserved when the request is issued, so
//! waiting requests are served in order. Watches pass untouched.
//!
//! Beyond client-go, a client can be given the *background* lane of the same bucket
//! ([`ThrottleLayer::background`]): its requests never reserve on credit, they take a token
//! only when one is free. Work that can wait (events, dropping a finalizer that has done its
//! job) then never delays work that cannot (creating a PV), while the total still stays within
//! `--kube-api-qps` / `--kube-api-burst`.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::{BoxFuture, poll_fn};
use http::{Request, Response};
use parking_lot::Mutex;
use tokio::time::Instant;
use tower::{BoxError, Layer, Service};

use super::metrics::RequestMetrics;
use super::request_info::{classify, is_watch};
use crate::bucket::TokenBucket;

/// Throttling waits longer than this are logged at `-v=3`.
const LOG_WAITS_OVER: Duration = Duration::from_secs(1);

/// A token bucket on tokio's clock (so paused-time tests drive it).
#[derive(Debug)]
struct Limiter {
    origin: Instant,
    bucket: Mutex<TokenBucket>,
}

impl Limiter {
    fn now(&self) -> Duration {
        Instant::now().saturating_duration_since(self.origin)
    }

    fn reserve(&self) -> Duration {
        let now = self.now();
        self.bucket.lock().reserve(now)
    }

    /// Waits for a free token and takes it; returns how long that took.
    async fn take_when_free(&self) -> Duration {
        let started = Instant::now();
        loop {
            let wait = {
                let now = self.now();
                let mut bucket = self.bucket.lock();
                if bucket.try_take(now) {
                    return started.elapsed();
                }
                bucket.until_available(now)
            };
            tokio::time::sleep(wait.max(Duration::from_millis(1))).await;
        }
    }
}

/// Adds QPS/burst throttling and request counting to a client's service stack.
#[derive(Clone, Debug)]
pub struct ThrottleLayer {
    limiter: Option<Arc<Limiter>>,
    metrics: Option<RequestMetrics>,
    host: Arc<str>,
    background: bool,
}

impl ThrottleLayer {
    /// `limits` of `None` means unlimited. `host` is the apiserver's `host:port`, the `host`
    /// label of `rest_client_requests_total`.
    pub fn new(limits: Option<(f64, u32)>, host: &str, metrics: Option<RequestMetrics>) -> Self {
        let origin = Instant::now();
        Self {
            limiter: limits.map(|(qps, burst)| {
                Arc::new(Limiter {
                    origin,
                    bucket: Mutex::new(TokenBucket::new(qps, burst, Duration::ZERO)),
                })
            }),
            metrics,
            host: host.into(),
            background: false,
        }
    }

    /// The background lane of the same bucket: see the module docs.
    pub fn background(&self) -> Self {
        Self {
            background: true,
            ..self.clone()
        }
    }
}

impl<S> Layer<S> for ThrottleLayer {
    type Service = Throttle<S>;

    fn layer(&self, inner: S) -> Throttle<S> {
        Throttle {
            // kube's stack is a `BoxService`, which is not `Clone`; a mutex lets the
            // request future call it after waiting. The lock is held only for the
            // synchronous `poll_ready` + `call` pair, never across an await.
            inner: Arc::new(Mutex::new(inner)),
            layer: self.clone(),
        }
    }
}

/// The service [`ThrottleLayer`] produces.
#[derive(Debug)]
pub struct Throttle<S> {
    inner: Arc<Mutex<S>>,
    layer: ThrottleLayer,
}

impl<S> Clone for Throttle<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<S, B, R> Service<Request<B>> for Throttle<S>
where
    S: Service<Request<B>, Response = Response<R>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Send + 'static,
    R: Send + 'static,
{
    type Response = Response<R>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Response<R>, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Readiness of the inner service is awaited in the request future, after throttling.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let watch = is_watch(req.uri());
        let wait = match &self.layer.limiter {
            Some(limiter) if !watch && !self.layer.background => limiter.reserve(),
            _ => Duration::ZERO,
        };
        let background = match &self.layer.limiter {
            Some(limiter) if !watch && self.layer.background => Some(limiter.clone()),
            _ => None,
        };
        let method = req.method().to_string();
        if let Some(metrics) = &self.layer.metrics {
            let (verb, resource) = classify(req.method(), req.uri());
            metrics.sent(verb, &resource);
        }
        let target = req.uri().to_string();
        let inner = self.inner.clone();
        let layer = self.layer.clone();
        let mut req = Some(req);
        Box::pin(async move {
            let wait = match background {
                Some(limiter) => limiter.take_when_free().await,
                None => wait,
            };
            if !wait.is_zero() && !layer.background {
                tokio::time::sleep(wait).await;
                if wait > LOG_WAITS_OVER {
                    klog::v!(
                        3,
                        "Waited for {wait:?} due to client-side throttling, not priority and fairness, request: {method}:{target}"
                    );
                }
            }
            let call = poll_fn(|cx| {
                let mut svc = inner.lock();
                match svc.poll_ready(cx) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(Err(e)) => Poll::Ready(Err(e.into())),
                    Poll::Ready(Ok(())) => match req.take() {
                        Some(r) => Poll::Ready(Ok(svc.call(r))),
                        None => Poll::Ready(Err(BoxError::from("request already sent"))),
                    },
                }
            })
            .await;
            let result = match call {
                Ok(fut) => fut.await.map_err(Into::into),
                Err(e) => Err(e),
            };
            if let Some(metrics) = &layer.metrics {
                let status = result.as_ref().ok().map(Response::status);
                metrics.finished(status, &layer.host, &method);
            }
            result
        })
    }
}
