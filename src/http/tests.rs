//! Tests of the server loop over real sockets on 127.0.0.1, speaking raw HTTP/1.x bytes so
//! that malformed, slow and pipelined clients can be played exactly.

use std::{
    net::{Ipv4Addr, SocketAddr},
    sync::Arc,
    time::Instant,
};

use http_body_util::BodyExt as _;
use hyper::{Method, body::Incoming, header};
use serde::{Serialize, Serializer};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
    sync::Notify,
    task::JoinHandle,
};

use super::*;
use crate::shutdown::{self, Trigger};

/// The length of `GET /big`'s answer: more than the socket buffers of both ends hold.
const BIG: usize = 32 * 1024 * 1024;

/// A generous bound for anything that should happen "soon"; never reached when things work.
const DEADLINE: Duration = Duration::from_secs(2);

/// Short limits so the tests are quick.
fn test_config() -> ServerConfig {
    ServerConfig {
        header_read_timeout: Duration::from_millis(300),
        max_header_bytes: 8192,
        body_limit: 1024,
        body_timeout: Duration::from_millis(300),
        buffer_bytes: 4 * FREE_BYTES,
        buffer_share: 2 * FREE_BYTES,
        write_timeout: Duration::from_millis(300),
        drain_timeout: DEADLINE,
        keep_alive: true,
        max_connections: 8,
    }
}

struct Server {
    addr: SocketAddr,
    trigger: Trigger,
    task: JoinHandle<crate::Result<()>>,
    /// Notified when `/slow` has started handling its request.
    slow_started: Arc<Notify>,
}

/// The test routes: `GET /` (JSON), `GET /echo/<x>` (echoes the path), `POST /echo` (reads the
/// body and answers its length), `GET /slow` (answers after 300 ms), `GET /panic`.
async fn route(
    request: Request<Incoming>,
    config: ServerConfig,
    slow: Arc<Notify>,
) -> Response<Body> {
    let path = request.uri().path().to_owned();
    match (request.method(), path.as_str()) {
        (&Method::GET, "/") => json(StatusCode::OK, &serde_json::json!({"ok": true})),
        (&Method::GET, "/slow") => {
            slow.notify_one();
            tokio::time::sleep(Duration::from_millis(300)).await;
            json(StatusCode::OK, &serde_json::json!({"slow": true}))
        }
        (&Method::GET, "/panic") => panic!("handler panicked on purpose"),
        (&Method::POST, "/echo") => {
            let mut held = Budget::new(FREE_BYTES, FREE_BYTES).open(Arc::from("test"));
            let limit = config.body_limit;
            match read_body(request.into_body(), limit, config.body_timeout, &mut held).await {
                Ok(body) => json(StatusCode::OK, &serde_json::json!({"len": body.len()})),
                Err(err) => err.response(),
            }
        }
        (&Method::GET, "/big") => text(StatusCode::OK, "text/plain", "x".repeat(BIG)),
        (&Method::GET, p) if p.starts_with("/echo/") => {
            json(StatusCode::OK, &serde_json::json!({"path": p}))
        }
        (_, "/" | "/slow" | "/panic") => method_not_allowed(&[Method::GET]),
        (_, "/echo") => method_not_allowed(&[Method::POST]),
        _ => not_found(),
    }
}

async fn start(config: ServerConfig) -> Server {
    let listener = bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (trigger, down) = shutdown::channel();
    let slow_started = Arc::new(Notify::new());
    let slow = slow_started.clone();
    let task = tokio::spawn(serve(
        "test",
        listener,
        config,
        None,
        down,
        move |request| route(request, config, slow.clone()),
    ));
    Server {
        addr,
        trigger,
        task,
        slow_started,
    }
}

// The raw client is the integration tests' own, included here; what follows adapts it to a
// server address and reads the answers for the asserts.
#[allow(
    dead_code,
    reason = "shared with the integration tests, which use all of it"
)]
#[path = "../../tests/common/http.rs"]
mod wire;

