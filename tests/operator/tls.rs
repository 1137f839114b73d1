//! R47: the API over HTTPS (`MUTANT_API_TLS_CERT_FILE`, `MUTANT_API_TLS_KEY_FILE`), with
//! certificates from test CAs: curl and a rustls client that trust the CA get through, plain
//! HTTP and clients trusting another CA do not, a rotated certificate is served without a
//! restart, a handshake that never finishes is cut off like a slow request head, and the
//! Mutation-token matrix holds over TLS. The metrics port stays plain HTTP.

use std::time::{Duration, Instant};

use common::tls::{TestCa, request};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

/// A fixture whose API speaks HTTPS with a certificate of `ca`, written into its own directory.
async fn tls_fixture(prefix: &str, ca: &TestCa) -> (Fixture, std::path::PathBuf) {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{prefix}-{}", common::random_suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = ca.write_server(&dir);
    let f = Fixture::with_env(
        prefix,
        &[
            ("MUTANT_API_TOKEN", ADMIN),
            ("MUTANT_API_TLS_CERT_FILE", &cert),
            ("MUTANT_API_TLS_KEY_FILE", &key),
        ],
    )
    .await;
    let client = ca.client();
    let path = format!("/api/v1/namespaces/{}/mutations", f.ns.name);
    let port = f.operator.api_port;
    wait_for("the HTTPS API to serve", CONVERGE, || async {
        let reply = request(&client, port, "GET", &path, Some(ADMIN), None).await?;
        (reply.status == 200)
            .then_some(())
            .ok_or_else(|| format!("{reply:?}"))
    })
    .await;
    (f, dir)
}

