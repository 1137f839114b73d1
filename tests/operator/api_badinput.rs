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
    let listed = list.json();
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["name"].as_str())
        .collect();
    assert!(names.contains(&"web"), "after {after}: {list:?}");
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

/// One parsed response.
#[derive(Debug)]
struct Response {
    version: String,
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

/// Parses every complete response in `raw`, in order (bodies by Content-Length; 204 and
/// 1xx have none). Panics on bytes that are not a response.
fn responses(raw: &[u8]) -> Vec<Response> {
    let mut out = Vec::new();
    let mut rest = raw;
    while !rest.is_empty() {
        let end = rest
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or_else(|| panic!("incomplete response head: {:?}", lossy(rest)));
        let head = std::str::from_utf8(&rest[..end]).unwrap();
        let mut lines = head.split("\r\n");
        let mut status_line = lines.next().unwrap().splitn(3, ' ');
        let version = status_line.next().unwrap().to_string();
        assert!(version.starts_with("HTTP/1."), "not a response: {head:?}");
        let status: u16 = status_line.next().unwrap().parse().unwrap();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let length = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .map(|(_, v)| v.parse::<usize>().unwrap());
        let length = match (status, length) {
            (204 | 100..=199, _) => 0,
            (_, Some(length)) => length,
            // No length: the body runs to the end of the connection.
            (_, None) => rest.len() - end - 4,
        };
        let body_start = end + 4;
        assert!(
            rest.len() >= body_start + length,
            "truncated body: {:?}",
            lossy(rest)
        );
        out.push(Response {
            version,
            status,
            headers,
            body: rest[body_start..body_start + length].to_vec(),
        });
        rest = &rest[body_start + length..];
    }
    out
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
async fn send_json(port: u16, method: &str, path: &str, body: &[u8]) -> Response {
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

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn slow_and_endless_requests_are_cut_off() {
    // R24: slow or half-sent requests time out; bodies over 1 MiB are refused.
    let f = fixture("api-bad-slow").await;
    let port = f.operator.api_port;
    let variants = format!("/api/v1/namespaces/{}/mutations/web/variants", f.ns.name);

    // Slowloris, three ways, all at once: a connection that sends nothing; half a request
    // head and then nothing; a head trickled one byte every 300 ms, which never completes
    // within the server's header timeout. Each must be closed by the server (EOF or reset),
    // well before the test's deadline.
    let silent = async {
        let mut stream = connect(port).await;
        read_until_closed(&mut stream, "a silent connection").await
    };
    let half = async {
        let mut stream = connect(port).await;
        stream
            .write_all(head("GET", &variants, "").trim_end().as_bytes())
            .await
            .unwrap();
        read_until_closed(&mut stream, "half a request head").await
    };
    let trickle = async {
        let stream = connect(port).await;
        let (mut reader, mut writer) = stream.into_split();
        let request = head("GET", &variants, "Connection: close\r\n").into_bytes();
        let writing = async move {
            for byte in request
                .iter()
                .cycle()
                .take(DEADLINE.as_millis() as usize / 300)
            {
                if writer.write_all(&[*byte]).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            // Never sends the blank line that ends the head: still cut off by the timeout.
            std::future::pending::<()>().await;
        };
        tokio::select! {
            ending = read_until_closed(&mut reader, "a trickled request head") => ending,
            () = writing => unreachable!(),
        }
    };
    let (silent, half, trickle) = tokio::join!(silent, half, trickle);
    for (case, ending) in [("silent", &silent), ("half", &half), ("trickle", &trickle)] {
        // The server closes without an answer, or with an error status; never a 2xx.
        if !ending.bytes.is_empty() {
            let all = responses(&ending.bytes);
            assert!(
                all.iter().all(|r| (400..500).contains(&r.status)),
                "{case}: {all:?}"
            );
        }
    }
    assert_serves(&f, "slow request heads").await;

    // A chunked body that never ends, sent as fast as possible: refused once it passes 1 MiB
    // (413), or the connection is closed; never read to the end (the writer stops at 64 MiB).
    let stream = connect(port).await;
    let (mut reader, mut writer) = stream.into_split();
    let opening = head("POST", &variants, "Transfer-Encoding: chunked\r\n");
    let writing = tokio::spawn(async move {
        let mut sent = 0usize;
        if !write_lenient(&mut writer, opening.as_bytes()).await {
            return sent;
        }
        let chunk = format!("10000\r\n{}\r\n", "x".repeat(0x10000)).into_bytes();
        while sent < 64 << 20 {
            if !write_lenient(&mut writer, &chunk).await {
                break;
            }
            sent += 0x10000;
        }
        sent
    });
    let ending = read_until_closed(&mut reader, "an endless chunked body").await;
    let sent = writing.await.unwrap();
    assert!(
        sent < 64 << 20,
        "the server read 64 MiB of an endless body: {ending:?}"
    );
    if ending.bytes.is_empty() {
        eprintln!(
            "endless chunked body: closed without an answer ({:?}) after {sent} bytes",
            ending.error
        );
    } else {
        let all = responses(&ending.bytes);
        assert_eq!(all.len(), 1, "{all:?}");
        assert_eq!(all[0].status, 413, "{all:?}");
        assert_eq!(
            all[0].json()["error"],
            "request body is larger than 1 MiB",
            "{all:?}"
        );
    }
    assert_serves(&f, "an endless chunked body").await;

    // A chunked body that trickles forever, staying far under the size limit: the body
    // timeout answers 408 (or closes the connection).
    let stream = connect(port).await;
    let (mut reader, mut writer) = stream.into_split();
    let opening = head("POST", &variants, "Transfer-Encoding: chunked\r\n");
    let writing = async move {
        if !write_lenient(&mut writer, opening.as_bytes()).await {
            return;
        }
        loop {
            if !write_lenient(&mut writer, b"1\r\n \r\n").await {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        std::future::pending::<()>().await;
    };
    let ending = tokio::select! {
        ending = read_until_closed(&mut reader, "a trickled chunked body") => ending,
        () = writing => unreachable!(),
    };
    if !ending.bytes.is_empty() {
        let all = responses(&ending.bytes);
        assert_eq!(all.len(), 1, "{all:?}");
        assert_eq!(all[0].status, 408, "{all:?}");
    }
    assert_serves(&f, "a trickled chunked body").await;

    // Content-Length far beyond the limit, without a byte of body: 413 at once, nothing read.
    // One that does not even fit in 64 bits is a malformed request: 400 (or 413).
    for (length, allowed) in [
        ("10000000000", &[413][..]),
        ("99999999999999999999999999", &[400, 413][..]),
    ] {
        let mut stream = connect(port).await;
        stream
            .write_all(head("POST", &variants, &format!("Content-Length: {length}\r\n")).as_bytes())
            .await
            .unwrap();
        let ending = read_until_closed(&mut stream, "a huge Content-Length").await;
        let all = responses(&ending.bytes);
        assert_eq!(all.len(), 1, "Content-Length {length}: {ending:?}");
        assert!(
            allowed.contains(&all[0].status),
            "Content-Length {length}: {all:?}"
        );
        assert_serves(&f, &format!("Content-Length {length}")).await;
    }

    // Nothing of the above reached the Mutation.
    let web = f.mutations().get("web").await.unwrap();
    let labels: Vec<&str> = web.spec.variants.iter().map(|v| v.label.as_str()).collect();
    assert_eq!(labels, ["a"]);
    assert_no_panic(&f);
}

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn oversized_heads_odd_paths_and_deep_json_get_4xx() {
    // R19, R24
    let f = fixture("api-bad-input").await;
    let port = f.operator.api_port;
    let ns = f.ns.name.clone();
    let before = f.mutations().get("web").await.unwrap();

    // 10,000 headers (about 130 KB, far over the 16 KiB head limit and hyper's header count):
    // 431 or 400. The head is written while the answer is read, since the server may answer
    // (and close) before it has all of it.
    let mut request = head(
        "GET",
        &format!("/api/v1/namespaces/{ns}/mutations"),
        "Connection: close\r\n",
    );
    request.truncate(request.len() - 2);
    for i in 0..10_000 {
        request.push_str(&format!("X-Filler-{i}: {i}\r\n"));
    }
    request.push_str("\r\n");
    let stream = connect(port).await;
    let (mut reader, mut writer) = stream.into_split();
    let writing = tokio::spawn(async move { write_lenient(&mut writer, request.as_bytes()).await });
    let ending = read_until_closed(&mut reader, "10,000 headers").await;
    let _ = writing.await.unwrap();
    let all = responses(&ending.bytes);
    assert_eq!(all.len(), 1, "10,000 headers: {ending:?}");
    assert!(
        [431, 400].contains(&all[0].status),
        "10,000 headers: {all:?}"
    );
    assert_serves(&f, "10,000 headers").await;

    // Paths that are not UTF-8: percent-encoded invalid sequences in each path parameter, and
    // raw bytes >= 0x80 on the wire. Always a 4xx, never a 5xx; the encoded ones are names
    // that are not DNS-1123 labels, so 400.
    // (path, the methods its route allows: those get 400, the others 405 as for any path)
    let encoded: [(String, &[&str]); 5] = [
        ("/api/v1/namespaces/%FF%FE/mutations".to_string(), &["GET"]),
        (
            format!("/api/v1/namespaces/{ns}/mutations/%C0%AF"),
            &["GET", "DELETE"],
        ),
        (
            format!("/api/v1/namespaces/{ns}/mutations/web%ED%A0%80"),
            &["GET", "DELETE"],
        ),
        (
            format!("/api/v1/namespaces/{ns}/mutations/web/variants/%80"),
            &["GET", "DELETE", "PATCH"],
        ),
        (
            format!("/api/v1/namespaces/{ns}/mutations/web/variants/a%00"),
            &["GET", "DELETE", "PATCH"],
        ),
    ];
    for (path, allowed) in &encoded {
        for method in ["GET", "DELETE", "PATCH"] {
            let reply = send_json(port, method, path, br#"{"instances":2}"#).await;
            let expected = if allowed.contains(&method) { 400 } else { 405 };
            assert_eq!(reply.status, expected, "{method} {path}: {reply:?}");
            assert!(reply.json()["error"].is_string(), "{method} {path}");
        }
    }
    let raw_paths: [&[u8]; 3] = [
        b"/api/v1/namespaces/\xff\xfe/mutations",
        b"/api/v1/namespaces/default/mutations/w\xc3\x28b",
        b"/\x80\x81\x82",
    ];
    for path in raw_paths {
        let mut raw = b"GET ".to_vec();
        raw.extend_from_slice(path);
        raw.extend_from_slice(
            format!(
                " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {ADMIN}\r\n\
                 Connection: close\r\n\r\n"
            )
            .as_bytes(),
        );
        let mut stream = connect(port).await;
        stream.write_all(&raw).await.unwrap();
        let ending = read_until_closed(&mut stream, "a raw non-UTF-8 path").await;
        let all = responses(&ending.bytes);
        assert_eq!(all.len(), 1, "{:?}: {ending:?}", lossy(path));
        assert!(
            (400..500).contains(&all[0].status),
            "{:?}: {all:?}",
            lossy(path)
        );
        assert_serves(&f, &format!("raw path {:?}", lossy(path))).await;
    }
    // A token that is not UTF-8 (obs-text in the header value) is simply not a valid token.
    let mut raw =
        format!("GET /api/v1/namespaces/{ns}/mutations/web HTTP/1.1\r\nHost: x\r\n").into_bytes();
    raw.extend_from_slice(b"Authorization: Bearer \xff\xfe\xfd\r\nConnection: close\r\n\r\n");
    let mut stream = connect(port).await;
    stream.write_all(&raw).await.unwrap();
    let ending = read_until_closed(&mut stream, "a non-UTF-8 token").await;
    let all = responses(&ending.bytes);
    assert_eq!(all.len(), 1, "{ending:?}");
    assert_eq!(all[0].status, 401, "{all:?}");
    assert_serves(&f, "non-UTF-8 paths").await;

    // 100,000 levels of JSON nesting in every body the API reads: 400 (serde_json's recursion
    // limit), no stack overflow. A stack overflow aborts the process, so answering afterwards
    // shows it is alive.
    let arrays = "[".repeat(100_000);
    let objects = r#"{"a":"#.repeat(100_000);
    let mutations = format!("/api/v1/namespaces/{ns}/mutations");
    let cases = [
        ("POST", mutations.clone(), arrays.clone()),
        ("POST", mutations.clone(), objects.clone()),
        (
            "POST",
            mutations.clone(),
            format!(r#"{{"name":"deep","deployment":{objects}"#),
        ),
        ("POST", format!("{mutations}/web/variants"), arrays.clone()),
        (
            "POST",
            format!("{mutations}/web/variants"),
            format!(r#"{{"label":"deep","env":{arrays}"#),
        ),
        (
            "PATCH",
            format!("{mutations}/web/variants/a"),
            arrays.clone(),
        ),
        (
            "PATCH",
            format!("{mutations}/web/variants/a"),
            format!(r#"{{"instances":{objects}"#),
        ),
    ];
    for (method, path, body) in &cases {
        let reply = send_json(port, method, path, body.as_bytes()).await;
        assert_eq!(reply.status, 400, "{method} {path} {:.60}: {reply:?}", body);
        let error = reply.json()["error"].as_str().unwrap().to_string();
        assert!(error.contains("invalid request body"), "{error}");
        assert_serves(&f, &format!("deep JSON to {method} {path}")).await;
    }

    // Nothing changed, nothing was created.
    let after = f.mutations().get("web").await.unwrap();
    assert_eq!(after.spec, before.spec);
    assert_eq!(after.metadata.generation, before.metadata.generation);
    let all = f.mutations().list(&Default::default()).await.unwrap();
    assert_eq!(common::names(&all.items), ["web"]);
    assert_no_panic(&f);
}

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn http_1_0_and_pipelined_requests_are_answered_in_order() {
    // R19, R22 (a client reads its own writes)
    let f = fixture("api-bad-pipe").await;
    let port = f.operator.api_port;
    let ns = f.ns.name.clone();
    let mutations = format!("/api/v1/namespaces/{ns}/mutations");

    // HTTP/1.0 without Host: answered, then the connection is closed (no keep-alive).
    let mut stream = connect(port).await;
    stream
        .write_all(
            format!("GET {mutations}/web HTTP/1.0\r\nAuthorization: Bearer {ADMIN}\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let ending = read_until_closed(&mut stream, "an HTTP/1.0 request").await;
    assert_eq!(ending.error, None, "closed cleanly: {ending:?}");
    let all = responses(&ending.bytes);
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0].status, 200, "{all:?}");
    assert_eq!(all[0].json()["name"], "web");
    assert_eq!(all[0].header("content-type"), Some("application/json"));

    // An HTTP/1.0 POST with a body: the variant is added.
    let body = r#"{"label":"old","instances":0}"#;
    let mut stream = connect(port).await;
    stream
        .write_all(
            format!(
                "POST {mutations}/web/variants HTTP/1.0\r\nAuthorization: Bearer {ADMIN}\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let ending = read_until_closed(&mut stream, "an HTTP/1.0 POST").await;
    let all = responses(&ending.bytes);
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0].status, 201, "{all:?}");
    assert_eq!(all[0].json()["label"], "old");
    assert_serves(&f, "HTTP/1.0").await;

    // Pipelined: six requests in one write, each depending on the one before. The answers
    // come back in order, and each request sees the writes of those before it.
    let token = f.token("web").await;
    let request = |method: &str, path: &str, body: &str, last: bool| {
        let mut r = format!(
            "{method} {mutations}/web{path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\
             Authorization: Bearer {token}\r\n"
        );
        if !body.is_empty() {
            r.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        if last {
            r.push_str("Connection: close\r\n");
        }
        r.push_str("\r\n");
        r.push_str(body);
        r
    };
    let pipelined = [
        request(
            "POST",
            "/variants",
            r#"{"label":"p1","instances":0}"#,
            false,
        ),
        request("GET", "/variants/p1", "", false),
        request("PATCH", "/variants/p1", r#"{"instances":3}"#, false),
        request("GET", "/variants/p1", "", false),
        request("DELETE", "/variants/p1", "", false),
        request("GET", "/variants/p1", "", true),
    ]
    .concat();
    let mut stream = connect(port).await;
    stream.write_all(pipelined.as_bytes()).await.unwrap();
    let ending = read_until_closed(&mut stream, "pipelined requests").await;
    let all = responses(&ending.bytes);
    let statuses: Vec<u16> = all.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [201, 200, 200, 200, 204, 404], "{all:?}");
    assert_eq!(all[0].json()["instances"], 0);
    assert_eq!(all[1].json()["label"], "p1");
    assert_eq!(all[1].json()["instances"], 0);
    assert_eq!(all[2].json()["instances"], 3);
    assert_eq!(all[3].json()["instances"], 3);
    assert!(all[4].body.is_empty());
    assert!(all[5].json()["error"].as_str().unwrap().contains("p1"));
    assert!(all.iter().all(|r| r.version == "HTTP/1.1"));

    // Pipelined reads that fail and succeed alternately keep their order too.
    let pipelined = [
        request("GET", "/variants/nope", "", false),
        request("GET", "", "", false),
        request("PUT", "", "{}", false),
        request("GET", "/variants", "", true),
    ]
    .concat();
    let mut stream = connect(port).await;
    stream.write_all(pipelined.as_bytes()).await.unwrap();
    let ending = read_until_closed(&mut stream, "pipelined reads").await;
    let all = responses(&ending.bytes);
    let statuses: Vec<u16> = all.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [404, 200, 405, 200], "{all:?}");
    assert_eq!(all[1].json()["name"], "web");
    assert_eq!(all[2].header("allow"), Some("GET, DELETE"));
    let listed = all[3].json();
    let labels: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["label"].as_str())
        .collect();
    assert_eq!(labels, ["a", "old"]);
    assert_serves(&f, "pipelined requests").await;

    let web = f.mutations().get("web").await.unwrap();
    let labels: Vec<&str> = web.spec.variants.iter().map(|v| v.label.as_str()).collect();
    assert_eq!(labels, ["a", "old"]);
    assert_no_panic(&f);
}

/// Starts a new operator process for the fixture's namespace (the old one is killed), as a
/// rollout or a crash would, and waits until its API answers or `CONVERGE` passes.
async fn restart(f: &mut Fixture) -> Result<(), String> {
    f.operator = common::Operator::start_with(&f.ns.name, &[("MUTANT_API_TOKEN", ADMIN)]);
    let deadline = Instant::now() + CONVERGE;
    let mut last = String::new();
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", f.operator.api_port))
            .await
            .is_ok()
        {
            let reply = f.call("GET", "/mutations", Some(ADMIN), None).await;
            if reply.status == 200 {
                return Ok(());
            }
            last = format!("{reply:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(last)
}

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn json_nested_just_under_the_parser_limit_does_not_break_the_operator() {
    // R24, R13: the operator's Kubernetes client decodes objects with serde_json's limit of
    // 128 levels, and a Mutation's base sits a few levels deeper in a watch event or a list
    // than in the request that created it. A create nested just under the limit must be
    // refused (400), or else be stored AND stay readable: answered 201, reconciled, and listed
    // again by a restarted operator (which lists every Mutation before it serves anything).
    let mut f = fixture("api-bad-deep").await;
    let mut accepted = vec!["web".to_string()];
    for depth in 110..=122 {
        let name = format!("deep-{depth}");
        let mut deployment = base(&name);
        deployment["spec"]["template"]["spec"]["containers"][0]["x"] = json!("NEST");
        let body = json!({"name": name, "deployment": deployment, "variants": [{"label": "a"}]})
            .to_string()
            .replace(
                "\"NEST\"",
                &format!("{}{}", "[".repeat(depth), "]".repeat(depth)),
            );
        let path = format!("/api/v1/namespaces/{}/mutations", f.ns.name);
        let reply = send_json(f.operator.api_port, "POST", &path, body.as_bytes()).await;
        assert!(
            [201, 400].contains(&reply.status),
            "{name}: {} {}",
            reply.status,
            lossy(&reply.body)
        );
        if reply.status == 201 {
            accepted.push(name);
        }
    }
    accepted.sort();

    // The running operator still reconciles a Mutation made afterwards.
    let after = json!({"name": "after", "deployment": base("after"), "variants": []});
    let created = f
        .call("POST", "/mutations", Some(ADMIN), Some(&after))
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    f.token("after").await;
    accepted.push("after".to_string());
    accepted.sort();

    // A restarted operator syncs its caches, serves, and lists every accepted Mutation.
    if let Err(last) = restart(&mut f).await {
        panic!(
            "after creates nested up to 122 levels (accepted: {accepted:?}), a restarted \
             operator did not serve within {CONVERGE:?}; last answer: {last}"
        );
    }
    let listed = f.call("GET", "/mutations", Some(ADMIN), None).await;
    let mut names: Vec<String> = listed
        .json()
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["name"].as_str().map(String::from))
        .collect();
    names.sort();
    assert_eq!(names, accepted);
    assert_no_panic(&f);
}
