//! The connection cap (R34): idle connections make room for new ones, busy
//! ones never do, and a new connection is refused only when every open one is busy.

use super::*;

fn capped(max_connections: usize) -> ServerConfig {
    ServerConfig {
        // Long enough that no connection here ends by the idle timeout.
        header_read_timeout: Duration::from_secs(30),
        max_connections,
        ..test_config()
    }
}

/// Waits until the server has closed `stream` (EOF or reset).
async fn closed(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(DEADLINE, stream.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// A connection to `addr` from loopback address `source` (127.0.0.x), as from a machine of
/// its own.
async fn connect_from(source: Ipv4Addr, addr: SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind((source, 0).into()).unwrap();
    socket.connect(addr).await.unwrap()
}

// R34, R44: at the cap an idle connection of the address holding the most (its longest idle)
// makes room for a newcomer; the others stay open and are served.
#[tokio::test]
async fn idle_connections_make_room_at_the_cap() {
    let server = start(capped(8)).await;
    // Four machines connect twice each and send nothing: each holds its quarter.
    let mut idle = Vec::new();
    for n in 2..6 {
        for _ in 0..2 {
            idle.push(connect_from(Ipv4Addr::new(127, 0, 0, n), server.addr).await);
            // Accepted in this order, so the first is the longest idle.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // A fifth machine is served: the longest idle connection was closed for it.
    let mut fifth = connect_from(Ipv4Addr::new(127, 0, 0, 9), server.addr).await;
    write_all(
        &mut fifth,
        b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    let raw = read_all(&mut fifth).await;
    assert_eq!(statuses(&raw), [200], "{raw}");
    assert!(
        closed(&mut idle[0]).await,
        "the longest idle connection is closed"
    );
    // The others are still open: a request on one is answered.
    write_all(
        &mut idle[7],
        b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    let raw = read_all(&mut idle[7]).await;
    assert_eq!(statuses(&raw), [200], "{raw}");
}

// R44: one address holds at most a quarter of the connections: its next one closes its own
// longest idle connection, and is refused while all of its are busy, however much room the
// listener has.
#[tokio::test]
async fn an_address_holds_at_most_a_quarter_of_the_connections() {
    let server = start(capped(8)).await;
    let host = Ipv4Addr::new(127, 0, 0, 2);
    let mut first = connect_from(host, server.addr).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut second = connect_from(host, server.addr).await;
    // A third from the host: its longest idle connection, idle for a second, makes room.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut third = connect_from(host, server.addr).await;
    write_all(
        &mut third,
        b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(
        closed(&mut first).await,
        "the host's longest idle connection is closed"
    );
    let raw = read_all(&mut third).await;
    assert_eq!(statuses(&raw), [200], "{raw}");
    write_all(
        &mut second,
        b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    let answered = read_all(&mut second).await;
    assert_eq!(statuses(&answered), [200], "{answered}");

    // Both of the host's busy: its next connection is refused, another machine's is not.
    let mut busy: Vec<TcpStream> = Vec::new();
    for _ in 0..2 {
        let mut stream = connect_from(host, server.addr).await;
        write_all(
            &mut stream,
            b"GET /slow HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        )
        .await;
        tokio::time::timeout(DEADLINE, server.slow_started.notified())
            .await
            .expect("the slow request did not start");
        busy.push(stream);
    }
    let raw = exchange_from(host, server.addr, b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").await;
    assert_eq!(statuses(&raw), [503], "{raw}");
    assert!(last_body(&raw).contains("this address"), "{raw}");
    let raw = exchange_from(
        Ipv4Addr::new(127, 0, 0, 3),
        server.addr,
        b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(statuses(&raw), [200], "{raw}");
    for mut stream in busy {
        let answered = read_all(&mut stream).await;
        assert_eq!(statuses(&answered), [200], "{answered}");
    }
}

/// Sends `request` on a new connection from `source` and reads until the server closes it
/// (a refused connection may end in a reset after its answer).
async fn exchange_from(source: Ipv4Addr, addr: SocketAddr, request: &[u8]) -> String {
    let mut stream = connect_from(source, addr).await;
    write_all(&mut stream, request).await;
    let (out, _) = wire::read_until_closed(&mut stream, DEADLINE).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn a_new_connection_is_refused_only_when_every_open_one_is_busy() {
    let server = start(capped(1)).await;
    let mut busy = TcpStream::connect(server.addr).await.unwrap();
    write_all(
        &mut busy,
        b"GET /slow HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    tokio::time::timeout(DEADLINE, server.slow_started.notified())
        .await
        .expect("the slow request did not start");
    let raw = exchange(server.addr, b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").await;
    assert_eq!(statuses(&raw), [503], "{raw}");
    assert_eq!(header(&raw, "retry-after").as_deref(), Some("1"), "{raw}");
    // The busy request is answered all the same, and then there is room again.
    let answered = read_all(&mut busy).await;
    assert_eq!(statuses(&answered), [200], "{answered}");
    let raw = exchange(
        server.addr,
        b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(statuses(&raw), [200], "{raw}");
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_after_the_header_timeout() {
    let server = start(test_config()).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let began = Instant::now();
    assert!(closed(&mut stream).await);
    assert!(
        began.elapsed() >= Duration::from_millis(250),
        "closed before the timeout"
    );
}

// R34: behind a trusted proxy each request is its forwarded client's: the shares of
// requests in flight are per client, not per proxy; an untrusted peer's header is ignored.
#[tokio::test]
async fn behind_a_trusted_proxy_the_shares_are_per_forwarded_client() {
    let listener = bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (_trigger, down) = shutdown::channel();
    let config = capped(8);
    let trusted = TrustedProxies::parse("127.0.0.7/32").unwrap();
    let open = connections(&config, trusted);
    let started = Arc::new(Notify::new());
    let slow = started.clone();
    tokio::spawn(serve_on(
        "test",
        listener,
        config,
        None,
        down,
        open,
        move |request: Request<Incoming>| {
            let slow = slow.clone();
            async move {
                let client = request
                    .extensions()
                    .get::<Client>()
                    .map(|c| c.0.to_string());
                if request.uri().path() == "/slow" {
                    slow.notify_one();
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                json(StatusCode::OK, &serde_json::json!({ "client": client }))
            }
        },
    ));
    let get = |path: &str, forwarded_for: &str| {
        format!(
            "GET {path} HTTP/1.1\r\nHost: t\r\nX-Forwarded-For: {forwarded_for}\r\n\
             Connection: close\r\n\r\n"
        )
    };
    let (proxy, stranger) = (Ipv4Addr::new(127, 0, 0, 7), Ipv4Addr::new(127, 0, 0, 8));
    let raw = exchange_from(proxy, addr, get("/", "1.2.3.4, 192.168.1.50").as_bytes()).await;
    assert_eq!(last_body(&raw), r#"{"client":"192.168.1.50"}"#, "{raw}");
    let raw = exchange_from(stranger, addr, get("/", "192.168.1.50").as_bytes()).await;
    assert_eq!(last_body(&raw), r#"{"client":"127.0.0.8"}"#, "{raw}");

    // One board behind the proxy holds its two requests in flight (a quarter of 8); its
    // third is 503, another board's request through the same proxy is answered.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = connect_from(proxy, addr).await;
        write_all(&mut stream, get("/slow", "192.168.1.50").as_bytes()).await;
        tokio::time::timeout(DEADLINE, started.notified())
            .await
            .expect("the slow request did not start");
        held.push(stream);
    }
    let raw = exchange_from(proxy, addr, get("/", "192.168.1.50").as_bytes()).await;
    assert_eq!(statuses(&raw), [503], "{raw}");
    assert!(last_body(&raw).contains("in flight"), "{raw}");
    let raw = exchange_from(proxy, addr, get("/", "192.168.1.51").as_bytes()).await;
    assert_eq!(statuses(&raw), [200], "{raw}");
    for mut stream in held {
        assert_eq!(statuses(&read_all(&mut stream).await), [200]);
    }
}

// R34, R44: a client that reads an answer to the end (`Connection: close`) and opens its next
// connection at once is let in: the slot of the closed one is free before the client can see
// it closed, however late its task ends, so the client is never refused for a connection it
// no longer has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reconnects_as_soon_as_it_is_answered_is_let_in() {
    // Its quarter is one connection.
    let server = start(capped(4)).await;
    for round in 0..300 {
        let raw = exchange(
            server.addr,
            b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert_eq!(statuses(&raw), [200], "round {round}: {raw}");
    }
}
