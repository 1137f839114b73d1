//! R20: the auth matrix. {admin, this Mutation's token, another Mutation's token, a wrong
//! token, no header} × the nine routes give exactly the contract's codes.

use serde_json::json;

use super::*;

fn create_body(name: &str) -> Value {
    json!({"name": name, "deployment": base(name), "variants": [{"label": "a", "instances": 0}]})
}

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn auth_matrix() {
    let f = Fixture::with_api("api-auth").await;
    for name in ["web", "other"] {
        let reply = f
            .call("POST", "/mutations", Some(ADMIN), Some(&create_body(name)))
            .await;
        assert_eq!(reply.status, 201, "{reply:?}");
    }
    let web = f.token("web").await;
    let other = f.token("other").await;
    let wrong = "0".repeat(64);
    // (who, token) in a fixed order: admin, own, other, wrong, none.
    let callers: [(&str, Option<&str>); 5] = [
        ("admin", Some(ADMIN)),
        ("own", Some(&web)),
        ("other", Some(&other)),
        ("wrong", Some(&wrong)),
        ("none", None),
    ];

    let scale = json!({"instances": 1});
    let variant = |label: &str| json!({"label": label, "instances": 0});
    let mut failures = Vec::new();
    let mut check = |what: String, got: u16, want: u16| {
        if got != want {
            failures.push(format!("{what}: got {got}, want {want}"));
        }
    };
    for (who, token) in callers {
        let admin = who == "admin";
        let own = admin || who == "own";
        let deny = |ok: u16, allowed: bool| if allowed { ok } else { 401 };

        let r = f.call("GET", "/mutations", token, None).await;
        check(format!("{who} GET list"), r.status, deny(200, admin));
        let r = f
            .call(
                "POST",
                "/mutations",
                token,
                Some(&create_body(&format!("new-{who}"))),
            )
            .await;
        check(format!("{who} POST mutation"), r.status, deny(201, admin));
        let r = f.call("GET", "/mutations/web", token, None).await;
        check(format!("{who} GET mutation"), r.status, deny(200, own));
        let r = f.call("GET", "/mutations/web/variants", token, None).await;
        check(format!("{who} GET variants"), r.status, deny(200, own));
        let label = format!("by-{who}");
        let r = f
            .call(
                "POST",
                "/mutations/web/variants",
                token,
                Some(&variant(&label)),
            )
            .await;
        check(format!("{who} POST variant"), r.status, deny(201, own));
        let r = f
            .call("GET", "/mutations/web/variants/a", token, None)
            .await;
        check(format!("{who} GET variant"), r.status, deny(200, own));
        // The variant it just added: the token scales only its own (R32).
        let r = f
            .call(
                "PATCH",
                &format!("/mutations/web/variants/{label}"),
                token,
                Some(&scale),
            )
            .await;
        check(format!("{who} PATCH variant"), r.status, deny(200, own));
        let r = f
            .call(
                "DELETE",
                &format!("/mutations/web/variants/{label}"),
                token,
                None,
            )
            .await;
        check(format!("{who} DELETE variant"), r.status, deny(204, own));
        // Deleting: the admin deletes what it just made; the others try "web" itself.
        let target = if admin { "new-admin" } else { "web" };
        let r = f
            .call("DELETE", &format!("/mutations/{target}"), token, None)
            .await;
        check(format!("{who} DELETE mutation"), r.status, deny(204, admin));
        if !admin {
            assert_eq!(r.header("www-authenticate"), Some("Bearer"));
        }
    }
    assert!(failures.is_empty(), "auth matrix:\n{}", failures.join("\n"));

    // Nothing the refused calls tried happened.
    let reply = f.call("GET", "/mutations", Some(ADMIN), None).await;
    assert_eq!(reply.each("name"), ["other", "web"]);
    let variants = f
        .call("GET", "/mutations/web/variants", Some(ADMIN), None)
        .await
        .json();
    assert_eq!(variants.as_array().unwrap().len(), 1, "{variants}");

    // An absent Mutation and a wrong token give byte-identical 401s to a Mutation token; the
    // admin gets 404.
    let absent = f.call("GET", "/mutations/ghost", Some(&web), None).await;
    let wrong_token = f.call("GET", "/mutations/web", Some(&wrong), None).await;
    let no_header = f.call("GET", "/mutations/web", None, None).await;
    assert_eq!(
        (absent.status, wrong_token.status, no_header.status),
        (401, 401, 401)
    );
    assert_eq!(absent.body, wrong_token.body);
    assert_eq!(absent.body, no_header.body);
    assert!(!absent.body.contains("ghost"));
    assert_eq!(
        f.call("GET", "/mutations/ghost", Some(ADMIN), None)
            .await
            .status,
        404
    );
    assert_eq!(
        f.call("GET", "/mutations/ghost/variants/a", Some(ADMIN), None)
            .await
            .status,
        404
    );
    assert_eq!(
        f.call("GET", "/mutations/web/variants/zzz", Some(&web), None)
            .await
            .status,
        404
    );
    assert_eq!(
        f.call("DELETE", "/mutations/ghost", Some(ADMIN), None)
            .await
            .status,
        404
    );

    // Tokens never appear in responses or in the operator's log.
    assert!(!f.operator.log_text().contains(&web));
    assert!(!f.operator.log_text().contains(ADMIN));
    assert!(!reply.body.contains(&web));
}

/// R15, R20: a token in a Secret of the right name that the Mutation does not own is never
/// accepted.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_foreign_secret_token_is_refused() {
    use k8s_openapi::api::core::v1::Secret;
    let f = Fixture::with_api("api-foreign").await;
    let secrets: Api<Secret> = f.ns.api();
    let planted: Secret = common::from_json(json!({
        "metadata": { "name": "web-secret" },
        "stringData": { "token": "planted-token" }
    }));
    secrets.create(&Default::default(), &planted).await.unwrap();
    let reply = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create_body("web")))
        .await;
    assert_eq!(reply.status, 201, "{reply:?}");
    f.wait_status::<Mutation>("web", "foreign secret reported", |s| s.message.is_some())
        .await;
    let reply = f
        .call("GET", "/mutations/web", Some("planted-token"), None)
        .await;
    assert_eq!(reply.status, 401);
}

/// R20: MUTANT_API_INSECURE=true serves without auth and says so loudly at start.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn insecure_mode_serves_without_auth_and_warns() {
    let f = Fixture::with_env("api-insecure", &[("MUTANT_API_INSECURE", "true")]).await;
    let port = f.operator.api_port;
    let path = format!("/api/v1/namespaces/{}/mutations", f.ns.name);
    let reply = wait_for("the API to answer without a token", CONVERGE, || async {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            return Err("not listening".to_string());
        }
        let reply = common::http::request(port, "GET", &path, None, None).await;
        if reply.status == 200 {
            Ok(reply)
        } else {
            Err(format!("{reply:?}"))
        }
    })
    .await;
    assert_eq!(reply.json(), json!([]));
    let log = f.operator.log_text();
    assert!(
        log.contains("WARN") && log.contains("WITHOUT AUTHENTICATION"),
        "{log}"
    );
}
