//! Shutdown of the server loop: in-flight requests drained, idle connections closed, the
//! drain bounded.

use super::*;

/// Starts a server with `config` and a `/slow` request on it; returns once the handler runs.
async fn slow_request_in_flight(config: ServerConfig) -> (Server, TcpStream) {
    let server = start(config).await;
    let mut in_flight = TcpStream::connect(server.addr).await.unwrap();
    write_all(&mut in_flight, b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n").await;
    tokio::time::timeout(DEADLINE, server.slow_started.notified())
        .await
        .expect("the slow request did not start");
    (server, in_flight)
}

/// Waits for `serve` to return after its shutdown; it must return Ok.
async fn returned(task: JoinHandle<crate::Result<()>>) {
    let result = tokio::time::timeout(DEADLINE, task)
        .await
        .expect("serve did not return after its shutdown")
        .unwrap();
    assert!(result.is_ok(), "{result:?}");
}

#[tokio::test]
async fn shutdown_drains_in_flight_requests_and_refuses_new_ones() {
    let (server, mut in_flight) = slow_request_in_flight(test_config()).await;
    server.trigger.fire();

    // The listener is closed first: new connections are refused. (A connect racing the
    // close may still land in the backlog and then be reset, seen either as a success or
    // as ECONNRESET; keep trying until refused.)
    let refused = tokio::time::timeout(DEADLINE, async {
        loop {
            match TcpStream::connect(server.addr).await {
                Ok(_) => {}
                Err(err) if err.kind() == io::ErrorKind::ConnectionReset => {}
                Err(err) => break err,
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("new connections were still accepted after shutdown");
    assert_eq!(refused.kind(), io::ErrorKind::ConnectionRefused);

    // The request in flight still completes; its connection is then closed (no keep-alive
    // during shutdown), so reading to the end terminates.
    let raw = read_all(&mut in_flight).await;
    assert_eq!(statuses(&raw), [200], "{raw}");
    assert_eq!(last_body(&raw), r#"{"slow":true}"#);
    returned(server.task).await;
}

#[tokio::test]
async fn shutdown_closes_idle_connections_at_once() {
    let mut config = test_config();
    // Long enough that only the graceful shutdown can close the connection in time.
    config.header_read_timeout = Duration::from_secs(30);
    let server = start(config).await;
    let mut idle = TcpStream::connect(server.addr).await.unwrap();
    write_all(&mut idle, b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let mut first = [0u8; 12];
    let n = idle.read(&mut first).await.unwrap();
    assert_eq!(&first[..n], &b"HTTP/1.1 200"[..n]);
    assert!(n > 0);

    server.trigger.fire();
    read_all(&mut idle).await;
    returned(server.task).await;
}

#[tokio::test]
async fn drain_timeout_bounds_shutdown() {
    let mut config = test_config();
    config.drain_timeout = Duration::from_millis(50);
    let (server, mut in_flight) = slow_request_in_flight(config).await;
    server.trigger.fire();
    returned(server.task).await;
    // The slow handler needs 300 ms; serve gives up after the 50 ms drain timeout and closes
    // the connection without an answer.
    assert_eq!(read_all(&mut in_flight).await, "");
}
