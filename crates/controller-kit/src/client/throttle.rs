//! The tower layer that gives a `kube::Client` client-go's client-side throttling.
//!
//! It sits outermost in the client's stack, so a request waits for its token before any
//! timeout starts, as in client-go. Watches pass untouched.
//!
//! Beyond client-go, waiting requests are served oldest work first rather than in the order
//! they were issued (see [`super::queue`]), and a client can be given the *background* lane of
//! the same bucket ([`ThrottleLayer::background`]): its requests wait behind every normal one.
//! Work that can wait (events, dropping a finalizer that has done its job) then never delays
//! work that cannot (creating a PV), while the total still stays within `--kube-api-qps` /
//! `--kube-api-burst`.
//!
//! A client can also be *prepaid* ([`ThrottleLayer::prepaid`]): its caller takes a token with
//! [`Budget::turn`] before it decides what to send, and the request does not wait again. A
//! writer that batches (the write-ahead record) then plans its write when its turn comes, with
//! everything asked of it while it waited, instead of planning first and waiting with a stale
//! plan.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::{BoxFuture, poll_fn};
use http::{Request, Response};
use parking_lot::Mutex;
use tokio::time::Instant;
use tower::{BoxError, Layer, Service};

use super::metrics::RequestMetrics;
use super::queue::{Lane, Limiter, work_began};
use super::request_info::{classify, is_watch};

/// Throttling waits longer than this are logged at `-v=3`.
const LOG_WAITS_OVER: Duration = Duration::from_secs(1);

/// Adds QPS/burst throttling and request counting to a client's service stack.
#[derive(Clone, Debug)]
pub struct ThrottleLayer {
    limiter: Option<Arc<Limiter>>,
    metrics: Option<RequestMetrics>,
    host: Arc<str>,
    background: bool,
    prepaid: bool,
}

/// A client's budget, for a caller that takes its token before building the request it sends
/// on the prepaid client ([`ThrottleLayer::prepaid`]).
#[derive(Clone, Debug)]
pub struct Budget {
    limiter: Option<Arc<Limiter>>,
}

impl Budget {
    /// No budget: every turn comes at once (a client without throttling).
    pub fn unlimited() -> Budget {
        Budget { limiter: None }
    }

    /// Waits for a token of the budget, in line with the normal lane's requests issued
    /// before now; the caller then sends exactly one request on the prepaid client.
    pub async fn turn(&self) {
        if let Some(limiter) = &self.limiter {
            limiter.acquire(Lane::Normal, Instant::now()).await;
        }
    }
}

impl ThrottleLayer {
    /// `limits` of `None` means unlimited. `host` is the apiserver's `host:port`, the `host`
    /// label of `rest_client_requests_total`.
    pub fn new(limits: Option<(f64, u32)>, host: &str, metrics: Option<RequestMetrics>) -> Self {
        Self {
            limiter: limits.map(|(qps, burst)| Arc::new(Limiter::new(qps, burst))),
            metrics,
            host: host.into(),
            background: false,
            prepaid: false,
        }
    }

    /// The same bucket for requests whose token was taken with [`Budget::turn`]: they are
    /// counted but never wait.
    pub fn prepaid(&self) -> Self {
        Self {
            prepaid: true,
            ..self.clone()
        }
    }

    /// The budget of this layer's bucket, for the prepaid client's caller.
    pub fn budget(&self) -> Budget {
        Budget {
            limiter: self.limiter.clone(),
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
        let limiter = match &self.layer.limiter {
            Some(limiter) if !self.layer.prepaid && !is_watch(req.uri()) => Some(limiter.clone()),
            _ => None,
        };
        let issued = Instant::now();
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
            if let Some(limiter) = limiter {
                // Read here, not in `call`: kube's request buffer calls this service from its
                // own task, while this future runs in the task that sent the request.
                let (lane, at) = if layer.background {
                    (Lane::Background, issued)
                } else {
                    (Lane::Normal, work_began().unwrap_or(issued))
                };
                let wait = limiter.acquire(lane, at).await;
                if wait > LOG_WAITS_OVER && !layer.background {
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
