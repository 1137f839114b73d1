//! R38: an API that small devices can talk to. ESP-IDF's HTTP client keeps
//! response headers in 512 bytes by default, Arduino clients that stream speak HTTP/1.0 and
//! cannot decode chunked bodies, mbedTLS needs the certificate chain small and fails on TLS
//! records larger than its input buffer. So: every answer of every route, errors included,
//! has a `Content-Length` and a head that fits 512 bytes; HTTP/1.0 works with and without
//! keep-alive; over TLS a P-256 chain (leaf and CA) stays under 4 KB, TLS 1.2 works, and
//! records stay within 4 KiB of plaintext.

use std::collections::BTreeSet;

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};
use tokio_rustls::rustls::pki_types::ServerName;

use mutantops::crd::RolloutPhase;

use super::*;

/// The response-header budget of ESP-IDF's `esp_http_client` (`buffer_size`, 512 by default).
const HEADER_BUDGET: usize = 512;

/// Reads one response the way a client with a 512-byte header buffer does: the head must end
/// within the budget; then exactly `Content-Length` bytes of body. Returns (head, body).
async fn read_with_budget<S: AsyncReadExt + Unpin>(stream: &mut S) -> (String, String) {
    let mut raw = Vec::new();
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        assert!(
            raw.len() < HEADER_BUDGET,
            "the response head does not fit {HEADER_BUDGET} bytes: {:?}",
            String::from_utf8_lossy(&raw)
        );
        let n = stream.read(&mut byte).await.unwrap();
        assert_eq!(
            n,
            1,
            "closed in the head: {:?}",
            String::from_utf8_lossy(&raw)
        );
        raw.push(byte[0]);
    }
    let head = String::from_utf8(raw).unwrap();
    let lower = head.to_ascii_lowercase();
    assert!(
        !lower.contains("transfer-encoding"),
        "a chunked answer: {head}"
    );
    let status: u16 = head[9..12].parse().unwrap();
    let length = lower
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse::<usize>().unwrap());
    // 204 and 304 have no body by definition (RFC 9110), so no length to say.
    let length = match (status, length) {
        (204 | 304, None) => 0,
        (_, Some(length)) => length,
        (_, None) => panic!("an answer without Content-Length: {head}"),
    };
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await.unwrap();
    (head, String::from_utf8_lossy(&body).into_owned())
}

/// Sends one request's bytes (from `common::http::Request::bytes`) and reads the answer with the
/// budget: its status and head.
async fn budgeted(port: u16, raw: &[u8]) -> (u16, String) {
    assert!(raw.len() <= 1024, "a device's request stays small");
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    stream.write_all(raw).await.unwrap();
    let (head, _) = read_with_budget(&mut stream).await;
    (head[9..12].parse().unwrap(), head)
}

/// A request (method, path, token, headers, body) and the status it must get.
type Case<'a> = (
    &'static str,
    String,
    Option<&'a str>,
    Vec<(&'static str, &'static str)>,
    Option<String>,
    u16,
);

