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

#[tokio::test]
async fn idle_connections_make_room_at_the_cap() {
    let server = start(capped(3)).await;
    // Three clients connect and send nothing.
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(TcpStream::connect(server.addr).await.unwrap());
        // Accepted in this order, so the first is the longest idle.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A fourth is served: the longest idle connection was closed for it.
    let raw = exchange(
        server.addr,
        b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(statuses(&raw), [200], "{raw}");
    assert!(
        closed(&mut idle[0]).await,
        "the longest idle connection is closed"
    );
    // The others are still open: a request on one is answered.
    write_all(
        &mut idle[2],
        b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    let raw = read_all(&mut idle[2]).await;
    assert_eq!(statuses(&raw), [200], "{raw}");
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
