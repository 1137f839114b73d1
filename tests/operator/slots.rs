//! R44, R34: the API's connections are shared fairly. A token, or a client
//! address, has at most a quarter of them busy: a token holder that keeps requests busy with
//! a body sent a byte at a time used to take every connection, so that everyone else got 503
//! while `/readyz` said 200. A host that opens connections fast used to get the oldest idle
//! one closed each time, and a board in a slow handshake always held the oldest. A listener
//! full of clients is the clients' doing, not the replica's: `/readyz` stays 200 (it used to
//! say 503, which let a few hosts take every replica out of its Service).
//!
//! Each client speaks from a loopback address of its own (127.0.0.x), as machines on a LAN do.

use std::{net::Ipv4Addr, time::Duration};

use tokio::{io::AsyncWriteExt as _, net::TcpStream};

use super::*;

/// A connection to the API from `source`.
pub(super) async fn connect_from(source: Ipv4Addr, port: u16) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind((source, 0).into()).unwrap();
    socket.connect(([127, 0, 0, 1], port).into()).await.unwrap()
}

/// A request head for a variant body of 1000 bytes with `token`, of which nothing is sent yet.
pub(super) fn slow_post(ns: &str, name: &str, token: &str) -> String {
    format!(
        "POST /api/v1/namespaces/{ns}/mutations/{name}/variants HTTP/1.1\r\nHost: api\r\n\
         Authorization: Bearer {token}\r\nContent-Type: application/json\r\n\
         Content-Length: 1000\r\n\r\n{{"
    )
}

/// `GET .../mutations/{name}` with `token`, from `source`.
async fn get_from(f: &Fixture, source: Ipv4Addr, name: &str, token: &str) -> common::http::Reply {
    let raw = format!(
        "GET /api/v1/namespaces/{}/mutations/{name} HTTP/1.1\r\nHost: api\r\n\
         Authorization: Bearer {token}\r\nConnection: close\r\n\r\n",
        f.ns.name
    );
    common::http::send_raw_from(source, f.operator.api_port, raw.as_bytes()).await
}

async fn readyz(f: &Fixture) -> common::http::Reply {
    common::http::request(f.operator.metrics_port, "GET", "/readyz", None, None).await
}

/// What each of `streams` shows 300 ms after its request: `None` while it waits for its body
/// (busy), else what the server said (empty when it closed the connection).
async fn outcomes(streams: &mut [TcpStream]) -> Vec<Option<String>> {
    let mut seen = Vec::new();
    for stream in streams {
        let mut buf = [0u8; 512];
        seen.push(
            match tokio::time::timeout(Duration::from_millis(300), stream.peek(&mut buf)).await {
                Err(_elapsed) => None,
                Ok(Ok(n)) => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
                Ok(Err(_)) => Some(String::new()),
            },
        );
    }
    seen
}