/// The route template of an API path, by its segments.
fn template(path: &str) -> &'static str {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segments[..] {
        [_, _, _, _, _] => "/api/v1/namespaces/{ns}/mutations",
        [_, _, _, _, _, _] => "/api/v1/namespaces/{ns}/mutations/{name}",
        [.., "variants"] => "/api/v1/namespaces/{ns}/mutations/{name}/variants",
        [.., "variants", _] => "/api/v1/namespaces/{ns}/mutations/{name}/variants/{label}",
        [.., "devices"] => "/api/v1/namespaces/{ns}/mutations/{name}/devices",
        [.., "devices", _] => "/api/v1/namespaces/{ns}/mutations/{name}/devices/{id}",
        [.., "devices", _, "token"] => {
            "/api/v1/namespaces/{ns}/mutations/{name}/devices/{id}/token"
        }
        [.., "devices", _, "poll"] => "/api/v1/namespaces/{ns}/mutations/{name}/devices/{id}/poll",
        [.., "devices", _, "screen"] => {
            "/api/v1/namespaces/{ns}/mutations/{name}/devices/{id}/screen"
        }
        [.., "variants", _, "screen"] => {
            "/api/v1/namespaces/{ns}/mutations/{name}/variants/{label}/screen"
        }
        [.., "rollout", "resume"] => "/api/v1/namespaces/{ns}/mutations/{name}/rollout/resume",
        [.., "rollout", "abort"] => "/api/v1/namespaces/{ns}/mutations/{name}/rollout/abort",
        _ => "(none)",
    }
}

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn every_answer_fits_a_512_byte_header_buffer_and_has_a_length() {
    let f = Fixture::with_api("small-heads").await;
    let port = f.operator.api_port;
    let ns = f.ns.name.clone();
    let p = |rest: &str| format!("/api/v1/namespaces/{ns}/mutations{rest}");
    let create = json!({"name": "snap", "deployment": base("snap"),
                        "variants": [{"label": "radxa", "instances": 0}]})
    .to_string();
    let raw = |method, path: &str, token, headers: &[(&str, &str)], body: Option<&str>| {
        common::http::Request::new(method, path, token, body)
            .headers(headers)
            .bytes(port)
    };
    let (status, _) = budgeted(port, &raw("POST", &p(""), Some(ADMIN), &[], Some(&create))).await;
    assert_eq!(status, 201);
    let token = f.token("snap").await;
    let device = Some(token.as_str());
    let add =
        json!({"label": "lilygo", "env": {"SNAP_RES": "960x540"}, "instances": 0}).to_string();
    let scale = json!({"instances": 1}).to_string();
    let other = json!({"name": "other", "deployment": base("other"),
                       "variants": [{"label": "a", "instances": 0}]})
    .to_string();
    // R39: a Mutation with devices, one enrolled outside the budget (its token is needed).
    let fleet = json!({"name": "fleet", "deployment": base("fleet"),
                       "variants": [{"label": "shared", "instances": 0, "enrollable": true}],
                       "devices": {"enrollment": "Open"}});
    let made = f
        .call("POST", "/mutations", Some(ADMIN), Some(&fleet))
        .await;
    assert_eq!(made.status, 201, "{made:?}");
    let key = f.token("fleet").await;
    let enrolled = f
        .call(
            "POST",
            "/mutations/fleet/devices",
            Some(&key),
            Some(&json!({"id": "a", "label": "shared"})),
        )
        .await;
    assert_eq!(enrolled.status, 201, "{enrolled:?}");
    let board = enrolled.json()["token"].as_str().unwrap().to_owned();
    let board = Some(board.as_str());
    // R53: its screen, fetched from a stand-in renderer, for the screen routes.
    let renderer = super::screens::renderer::Renderer::start().await;
    renderer.set(
        "/screen.bmp",
        super::screens::renderer::Answer::bmp(&[b'B'; 48_062]),
    );
    super::screens::point(&f, "fleet-shared", &renderer).await;
    let screen = json!({"spec": {
        "service": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
        "screen": {"port": "http", "path": "/screen.bmp"}}});
    f.mutations()
        .patch(
            "fleet",
            &Default::default(),
            &kube::api::Patch::Merge(&screen),
        )
        .await
        .unwrap();
    let shown = f
        .wait_status::<Mutation>("fleet", "a screen", |s| {
            s.variants
                .iter()
                .any(|v| v.screen.as_ref().is_some_and(|s| s.etag.is_some()))
        })
        .await;
    let etag = shown.variants[0]
        .screen
        .as_ref()
        .unwrap()
        .etag
        .clone()
        .unwrap();
    // The table's headers live for the whole test.
    let etag: &'static str = Box::leak(etag.into_boxed_str());
    let enroll_b = json!({"id": "b", "label": "shared"}).to_string();
    // R43: a Mutation whose rollout waits at a pause step, to resume and abort.
    let rolled = |image: &str| {
        let mut b = base("ro");
        b["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image);
        let mut m = mutation("ro", b, json!([{"label": "a", "instances": 0}]));
        m["spec"]["rollout"] = json!({"steps": [{"pause": true}]});
        m
    };
    f.apply::<Mutation>(&rolled("registry.example/app:1")).await;
    let phase = |want: RolloutPhase| {
        move |s: &OwnerStatus| s.rollout.as_deref().is_some_and(|r| r.phase == want)
    };
    f.wait_status::<Mutation>("ro", "Complete", phase(RolloutPhase::Complete))
        .await;
    f.apply::<Mutation>(&rolled("registry.example/app:2")).await;
    f.wait_status::<Mutation>("ro", "Paused", phase(RolloutPhase::Paused))
        .await;
    let cases: Vec<Case> = vec![
        ("GET", p(""), Some(ADMIN), vec![], None, 200),
        ("POST", p(""), Some(ADMIN), vec![], Some(other.clone()), 201),
        ("POST", p(""), Some(ADMIN), vec![], Some(other), 409),
        ("POST", p(""), Some(ADMIN), vec![], Some("{".into()), 400),
        ("POST", p(""), device, vec![], Some(create.clone()), 401),
        ("GET", p("/snap"), device, vec![], None, 200),
        ("GET", p("/snap"), Some("wrong"), vec![], None, 401),
        ("GET", p("/absent"), Some(ADMIN), vec![], None, 404),
        ("GET", p("/snap/variants"), device, vec![], None, 200),
        ("POST", p("/snap/variants"), device, vec![], Some(add), 201),
        ("GET", p("/snap/variants/lilygo"), device, vec![], None, 200),
        (
            "PATCH",
            p("/snap/variants/lilygo"),
            device,
            vec![],
            Some(scale),
            200,
        ),
        (
            "DELETE",
            p("/snap/variants/lilygo"),
            device,
            vec![],
            None,
            204,
        ),
        ("GET", p("/snap/variants/lilygo"), device, vec![], None, 404),
        ("DELETE", p("/other"), Some(ADMIN), vec![], None, 204),
        (
            "POST",
            p("/fleet/devices"),
            Some(&key),
            vec![],
            Some(enroll_b),
            201,
        ),
        ("GET", p("/fleet/devices"), Some(ADMIN), vec![], None, 200),
        ("GET", p("/fleet/devices/a"), board, vec![], None, 200),
        (
            "GET",
            p("/fleet/devices/a/poll"),
            board,
            vec![("Battery-Voltage", "4.02"), ("RSSI", "-70")],
            None,
            200,
        ),
        (
            "GET",
            p("/fleet/devices/a/screen"),
            board,
            vec![],
            None,
            200,
        ),
        (
            "GET",
            p("/fleet/devices/a/screen"),
            board,
            vec![("If-None-Match", etag)],
            None,
            304,
        ),
        (
            "GET",
            p("/fleet/variants/shared/screen"),
            board,
            vec![],
            None,
            200,
        ),
        ("GET", p("/fleet/devices/b"), board, vec![], None, 403),
        (
            "DELETE",
            p("/fleet/devices/b"),
            Some(ADMIN),
            vec![],
            None,
            204,
        ),
        (
            "POST",
            p("/fleet/devices/a/token"),
            board,
            vec![],
            None,
            200,
        ),
        ("GET", p("/fleet/devices/a"), board, vec![], None, 401),
        (
            "POST",
            p("/ro/rollout/resume"),
            Some(ADMIN),
            vec![],
            None,
            202,
        ),
        (
            "POST",
            p("/ro/rollout/abort"),
            Some(ADMIN),
            vec![],
            None,
            202,
        ),
        ("PUT", p("/snap"), device, vec![], None, 405),
        ("GET", "/nothing".into(), None, vec![], None, 404),
    ];
    let mut routes = BTreeSet::new();
    for (method, path, token, headers, body, want) in &cases {
        let (status, head) =
            budgeted(port, &raw(method, path, *token, headers, body.as_deref())).await;
        assert_eq!(status, *want, "{method} {path}: {head}");
        println!(
            "{method} {} -> {status}: head {} bytes",
            template(path),
            head.len()
        );
        if status < 300 {
            routes.insert((method.to_string(), template(path)));
        }
    }
    // Every route of the table answered within the budget at least once.
    let table: BTreeSet<(String, &str)> = mutantops::api::ROUTES
        .iter()
        .map(|r| (r.method.to_string(), r.path))
        .collect();
    assert_eq!(routes, table);
    // A body announced over the limit: 413 at once, within the budget too.
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let big = format!(
        "POST {} HTTP/1.1\r\nHost: d\r\nAuthorization: Bearer {token}\r\n\
         Content-Length: 2000000\r\n\r\n",
        p("/snap/variants")
    );
    stream.write_all(big.as_bytes()).await.unwrap();
    let (head, _) = read_with_budget(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    // 429 and its Retry-After fit too: validated reads past the token's budget. All at once,
    // so that however slowly each is answered they outrun the budget's refill.
    let no_cache = [("Cache-Control", "no-cache")];
    let request = raw("GET", &p("/snap"), device, &no_cache, None);
    let answers = futures::future::join_all((0..40).map(|_| budgeted(port, &request))).await;
    let head = answers
        .into_iter()
        .find_map(|(status, head)| (status == 429).then_some(head))
        .expect("validated reads past the budget answer 429");
    assert!(
        head.to_ascii_lowercase().contains("retry-after: 1"),
        "{head}"
    );
}

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn http_1_0_clients_work_with_and_without_keep_alive() {
    let f = Fixture::with_api("small-http10").await;
    let port = f.operator.api_port;
    let create = json!({"name": "snap", "deployment": base("snap"),
                        "variants": [{"label": "radxa", "instances": 0}]});
    assert_eq!(
        f.call("POST", "/mutations", Some(ADMIN), Some(&create))
            .await
            .status,
        201
    );
    let token = f.token("snap").await;
    let path = format!("/api/v1/namespaces/{}/mutations/snap/variants", f.ns.name);
    let auth = format!("Authorization: Bearer {token}\r\n");

    // Without keep-alive: one answer, then the server closes.
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let request = format!("GET {path} HTTP/1.0\r\n{auth}\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let (head, body) = read_with_budget(&mut stream).await;
    assert!(head.starts_with("HTTP/1.0 200"), "{head}");
    assert!(body.contains("radxa"), "{body}");
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "nothing after the answer: {rest:?}");

    // With keep-alive: a POST with a body and a GET on one connection, as Arduino's
    // HTTPClient sends them with setReuse(true).
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let add =
        json!({"label": "lilygo", "env": {"SNAP_RES": "960x540"}, "instances": 0}).to_string();
    let post = format!(
        "POST {path} HTTP/1.0\r\nConnection: keep-alive\r\n{auth}Content-Type: \
         application/json\r\nContent-Length: {}\r\n\r\n{add}",
        add.len()
    );
    stream.write_all(post.as_bytes()).await.unwrap();
    let (head, _) = read_with_budget(&mut stream).await;
    assert!(head.starts_with("HTTP/1.0 201"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("connection: keep-alive"),
        "{head}"
    );
    let get = format!("GET {path}/lilygo HTTP/1.0\r\nConnection: keep-alive\r\n{auth}\r\n");
    stream.write_all(get.as_bytes()).await.unwrap();
    let (head, body) = read_with_budget(&mut stream).await;
    assert!(head.starts_with("HTTP/1.0 200"), "{head}");
    assert!(body.contains("960x540"), "{body}");
}

/// TLS records seen: (content type, length).
type Records = std::sync::Arc<std::sync::Mutex<Vec<(u8, usize)>>>;

/// A TCP proxy to 127.0.0.1:`upstream` that records the content type and length of every TLS
/// record the server sends. Returns its port and the records seen so far.
async fn record_meter(upstream: u16) -> (u16, Records) {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let lengths = seen.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = TcpStream::connect(("127.0.0.1", upstream)).await.unwrap();
            let (mut client_read, mut client_write) = client.into_split();
            let (mut server_read, mut server_write) = server.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
            });
            let lengths = lengths.clone();
            tokio::spawn(async move {
                let mut header = [0u8; 5];
                while server_read.read_exact(&mut header).await.is_ok() {
                    let length = usize::from(u16::from_be_bytes([header[3], header[4]]));
                    let mut record = vec![0u8; length];
                    if server_read.read_exact(&mut record).await.is_err() {
                        break;
                    }
                    lengths.lock().unwrap().push((header[0], length));
                    if client_write.write_all(&header).await.is_err()
                        || client_write.write_all(&record).await.is_err()
                    {
                        break;
                    }
                }
            });
        }
    });
    (port, seen)
}

