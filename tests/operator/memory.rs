//! R44, R34: what one token can make a replica hold is bounded by design. The
//! operator runs in a memory cgroup of deploy/'s limit (64 MiB) with its defaults (256
//! connections, 8 MiB of buffered bodies and answers, a quarter per caller), while one
//! Mutation's token, the one every board of a fleet holds, keeps 200 connections (from four
//! addresses, each within its quarter) busy with the ways of holding memory: bodies as large
//! as the listener used to accept (1 MB) or as a token may now send (190 kB), sent all but one
//! byte and left there; chunked bodies sent without end; and requests for a large answer (its
//! Mutation, whose base is about 300 KiB) that are never read. Those used to hold about 60 MB of bodies alone, and the kernel killed
//! the process (checked: "Memory cgroup out of memory: Killed process (mutantops)"). Now the
//! process lives, never reaches its limit, and still answers: the admin, a small change sent
//! with the same token, and the probes.

use std::{sync::Arc, time::Duration};

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
    sync::Mutex,
};

use super::*;
use common::cgroup::MemoryCgroup;

/// deploy/'s memory limit for the operator.
const LIMIT: u64 = 64 * 1024 * 1024;

/// A base whose JSON is about 300 KiB: 75 env entries of 4 KiB.
fn large_base(name: &str) -> Value {
    let mut b = base(name);
    let env: Vec<Value> = (0..75)
        .map(|i| json!({ "name": format!("FILL_{i}"), "value": "f".repeat(4000) }))
        .collect();
    b["spec"]["template"]["spec"]["containers"][0]["env"] = json!(env);
    b
}

/// The head of a request to `path` with `token`, and its extra `headers`.
fn head(method: &str, path: &str, token: &str, headers: &str) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: operator\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\n{headers}\r\n"
    )
}

/// Opens a connection from `source` and sends `bytes`; the connection is kept (returned)
/// whatever happens.
async fn send(source: std::net::Ipv4Addr, port: u16, bytes: &[u8]) -> Option<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4().ok()?;
    socket.bind((source, 0).into()).ok()?;
    let mut stream = socket.connect(([127, 0, 0, 1], port).into()).await.ok()?;
    // A refused body is answered and the connection closed: that is fine, the test goes on.
    let _ = stream.write_all(bytes).await;
    Some(stream)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn one_token_cannot_exhaust_a_replicas_memory() {
    let ns = TestNamespace::new("memory").await;
    common::install_crds(&ns.client).await;
    let cgroup = MemoryCgroup::new("mutantops-memory", LIMIT);
    let operator = Operator::start_confined(
        &ns.name,
        &[("MUTANT_API_TOKEN", ADMIN)],
        None,
        Some(cgroup.dir()),
    );
    let f = Fixture { operator, ns };
    let port = f.operator.api_port;
    wait_api(port, &f.ns.name).await;
    let create = json!({"name": "web", "deployment": large_base("web"),
                        "variants": [{"label": "a", "instances": 0}]});
    let created = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    let token = f.token("web").await;
    let got = f.call("GET", "/mutations/web", Some(&token), None).await;
    assert_eq!(got.status, 200, "{got:?}");
    assert!(
        got.body.len() > 250_000,
        "the answer is {} bytes",
        got.body.len()
    );

    let prefix = format!("/api/v1/namespaces/{}/mutations/web", f.ns.name);
    let held = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..200 {
        let (held, token, prefix) = (held.clone(), token.clone(), prefix.clone());
        tasks.push(tokio::spawn(async move {
            let request = match i % 4 {
                // A body as large as a token may send, all but its last byte: the token's
                // share holds ten of them.
                3 => {
                    let mut r = head(
                        "POST",
                        &format!("{prefix}/variants"),
                        &token,
                        "Content-Length: 190000\r\n",
                    )
                    .into_bytes();
                    r.extend(std::iter::repeat_n(b' ', 189_999));
                    r
                }
                // A 1 MB body, all but its last byte.
                0 => {
                    let mut r = head(
                        "POST",
                        &format!("{prefix}/variants"),
                        &token,
                        "Content-Length: 1000000\r\n",
                    )
                    .into_bytes();
                    r.extend(std::iter::repeat_n(b' ', 999_999));
                    r
                }
                // A chunked body that never ends: 16 chunks of 64 KiB.
                1 => {
                    let mut r = head(
                        "POST",
                        &format!("{prefix}/variants"),
                        &token,
                        "Transfer-Encoding: chunked\r\n",
                    )
                    .into_bytes();
                    for _ in 0..16 {
                        r.extend(format!("{:x}\r\n", 65_536).as_bytes());
                        r.extend(std::iter::repeat_n(b' ', 65_536));
                        r.extend(b"\r\n");
                    }
                    r
                }
                // A large answer, never read.
                _ => head("GET", &prefix, &token, "").into_bytes(),
            };
            // The token's holder on four machines of its own, each within its quarter of the
            // connections (R44): 200 connections in all, beside the admin's and the board's.
            let source = std::net::Ipv4Addr::new(127, 0, 0, 2 + (i / 50) as u8);
            if let Some(stream) = send(source, port, &request).await {
                held.lock().await.push(stream);
            }
        }));
    }
    // The sends of the bodies block while the server holds them; give them time to pile up.
    tokio::time::sleep(Duration::from_secs(4)).await;

    // Still serving, to the admin and to an honest board with the same token.
    let list = f.call("GET", "/mutations/web", Some(ADMIN), None).await;
    assert_eq!(list.status, 200, "{list:?}");
    let small = json!({"label": "kiosk", "env": {"MODE": "kiosk"}, "instances": 0});
    let added = f.add_variant("web", &token, &small).await;
    assert_eq!(added.status, 201, "{added:?}");
    let ready = common::http::request(f.operator.metrics_port, "GET", "/readyz", None, None).await;
    assert_eq!(ready.status, 200, "{ready:?}");

    let mut f = f;
    assert!(f.operator.exited().is_none(), "the operator died");
    for task in tasks {
        task.abort();
    }
    // What the held connections were told, for the log: 413 and 503 say how they were refused.
    let mut told = std::collections::BTreeMap::<String, usize>::new();
    for mut stream in held.lock().await.drain(..) {
        let mut buf = [0u8; 12];
        let status =
            match tokio::time::timeout(Duration::from_millis(20), stream.read(&mut buf)).await {
                Ok(Ok(n)) if n >= 12 => String::from_utf8_lossy(&buf[9..12]).into_owned(),
                _ => "nothing".to_string(),
            };
        *told.entry(status).or_default() += 1;
    }
    let peak = cgroup.peak();
    println!(
        "peak {:.1} MiB of {} MiB; answers {told:?}",
        peak as f64 / 1048576.0,
        LIMIT >> 20
    );
    assert!(peak < LIMIT, "the cgroup reached its limit: {peak} bytes");
    if cgroup.counts_oom_kills() {
        assert_eq!(cgroup.oom_kills(), 0);
    }
    assert!(f.operator.exited().is_none(), "the operator died");
}
