//! The one hardened HTTP/1.1 server loop, shared by the HTTP API (port 8080) and the
//! metrics/probe listener (port 9568), plus the small response and body helpers both use.
//!
//! No web framework: a handler is a plain `async` function from a request to a response; it
//! never fails (an error becomes an error response, see [`error`]). The loop protects the
//! process from misbehaving clients:
//!
//! - a client that sends its request head too slowly (slowloris), or keeps an idle keep-alive
//!   connection open, is disconnected after [`ServerConfig::header_read_timeout`];
//! - a request head larger than [`ServerConfig::max_header_bytes`] is answered with
//!   `431 Request Header Fields Too Large` and the connection is closed;
//! - [`read_body`] refuses bodies over [`ServerConfig::body_limit`] (413, before reading
//!   anything when `Content-Length` already says so) and bodies that arrive too slowly (408);
//!   what a body or an answer holds beyond [`FREE_BYTES`](budget::FREE_BYTES) is reserved from a [`Budget`]
//!   (`budget.rs`), refused with 503 when the caller's share or the total is held already;
//! - a client that leaves what it is sent untaken for [`ServerConfig::write_timeout`] once its
//!   socket backs up is disconnected (`deadline.rs`);
//! - a panicking handler answers 500 instead of dropping the connection;
//! - at most [`ServerConfig::max_connections`] connections are open at once, and a quarter of
//!   them per client address: an address at its quarter loses its own idle connections, at
//!   the cap an idle one of the address holding the most is closed to make room, and a new
//!   one is refused (503 with `Retry-After` over plain HTTP) only when none may be closed
//!   (`conns.rs`); one client address has at most a quarter busy at once, its next request
//!   answered 503 (`shares.rs`). The client of a request is the connection's peer, or the
//!   client a trusted proxy names (`forwarded.rs`);
//! - the two listeners' caps together leave a reserve of the descriptors the process may open
//!   for its own connections and files, lowered at start when they would not (`descriptors.rs`);
//! - a failing `accept` (for example `EMFILE`) is logged and retried, never ends the loop;
//! - on shutdown the listener is closed first, then in-flight requests are drained for at
//!   most [`ServerConfig::drain_timeout`].

use std::{
    convert::Infallible, future::Future, io, net::SocketAddr, panic::AssertUnwindSafe, sync::Arc,
    time::Duration,
};

use futures::FutureExt as _;
use hyper::{
    Request, Response, StatusCode, body::Incoming, server::conn::http1, service::service_fn,
};
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    server::graceful::GracefulShutdown,
};
use tokio::{net::TcpListener, task::JoinSet};
use tracing::Instrument as _;

use crate::{Result, config::TrustedProxies, shutdown::Shutdown};

mod body;
mod budget;
mod conns;
mod deadline;
pub mod descriptors;
mod error;
mod forwarded;
mod limits;
pub mod overdue;
mod response;
mod shares;

use conns::{EVICTION_WAIT, REFUSAL_LOG_EVERY, REFUSED_AT_CAP, REFUSED_FOR_ADDRESS};
pub use conns::{Open as Connections, share_of};
pub use forwarded::Client;
pub use shares::{InFlight, Shares};
#[cfg(test)]
mod tests;
pub mod tls;

pub use body::read_body;
#[cfg(test)]
use budget::FREE_BYTES;
pub use budget::{Budget, Key, Reservation, hold_answer, key_of, with_joined};
pub use error::ApiError;
pub use limits::ServerConfig;
pub use response::{Body, error, json, method_not_allowed, no_content, not_found, text};

/// 503 with `Retry-After: 1` and `Connection: close` (the body, if any, is not read), for a
/// request over a share of the busy connections.
pub fn at_share(message: String) -> Response<Body> {
    let mut response = error(StatusCode::SERVICE_UNAVAILABLE, message);
    let headers = response.headers_mut();
    headers.insert(
        hyper::header::RETRY_AFTER,
        hyper::header::HeaderValue::from_static("1"),
    );
    headers.insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("close"),
    );
    response
}

/// The smallest read buffer hyper accepts (`max_buf_size` panics below it).
const MIN_MAX_BUF_SIZE: usize = 8192;

/// How long the loop waits before accepting again after a failed `accept` (for example when
/// the process ran out of file descriptors).
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(100);

/// Binds a listener on `addr`; the error names the address.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|err| io::Error::new(err.kind(), format!("cannot listen on {addr}: {err}")).into())
}

