//! Issue 15: two replicas behind one Service, requests alternating between them. A Mutation
//! created through one replica, its token and a variant added through it, are usable through
//! the other at once, although the other's caches have not caught up yet.
//!
//! To make "not caught up yet" certain rather than a race of milliseconds, the second replica
//! reaches the API server through a TCP proxy of the test's that holds every byte coming back
//! for 300 ms: its watches lag that much, far longer than the first replica takes to answer,
//! and so does its check of a miss, which then waits for its caches to show what the API
//! server has.

use std::time::Duration;

use serde_json::json;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

use super::*;

/// How long the proxy holds what the API server sends.
const LAG: Duration = Duration::from_millis(300);

/// A TCP proxy to `upstream` that forwards what the client sends at once and what comes back
/// `LAG` late (in order). Returns its port; it runs until the test's runtime ends.
async fn lagging_proxy(upstream: String) -> u16 {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    return;
                };
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
                });
                // Each chunk is written LAG after it was read, in order.
                let (tx, mut rx) =
                    tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = server_read.read(&mut buf).await {
                        if n == 0
                            || tx
                                .send((tokio::time::Instant::now() + LAG, buf[..n].to_vec()))
                                .is_err()
                        {
                            break;
                        }
                    }
                });
                while let Some((due, chunk)) = rx.recv().await {
                    tokio::time::sleep_until(due).await;
                    if client_write.write_all(&chunk).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    port
}

/// A copy of the test cluster's kubeconfig whose server is `127.0.0.1:port`.
fn kubeconfig_through(port: u16, path: &std::path::Path) -> String {
    let source = std::env::var("KUBECONFIG").expect("KUBECONFIG names the test cluster");
    let mut config: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(source).unwrap()).unwrap();
    let cluster = &mut config["clusters"][0]["cluster"];
    let server = cluster["server"].as_str().unwrap().to_string();
    let upstream = server
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_string();
    cluster["server"] = serde_yaml::Value::String(format!("https://127.0.0.1:{port}"));
    std::fs::write(path, serde_yaml::to_string(&config).unwrap()).unwrap();
    upstream
}

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn what_one_replica_made_is_usable_through_the_other_at_once() {
    let ns = TestNamespace::new("replicas").await;
    common::install_crds(&ns.client).await;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("replicas-{}", common::random_suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    // The proxy's port is not known before the upstream is read: read it first.
    let upstream = kubeconfig_through(0, &kubeconfig);
    let proxy = lagging_proxy(upstream).await;
    kubeconfig_through(proxy, &kubeconfig);

    let env = |name: &'static str| {
        vec![
            ("POD_NAMESPACE", ns.name.clone()),
            ("POD_NAME", name.to_string()),
            ("MUTANT_API_TOKEN", ADMIN.to_string()),
        ]
    };
    let a_env = env("replica-a");
    let a = Operator::start_with(
        &ns.name,
        &a_env
            .iter()
            .map(|(k, v)| (*k, v.as_str()))
            .collect::<Vec<_>>(),
    );
    let mut b_env = env("replica-b");
    b_env.push(("KUBECONFIG", kubeconfig.display().to_string()));
    let b = Operator::start_with(
        &ns.name,
        &b_env
            .iter()
            .map(|(k, v)| (*k, v.as_str()))
            .collect::<Vec<_>>(),
    );
    let path = |p: &str| format!("/api/v1/namespaces/{}{p}", ns.name);
    for port in [a.api_port, b.api_port] {
        wait_for("the HTTP API to serve", CONVERGE, || async {
            TcpStream::connect(("127.0.0.1", port))
                .await
                .map_err(|e| e.to_string())?;
            let reply =
                common::http::request(port, "GET", &path("/mutations"), Some(ADMIN), None).await;
            if reply.status == 200 {
                Ok(())
            } else {
                Err(format!("{reply:?}"))
            }
        })
        .await;
    }

    // Created through A (which answers once its own caches show the Mutation and its Secret).
    let create = json!({"name": "m", "deployment": base("web"), "variants": [{"label": "a", "instances": 0}]});
    let body = create.to_string();
    let created = common::http::request(
        a.api_port,
        "POST",
        &path("/mutations"),
        Some(ADMIN),
        Some(&body),
    )
    .await;
    assert_eq!(created.status, 201, "{created:?}");
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = ns.api();
    let secret = secrets.get("m-secret").await.unwrap();
    let token = String::from_utf8(secret.data.unwrap()["token"].0.clone()).unwrap();

    // At once through B, whose watches lag behind: its token works, and the Mutation and its
    // variant are there.
    let read = common::http::request(
        b.api_port,
        "GET",
        &path("/mutations/m/variants/a"),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(
        read.status, 200,
        "the new token through the other replica: {read:?}"
    );

    // A variant added through A is read through B at once.
    let add = json!({"label": "b", "instances": 0}).to_string();
    let added = common::http::request(
        a.api_port,
        "POST",
        &path("/mutations/m/variants"),
        Some(&token),
        Some(&add),
    )
    .await;
    assert_eq!(added.status, 201, "{added:?}");
    let read = common::http::request(
        b.api_port,
        "GET",
        &path("/mutations/m/variants/b"),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(
        read.status, 200,
        "the new variant through the other replica: {read:?}"
    );

    // A wrong token still gets the one 401, through either replica.
    for port in [a.api_port, b.api_port] {
        let wrong = common::http::request(
            port,
            "GET",
            &path("/mutations/m/variants/a"),
            Some("0000000000000000000000000000000000000000000000000000000000000000"),
            None,
        )
        .await;
        assert_eq!(wrong.status, 401, "{wrong:?}");
    }
    drop((a, b));
    let _ = std::fs::remove_dir_all(&dir);
}