/// Sends `request` on a new connection and reads until the server closes it.
async fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    wire::exchange(addr.port(), request).await
}

/// Writes all of `bytes` on an open connection.
async fn write_all(stream: &mut TcpStream, bytes: &[u8]) {
    stream.write_all(bytes).await.unwrap();
}

/// Reads until the server closes the connection (bounded by [`DEADLINE`]).
async fn read_all(stream: &mut TcpStream) -> String {
    let (out, read) = wire::read_until_closed(stream, DEADLINE).await;
    read.unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

/// The status codes of every response in `raw`, in order.
fn statuses(raw: &str) -> Vec<u16> {
    let responses = wire::responses(raw.as_bytes());
    responses.iter().map(|r| r.status).collect()
}

/// The body of the last response in `raw`.
fn last_body(raw: &str) -> String {
    let mut responses = wire::responses(raw.as_bytes());
    responses.pop().map(|r| r.body).unwrap_or_default()
}

/// A header of the first response in `raw`.
fn header(raw: &str, name: &str) -> Option<String> {
    wire::parse(raw)?.header(name).map(str::to_owned)
}

async fn body_string(response: Response<Body>) -> String {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test]
async fn get_answers_json() {
    let server = start(test_config()).await;
    let raw = exchange(
        server.addr,
        b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(statuses(&raw), [200], "{raw}");
    assert_eq!(
        header(&raw, "content-type").as_deref(),
        Some("application/json")
    );
    assert_eq!(last_body(&raw), r#"{"ok":true}"#);
}

#[tokio::test]
async fn unknown_path_and_wrong_method() {
    let server = start(test_config()).await;
    let raw = exchange(
        server.addr,
        b"GET /nope HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(statuses(&raw), [404], "{raw}");
    assert_eq!(last_body(&raw), r#"{"error":"not found"}"#);

    let raw = exchange(
        server.addr,
        b"DELETE / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(statuses(&raw), [405], "{raw}");
    assert_eq!(header(&raw, "allow").as_deref(), Some("GET"));
}

#[tokio::test]
async fn small_body_is_read() {
    let server = start(test_config()).await;
    let raw = exchange(
        server.addr,
        b"POST /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello",
    )
    .await;
    assert_eq!(statuses(&raw), [200], "{raw}");
    assert_eq!(last_body(&raw), r#"{"len":5}"#);
}

#[tokio::test]
async fn content_length_over_the_limit_is_413_before_reading() {
    let server = start(test_config()).await;
    // Only the head is sent: the server must answer without waiting for the body.
    let raw = exchange(
        server.addr,
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\n\r\n",
    )
    .await;
    assert_eq!(statuses(&raw), [413], "{raw}");
    assert_eq!(
        last_body(&raw),
        r#"{"error":"request body is larger than 1 KiB"}"#
    );
}

#[tokio::test]
async fn content_length_with_expect_continue_over_the_limit_gets_no_100() {
    let server = start(test_config()).await;
    let raw = exchange(
        server.addr,
        b"POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n",
    )
    .await;
    assert_eq!(statuses(&raw), [413], "{raw}");
}

#[tokio::test]
async fn chunked_body_over_the_limit_is_413() {
    let server = start(test_config()).await;
    let chunk = "x".repeat(800);
    // Two 800-byte chunks pass the 1 KiB limit; the whole request fits in one read of the
    // server, so it is answered (not reset) even though the body is never read to its end.
    let request = format!(
        "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n\
         320\r\n{chunk}\r\n320\r\n{chunk}\r\n0\r\n\r\n"
    );
    let raw = exchange(server.addr, request.as_bytes()).await;
    assert_eq!(statuses(&raw), [413], "{raw}");
    assert_eq!(
        last_body(&raw),
        r#"{"error":"request body is larger than 1 KiB"}"#
    );
}

#[tokio::test]
async fn malformed_chunked_body_is_400() {
    let server = start(test_config()).await;
    let raw = exchange(
        server.addr,
        b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
    )
    .await;
    assert_eq!(statuses(&raw), [400], "{raw}");
    assert!(
        last_body(&raw).starts_with(r#"{"error":"cannot read request body"#),
        "{raw}"
    );
}

#[tokio::test]
async fn slow_header_is_disconnected() {
    let server = start(test_config()).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let began = Instant::now();
    // Half a head, then nothing: a slowloris client.
    write_all(&mut stream, b"GET / HTTP/1.1\r\nHost: t\r\n").await;
    let raw = read_all(&mut stream).await;
    // Hyper closes the connection without an answer when the head does not arrive in time.
    assert_eq!(raw, "");
    assert!(
        began.elapsed() >= Duration::from_millis(250),
        "closed before the timeout"
    );
}

#[tokio::test]
async fn idle_keep_alive_connection_is_closed() {
    let server = start(test_config()).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    write_all(&mut stream, b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").await;
    // The header read timeout also runs while waiting for the next request.
    let raw = read_all(&mut stream).await;
    assert_eq!(statuses(&raw), [200], "{raw}");
}

#[tokio::test]
async fn slow_body_is_408() {
    let server = start(test_config()).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    write_all(
        &mut stream,
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n0123456789",
    )
    .await;
    let raw = read_all(&mut stream).await;
    assert_eq!(statuses(&raw), [408], "{raw}");
    assert_eq!(
        last_body(&raw),
        r#"{"error":"request body was not received in time"}"#
    );
}

#[tokio::test]
async fn huge_header_is_431() {
    let config = test_config();
    let server = start(config).await;
    // A head that fills hyper's whole read buffer without ending. Exactly that many bytes are
    // sent, so the server has read everything when it closes and the answer is not lost to a
    // TCP reset.
    let mut head = b"GET / HTTP/1.1\r\nHost: t\r\nX-Big: ".to_vec();
    head.resize(config.max_header_bytes, b'a');
    let raw = exchange(server.addr, &head).await;
    assert_eq!(statuses(&raw), [431], "{raw}");
}

#[tokio::test]
async fn header_under_the_limit_is_accepted() {
    let server = start(test_config()).await;
    let request = format!(
        "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\nX-Big: {}\r\n\r\n",
        "a".repeat(6000)
    );
    let raw = exchange(server.addr, request.as_bytes()).await;
    assert_eq!(statuses(&raw), [200], "{raw}");
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let server = start(test_config()).await;
    let raw = exchange(
        server.addr,
        b"GET /echo/a HTTP/1.1\r\nHost: t\r\n\r\n\
          GET /echo/b HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(statuses(&raw), [200, 200], "{raw}");
    let a = raw.find(r#"{"path":"/echo/a"}"#).expect("first answer");
    let b = raw.find(r#"{"path":"/echo/b"}"#).expect("second answer");
    assert!(a < b, "{raw}");
}

#[tokio::test]
async fn http_1_0_request_works() {
    let server = start(test_config()).await;
    // No Host, no keep-alive: the server answers and closes.
    let raw = exchange(server.addr, b"GET / HTTP/1.0\r\n\r\n").await;
    assert_eq!(statuses(&raw), [200], "{raw}");
    assert_eq!(last_body(&raw), r#"{"ok":true}"#);
}

#[tokio::test]
async fn panicking_handler_answers_500_and_keeps_the_connection() {
    let server = start(test_config()).await;
    let raw = exchange(
        server.addr,
        b"GET /panic HTTP/1.1\r\nHost: t\r\n\r\nGET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(statuses(&raw), [500, 200], "{raw}");
    assert!(raw.contains(r#"{"error":"internal error"}"#), "{raw}");
}

#[tokio::test]
async fn bind_error_names_the_address() {
    let taken = bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .unwrap();
    let addr = taken.local_addr().unwrap();
    let err = bind(addr).await.unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("cannot listen on {addr}")),
        "{err}"
    );
    assert_eq!(err.metric_label(), "client");
}

mod cap;
mod deadline;
mod draining;
mod helpers;
