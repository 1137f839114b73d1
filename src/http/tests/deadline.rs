//! R44: a client that does not read its answer is disconnected after the write
//! timeout, so it holds the connection and the answer's bytes only that long.

use super::*;

#[tokio::test]
async fn a_client_that_does_not_read_is_disconnected() {
    let server = start(test_config()).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    write_all(&mut stream, b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n").await;
    // Read nothing for well past the write timeout (300 ms): the socket backs up at once.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let started = Instant::now();
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    let ended = loop {
        match tokio::time::timeout(DEADLINE, stream.read(&mut buf)).await {
            Ok(Ok(0)) => break true,
            Ok(Ok(n)) => got += n,
            Ok(Err(_reset)) => break true,
            Err(_elapsed) => break false,
        }
    };
    assert!(
        ended,
        "the connection stays open after {:?}",
        started.elapsed()
    );
    assert!(
        got < BIG,
        "the whole answer ({got} bytes) was taken: the server waited for the slow reader"
    );
}

#[tokio::test]
async fn a_client_that_reads_gets_all_of_it() {
    let server = start(test_config()).await;
    let raw = exchange(
        server.addr,
        b"GET /big HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(statuses(&raw), [200]);
    assert_eq!(last_body(&raw).len(), BIG);
}
