//! Slow request heads are cut off; endless, trickled and oversized bodies are refused.

use super::*;

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
    assert_eq!(f.spec_labels("web").await, ["a"]);
    assert_no_panic(&f);
}
