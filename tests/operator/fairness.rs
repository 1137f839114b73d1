//! R34, R44: fairness when identities are cheap. Shares of the API's connections were per
//! client address and per token, and the enrollment key mints device tokens, so a few hosts
//! held a replica: four device tokens from two addresses holding slow bodies, or two hosts
//! without any token each holding half the connections and reopening them every 3 s (always
//! younger than the 5 s that protected a connection from being closed for another). Every
//! other board got 503, and `/readyz` said not ready while the listener was full, so the
//! same attack took every replica out of its Service.
//!
//! Now an address holds at most a quarter of the connections (and of the requests in
//! flight), a Mutation with all its devices a quarter of the requests in flight, a newcomer
//! gets the idle connection of an address holding more, and readiness is the replica's, not
//! its listener's. Behind a trusted proxy each request is its forwarded client's.
//!
//! Each client speaks from a loopback address of its own (127.0.0.x), as machines on a LAN do.

use std::{
    net::Ipv4Addr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
};

use super::{
    devices::{create, enrolled},
    slots::{connect_from, slow_post},
    *,
};

/// The connection cap of these tests: a quarter is 4.
const CAP: &str = "16";

/// How long the victim's requests are timed under attack.
const ATTACK: Duration = Duration::from_secs(30);

/// What firmware waits for an answer, at most.
const PATIENCE: Duration = Duration::from_secs(5);

/// A connection from `source`, or none if the connect fails.
async fn try_connect(source: Ipv4Addr, port: u16) -> Option<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4().ok()?;
    socket.bind((source, 0).into()).ok()?;
    socket.connect(([127, 0, 0, 1], port).into()).await.ok()
}

/// A host without any token: `count` connections that send nothing, each reopened every 3 s
/// (or at the next tick after the server closes it), until `stop`. Counts the connections
/// opened.
fn tokenless(
    source: Ipv4Addr,
    port: u16,
    count: usize,
    stop: &Arc<AtomicBool>,
) -> Arc<AtomicUsize> {
    let opened = Arc::new(AtomicUsize::new(0));
    for _ in 0..count {
        let (stop, opened) = (stop.clone(), opened.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let tick = tokio::time::Instant::now() + Duration::from_secs(3);
                if let Some(mut stream) = try_connect(source, port).await {
                    opened.fetch_add(1, Ordering::Relaxed);
                    let mut buf = [0u8; 256];
                    let _ = tokio::time::timeout_at(tick, stream.read(&mut buf)).await;
                }
                tokio::time::sleep_until(tick).await;
            }
        });
    }
    opened
}

/// A host holding slow bodies: for each device (token, variant), `per_device` PATCHes of its
/// variant whose 100-byte body is sent a byte a second, each started again half a second
/// after the server answers or closes it, until `stop`. Counts the answers by status.
fn slow_bodies(
    source: Ipv4Addr,
    port: u16,
    path: &str,
    devices: &[(String, String)],
    per_device: usize,
    stop: &Arc<AtomicBool>,
) -> Arc<std::sync::Mutex<std::collections::BTreeMap<String, usize>>> {
    let answers = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::new()));
    for (token, label) in devices {
        for _ in 0..per_device {
            let head = format!(
                "PATCH {path}/{label} HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer {token}\r\n\
                 Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
            );
            let (stop, answers) = (stop.clone(), answers.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let answer = hold_a_slow_body(source, port, &head, &stop).await;
                    *answers.lock().unwrap().entry(answer).or_default() += 1;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            });
        }
    }
    answers
}

/// One slow PATCH: the head, then a byte a second until the server says something (its
/// status, as text) or closes ("closed").
async fn hold_a_slow_body(source: Ipv4Addr, port: u16, head: &str, stop: &AtomicBool) -> String {
    let Some(mut stream) = try_connect(source, port).await else {
        return "not connected".to_string();
    };
    if stream.write_all(head.as_bytes()).await.is_err() {
        return "closed".to_string();
    }
    let mut buf = [0u8; 512];
    for byte in std::iter::once(b'{')
        .chain(std::iter::repeat(b' '))
        .take(99)
    {
        if stop.load(Ordering::Relaxed) {
            return "stopped".to_string();
        }
        if stream.write_all(&[byte]).await.is_err() {
            return "closed".to_string();
        }
        match tokio::time::timeout(Duration::from_secs(1), stream.read(&mut buf)).await {
            Err(_elapsed) => continue,
            Ok(Ok(n)) if n >= 12 => return String::from_utf8_lossy(&buf[9..12]).into_owned(),
            Ok(_) => return "closed".to_string(),
        }
    }
    "sent whole".to_string()
}

