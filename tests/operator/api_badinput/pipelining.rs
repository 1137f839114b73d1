//! HTTP/1.0 and pipelined requests are answered, in order.

use super::*;

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
    assert_eq!(all[3].each("label"), ["a", "old"]);
    assert_serves(&f, "pipelined requests").await;

    assert_eq!(f.spec_labels("web").await, ["a", "old"]);
    assert_no_panic(&f);
}
