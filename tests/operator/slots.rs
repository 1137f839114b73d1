//! R44, R34: the API's connections are shared fairly. A token, or a client
//! address, has at most a share of them busy: a token holder that keeps requests busy with a
//! body sent a byte at a time used to take every connection, so that everyone else got 503
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
async fn connect_from(source: Ipv4Addr, port: u16) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind((source, 0).into()).unwrap();
    socket.connect(([127, 0, 0, 1], port).into()).await.unwrap()
}

/// A request head for a variant body of 1000 bytes with `token`, of which nothing is sent yet.
fn slow_post(ns: &str, name: &str, token: &str) -> String {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_token_or_an_address_holds_only_its_share_of_busy_connections() {
    // 40 connections: a token may have 10 busy, an address 20.
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
    let port = f.operator.api_port;

    // One host (127.0.0.2) with three tokens: 12 slow bodies each, 36 in all. Each token gets
    // 10 busy at most and the host 20: the rest are answered 503 at once.
    let hostile = Ipv4Addr::new(127, 0, 0, 2);
    let mut held = Vec::new();
    let mut refused = 0;
    for (name, token) in &tokens[..3] {
        for _ in 0..12 {
            let mut stream = connect_from(hostile, port).await;
            stream
                .write_all(slow_post(&f.ns.name, name, token).as_bytes())
                .await
                .unwrap();
            held.push(stream);
        }
    }
    // Whoever was answered at once was refused; the others are busy, waiting for their body.
    for stream in &mut held {
        let mut buf = [0u8; 512];
        if let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_millis(300), stream.peek(&mut buf)).await
        {
            let text = String::from_utf8_lossy(&buf[..n]);
            assert!(text.starts_with("HTTP/1.1 503"), "{text}");
            assert!(text.contains("in flight"), "{text}");
            refused += 1;
        }
    }
    println!("{} of 36 slow bodies refused at once", refused);
    assert!(
        refused >= 16,
        "only {refused} of 36 refused: more than 20 are busy"
    );

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
    drop(held);
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
    // has room for 8.
    let flooder = Ipv4Addr::new(127, 0, 0, 8);
    let mut flood = Vec::new();
    for _ in 0..100 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind((flooder, 0).into()).unwrap();
        if let Ok(stream) = socket.connect(([127, 0, 0, 1], port).into()).await {
            flood.push(stream);
        }
    }
    // The flooder holds more than half of the slots: its own connections make room for its
    // new ones, young as they are; the board's, younger than the 5 s head deadline, stays.
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