/// Accept errors that concern only the one connection being accepted: skip it and go on.
fn is_connection_error(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Turns a panic payload into something to log.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    if let Some(message) = payload.downcast_ref::<&'static str>() {
        message
    } else if let Some(message) = payload.downcast_ref::<String>() {
        message
    } else {
        "(no message)"
    }
}

/// Runs `handler` on one request; a panic (in the call or in its future) becomes a 500.
///
/// The release profile uses `panic = "abort"`, so this only matters in tests and debug builds.
fn call_guarded<F, Fut>(
    handler: &F,
    request: Request<Incoming>,
) -> impl Future<Output = Response<Body>> + Send + 'static + use<F, Fut>
where
    F: Fn(Request<Incoming>) -> Fut,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    let called = std::panic::catch_unwind(AssertUnwindSafe(|| handler(request)));
    async move {
        let outcome = match called {
            Ok(future) => AssertUnwindSafe(future).catch_unwind().await,
            Err(payload) => Err(payload),
        };
        outcome.unwrap_or_else(|payload| {
            tracing::error!(panic = panic_message(&*payload), "request handler panicked");
            error(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
        })
    }
}

/// Serves HTTP/1.1 on `listener` with `handler` until `shutdown` resolves, then stops
/// accepting (the listener is closed at once) and drains in-flight requests for at most
/// [`ServerConfig::drain_timeout`]; connections still open after that are closed.
///
/// With `tls` it speaks HTTPS only: each connection's TLS handshake must finish within
/// [`ServerConfig::header_read_timeout`], like a request head; one that fails (plain HTTP, a
/// client that does not trust the certificate) closes the connection.
///
/// `name` (for example `"api"` or `"metrics"`) labels the logs. Each connection runs in its
/// own task inside a `conn` span with the server name and the peer address.
pub async fn serve<F, Fut>(
    name: &'static str,
    listener: TcpListener,
    config: ServerConfig,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: Shutdown,
    handler: F,
) -> Result<()>
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    let open = connections(&config, TrustedProxies::default());
    serve_on(name, listener, config, tls, shutdown, open, handler).await
}

/// The open connections of a listener of `config`, for [`serve_on`], whose peers in
/// `trusted` are proxies that name their clients.
pub fn connections(config: &ServerConfig, trusted: TrustedProxies) -> Arc<Connections> {
    Connections::new(config.max_connections, config.header_read_timeout, trusted)
}

