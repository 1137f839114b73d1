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

    let variants = "/mutations/web/variants";
    let a = "/mutations/web/variants/a";
    let bad_name = json!({"name": "Web!", "deployment": base("x")}).to_string();
    let taken = json!({"name": "web", "deployment": base("web")}).to_string();
    let huge = format!(r#"{{"label":"b","env":{{"X":"{}"}}}}"#, "x".repeat(2 << 20));
    // (method, path, body, expected status, a word the error must contain)
    let cases = [
        ("POST", variants, "{not json", 400, "invalid request body"),
        ("POST", variants, r#"{"label": 7}"#, 400, "invalid type"),
        (
            "POST",
            variants,
            r#"{"env": {}}"#,
            400,
            "missing field `label`",
        ),
        (
            "POST",
            variants,
            r#"{"label":"b","replicas":2}"#,
            400,
            "unknown field `replicas`",
        ),
        (
            "POST",
            variants,
            r#"{"label":"Bad_Label"}"#,
            400,
            "DNS-1123",
        ),
        (
            "POST",
            variants,
            r#"{"label":"b","env":{"1BAD":"x"}}"#,
            400,
            "1BAD",
        ),
        (
            "POST",
            variants,
            r#"{"label":"b","env":{"A":1}}"#,
            400,
            "invalid type",
        ),
        (
            "POST",
            variants,
            r#"{"label":"b","instances":-1}"#,
            400,
            "negative",
        ),
        ("POST", variants, r#"{"label":"a"}"#, 409, "already exists"),
        ("PATCH", a, r#"{"instances":-2}"#, 400, "negative"),
        ("PATCH", a, r#"{"instances":"4"}"#, 400, "invalid type"),
        (
            "PATCH",
            a,
            r#"{"instances":4,"env":{}}"#,
            400,
            "unknown field `env`",
        ),
        (
            "PATCH",
            "/mutations/web/variants/zz",
            r#"{"instances":4}"#,
            404,
            "not found",
        ),
        (
            "POST",
            "/mutations",
            r#"{"name":"web","deployment":{}}"#,
            400,
            "deployment",
        ),
        ("POST", "/mutations", &bad_name, 400, "name"),
        ("POST", "/mutations", &taken, 409, "already exists"),
        ("POST", variants, &huge, 413, "larger than"),
        ("GET", "/mutations/Bad_Name", "", 400, "mutation name"),
        (
            "GET",
            "/mutations/web/variants/-x",
            "",
            400,
            "variant label",
        ),
        ("GET", "/deployments", "", 404, "not found"),
        ("PUT", "/mutations/web", "{}", 405, "not allowed"),
    ];
    for (method, p, body, status, word) in cases {
        let reply = raw(method, p, body).await;
        assert_eq!(reply.status, status, "{method} {p} {body:.80}: {reply:?}");
        let error = reply.error();
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

/// R24: a Mutation's name is a DNS-1123 subdomain, as Kubernetes allows: one named with
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

/// R19, R51: a namespace being deleted is part of normal operation. A create in it answers 409
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

/// R24: what the API server would refuse is refused up front with 400 and the
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
    let mut mistyped = base("web");
    // (not spec.replicas: the variant's instances replace it)
    mistyped["spec"]["minReadySeconds"] = json!("ten");
    // R10: with no variant yet, the base alone is dry-run: refused now, not at the first
    // variant.
    let cases = [
        (unknown, "bogusField", json!([{"label": "a"}])),
        (no_image, "image", json!([{"label": "a"}])),
        (mistyped.clone(), "minReadySeconds", json!([{"label": "a"}])),
        (mistyped, "minReadySeconds", json!([])),
    ];
    for (base, needle, variants) in cases {
        let create = json!({"name": "web", "deployment": base, "variants": variants});
        let reply = f
            .call("POST", "/mutations", Some(ADMIN), Some(&create))
            .await;
        assert_eq!(reply.status, 400, "{reply:?}");
        let error = reply.error();
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
