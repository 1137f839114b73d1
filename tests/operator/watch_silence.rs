//! R20, R34: staleness from the watch, not only from failed calls. A
//! replica whose watches stall while its other calls are answered used to keep a revoked
//! token valid for almost five minutes (kube-runtime's idle timeout), and `/readyz` said 200.
//! Now a watch with neither an event nor a bookmark for `MUTANT_WATCH_STALE_AFTER_SECONDS`
//! makes its cache stale: the API answers 503 with `Retry-After` and `/readyz` 503, until the
//! watch has listed again; then the revoked token is refused (401) and the replica is ready.
//!
//! The replica reaches the API server through a [`StallingProxy`] that holds the connections
//! open when the stall begins (the watches' among them) and lets new ones through after a
//! delay, so the calls the replica makes meanwhile are answered (it is never cut off from the
//! API server, which `MUTANT_STALE_AFTER_SECONDS` would report), and the watches' new lists
//! take a moment, long enough to see the 503s.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;

use super::{cutoff::readyz, replicas::kubeconfig_through, stalling::StallingProxy, *};

/// The bound on a watch's silence the replica gets: seconds, not the default two minutes.
/// Each watch is then asked to end after 3 s, the API server's bookmark 2 s before its end.
const SILENCE: Duration = Duration::from_secs(6);

/// How long a new connection waits in the proxy once the stall has begun.
const NEW_CONNECTION_DELAY: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_stalled_watch_stops_a_revoked_token_within_the_bound() {
    let ns = TestNamespace::new("watch-silence").await;
    common::install_crds(&ns.client).await;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("watch-silence-{}", common::random_suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let proxy = StallingProxy::start(kubeconfig_through(0, &kubeconfig)).await;
    kubeconfig_through(proxy.port, &kubeconfig);
    let kubeconfig = kubeconfig.display().to_string();
    let silence = SILENCE.as_secs().to_string();
    let operator = Operator::start_with(
        &ns.name,
        &[
            ("MUTANT_API_TOKEN", ADMIN),
            ("MUTANT_WATCH_STALE_AFTER_SECONDS", &silence),
            ("POD_NAMESPACE", &ns.name),
            ("KUBECONFIG", &kubeconfig),
        ],
    );
    let (api, metrics) = (operator.api_port, operator.metrics_port);
    let path = format!("/api/v1/namespaces/{}/mutations", ns.name);
    wait_api(api, &ns.name).await;
    let create = json!({"name": "web", "deployment": base("web"),
                        "variants": [{"label": "a", "instances": 0}]});
    let created =
        common::http::request(api, "POST", &path, Some(ADMIN), Some(&create.to_string())).await;
    assert_eq!(created.status, 201, "{created:?}");
    let secrets: Api<Secret> = ns.api();
    let secret = secrets.get("web-secret").await.unwrap();
    let token = String::from_utf8(secret.data.unwrap()["token"].0.clone()).unwrap();
    let web = format!("{path}/web");
    let device_get = || common::http::request(api, "GET", &web, Some(&token), None);

    // Quiet watches are not silent ones: for more than twice the bound, with nothing changing,
    // the API server's bookmarks keep every cache fresh.
    let quiet = Instant::now();
    while quiet.elapsed() < 2 * SILENCE + Duration::from_secs(1) {
        let reply = device_get().await;
        assert_eq!(reply.status, 200, "{reply:?}");
        let (status, body) = readyz(metrics).await;
        assert_eq!(status, 200, "{body}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // The watches stall; the token's Secret is deleted where the replica cannot see it.
    proxy.stall_open_ones(NEW_CONNECTION_DELAY);
    let stalled = Instant::now();
    secrets
        .delete("web-secret", &Default::default())
        .await
        .unwrap();
    let mut refused_stale = None;
    let mut not_ready = None;
    loop {
        let reply = device_get().await;
        let at = stalled.elapsed();
        match reply.status {
            200 => assert!(
                at < SILENCE + Duration::from_secs(2),
                "still authorised from its cache {at:?} after the watches stalled: {reply:?}"
            ),
            503 => {
                assert_eq!(reply.header("retry-after"), Some("1"), "{reply:?}");
                assert!(reply.body.contains("went silent"), "{reply:?}");
                refused_stale.get_or_insert(at);
                let (status, body) = readyz(metrics).await;
                if status == 503 {
                    assert!(body.contains("went silent"), "{body}");
                    not_ready.get_or_insert(stalled.elapsed());
                }
            }
            401 => break,
            _ => panic!("{reply:?}"),
        }
        assert!(at < CONVERGE, "no 401 within {CONVERGE:?}: {reply:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let refused = stalled.elapsed();
    println!(
        "watches stalled: 503 from {refused_stale:?}, /readyz 503 from {not_ready:?}, 401 \
         after {refused:?}"
    );
    assert!(
        refused_stale.is_some(),
        "no 503 while the watches listed again"
    );
    assert!(
        not_ready.is_some(),
        "/readyz said 200 while the watches listed again"
    );
    // Listed again: ready, though the watches' old connections are still held.
    wait_for("the replica to be ready again", CONVERGE, || async {
        let (status, body) = readyz(metrics).await;
        (status == 200).then_some(()).ok_or(body)
    })
    .await;
    assert_eq!(device_get().await.status, 401);
    proxy.open();
    assert!(
        operator
            .log_text()
            .contains("heard nothing (no answer, event or bookmark)"),
        "the replica logs why it listed again"
    );
    assert!(
        !operator.log_text().contains("panicked"),
        "the operator panicked"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