/// Runs deploy/devices/README.md's `lan-ca` block in `dir`, with names of this machine and
/// without its kubectl line; returns the chain and key files it made.
fn lan_ca(dir: &std::path::Path) -> (String, String) {
    let block = markdown_block("deploy/devices/README.md", "<!-- lan-ca -->", "sh");
    let script: String = block
        .replace(
            "HOST=mutantops.home.lan IP=192.168.1.10",
            "HOST=localhost IP=127.0.0.1",
        )
        .lines()
        .filter(|line| !line.starts_with("kubectl "))
        .map(|line| format!("{line}\n"))
        .collect();
    let out = std::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("bash: {e}"));
    assert!(
        out.status.success(),
        "the lan-ca block failed (it needs openssl): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        dir.join("tls.crt").display().to_string(),
        dir.join("tls.key").display().to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn tls_for_mbedtls_a_small_chain_tls_1_2_and_small_records() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("small-tls-{}", common::random_suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = lan_ca(&dir);
    let f = Fixture::with_env(
        "small-tls",
        &[
            ("MUTANT_API_TOKEN", ADMIN),
            ("MUTANT_API_TLS_CERT_FILE", &cert),
            ("MUTANT_API_TLS_KEY_FILE", &key),
        ],
    )
    .await;
    let (port, records) = record_meter(f.operator.api_port).await;
    let ca = std::fs::read_to_string(dir.join("ca.crt")).unwrap();
    let client = common::tls::client_trusting(&ca, true);
    let path = format!("/api/v1/namespaces/{}/mutations", f.ns.name);
    wait_for("the HTTPS API to serve", CONVERGE, || async {
        let reply = common::tls::request(&client, port, "GET", &path, Some(ADMIN), None).await?;
        (reply.status == 200)
            .then_some(())
            .ok_or(format!("{reply:?}"))
    })
    .await;
    // An answer far over 4 KiB: a Mutation whose variants carry long values.
    let variants: Vec<Value> = (0..6)
        .map(|i| {
            json!({"label": format!("v{i}"), "instances": 0,
                        "env": {"PAGE": "x".repeat(3000)}})
        })
        .collect();
    let create = json!({"name": "snap", "deployment": base("snap"), "variants": variants});
    let created = common::tls::request(
        &client,
        port,
        "POST",
        &path,
        Some(ADMIN),
        Some(&create.to_string()),
    )
    .await
    .unwrap();
    assert_eq!(created.status, 201, "{created:?}");

    records.lock().unwrap().clear();
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut tls = client
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .unwrap();
    let (_, session) = tls.get_ref();
    assert_eq!(
        session.protocol_version(),
        Some(tokio_rustls::rustls::ProtocolVersion::TLSv1_2)
    );
    let chain: Vec<usize> = session
        .peer_certificates()
        .unwrap()
        .iter()
        .map(|c| c.len())
        .collect();
    let served: usize = chain.iter().sum();
    println!("served chain: {chain:?} bytes of DER, {served} in all");
    assert_eq!(chain.len(), 2, "leaf and CA");
    assert!(served < 4096, "the chain is {served} bytes");
    let raw =
        common::http::Request::new("GET", &format!("{path}/snap"), Some(ADMIN), None).bytes(port);
    tls.write_all(&raw).await.unwrap();
    let (head, body) = read_with_budget(&mut tls).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        body.len() > 16 * 1024,
        "the answer spans several records: {}",
        body.len()
    );
    let largest = records.lock().unwrap().iter().map(|r| r.1).max().unwrap();
    println!("largest TLS record: {largest} bytes");
    // 4 KiB of plaintext, and what AES-GCM adds in TLS 1.2 (nonce and tag).
    assert!(largest <= 4096 + 64, "a record of {largest} bytes");

    // A small answer is one record: head and body in one buffer, one encryption.
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut tls = client
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .unwrap();
    records.lock().unwrap().clear();
    let absent = format!("{path}/snap/variants/absent");
    let raw = common::http::Request::new("GET", &absent, Some(ADMIN), None).bytes(port);
    tls.write_all(&raw).await.unwrap();
    let (head, _) = read_with_budget(&mut tls).await;
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    // Application data is content type 23.
    let answer: Vec<usize> = records
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.0 == 23)
        .map(|r| r.1)
        .collect();
    assert_eq!(answer.len(), 1, "one record for a small answer: {answer:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
