//! Noticing at once that the driver closed our connection.
//!
//! grpc-go reconnects in the background, so upstream's dialer runs (and exits the sidecar) as
//! soon as the driver goes away. tonic re-dials only when the next call is made, which for an
//! idle provisioner may be never. So the socket stream reports when the connection task drops
//! it — that is, when the connection ended — as long as a [`crate::Client`] still exists.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Called when the connection to the driver is lost; see [`ConnectOptions::on_connection_lost`](crate::ConnectOptions::on_connection_lost).
pub type ConnectionLostCallback = Arc<dyn Fn() + Send + Sync>;

/// Connection-loss bookkeeping, as in csi-lib-utils' custom dialer: a dial after a successful
/// one means the connection was lost. Reported once per loss, until a dial succeeds again.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DialState {
    have_connected: bool,
    lost: bool,
}

impl DialState {
    /// Called before every dial; `true` means "report the loss now".
    pub(crate) fn before_dial(&mut self) -> bool {
        let report = self.have_connected && !self.lost;
        if report {
            self.lost = true;
        }
        report
    }

    /// Called after a dial succeeded.
    pub(crate) fn dialed(&mut self) {
        self.have_connected = true;
        self.lost = false;
    }
}

/// Shared by every stream of one client: who to tell, and whether telling makes sense yet.
#[derive(Clone)]
pub(crate) struct LossWatch {
    pub(crate) state: Arc<Mutex<DialState>>,
    pub(crate) on_lost: Option<ConnectionLostCallback>,
    pub(crate) shown: String,
    /// Set once the initial connect has succeeded (earlier attempts may be dropped freely).
    pub(crate) armed: Arc<AtomicBool>,
    /// Upgradable while a client exists; a stream dropped because the client went away is no loss.
    pub(crate) client: Weak<()>,
}

impl LossWatch {
    /// Reports a loss once (shared with the re-dial path, which also reports through `state`).
    fn report(&self) {
        let report = self
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .before_dial();
        if report {
            tracing::error!(address = %self.shown, "Lost connection");
            if let Some(callback) = &self.on_lost {
                callback();
            }
        }
    }

    /// A re-dial of an established connection: the connection was lost.
    pub(crate) fn redialing(&self) {
        if self.armed.load(Ordering::Acquire) {
            self.report();
        }
    }

    fn stream_closed(&self) {
        if self.armed.load(Ordering::Acquire) && self.client.upgrade().is_some() {
            self.report();
        }
    }
}

/// A stream that reports a connection loss when the connection task drops it.
pub(crate) struct Watched<S> {
    pub(crate) inner: S,
    pub(crate) watch: LossWatch,
}

impl<S> Drop for Watched<S> {
    fn drop(&mut self) {
        self.watch.stream_closed();
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
