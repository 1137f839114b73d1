//! R30: two replicas behind one Service, requests alternating between them. A Mutation
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
pub(super) async fn lagging_proxy(upstream: String) -> u16 {
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
pub(super) fn kubeconfig_through(port: u16, path: &std::path::Path) -> String {
    let source = std::env::var("KUBECONFIG").expect("KUBECONFIG names the test cluster");
    let mut config: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(source).unwrap()).unwrap();
    let cluster = &mut config["clusters"][0]["cluster"];
    let server = cluster["server"].as_str().unwrap().to_string();
    let upstream = server
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_string();
    cluster["server"] = Value::String(format!("https://127.0.0.1:{port}"));
    std::fs::write(path, serde_saphyr::to_string(&config).unwrap()).unwrap();
    upstream
}

/// A kubeconfig, in a new directory `<prefix>-<random>` under the target's tmp dir, that
/// reaches the test cluster through a [`lagging_proxy`]: (the directory, the file).
pub(super) async fn lagging_kubeconfig(prefix: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{prefix}-{}", common::random_suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    // The proxy's port is not known before the upstream is read: read it first.
    let upstream = kubeconfig_through(0, &kubeconfig);
    let proxy = lagging_proxy(upstream).await;
    kubeconfig_through(proxy, &kubeconfig);
    (dir, kubeconfig)
}

/// Replica A reaches the API server directly, replica B through the lagging proxy; both serve
/// the API of one namespace with the admin token `ADMIN`.
pub(super) struct Replicas {
    pub(super) a: Operator,
    pub(super) b: Operator,
    dir: std::path::PathBuf,
    pub(super) ns: TestNamespace,
}

