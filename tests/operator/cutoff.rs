//! R34: a replica whose API server stalls. It reaches the API server
//! through a TCP proxy of the test's that can stall ([`BehindStallingProxy`]): accept connections and
//! pass nothing on, either way, as a hung API server or a network that drops packets would. A
//! call then ends at its deadline (503 with `Retry-After`, not a request left without an
//! answer); once the server has not answered for `MUTANT_STALE_AFTER_SECONDS`, the replica
//! stops authorising from its caches (they may hold a token whose Secret is gone) and reports
//! not ready; when the server answers again it recovers by itself.

use std::time::Instant;

use k8s_openapi::api::core::v1::Secret;

use super::{stalling::BehindStallingProxy, *};

/// `/readyz` of the replica: status and body.
pub(super) async fn readyz(port: u16) -> (u16, String) {
    let reply = common::http::request(port, "GET", "/readyz", None, None).await;
    (reply.status, reply.body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_replica_cut_off_from_the_api_server_answers_503_and_recovers() {
    let setup = BehindStallingProxy::start("cutoff", &[("MUTANT_STALE_AFTER_SECONDS", "3")]).await;
    let (proxy, token) = (&setup.proxy, &setup.token);
    let (api, metrics) = (setup.operator.api_port, setup.operator.metrics_port);
    let path = |rest: &str| setup.path(rest);
    let secrets: Api<Secret> = setup.ns.api();
    let web = path("/web");
    let device_get = || common::http::request(api, "GET", &web, Some(token), None);
    assert_eq!(device_get().await.status, 200);
    assert_eq!(readyz(metrics).await.0, 200);

    // The API server stalls. A device's POST, which needs the server (its dry run),
    // is answered at the request's deadline (4 s, tests/operator/deadline.rs), with Retry-After;
    // it was left without an answer.
    proxy.stall_all();
    let began = Instant::now();
    let add = json!({"label": "b", "instances": 0}).to_string();
    let added =
        common::http::request(api, "POST", &path("/web/variants"), Some(token), Some(&add)).await;
    let waited = began.elapsed();
    println!(
        "a POST during the stall was answered {} after {waited:?}",
        added.status
    );
    assert_eq!(added.status, 503, "{added:?}");
    assert_eq!(added.header("retry-after"), Some("1"), "{added:?}");

    // The Secret is deleted where the replica cannot see it. Within the bound (3 s,
    // after the Lease's reads and the calls above have failed) the replica stops authorising
    // from its cache: the old token gets 503, not 200, and the replica is not ready.
    secrets
        .delete("web-secret", &Default::default())
        .await
        .unwrap();
    wait_for("the cut-off replica to answer 503", CONVERGE, || async {
        let reply = device_get().await;
        match reply.status {
            503 => Ok(reply),
            200 => Err(format!("still authorised from its cache: {reply:?}")),
            _ => panic!("{reply:?}"),
        }
    })
    .await;
    let reply = device_get().await;
    assert_eq!(reply.header("retry-after"), Some("1"), "{reply:?}");
    assert!(
        reply.body.contains("has not reached the Kubernetes API"),
        "{reply:?}"
    );
    let (status, body) = readyz(metrics).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("has not answered"), "{body}");

    // The server answers again: ready again by itself, and the deleted Secret's token is
    // refused (the leader makes the Mutation a new Secret, with a new token).
    proxy.open();
    wait_for("the replica to be ready again", CONVERGE, || async {
        let (status, body) = readyz(metrics).await;
        (status == 200).then_some(()).ok_or(body)
    })
    .await;
    wait_for("the old token to be refused", CONVERGE, || async {
        let reply = device_get().await;
        (reply.status == 401)
            .then_some(())
            .ok_or(format!("{reply:?}"))
    })
    .await;
    setup.no_panic();
}