/// [`serve`], keeping its connections in `open` (from [`connections`]).
pub async fn serve_on<F, Fut>(
    name: &'static str,
    listener: TcpListener,
    config: ServerConfig,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: Shutdown,
    open: Arc<Connections>,
    handler: F,
) -> Result<()>
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let local = listener.local_addr()?;

    let max_buf_size = if config.max_header_bytes < MIN_MAX_BUF_SIZE {
        tracing::warn!(
            server = name,
            max_header_bytes = config.max_header_bytes,
            "max_header_bytes below hyper's minimum; using {MIN_MAX_BUF_SIZE}"
        );
        MIN_MAX_BUF_SIZE
    } else {
        config.max_header_bytes
    };
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(config.header_read_timeout)
        .max_buf_size(max_buf_size)
        .keep_alive(config.keep_alive);

    let graceful = GracefulShutdown::new();
    // R44: one client address has at most a quarter of the connections busy at once.
    let by_address = Shares::new(open.per_address());
    let (mut refused, mut last_refusal_log) = (0u64, None);
    let mut connections = JoinSet::new();
    let down = shutdown.wait();
    tokio::pin!(down);

    tracing::info!(server = name, addr = %local, "listening");
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut down => break,
            // Reap finished connection tasks so the set does not grow.
            Some(joined) = connections.join_next(), if !connections.is_empty() => {
                if let Err(err) = joined {
                    tracing::error!(server = name, error = %err, "connection task failed");
                }
                continue;
            }
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(err) if is_connection_error(&err) => {
                tracing::debug!(server = name, error = %err, "accept: connection lost");
                continue;
            }
            Err(err) => {
                // EMFILE, ENFILE, ENOBUFS, ...: wait a little for resources to free up.
                tracing::warn!(server = name, error = %err, "accept failed; retrying");
                tokio::select! {
                    biased;
                    () = &mut down => break,
                    () = tokio::time::sleep(ACCEPT_RETRY_DELAY) => continue,
                }
            }
        };
        let (slot, id) = match open.admit(peer.ip()) {
            conns::Admit::Yes { slot, id, evicted } => {
                if let Some(evicted) = evicted {
                    tracing::debug!(server = name, peer = %peer, "at the connection cap: closing the longest idle connection");
                    // Its socket is closed before the next accept: a burst of connections
                    // cannot outrun the closing and take every file descriptor.
                    let _ = tokio::time::timeout(EVICTION_WAIT, evicted.gone()).await;
                }
                (slot, id)
            }
            conns::Admit::AddressFull => {
                tracing::debug!(server = name, peer = %peer, "this address holds its share of the connections, none idle for a second: refused");
                if acceptor.is_none() {
                    let _ = stream.try_write(REFUSED_FOR_ADDRESS);
                }
                continue;
            }
            conns::Admit::Full => {
                refused += 1;
                if last_refusal_log
                    .is_none_or(|at: tokio::time::Instant| at.elapsed() >= REFUSAL_LOG_EVERY)
                {
                    tracing::warn!(
                        server = name,
                        max_connections = config.max_connections,
                        refused,
                        "the listener is saturated: at the connection cap, and no connection may be closed for a new one; refusing new connections"
                    );
                    last_refusal_log = Some(tokio::time::Instant::now());
                }
                if acceptor.is_none() {
                    // Fits any socket buffer: written at once or not at all.
                    let _ = stream.try_write(REFUSED_AT_CAP);
                }
                continue;
            }
        };
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(server = name, peer = %peer, error = %err, "cannot set TCP_NODELAY");
        }
        let leave = conns::Leave(open.clone(), id, slot.clone());
        let stream = deadline::WriteDeadline::new(stream, config.write_timeout, leave);

        let handler = handler.clone();
        let in_flight = slot.clone();
        let (by_address, clients) = (by_address.clone(), open.clone());
        let service = service_fn(move |mut request: Request<Incoming>| {
            let client = clients.client(peer.ip(), request.headers());
            request.extensions_mut().insert(Client(client));
            let busy = in_flight.busy();
            let entered = by_address.enter(client);
            let response = entered.is_some().then(|| call_guarded(&handler, request));
            let share = by_address.max();
            async move {
                let response = match response {
                    Some(response) => response.await,
                    None => at_share(format!(
                        "this address has {share} requests in flight, its share of this \
                         replica's connections; retry in a second"
                    )),
                };
                drop((busy, entered));
                Ok::<_, Infallible>(response)
            }
        });
        let (builder, watcher, acceptor) = (builder.clone(), graceful.watcher(), acceptor.clone());
        let handshake_timeout = config.header_read_timeout;
        let span = tracing::debug_span!("conn", server = name, peer = %peer);
        connections.spawn(
            async move {
                tracing::debug!("accepted");
                let serving = async move {
                    match acceptor {
                        None => {
                            let connection =
                                builder.serve_connection(TokioIo::new(stream), service);
                            watcher.watch(connection).await
                        }
                        Some(acceptor) => {
                            let tls = match tokio::time::timeout(
                                handshake_timeout,
                                acceptor.accept(stream),
                            )
                            .await
                            {
                                Ok(Ok(tls)) => tls,
                                Ok(Err(err)) => {
                                    tracing::debug!(error = %err, "closed: TLS handshake failed");
                                    return Ok(());
                                }
                                Err(_elapsed) => {
                                    tracing::debug!("closed: TLS handshake not finished in time");
                                    return Ok(());
                                }
                            };
                            let connection = builder.serve_connection(TokioIo::new(tls), service);
                            watcher.watch(connection).await
                        }
                    }
                };
                // Closed to make room: dropped at once, it has no request in flight.
                let served = tokio::select! {
                    served = serving => served,
                    () = slot.evicted() => {
                        tracing::debug!("closed: idle at the connection cap");
                        return;
                    }
                };
                match served {
                    Ok(()) => tracing::debug!("closed"),
                    Err(err) if err.is_timeout() => {
                        tracing::debug!("closed: request head not received in time");
                    }
                    Err(err) => tracing::debug!(error = %err, "closed with an error"),
                }
            }
            .instrument(span),
        );
    }

    // Stop accepting first: new connections are refused from here on.
    drop(listener);
    let open = graceful.count();
    tracing::info!(server = name, addr = %local, connections = open, "stopped accepting; draining");
    let drained = tokio::time::timeout(config.drain_timeout, async {
        graceful.shutdown().await;
        while connections.join_next().await.is_some() {}
    })
    .await;
    match drained {
        Ok(()) => tracing::info!(server = name, addr = %local, "stopped: all connections drained"),
        Err(_elapsed) => {
            while connections.try_join_next().is_some() {}
            tracing::warn!(
                server = name,
                addr = %local,
                still_open = connections.len(),
                drain_timeout = ?config.drain_timeout,
                "stopped: drain timed out; closing the remaining connections"
            );
            connections.shutdown().await;
        }
    }
    Ok(())
}