impl Replicas {
    pub(super) async fn start(prefix: &str) -> Replicas {
        let ns = TestNamespace::new(prefix).await;
        common::install_crds(&ns.client).await;
        let (dir, kubeconfig) = lagging_kubeconfig("replicas").await;

        let env = |name: &'static str| {
            vec![
                ("POD_NAMESPACE", ns.name.clone()),
                ("POD_NAME", name.to_string()),
                ("MUTANT_API_TOKEN", ADMIN.to_string()),
            ]
        };
        let start = |env: Vec<(&str, String)>| {
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            Operator::start_with(&ns.name, &env)
        };
        let a = start(env("replica-a"));
        let mut b_env = env("replica-b");
        b_env.push(("KUBECONFIG", kubeconfig.display().to_string()));
        let b = start(b_env);
        let replicas = Replicas { a, b, dir, ns };
        for port in [replicas.a.api_port, replicas.b.api_port] {
            wait_api(port, &replicas.ns.name).await;
        }
        replicas
    }

    /// An API request to the replica on `port`, below the namespace's path.
    pub(super) async fn call(
        &self,
        port: u16,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&serde_json::Value>,
    ) -> common::http::Reply {
        self.call_with(port, method, path, token, &[], body).await
    }

    /// [`Replicas::call`] with extra headers.
    pub(super) async fn call_with(
        &self,
        port: u16,
        method: &str,
        path: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: Option<&serde_json::Value>,
    ) -> common::http::Reply {
        let path = format!("/api/v1/namespaces/{}{path}", self.ns.name);
        let body = body.map(|b| b.to_string());
        common::http::Request::new(method, &path, token, body.as_deref())
            .headers(headers)
            .send(port)
            .await
    }

    /// Creates Mutation `name` (variant `a`, 0 instances) through A; returns its token.
    pub(super) async fn create(&self, name: &str) -> String {
        let create = json!({"name": name, "deployment": base(name),
                            "variants": [{"label": "a", "instances": 0}]});
        let created = self
            .call(
                self.a.api_port,
                "POST",
                "/mutations",
                Some(ADMIN),
                Some(&create),
            )
            .await;
        assert_eq!(created.status, 201, "{created:?}");
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = self.ns.api();
        let secret = secrets.get(&format!("{name}-secret")).await.unwrap();
        String::from_utf8(secret.data.unwrap()["token"].0.clone()).unwrap()
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn what_one_replica_made_is_usable_through_the_other_at_once() {
    let r = Replicas::start("replicas").await;
    let (a, b) = (r.a.api_port, r.b.api_port);

    // Created through A (which answers once its own caches show the Mutation and its Secret).
    let token = r.create("m").await;

    // At once through B, whose watches lag behind: its token works, and the Mutation and its
    // variant are there.
    let read = r
        .call(b, "GET", "/mutations/m/variants/a", Some(&token), None)
        .await;
    assert_eq!(
        read.status, 200,
        "the new token through the other replica: {read:?}"
    );

    // A variant added through A is read through B at once.
    let add = json!({"label": "b", "instances": 0});
    let added = r
        .call(a, "POST", "/mutations/m/variants", Some(&token), Some(&add))
        .await;
    assert_eq!(added.status, 201, "{added:?}");
    let read = r
        .call(b, "GET", "/mutations/m/variants/b", Some(&token), None)
        .await;
    assert_eq!(
        read.status, 200,
        "the new variant through the other replica: {read:?}"
    );

    // A wrong token still gets the one 401, through either replica.
    for port in [a, b] {
        let wrong = r
            .call(
                port,
                "GET",
                "/mutations/m/variants/a",
                Some("0000000000000000000000000000000000000000000000000000000000000000"),
                None,
            )
            .await;
        assert_eq!(wrong.status, 401, "{wrong:?}");
    }
}

/// R30: edits of existing variants, alternating between the replicas, each read at once
/// through the other with `Cache-Control: no-cache`: scaled, removed, added, and the list. The
/// admin scales and removes its `a`; the Mutation's token its own `b` (R32), added through one
/// replica and scaled through the other, which checks who made it on the Mutation it reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_validated_read_through_either_replica_shows_every_acknowledged_edit() {
    let r = Replicas::start("replicas-edit").await;
    let token = r.create("m").await;
    let (a, b) = (r.a.api_port, r.b.api_port);
    let no_cache = [("Cache-Control", "no-cache")];
    let read = |port, path: &'static str| {
        let r = &r;
        async move {
            r.call_with(port, "GET", path, Some(ADMIN), &no_cache, None)
                .await
        }
    };
    for (round, (writer, reader)) in [(a, b), (b, a), (a, b), (b, a)].into_iter().enumerate() {
        let instances = round + 1;
        let scale = json!({ "instances": instances });
        let scaled = r
            .call(
                writer,
                "PATCH",
                "/mutations/m/variants/a",
                Some(ADMIN),
                Some(&scale),
            )
            .await;
        assert_eq!(scaled.status, 200, "{scaled:?}");
        let seen = read(reader, "/mutations/m/variants/a").await;
        assert_eq!(seen.status, 200, "{seen:?}");
        assert_eq!(
            seen.json()["instances"],
            instances,
            "round {round}: {seen:?}"
        );
    }
    // Added and removed through B, the list read through A.
    let add = json!({"label": "b", "instances": 0});
    let added = r
        .call(b, "POST", "/mutations/m/variants", Some(&token), Some(&add))
        .await;
    assert_eq!(added.status, 201, "{added:?}");
    let scale = json!({"instances": 1});
    let scaled = r
        .call(
            a,
            "PATCH",
            "/mutations/m/variants/b",
            Some(&token),
            Some(&scale),
        )
        .await;
    assert_eq!(scaled.status, 200, "{scaled:?}");
    let refused = r
        .call(b, "DELETE", "/mutations/m/variants/a", Some(&token), None)
        .await;
    assert_eq!(refused.status, 403, "the admin's a: {refused:?}");
    let removed = r
        .call(b, "DELETE", "/mutations/m/variants/a", Some(ADMIN), None)
        .await;
    assert_eq!(removed.status, 204, "{removed:?}");
    let listed = read(a, "/mutations/m/variants").await;
    assert_eq!(listed.each("label"), ["b"], "{listed:?}");
    let gone = read(a, "/mutations/m/variants/a").await;
    assert_eq!(gone.status, 404, "{gone:?}");
    // A Mutation deleted through A is gone from B's list and B's reads.
    let second = r.create("n").await;
    let deleted = r.call(a, "DELETE", "/mutations/n", Some(ADMIN), None).await;
    assert!([200, 204].contains(&deleted.status), "{deleted:?}");
    let list = read(b, "/mutations").await;
    assert_eq!(list.each("name"), ["m"], "{list:?}");
    let gone = r
        .call_with(b, "GET", "/mutations/n", Some(&second), &no_cache, None)
        .await;
    // 401 once B's cache has dropped its Secret too, 404 while only the Mutation is gone.
    assert!(
        [401, 404].contains(&gone.status),
        "the deleted Mutation: {gone:?}"
    );
}
