//! Shutdown of the server loop: in-flight requests drained, idle connections closed, the
//! drain bounded.

use super::*;

#[tokio::test]
async fn shutdown_drains_in_flight_requests_and_refuses_new_ones() {
    let server = start(test_config()).await;
    let in_flight = TcpStream::connect(server.addr).await.unwrap();
    write_all(&in_flight, b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n").await;
    tokio::time::timeout(DEADLINE, server.slow_started.notified())
        .await
        .expect("the slow request did not start");

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
    let raw = read_all(&in_flight).await;
    assert_eq!(statuses(&raw), [200], "{raw}");
    assert_eq!(last_body(&raw), r#"{"slow":true}"#);

    let result = tokio::time::timeout(DEADLINE, server.task)
        .await
        .expect("serve did not return after draining")
        .unwrap();
    assert!(result.is_ok(), "{result:?}");
}

#[tokio::test]
async fn shutdown_closes_idle_connections_at_once() {
    let mut config = test_config();
    // Long enough that only the graceful shutdown can close the connection in time.
    config.header_read_timeout = Duration::from_secs(30);
    let server = start(config).await;
    let idle = TcpStream::connect(server.addr).await.unwrap();
    write_all(&idle, b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let mut first = [0u8; 12];
    let n = read_some(&idle, &mut first).await.unwrap();
    assert_eq!(&first[..n], &b"HTTP/1.1 200"[..n]);
    assert!(n > 0);

    server.trigger.fire();
    read_all(&idle).await;
    let result = tokio::time::timeout(DEADLINE, server.task)
        .await
        .unwrap()
        .unwrap();
    assert!(result.is_ok(), "{result:?}");
}

#[tokio::test]
async fn drain_timeout_bounds_shutdown() {
    let mut config = test_config();
    config.drain_timeout = Duration::from_millis(50);
    let server = start(config).await;
    let in_flight = TcpStream::connect(server.addr).await.unwrap();
    write_all(&in_flight, b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n").await;
    tokio::time::timeout(DEADLINE, server.slow_started.notified())
        .await
        .expect("the slow request did not start");
    server.trigger.fire();
    let result = tokio::time::timeout(DEADLINE, server.task)
        .await
        .unwrap()
        .unwrap();
    assert!(result.is_ok(), "{result:?}");
    // The slow handler needs 300 ms; serve gives up after the 50 ms drain timeout and closes
    // the connection without an answer.
    assert_eq!(read_all(&in_flight).await, "");
}
