//! R34: one deadline per API request. While the API server stalls (a TCP
//! proxy of the test's accepts and passes nothing on, [`StallingProxy`]), a device's POST of a
//! variant makes several calls in a row (a read, a dry run, the write); each has its own
//! 10 s deadline, and the device used to wait their sum (no answer within 20 s) where its
//! firmware gives up after 4.5 to 5 s. With the default `MUTANT_API_REQUEST_DEADLINE_SECONDS`
//! (4) it is answered 503 with `Retry-After` at the request's deadline, told that nothing was
//! changed; a read from the cache is answered at once meanwhile; once the server answers again
//! the same POST is made.

use std::time::{Duration, Instant};

use super::{stalling::BehindStallingProxy, *};

/// The default request deadline, and what a device's firmware waits at most.
const DEADLINE: Duration = Duration::from_secs(4);
const FIRMWARE_GIVES_UP: Duration = Duration::from_millis(4500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_stalled_api_server_costs_a_device_one_deadline_not_the_sum_of_its_calls() {
    // The deadline is left at its default.
    let setup = BehindStallingProxy::start("deadline", &[]).await;
    let (proxy, token, api) = (&setup.proxy, &setup.token, setup.operator.api_port);
    let path = |rest: &str| setup.path(rest);
    let (web, variants) = (path("/web"), path("/web/variants"));
    let add = json!({"label": "b", "instances": 0}).to_string();
    let post = || common::http::request(api, "POST", &variants, Some(token), Some(&add));

    proxy.stall_all();
    let began = Instant::now();
    let added = post().await;
    let waited = began.elapsed();
    println!(
        "a device's POST during the stall: {} after {waited:?}",
        added.status
    );
    assert_eq!(added.status, 503, "{added:?}");
    assert_eq!(added.header("retry-after"), Some("1"), "{added:?}");
    assert!(
        added.body.contains("deadline of 4 s") && added.body.contains("nothing was changed"),
        "{added:?}"
    );
    // It waited for the API server, and no longer than the deadline (and the few milliseconds
    // of writing the answer): before the firmware gives up.
    assert!(
        waited >= DEADLINE - Duration::from_millis(300),
        "{waited:?}"
    );
    assert!(waited < FIRMWARE_GIVES_UP, "answered after {waited:?}");
    // A read of the cache is answered at once meanwhile.
    let began = Instant::now();
    let got = common::http::request(api, "GET", &web, Some(token), None).await;
    assert_eq!(got.status, 200, "{got:?}");
    assert!(
        began.elapsed() < Duration::from_secs(1),
        "{:?}",
        began.elapsed()
    );

    // The server answers again: nothing was made of the refused POST, and the same POST
    // now is.
    proxy.open();
    let reply = wait_for(
        "the POST to be made once the server answers",
        CONVERGE,
        || async {
            let began = Instant::now();
            let reply = post().await;
            let waited = began.elapsed();
            assert!(
                waited < FIRMWARE_GIVES_UP,
                "answered after {waited:?}: {reply:?}"
            );
            match reply.status {
                201 => Ok(reply),
                503 => Err(format!("{reply:?}")),
                _ => panic!("{reply:?}"),
            }
        },
    )
    .await;
    let view: Value = serde_json::from_str(&reply.body).unwrap();
    assert_eq!(view["label"], "b", "{view}");
    setup.no_panic();
}