/// `count` slow bodies to Mutation `name` with `token`, from `source`.
async fn slow_posts(
    f: &Fixture,
    source: Ipv4Addr,
    name: &str,
    token: &str,
    count: usize,
) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for _ in 0..count {
        let mut stream = connect_from(source, f.operator.api_port).await;
        // A refused connection may be closed before its request is written: that is fine.
        let _ = stream
            .write_all(slow_post(&f.ns.name, name, token).as_bytes())
            .await;
        held.push(stream);
    }
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_token_or_an_address_holds_only_its_share_of_busy_connections() {
    // 40 connections: a token, its Mutation and an address may each have 10 busy.
    let f = Fixture::with_env(
        "slots",
        &[
            ("MUTANT_API_TOKEN", ADMIN),
            ("MUTANT_API_MAX_CONNECTIONS", "40"),
        ],
    )
    .await;
    wait_api(f.operator.api_port, &f.ns.name).await;
    let mut tokens = Vec::new();
    for name in ["one", "two", "three", "four"] {
        let create = json!({"name": name, "deployment": base(name),
                            "variants": [{"label": "a", "instances": 0}]});
        let created = f
            .call("POST", "/mutations", Some(ADMIN), Some(&create))
            .await;
        assert_eq!(created.status, 201, "{created:?}");
        tokens.push((name, f.token(name).await));
    }

    // One host (127.0.0.2) with three tokens: 12 slow bodies each, 36 in all. The host gets
    // 10 busy at most: the rest are answered 503 at once, or closed.
    let hostile = Ipv4Addr::new(127, 0, 0, 2);
    let mut held = Vec::new();
    for (name, token) in &tokens[..3] {
        held.extend(slow_posts(&f, hostile, name, token, 12).await);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let seen = outcomes(&mut held).await;
    let busy = seen.iter().filter(|s| s.is_none()).count();
    for said in seen.iter().flatten().filter(|s| !s.is_empty()) {
        assert!(said.starts_with("HTTP/1.1 503"), "{said}");
        assert!(
            said.contains("in flight") || said.contains("this address"),
            "{said}"
        );
    }
    println!("{busy} of 36 slow bodies from one host busy");
    assert!(
        (1..=10).contains(&busy),
        "{busy} of 36 busy: the host holds more than 10"
    );

    // A second host with the first token: that token has its share busy already (the
    // host's slow bodies were of it first), so from any address its next are refused.
    let second = Ipv4Addr::new(127, 0, 0, 5);
    let mut more = slow_posts(&f, second, "one", &tokens[0].1, 4).await;
    let seen = outcomes(&mut more).await;
    println!("the same token from another host: {seen:?}");
    assert!(
        seen.iter()
            .flatten()
            .any(|s| s.contains("this token has 10 requests in flight")),
        "{seen:?}"
    );
    assert!(seen.iter().all(Option::is_some), "{seen:?}");

    // Everyone else is served: the admin, and a board with another Mutation's token from its
    // own address; the replica says it is ready. (A board holding one of the host's tokens
    // shares that token's quarter, by design.)
    let admin = Ipv4Addr::new(127, 0, 0, 3);
    let got = get_from(&f, admin, "one", ADMIN).await;
    assert_eq!(got.status, 200, "{got:?}");
    let board = Ipv4Addr::new(127, 0, 0, 4);
    let got = get_from(&f, board, "four", &tokens[3].1).await;
    assert_eq!(got.status, 200, "{got:?}");
    let ready = readyz(&f).await;
    assert_eq!(ready.status, 200, "{ready:?}");
    drop((held, more));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_young_connection_is_never_closed_for_another_and_readyz_ignores_a_full_listener() {
    let f = Fixture::with_env(
        "young",
        &[
            ("MUTANT_API_TOKEN", ADMIN),
            ("MUTANT_API_MAX_CONNECTIONS", "8"),
        ],
    )
    .await;
    wait_api(f.operator.api_port, &f.ns.name).await;
    let port = f.operator.api_port;
    let create = json!({"name": "web", "deployment": base("web"), "variants": []});
    let created = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    assert_eq!(created.status, 201, "{created:?}");

    // A board opens its connection and sends its request head slowly, as an ESP32 finishing
    // a TLS handshake would: half of it now, the rest 2 s later.
    let board = Ipv4Addr::new(127, 0, 0, 9);
    let mut board_stream = connect_from(board, port).await;
    let head = format!(
        "GET /api/v1/namespaces/{}/mutations/web HTTP/1.1\r\nHost: api\r\n",
        f.ns.name
    );
    board_stream.write_all(head.as_bytes()).await.unwrap();

    // Meanwhile a host opens 100 connections as fast as it can and sends nothing; the server
    // has room for 8, and the host for 2 of them.
    let flooder = Ipv4Addr::new(127, 0, 0, 8);
    let mut flood = Vec::new();
    for _ in 0..100 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind((flooder, 0).into()).unwrap();
        if let Ok(stream) = socket.connect(([127, 0, 0, 1], port).into()).await {
            flood.push(stream);
        }
    }
    // The flooder's own connections make room for its new ones, young as they are; the
    // board's, younger than the 5 s head deadline, stays.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rest = format!("Authorization: Bearer {ADMIN}\r\nConnection: close\r\n\r\n");
    board_stream.write_all(rest.as_bytes()).await.unwrap();
    let (out, _) =
        common::http::read_until_closed(&mut board_stream, Duration::from_secs(10)).await;
    let text = String::from_utf8_lossy(&out);
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "the board's connection was closed for the flood: {text:?}"
    );
    drop(flood);
    let ready = readyz(&f).await;
    assert_eq!(ready.status, 200, "{ready:?}");

    // Eight machines with one new connection each: none may be closed for a ninth until they
    // are older than the 5 s head deadline, so the listener refuses the ninth meanwhile, and
    // says so in its log; /readyz says 200 all the same (R34: readiness is the replica's,
    // not how many clients hold its listener). (Connected is not yet accepted: the server
    // takes them from its backlog in a moment; and a flood connection the server has not
    // seen close yet can take one of the eight slots for a moment, so the eight try again,
    // fresh, until the listener is full of them.)
    let mut refused = None;
    let mut eight = Vec::new();
    for _attempt in 0..5 {
        eight.clear();
        tokio::time::sleep(Duration::from_millis(500)).await;
        for n in 20..28 {
            eight.push(connect_from(Ipv4Addr::new(127, 0, 0, n), port).await);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let ninth = format!(
            "GET /api/v1/namespaces/{}/mutations/web HTTP/1.1\r\nHost: api\r\n\
             Authorization: Bearer {ADMIN}\r\nConnection: close\r\n\r\n",
            f.ns.name
        );
        let got =
            common::http::send_raw_from(Ipv4Addr::new(127, 0, 0, 28), port, ninth.as_bytes()).await;
        let ready = readyz(&f).await;
        assert_eq!(
            ready.status, 200,
            "a full listener made the replica not ready: {ready:?}"
        );
        if got.status == 503 && got.body.contains("too many connections") {
            refused = Some(got);
            break;
        }
    }
    assert!(
        refused.is_some(),
        "the ninth was never refused with eight new connections"
    );
    let log = f.operator.log_text();
    assert!(
        log.contains("the listener is saturated"),
        "no log line of the refusal"
    );
    drop(eight);
}
