//! R24, R19: hostile and malformed requests against the running API, sent as raw bytes over
//! TCP: slow request heads are cut off, endless or oversized bodies are refused, 10,000
//! headers, paths that are not UTF-8 and deeply nested JSON get a 4xx (never a 5xx), HTTP/1.0
//! and pipelined requests are answered, in order. After every case the API still answers a
//! normal request, so no case took the process (or its listener) down.

use std::{io, time::Duration};

use serde_json::json;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    time::Instant,
};

use super::*;
use crate::common::http::{Reply, responses};

/// How long the server may take to cut off or answer a hostile client. Generous on purpose:
/// the server's own limits are a few seconds (head 5 s, body 10 s); this only bounds the test.
const DEADLINE: Duration = Duration::from_secs(30);

/// A fixture with Mutation `web` (variant `a`) made through the API.
async fn fixture(prefix: &str) -> Fixture {
    let f = Fixture::with_api(prefix).await;
    let create = json!({"name": "web", "deployment": base("web"), "variants": [{"label": "a"}]});
    let created = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    f
}

/// The API still answers normal requests: the list, and Mutation `web`.
async fn assert_serves(f: &Fixture, after: &str) {
    let list = f.call("GET", "/mutations", Some(ADMIN), None).await;
    assert_eq!(list.status, 200, "after {after}: {list:?}");
    let names = list.each("name");
    assert!(names.iter().any(|n| n == "web"), "after {after}: {list:?}");
    let web = f.call("GET", "/mutations/web", Some(ADMIN), None).await;
    assert_eq!(web.status, 200, "after {after}: {web:?}");
    assert_eq!(web.json()["name"], "web", "after {after}");
}

/// The operator did not panic anywhere (a panic in a handler would be a 500; one elsewhere
/// could end a task silently).
fn assert_no_panic(f: &Fixture) {
    let log = f.operator.log_text();
    assert!(
        !log.contains("panicked"),
        "the operator panicked:\n{}",
        log.lines()
            .filter(|l| l.contains("panic"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// How a connection ended from the client's side.
#[derive(Debug)]
struct Ending {
    /// Everything received.
    bytes: Vec<u8>,
    /// `None`: the server closed it (EOF); `Some`: a read error such as a reset.
    error: Option<io::ErrorKind>,
}

/// Reads until the server closes the connection (EOF or reset), panicking after [`DEADLINE`]:
/// a connection the server keeps open is exactly what these cases must not see.
async fn read_until_closed(stream: &mut (impl AsyncReadExt + Unpin), what: &str) -> Ending {
    let mut bytes = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    let read = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) => return None,
                Ok(n) => bytes.extend_from_slice(&buf[..n]),
                Err(e) => return Some(e.kind()),
            }
        }
    };
    match tokio::time::timeout(DEADLINE, read).await {
        Ok(error) => Ending { bytes, error },
        Err(_) => panic!("{what}: the server kept the connection open for {DEADLINE:?}"),
    }
}

fn lossy(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.chars().take(600).collect()
}

async fn connect(port: u16) -> TcpStream {
    TcpStream::connect(("127.0.0.1", port)).await.unwrap()
}

/// Writes `bytes`; a write the server refuses (it closed or reset the connection) is not an
/// error here, since refusing is what some cases expect. Returns whether all was written.
async fn write_lenient(stream: &mut (impl AsyncWriteExt + Unpin), bytes: &[u8]) -> bool {
    stream.write_all(bytes).await.is_ok()
}

/// The request head of an authorised JSON request (no body yet).
fn head(method: &str, path: &str, extra: &str) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {ADMIN}\r\n\
         Content-Type: application/json\r\n{extra}\r\n"
    )
}

/// Sends a complete request with a JSON body and returns the one response.
async fn send_json(port: u16, method: &str, path: &str, body: &[u8]) -> Reply {
    let mut raw = head(
        method,
        path,
        &format!("Content-Length: {}\r\nConnection: close\r\n", body.len()),
    )
    .into_bytes();
    raw.extend_from_slice(body);
    let mut stream = connect(port).await;
    stream.write_all(&raw).await.unwrap();
    let ending = read_until_closed(&mut stream, &format!("{method} {path}")).await;
    let mut all = responses(&ending.bytes);
    assert_eq!(all.len(), 1, "{method} {path}: {ending:?}");
    all.remove(0)
}

mod pipelining;
mod shapes;
mod slow;
