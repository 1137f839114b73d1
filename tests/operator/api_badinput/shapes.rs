//! 10,000 headers, paths that are not UTF-8 and deeply nested JSON get a 4xx, never a 5xx, and
//! nesting just under the parser limit does not break the operator.

use super::*;

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn oversized_heads_odd_paths_and_deep_json_get_4xx() {
    // R19, R24
    let f = fixture("api-bad-input").await;
    let port = f.operator.api_port;
    let ns = f.ns.name.clone();
    let before = f.mutations().get("web").await.unwrap();

    // 10,000 headers (about 130 KB, far over the 16 KiB head limit and hyper's header count):
    // 431 or 400. The head is written while the answer is read, since the server may answer
    // (and close) before it has all of it.
    let mut request = head(
        "GET",
        &format!("/api/v1/namespaces/{ns}/mutations"),
        "Connection: close\r\n",
    );
    request.truncate(request.len() - 2);
    for i in 0..10_000 {
        request.push_str(&format!("X-Filler-{i}: {i}\r\n"));
    }
    request.push_str("\r\n");
    let stream = connect(port).await;
    let (mut reader, mut writer) = stream.into_split();
    let writing = tokio::spawn(async move { write_lenient(&mut writer, request.as_bytes()).await });
    let ending = read_until_closed(&mut reader, "10,000 headers").await;
    let _ = writing.await.unwrap();
    let all = responses(&ending.bytes);
    assert_eq!(all.len(), 1, "10,000 headers: {ending:?}");
    assert!(
        [431, 400].contains(&all[0].status),
        "10,000 headers: {all:?}"
    );
    assert_serves(&f, "10,000 headers").await;

    // Paths that are not UTF-8: percent-encoded invalid sequences in each path parameter, and
    // raw bytes >= 0x80 on the wire. Always a 4xx, never a 5xx; the encoded ones are names
    // that are not DNS-1123 labels, so 400.
    // (path, the methods its route allows: those get 400, the others 405 as for any path)
    let encoded: [(String, &[&str]); 5] = [
        ("/api/v1/namespaces/%FF%FE/mutations".to_string(), &["GET"]),
        (
            format!("/api/v1/namespaces/{ns}/mutations/%C0%AF"),
            &["GET", "DELETE"],
        ),
        (
            format!("/api/v1/namespaces/{ns}/mutations/web%ED%A0%80"),
            &["GET", "DELETE"],
        ),
        (
            format!("/api/v1/namespaces/{ns}/mutations/web/variants/%80"),
            &["GET", "DELETE", "PATCH"],
        ),
        (
            format!("/api/v1/namespaces/{ns}/mutations/web/variants/a%00"),
            &["GET", "DELETE", "PATCH"],
        ),
    ];
    for (path, allowed) in &encoded {
        for method in ["GET", "DELETE", "PATCH"] {
            let reply = send_json(port, method, path, br#"{"instances":2}"#).await;
            let expected = if allowed.contains(&method) { 400 } else { 405 };
            assert_eq!(reply.status, expected, "{method} {path}: {reply:?}");
            assert!(reply.json()["error"].is_string(), "{method} {path}");
        }
    }
    let raw_paths: [&[u8]; 3] = [
        b"/api/v1/namespaces/\xff\xfe/mutations",
        b"/api/v1/namespaces/default/mutations/w\xc3\x28b",
        b"/\x80\x81\x82",
    ];
    for path in raw_paths {
        let mut raw = b"GET ".to_vec();
        raw.extend_from_slice(path);
        raw.extend_from_slice(
            format!(
                " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {ADMIN}\r\n\
                 Connection: close\r\n\r\n"
            )
            .as_bytes(),
        );
        let mut stream = connect(port).await;
        stream.write_all(&raw).await.unwrap();
        let ending = read_until_closed(&mut stream, "a raw non-UTF-8 path").await;
        let all = responses(&ending.bytes);
        assert_eq!(all.len(), 1, "{:?}: {ending:?}", lossy(path));
        assert!(
            (400..500).contains(&all[0].status),
            "{:?}: {all:?}",
            lossy(path)
        );
        assert_serves(&f, &format!("raw path {:?}", lossy(path))).await;
    }
    // A token that is not UTF-8 (obs-text in the header value) is simply not a valid token.
    let mut raw =
        format!("GET /api/v1/namespaces/{ns}/mutations/web HTTP/1.1\r\nHost: x\r\n").into_bytes();
    raw.extend_from_slice(b"Authorization: Bearer \xff\xfe\xfd\r\nConnection: close\r\n\r\n");
    let mut stream = connect(port).await;
    stream.write_all(&raw).await.unwrap();
    let ending = read_until_closed(&mut stream, "a non-UTF-8 token").await;
    let all = responses(&ending.bytes);
    assert_eq!(all.len(), 1, "{ending:?}");
    assert_eq!(all[0].status, 401, "{all:?}");
    assert_serves(&f, "non-UTF-8 paths").await;

    // 100,000 levels of JSON nesting in every body the API reads: 400 (serde_json's recursion
    // limit), no stack overflow. A stack overflow aborts the process, so answering afterwards
    // shows it is alive.
    let arrays = "[".repeat(100_000);
    let objects = r#"{"a":"#.repeat(100_000);
    let mutations = format!("/api/v1/namespaces/{ns}/mutations");
    let cases = [
        ("POST", mutations.clone(), arrays.clone()),
        ("POST", mutations.clone(), objects.clone()),
        (
            "POST",
            mutations.clone(),
            format!(r#"{{"name":"deep","deployment":{objects}"#),
        ),
        ("POST", format!("{mutations}/web/variants"), arrays.clone()),
        (
            "POST",
            format!("{mutations}/web/variants"),
            format!(r#"{{"label":"deep","env":{arrays}"#),
        ),
        (
            "PATCH",
            format!("{mutations}/web/variants/a"),
            arrays.clone(),
        ),
        (
            "PATCH",
            format!("{mutations}/web/variants/a"),
            format!(r#"{{"instances":{objects}"#),
        ),
    ];
    for (method, path, body) in &cases {
        let reply = send_json(port, method, path, body.as_bytes()).await;
        assert_eq!(reply.status, 400, "{method} {path} {:.60}: {reply:?}", body);
        let error = reply.json()["error"].as_str().unwrap().to_string();
        assert!(error.contains("invalid request body"), "{error}");
        assert_serves(&f, &format!("deep JSON to {method} {path}")).await;
    }

    // Nothing changed, nothing was created.
    let after = f.mutations().get("web").await.unwrap();
    assert_eq!(after.spec, before.spec);
    assert_eq!(after.metadata.generation, before.metadata.generation);
    let all = f.mutations().list(&Default::default()).await.unwrap();
    assert_eq!(common::names(&all.items), ["web"]);
    assert_no_panic(&f);
}

/// Starts a new operator process for the fixture's namespace (the old one is killed), as a
/// rollout or a crash would, and waits until its API answers or `CONVERGE` passes.
async fn restart(f: &mut Fixture) -> Result<(), String> {
    f.operator = common::Operator::start_with(&f.ns.name, &[("MUTANT_API_TOKEN", ADMIN)]);
    let deadline = Instant::now() + CONVERGE;
    let mut last = String::new();
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", f.operator.api_port))
            .await
            .is_ok()
        {
            let reply = f.call("GET", "/mutations", Some(ADMIN), None).await;
            if reply.status == 200 {
                return Ok(());
            }
            last = format!("{reply:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(last)
}

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn json_nested_just_under_the_parser_limit_does_not_break_the_operator() {
    // R24, R13: the operator's Kubernetes client decodes objects with serde_json's limit of
    // 128 levels, and a Mutation's base sits a few levels deeper in a watch event or a list
    // than in the request that created it. A create nested just under the limit must be
    // refused (400), or else be stored AND stay readable: answered 201, reconciled, and listed
    // again by a restarted operator (which lists every Mutation before it serves anything).
    let mut f = fixture("api-bad-deep").await;
    let mut accepted = vec!["web".to_string()];
    for depth in 110..=122 {
        let name = format!("deep-{depth}");
        let mut deployment = base(&name);
        deployment["spec"]["template"]["spec"]["containers"][0]["x"] = json!("NEST");
        let body = json!({"name": name, "deployment": deployment, "variants": [{"label": "a"}]})
            .to_string()
            .replace(
                "\"NEST\"",
                &format!("{}{}", "[".repeat(depth), "]".repeat(depth)),
            );
        let path = format!("/api/v1/namespaces/{}/mutations", f.ns.name);
        let reply = send_json(f.operator.api_port, "POST", &path, body.as_bytes()).await;
        assert!(
            [201, 400].contains(&reply.status),
            "{name}: {} {}",
            reply.status,
            lossy(reply.body.as_bytes())
        );
        if reply.status == 201 {
            accepted.push(name);
        }
    }
    accepted.sort();

    // The running operator still reconciles a Mutation made afterwards.
    let after = json!({"name": "after", "deployment": base("after"), "variants": []});
    let created = f
        .call("POST", "/mutations", Some(ADMIN), Some(&after))
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    f.token("after").await;
    accepted.push("after".to_string());
    accepted.sort();

    // A restarted operator syncs its caches, serves, and lists every accepted Mutation.
    if let Err(last) = restart(&mut f).await {
        panic!(
            "after creates nested up to 122 levels (accepted: {accepted:?}), a restarted \
             operator did not serve within {CONVERGE:?}; last answer: {last}"
        );
    }
    let mut names = f
        .call("GET", "/mutations", Some(ADMIN), None)
        .await
        .each("name");
    names.sort();
    assert_eq!(names, accepted);
    assert_no_panic(&f);
}