/// GET `path` with `token` from `source`, on a connection of its own: the status and how long
/// it took, or `None` if no answer came within [`PATIENCE`].
async fn timed_get(
    source: Ipv4Addr,
    port: u16,
    path: &str,
    token: &str,
) -> (Option<u16>, Duration) {
    let began = Instant::now();
    let raw = common::http::Request::new("GET", path, Some(token), None).bytes(port);
    // In a task of its own: a connection closed without an answer fails the exchange.
    let sent = tokio::spawn(async move { common::http::send_raw_from(source, port, &raw).await });
    let status = match tokio::time::timeout(PATIENCE, sent).await {
        Ok(Ok(reply)) => Some(reply.status),
        Ok(Err(_)) | Err(_) => None,
    };
    (status, began.elapsed())
}

/// R34, R44: two hosts without a token reopening connections every 3 s, and four device
/// tokens of one Mutation on two more hosts holding slow bodies, against a replica of 16
/// connections: a board of another Mutation, on a fifth address, gets every answer (its
/// variant, its poll) within 5 s for 30 s, and `/readyz` says 200 throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_board_is_served_while_cheap_identities_attack() {
    let f = Fixture::with_env(
        "fairness",
        &[
            ("MUTANT_API_TOKEN", ADMIN),
            ("MUTANT_API_MAX_CONNECTIONS", CAP),
        ],
    )
    .await;
    wait_api(f.operator.api_port, &f.ns.name).await;
    let (port, ns) = (f.operator.api_port, f.ns.name.clone());
    // The attacked fleet: its enrollment key lifted from a board, four devices minted.
    let open = json!({"enrollment": "Open"});
    let key = create(&f, "fleet", open.clone(), json!({})).await;
    let mut minted = Vec::new();
    for id in ["m1", "m2", "m3", "m4"] {
        let body = json!({"id": id, "variant": {"label": id, "instances": 0}});
        minted.push((enrolled(&f, "fleet", &key, body).await, id.to_string()));
    }
    // The board: a device of another Mutation.
    let home = create(&f, "home", open, json!({})).await;
    let body = json!({"id": "board", "variant": {"label": "board", "instances": 0}});
    let board = enrolled(&f, "home", &home, body).await;
    let variant = format!("/api/v1/namespaces/{ns}/mutations/home/variants/board");
    let poll = format!("/api/v1/namespaces/{ns}/mutations/home/devices/board/poll");

    let stop = Arc::new(AtomicBool::new(false));
    let host = |n| Ipv4Addr::new(127, 0, 0, n);
    let t1 = tokenless(host(2), port, 16, &stop);
    let t2 = tokenless(host(3), port, 16, &stop);
    let fleet = format!("/api/v1/namespaces/{ns}/mutations/fleet/variants");
    let d1 = slow_bodies(host(4), port, &fleet, &minted[..2], 4, &stop);
    let d2 = slow_bodies(host(5), port, &fleet, &minted[2..], 4, &stop);
    tokio::time::sleep(Duration::from_secs(3)).await;

    let (mut worst, mut answered, mut failures) = (Duration::ZERO, 0, Vec::new());
    let mut not_ready = Vec::new();
    let began = Instant::now();
    let mut round = 0;
    while began.elapsed() < ATTACK {
        let path = if round % 2 == 0 { &variant } else { &poll };
        let (status, took) = timed_get(host(6), port, path, &board).await;
        worst = worst.max(took);
        match status {
            Some(200) => answered += 1,
            other => failures.push(format!("{path}: {other:?} after {took:?}")),
        }
        let ready =
            common::http::request(f.operator.metrics_port, "GET", "/readyz", None, None).await;
        if ready.status != 200 {
            not_ready.push(format!("{:?}: {ready:?}", began.elapsed()));
        }
        round += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let held = |a: &Arc<std::sync::Mutex<std::collections::BTreeMap<String, usize>>>| {
        a.lock().unwrap().clone()
    };
    println!(
        "the board: {answered} answered in {round} requests, the slowest in {worst:?}; \
         /readyz not ready {} times; tokenless hosts opened {} and {} connections; slow bodies \
         ended {:?} and {:?}",
        not_ready.len(),
        t1.load(Ordering::Relaxed),
        t2.load(Ordering::Relaxed),
        held(&d1),
        held(&d2),
    );
    assert!(
        failures.is_empty(),
        "the board was not served: {failures:#?}"
    );
    assert!(
        not_ready.is_empty(),
        "/readyz said not ready: {not_ready:#?}"
    );
    assert!(worst <= PATIENCE, "the slowest answer took {worst:?}");
    // The attack was real: the listener was at its cap, and slow bodies held their
    // connections until the body deadline (408) or were refused their share (503).
    let log = f.operator.log_text();
    assert!(
        log.contains("at the connection cap: closing"),
        "the listener never reached its cap"
    );
    let bodies = [held(&d1), held(&d2)];
    assert!(
        bodies.iter().any(|b| b.contains_key("408")),
        "no slow body was held until its deadline: {bodies:?}"
    );
}

