//! Dialling the driver's unix socket: the initial blocking connect and connection-loss detection.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::address::{AddressError, display_address, socket_path};
use crate::metrics::CallMetrics;
use crate::watched::{ConnectionLostCallback, DialState, LossWatch, Watched};

/// Upstream logs "Still connecting" this often while the socket does not accept.
pub const CONNECT_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Pause between dial attempts during the initial connect (gRPC's backoff capped at 1 s).
pub const REDIAL_INTERVAL: Duration = Duration::from_secs(1);

/// How to connect to the driver and how to make calls.
#[derive(Clone)]
pub struct ConnectOptions {
    /// Timeout of every CSI call (the `--timeout` flag). Default 10 s, the upstream code default.
    pub timeout: Duration,
    /// How long [`crate::Client::connect`] keeps dialling before giving up; `None` waits forever.
    /// Default 30 s: csi-lib-utils' `Connect` (v0.24, used by external-provisioner v6.3) gives up
    /// after 30 s and the provisioner then exits. It logs "Still connecting" every 10 s.
    pub connect_timeout: Option<Duration>,
    /// Invoked once each time a working connection is lost, at the moment the channel re-dials
    /// (this happens on the next call after the driver went away). Upstream's
    /// `ExitOnConnectionLoss` exits the process here; the library never exits, the binary decides.
    /// It runs on a tokio worker thread, so it should return quickly (or exit).
    pub on_connection_lost: Option<ConnectionLostCallback>,
    /// Where to record `csi_sidecar_operations_seconds`; `None` records nothing.
    pub metrics: Option<CallMetrics>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            connect_timeout: Some(Duration::from_secs(30)),
            on_connection_lost: None,
            metrics: None,
        }
    }
}

impl fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field(
                "on_connection_lost",
                &self.on_connection_lost.as_ref().map(|_| "Fn()"),
            )
            .field("metrics", &self.metrics.is_some())
            .finish()
    }
}

/// Why [`crate::Client::connect`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The address is not one we can dial.
    #[error(transparent)]
    Address(#[from] AddressError),
    /// The socket did not accept a connection within [`ConnectOptions::connect_timeout`].
    #[error(
        "no CSI driver accepted a connection on {address} within {waited:?} (last error: \
         {last_error}); check that the driver runs and listens on that socket"
    )]
    Timeout {
        /// The socket, as `unix:///path`.
        address: String,
        /// How long we tried.
        waited: Duration,
        /// The last dial error.
        last_error: String,
    },
}

/// Dials the socket until it accepts, then returns a channel whose every later re-dial goes
/// through the loss detection.
pub(crate) async fn connect_channel(
    address: &str,
    opts: &ConnectOptions,
) -> Result<(Channel, String, Arc<()>), ConnectError> {
    let path = socket_path(address)?;
    let shown = display_address(&path);
    klog::v!(5, address = %shown, "Connecting");

    // Held by the client: while it lives, a closed connection is a lost driver.
    let client_token = Arc::new(());
    let watch = LossWatch {
        state: Arc::new(Mutex::new(DialState::default())),
        on_lost: opts.on_connection_lost.clone(),
        shown: shown.clone(),
        armed: Arc::new(AtomicBool::new(false)),
        client: Arc::downgrade(&client_token),
    };
    let connector = unix_connector(path, watch.clone());
    // The URI is never resolved (the connector ignores it); "localhost" is the :authority
    // grpc-go sends for unix sockets.
    let endpoint = Endpoint::from_static("http://localhost");

    let start = Instant::now();
    let mut next_log = start + CONNECT_LOG_INTERVAL;
    loop {
        let remaining = opts
            .connect_timeout
            .map(|t| t.saturating_sub(start.elapsed()));
        let attempt = endpoint.connect_with_connector(connector.clone());
        let last_error = match remaining {
            Some(left) => match tokio::time::timeout(left, attempt).await {
                Ok(Ok(channel)) => return Ok(armed(channel, shown, client_token, &watch)),
                Ok(Err(e)) => error_chain(&e),
                Err(_) => "dial timed out".to_string(),
            },
            None => match attempt.await {
                Ok(channel) => return Ok(armed(channel, shown, client_token, &watch)),
                Err(e) => error_chain(&e),
            },
        };
        let now = Instant::now();
        if let Some(limit) = opts.connect_timeout
            && now.duration_since(start) >= limit
        {
            return Err(ConnectError::Timeout {
                address: shown,
                waited: limit,
                last_error,
            });
        }
        if now >= next_log {
            klog::v!(0, address = %shown, error = %last_error, "Still connecting");
            next_log += CONNECT_LOG_INTERVAL;
        }
        let pause = match opts.connect_timeout {
            Some(limit) => REDIAL_INTERVAL.min(limit.saturating_sub(now.duration_since(start))),
            None => REDIAL_INTERVAL,
        };
        tokio::time::sleep(pause).await;
    }
}

/// The connection is up: from now on its end means the driver is gone.
fn armed(
    channel: Channel,
    shown: String,
    token: Arc<()>,
    watch: &LossWatch,
) -> (Channel, String, Arc<()>) {
    watch.armed.store(true, Ordering::Release);
    (channel, shown, token)
}

type Connector =
    tower::util::BoxCloneSyncService<Uri, TokioIo<Watched<UnixStream>>, std::io::Error>;

fn unix_connector(path: PathBuf, watch: LossWatch) -> Connector {
    let path = Arc::new(path);
    tower::util::BoxCloneSyncService::new(tower::service_fn(move |_: Uri| {
        // A re-dial after a successful connection means the connection was lost (the stream's
        // drop usually reported it already; `report` says it once).
        watch.redialing();
        let (path, watch) = (Arc::clone(&path), watch.clone());
        async move {
            let stream = UnixStream::connect(path.as_path()).await?;
            watch
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .dialed();
            Ok(TokioIo::new(Watched {
                inner: stream,
                watch,
            }))
        }
    }))
}

/// tonic's transport error says only "transport error"; the cause is in its sources.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug)]
    enum Step {
        Dial,
        Success,
    }

    #[test]
    fn loss_is_reported_once_per_lost_connection() {
        use Step::{Dial, Success};
        // (steps, how many reports the sequence produces)
        let cases: [(&[Step], usize); 6] = [
            (&[Dial, Dial, Dial], 0),                   // never connected
            (&[Dial, Success], 0),                      // initial connect
            (&[Dial, Success, Dial], 1),                // first re-dial reports
            (&[Dial, Success, Dial, Dial, Dial], 1),    // failed re-dials stay quiet
            (&[Dial, Success, Dial, Success, Dial], 2), // reconnected, lost again
            (&[Dial, Dial, Success, Dial, Dial, Success, Dial], 2),
        ];
        for (steps, want) in cases {
            let mut state = DialState::default();
            let mut reports = 0;
            for step in steps {
                match step {
                    Dial => reports += usize::from(state.before_dial()),
                    Success => state.dialed(),
                }
            }
            assert_eq!(reports, want, "{steps:?}");
        }
    }

    #[test]
    fn default_options_match_upstream() {
        let opts = ConnectOptions::default();
        assert_eq!(opts.timeout, Duration::from_secs(10));
        assert_eq!(opts.connect_timeout, Some(Duration::from_secs(30)));
        assert!(opts.on_connection_lost.is_none() && opts.metrics.is_none());
    }
}
