//! The write deadline of a connection (R44): a client that does not take what it
//! is sent (an answer, or the 100 Continue before a body) within
//! [`ServerConfig::write_timeout`](super::ServerConfig::write_timeout) of the socket backing up
//! is disconnected, so a slow reader holds a connection, its buffers and its answer's
//! reservation only that long.
//!
//! It also holds a guard, the connection's slot (`conns::Leave`), and drops it when the
//! connection is shut down, before the client can see it closed (R34, R44): a client that reads its answer to
//! the end and opens its next connection at once is never counted as holding both, however
//! late the closed connection's task ends. Between the shutdown and the socket's drop the
//! descriptor is still open for a moment; a shutdown does not wait on the client.

use std::{
    future::Future as _,
    io,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    time::Sleep,
};

/// A stream whose writes must be flushed within `limit` of the first one that waited.
pub(super) struct WriteDeadline<S, G> {
    inner: S,
    limit: Duration,
    /// Set while written bytes wait for the client: from the first write that could not go
    /// out at once until everything is flushed.
    waiting: Option<Pin<Box<Sleep>>>,
    /// The connection's slot, freed at the shutdown or else when the stream is dropped
    /// (declared after `inner`: after its socket is closed).
    held: Option<G>,
}

impl<S, G> WriteDeadline<S, G> {
    /// `inner`, holding `held` (its slot) until it is shut down or dropped.
    pub(super) fn new(inner: S, limit: Duration, held: G) -> Self {
        WriteDeadline {
            inner,
            limit,
            waiting: None,
            held: Some(held),
        }
    }

    /// What a write that could not go out now answers: still pending, or an error once the
    /// deadline has passed.
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let limit = self.limit;
        let timer = self
            .waiting
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the client took nothing for {limit:?}"),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin, G: Unpin> AsyncRead for WriteDeadline<S, G> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin, G: Unpin> AsyncWrite for WriteDeadline<S, G> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Pending => self.pending(cx),
            done => done,
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            Poll::Pending => self.pending(cx),
            done => done,
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Pending => self.pending(cx),
            Poll::Ready(Ok(())) => {
                // Everything written: the next wait starts a new deadline.
                self.waiting = None;
                Poll::Ready(Ok(()))
            }
            failed => failed,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Everything is written: the slot is free before the client sees the end.
        self.held.take();
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