/// R34: behind a trusted proxy (`MUTANT_API_TRUSTED_PROXIES=127.0.0.7/32`) the shares are
/// per forwarded client: one board holding its quarter of requests in flight through the
/// proxy leaves another board behind the same proxy served, and the proxy holds more than an
/// address's quarter of the connections. From an untrusted peer `X-Forwarded-For` is ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn behind_a_trusted_proxy_the_shares_are_per_forwarded_client() {
    let f = Fixture::with_env(
        "proxied",
        &[
            ("MUTANT_API_TOKEN", ADMIN),
            ("MUTANT_API_MAX_CONNECTIONS", CAP),
            ("MUTANT_API_TRUSTED_PROXIES", "127.0.0.7/32"),
        ],
    )
    .await;
    wait_api(f.operator.api_port, &f.ns.name).await;
    let (port, ns) = (f.operator.api_port, f.ns.name.clone());
    let mut tokens = Vec::new();
    for name in ["one", "two", "three"] {
        let create = json!({"name": name, "deployment": base(name), "variants": []});
        let created = f
            .call("POST", "/mutations", Some(ADMIN), Some(&create))
            .await;
        assert_eq!(created.status, 201, "{created:?}");
        tokens.push(f.token(name).await);
    }
    let (proxy, stranger) = (Ipv4Addr::new(127, 0, 0, 7), Ipv4Addr::new(127, 0, 0, 8));
    let forwarded = |head: String, client: &str| {
        head.replacen(
            "\r\n",
            &format!("\r\nX-Forwarded-For: 10.0.0.9, {client}\r\n"),
            1,
        )
    };
    // Board .50 behind the proxy: four slow bodies, two with each of two tokens (each token
    // within its own quarter), so that the board holds its address's quarter.
    let mut held = Vec::new();
    for (name, token) in [("one", &tokens[0]), ("two", &tokens[1])] {
        for _ in 0..2 {
            let mut stream = connect_from(proxy, port).await;
            let head = forwarded(slow_post(&ns, name, token), "192.168.1.50");
            stream.write_all(head.as_bytes()).await.unwrap();
            held.push(stream);
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let get_three = |client: &str| {
        let head = format!(
            "GET /api/v1/namespaces/{ns}/mutations/three HTTP/1.1\r\nHost: api\r\n\
             Authorization: Bearer {}\r\nConnection: close\r\n\r\n",
            tokens[2]
        );
        forwarded(head, client)
    };
    let again =
        common::http::send_raw_from(proxy, port, get_three("192.168.1.50").as_bytes()).await;
    assert_eq!(again.status, 503, "{again:?}");
    assert!(
        again.body.contains("this address has 4 requests in flight"),
        "{again:?}"
    );
    // Another board behind the same proxy is served: its own share, and the proxy is not
    // held to an address's quarter of the connections (it has five open).
    let other =
        common::http::send_raw_from(proxy, port, get_three("192.168.1.51").as_bytes()).await;
    assert_eq!(other.status, 200, "{other:?}");

    // From an untrusted peer the header names nobody: its request is the peer's.
    let direct =
        common::http::send_raw_from(stranger, port, get_three("192.168.1.52").as_bytes()).await;
    assert_eq!(direct.status, 200, "{direct:?}");
    let log = f.operator.log_text();
    let clients: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("api request") && l.contains("/mutations/three"))
        .collect();
    let said = |ip: &str| clients.iter().any(|l| l.contains(&format!("client={ip}")));
    assert!(said("192.168.1.51"), "{clients:#?}");
    assert!(said("127.0.0.8") && !said("192.168.1.52"), "{clients:#?}");
    assert!(!said("10.0.0.9") && !said("127.0.0.7"), "{clients:#?}");
    drop(held);
}
