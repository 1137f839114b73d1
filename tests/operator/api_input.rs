//! R19, R24: bad input gets a clear JSON error with the right code and changes nothing.

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn bad_input_is_refused_and_changes_nothing() {
    let f = Fixture::with_api("api-input").await;
    let create = json!({"name": "web", "deployment": base("web"), "variants": [{"label": "a"}]});
    let created = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    assert_eq!(
        created.json()["variants"][0]["instances"],
        1,
        "instances defaults to 1"
    );
    let before = f.mutations().get("web").await.unwrap();
    let port = f.operator.api_port;
    let ns = f.ns.name.clone();
    let path = |p: &str| format!("/api/v1/namespaces/{ns}{p}");
    let raw = async |method: &str, p: &str, body: &str| {
        let body = (!body.is_empty()).then_some(body);
        common::http::request(port, method, &path(p), Some(ADMIN), body).await
    };

    // (method, path, body, expected status, a word the error must contain)
    let cases: Vec<(&str, &str, String, u16, &str)> = vec![
        (
            "POST",
            "/mutations/web/variants",
            "{not json".into(),
            400,
            "invalid request body",
        ),
        (
            "POST",
            "/mutations/web/variants",
            r#"{"label": 7}"#.into(),
            400,
            "invalid type",
        ),
        (
            "POST",
            "/mutations/web/variants",
            r#"{"env": {}}"#.into(),
            400,
            "missing field `label`",
        ),
        (
            "POST",
            "/mutations/web/variants",
            r#"{"label":"b","replicas":2}"#.into(),
            400,
            "unknown field `replicas`",
        ),
        (
            "POST",
            "/mutations/web/variants",
            r#"{"label":"Bad_Label"}"#.into(),
            400,
            "DNS-1123",
        ),
        (
            "POST",
            "/mutations/web/variants",
            r#"{"label":"b","env":{"1BAD":"x"}}"#.into(),
            400,
            "1BAD",
        ),
        (
            "POST",
            "/mutations/web/variants",
            r#"{"label":"b","env":{"A":1}}"#.into(),
            400,
            "invalid type",
        ),
        (
            "POST",
            "/mutations/web/variants",
            r#"{"label":"b","instances":-1}"#.into(),
            400,
            "negative",
        ),
        (
            "POST",
            "/mutations/web/variants",
            r#"{"label":"a"}"#.into(),
            409,
            "already exists",
        ),
        (
            "PATCH",
            "/mutations/web/variants/a",
            r#"{"instances":-2}"#.into(),
            400,
            "negative",
        ),
        (
            "PATCH",
            "/mutations/web/variants/a",
            r#"{"instances":"4"}"#.into(),
            400,
            "invalid type",
        ),
        (
            "PATCH",
            "/mutations/web/variants/a",
            r#"{"instances":4,"env":{}}"#.into(),
            400,
            "unknown field `env`",
        ),
        (
            "PATCH",
            "/mutations/web/variants/zz",
            r#"{"instances":4}"#.into(),
            404,
            "not found",
        ),
        (
            "POST",
            "/mutations",
            r#"{"name":"web","deployment":{}}"#.into(),
            400,
            "deployment",
        ),
        (
            "POST",
            "/mutations",
            json!({"name": "Web!", "deployment": base("x")}).to_string(),
            400,
            "name",
        ),
        (
            "POST",
            "/mutations",
            json!({"name": "web", "deployment": base("web")}).to_string(),
            409,
            "already exists",
        ),
        (
            "POST",
            "/mutations/web/variants",
            format!(r#"{{"label":"b","env":{{"X":"{}"}}}}"#, "x".repeat(2 << 20)),
            413,
            "larger than",
        ),
        (
            "GET",
            "/mutations/Bad_Name",
            String::new(),
            400,
            "mutation name",
        ),
        (
            "GET",
            "/mutations/web/variants/-x",
            String::new(),
            400,
            "variant label",
        ),
        ("GET", "/deployments", String::new(), 404, "not found"),
        ("PUT", "/mutations/web", "{}".into(), 405, "not allowed"),
    ];
    for (method, p, body, status, word) in &cases {
        let reply = raw(method, p, body).await;
        assert_eq!(
            reply.status, *status,
            "{method} {p} {:.80}: {reply:?}",
            body
        );
        let error = reply.json()["error"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            error.contains(word),
            "{method} {p}: error {error:?} should mention {word:?}"
        );
        assert_eq!(reply.header("content-type"), Some("application/json"));
    }
    let reply = raw("PUT", "/mutations/web", "{}").await;
    assert_eq!(reply.header("allow"), Some("GET, DELETE"));
    let bad_ns = common::http::request(
        port,
        "GET",
        "/api/v1/namespaces/NOT_A_NS/mutations",
        Some(ADMIN),
        None,
    )
    .await;
    assert_eq!(bad_ns.status, 400);

    // Nothing changed.
    let after = f.mutations().get("web").await.unwrap();
    assert_eq!(after.spec, before.spec);
    assert_eq!(after.metadata.generation, before.metadata.generation);

    // A client that sends its headers too slowly is disconnected.
    let mut slow = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    slow.write_all(b"GET /api/v1/namespaces/x/mutations HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(30), slow.read_to_end(&mut buf)).await;
    assert!(
        closed.is_ok(),
        "a stalled request head must be cut off by the server"
    );
}

/// Issue 15: a Mutation's name is a DNS-1123 subdomain, as Kubernetes allows: one named with
/// dots is created, read and edited through the API, with the admin token and its own.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_mutation_named_with_dots_is_reachable() {
    let f = Fixture::with_api("api-dots").await;
    let create = json!({"name": "web.v2", "deployment": base("web"), "variants": [{"label": "a", "instances": 0}]});
    let created = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    let read = f.call("GET", "/mutations/web.v2", Some(ADMIN), None).await;
    assert_eq!(read.status, 200, "{read:?}");
    assert_eq!(read.json()["name"], "web.v2");

    let token = f.token("web.v2").await;
    let added = f
        .call(
            "POST",
            "/mutations/web.v2/variants",
            Some(&token),
            Some(&json!({"label": "b", "instances": 0})),
        )
        .await;
    assert_eq!(added.status, 201, "{added:?}");
    let variant = f
        .call("GET", "/mutations/web.v2/variants/b", Some(&token), None)
        .await;
    assert_eq!(variant.status, 200, "{variant:?}");
    f.wait_deployment("web-b", "created", |_| true).await;

    // Not a subdomain: still 400.
    let bad = f.call("GET", "/mutations/web..v2", Some(ADMIN), None).await;
    assert_eq!(bad.status, 400, "{bad:?}");
}

/// Issue 15: a namespace being deleted is part of normal operation. A create in it answers 409
/// with the API server's reason (not 502), and the request is not logged as a failure at warn.
/// A ConfigMap with a finalizer of the test's holds the namespace in Terminating meanwhile.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_terminating_namespace_is_a_conflict_not_a_fault() {
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
    let f = Fixture::with_api("api-term").await;
    let holds: Api<ConfigMap> = f.ns.api();
    let hold: ConfigMap = common::from_json(json!({
        "metadata": {"name": "hold", "finalizers": [common::TEST_HOLD]}
    }));
    holds.create(&PostParams::default(), &hold).await.unwrap();
    let namespaces: Api<Namespace> = Api::all(f.ns.client.clone());
    namespaces
        .delete(&f.ns.name, &DeleteParams::background())
        .await
        .unwrap();
    wait_for("the namespace to be Terminating", CONVERGE, || async {
        let ns = namespaces
            .get(&f.ns.name)
            .await
            .map_err(|e| e.to_string())?;
        match ns.status.and_then(|s| s.phase).as_deref() {
            Some("Terminating") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    let create = json!({"name": "late", "deployment": base("web"), "variants": [{"label": "a"}]});
    let reply = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    // Let the namespace go before asserting, so a failure leaves nothing behind.
    holds
        .patch(
            "hold",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    assert_eq!(reply.status, 409, "{reply:?}");
    assert!(
        reply.json()["error"]
            .as_str()
            .is_some_and(|e| e.contains("being terminated")),
        "{reply:?}"
    );
    let log = f.operator.log_text();
    let warned: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.contains("WARN") && (l.contains("method=POST") || l.contains("kubernetes api"))
        })
        .collect();
    assert!(warned.is_empty(), "{warned:#?}");
}

/// Issue 15, R24: what the API server would refuse is refused up front with 400 and the
/// server's message (a dry run of each resulting Deployment), and nothing is created: a field
/// the Deployment schema does not declare, and a container without an image.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn what_the_server_would_refuse_is_a_400() {
    let f = Fixture::with_api("api-dryrun").await;
    let mut unknown = base("web");
    unknown["spec"]["template"]["spec"]["containers"][0]["bogusField"] = json!(true);
    let mut no_image = base("web");
    no_image["spec"]["template"]["spec"]["containers"][0]
        .as_object_mut()
        .unwrap()
        .remove("image");
    for (base, needle) in [(unknown, "bogusField"), (no_image, "image")] {
        let create = json!({"name": "web", "deployment": base, "variants": [{"label": "a"}]});
        let reply = f
            .call("POST", "/mutations", Some(ADMIN), Some(&create))
            .await;
        assert_eq!(reply.status, 400, "{reply:?}");
        let error = reply.json()["error"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            error.contains(needle) && error.contains("rejected by the Kubernetes API"),
            "{error}"
        );
        assert!(f.mutations().get_opt("web").await.unwrap().is_none());
    }
    // A valid one is created as before.
    let create = json!({"name": "web", "deployment": base("web"), "variants": [{"label": "a", "instances": 0}]});
    let reply = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    assert_eq!(reply.status, 201, "{reply:?}");
}