/// curl's exit code and the HTTP status it printed, trusting `ca_file`.
fn curl(ca_file: &std::path::Path, url: &str, token: &str) -> (Option<i32>, String) {
    let out = std::process::Command::new("curl")
        .args([
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "10",
        ])
        .arg("--cacert")
        .arg(ca_file)
        .args(["-H", &format!("Authorization: Bearer {token}"), url])
        .output()
        .unwrap_or_else(|e| panic!("curl: {e} (scripts/test needs curl)"));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// One request of the token matrix: method, path, token, body, the status expected.
type Case = (&'static str, String, Option<String>, Option<Value>, u16);

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn the_api_speaks_https_only_to_clients_that_trust_its_ca() {
    let ca = TestCa::new("main");
    let (f, dir) = tls_fixture("api-tls", &ca).await;
    let port = f.operator.api_port;
    let base_path = format!("/api/v1/namespaces/{}", f.ns.name);
    let url = format!("https://127.0.0.1:{port}{base_path}/mutations");

    // curl --cacert, as docs/devices.md has it.
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    assert_eq!(curl(&ca_file, &url, ADMIN), (Some(0), "200".to_string()));

    // Another CA: refused by curl (60: the peer's certificate cannot be verified) and rustls.
    let other = TestCa::new("other");
    let other_file = dir.join("other.pem");
    std::fs::write(&other_file, other.pem()).unwrap();
    assert_eq!(curl(&other_file, &url, ADMIN).0, Some(60));
    let refused = request(
        &other.client(),
        port,
        "GET",
        &format!("{base_path}/mutations"),
        Some(ADMIN),
        None,
    )
    .await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.contains("UnknownIssuer") || e.contains("invalid peer certificate")),
        "{refused:?}"
    );

    // Plain HTTP on the TLS port gets no HTTP answer.
    let plain = common::http::exchange(
        port,
        &common::http::Request::new("GET", &format!("{base_path}/mutations"), Some(ADMIN), None)
            .bytes(port),
    )
    .await;
    assert!(!plain.starts_with("HTTP/"), "{plain:?}");

    // The metrics port stays plain HTTP.
    let metrics =
        common::http::request(f.operator.metrics_port, "GET", "/metrics", None, None).await;
    assert_eq!(metrics.status, 200);

    // A handshake that never finishes (a record header promising a ClientHello that never
    // comes) is closed like a slow request head (5 s), well before 20 s.
    let mut stalled = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    stalled
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .await
        .unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 64];
    let ended = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match stalled.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "a stalled handshake was still open after {:?}",
        started.elapsed()
    );

    // The Mutation-token matrix, over TLS.
    let client = ca.client();
    let call = |method: &'static str, path: String, token: Option<String>, body: Option<Value>| {
        let client = client.clone();
        async move {
            let body = body.map(|b| b.to_string());
            request(
                &client,
                port,
                method,
                &path,
                token.as_deref(),
                body.as_deref(),
            )
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
            .status
        }
    };
    let admin = Some(ADMIN.to_string());
    let p = |rest: &str| format!("{base_path}{rest}");
    for name in ["m", "n"] {
        let create = json!({"name": name, "deployment": base(name),
                            "variants": [{"label": "a", "instances": 0}]});
        assert_eq!(
            call("POST", p("/mutations"), admin.clone(), Some(create)).await,
            201
        );
    }
    let own = Some(f.token("m").await);
    let variant = json!({"label": "b", "instances": 0});
    let scale = json!({"instances": 1});
    let matrix: Vec<Case> = vec![
        ("GET", p("/mutations/m"), None, None, 401),
        ("GET", p("/mutations/m"), Some("wrong".into()), None, 401),
        ("GET", p("/mutations/m"), own.clone(), None, 200),
        ("GET", p("/mutations"), own.clone(), None, 401),
        ("GET", p("/mutations/n"), own.clone(), None, 401),
        (
            "POST",
            p("/mutations/n/variants"),
            own.clone(),
            Some(variant.clone()),
            401,
        ),
        ("DELETE", p("/mutations/m"), own.clone(), None, 401),
        (
            "POST",
            p("/mutations/m/variants"),
            own.clone(),
            Some(variant),
            201,
        ),
        ("GET", p("/mutations/m/variants"), own.clone(), None, 200),
        (
            "PATCH",
            p("/mutations/m/variants/b"),
            own.clone(),
            Some(scale),
            200,
        ),
        ("GET", p("/mutations/m/variants/b"), own.clone(), None, 200),
        (
            "DELETE",
            p("/mutations/m/variants/b"),
            own.clone(),
            None,
            204,
        ),
        ("DELETE", p("/mutations/n"), admin.clone(), None, 204),
    ];
    for (method, path, token, body, expected) in matrix {
        let described = format!(
            "{method} {path} with {}",
            token.as_deref().map_or("no token", |t| if t == ADMIN {
                "the admin token"
            } else {
                "a Mutation token"
            })
        );
        assert_eq!(
            call(method, path, token, body).await,
            expected,
            "{described}"
        );
    }

    // Rotating a device's token, as docs/devices.md says: delete the Secret; a new one with a new
    // token is made, and the old token is refused from then on.
    let old = own.clone().unwrap_or_default();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = f.ns.api();
    secrets
        .delete("m-secret", &Default::default())
        .await
        .unwrap();
    let new = wait_for("a new token", CONVERGE, || async {
        let token = f.token("m").await;
        if token == old {
            Err("still the old token".to_string())
        } else {
            Ok(token)
        }
    })
    .await;
    wait_for("the new token to be accepted", CONVERGE, || async {
        match call("GET", p("/mutations/m"), Some(new.clone()), None).await {
            200 => Ok(()),
            other => Err(other.to_string()),
        }
    })
    .await;
    assert_eq!(call("GET", p("/mutations/m"), Some(old), None).await, 401);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_rotated_certificate_is_served_without_a_restart() {
    let first = TestCa::new("first");
    let (f, dir) = tls_fixture("api-tls-rotate", &first).await;
    let port = f.operator.api_port;
    let path = format!("/api/v1/namespaces/{}/mutations", f.ns.name);

    // Files replaced as a Secret volume replaces them, by a certificate of another CA.
    let second = TestCa::new("second");
    second.write_server(&dir);
    let client = second.client();
    wait_for("the new certificate to be served", CONVERGE, || async {
        let reply = request(&client, port, "GET", &path, Some(ADMIN), None).await?;
        (reply.status == 200)
            .then_some(())
            .ok_or_else(|| format!("{reply:?}"))
    })
    .await;
    let old = request(&first.client(), port, "GET", &path, Some(ADMIN), None).await;
    assert!(old.is_err(), "the old CA is still trusted: {old:?}");
    assert!(
        f.operator
            .log_text()
            .contains("serving the API's new TLS certificate")
    );
    let _ = std::fs::remove_dir_all(&dir);
}
