//! Tests of deadlines and reachability.

use super::*;
use http_body_util::{BodyExt as _, Empty, Full};
use tower::ServiceExt as _;

fn request(uri: &str) -> Request<()> {
    Request::builder()
        .uri(uri)
        .body(())
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn watches_are_told_by_their_query() {
    assert!(is_watch(&request(
        "/api/v1/secrets?watch=true&labelSelector=a"
    )));
    assert!(is_watch(&request("/apis/x/v1/m?resourceVersion=1&watch=1")));
    assert!(
        is_watch(&request("/apis/x/v1/m?&limit=500")),
        "a watcher's paged list"
    );
    assert!(!is_watch(&request(
        "/api/v1/secrets?labelSelector=watch%3Dtrue"
    )));
    assert!(!is_watch(&request("/api/v1/secrets")));
    assert!(!is_watch(&request("/api/v1/secrets?watch=false")));
}

#[test]
fn health_fails_from_the_first_failure_until_an_answer() {
    let health = Health::default();
    assert_eq!(health.unanswered_for(), None);
    health.failed();
    let first = health.unanswered_for();
    assert!(first.is_some());
    std::thread::sleep(Duration::from_millis(5));
    health.failed();
    // A later failure does not move the start.
    assert!(health.unanswered_for() > first);
    health.answered();
    assert_eq!(health.unanswered_for(), None);
}

// R34: a call without an answer fails at its deadline; a watch waits.
#[tokio::test(start_paused = true)]
async fn calls_that_stall_fail_at_their_deadline_and_watches_do_not() {
    let health = Health::default();
    let stalled = tower::service_fn(|_: Request<()>| {
        std::future::pending::<Result<Response<Empty<Bytes>>, BoxError>>()
    });
    let layer = HealthLayer::new(health.clone(), Duration::from_secs(10));
    let started = Instant::now();
    let err = layer
        .layer(stalled)
        .oneshot(request("/api/v1/namespaces/a/secrets/b"))
        .await
        .err()
        .unwrap_or_else(|| panic!("a stalled call must fail"));
    assert_eq!(started.elapsed(), Duration::from_secs(10));
    assert!(
        err.to_string().contains("did not answer within 10 s"),
        "{err}"
    );
    assert!(health.unanswered_for().is_some());

    let watch = layer
        .layer(stalled)
        .oneshot(request("/api/v1/secrets?watch=true"));
    assert!(
        tokio::time::timeout(Duration::from_secs(3600), watch)
            .await
            .is_err(),
        "a watch has no deadline of this layer"
    );
}

// R34: a call its caller gives up on after a while (the Lease's own timeout)
// is a failure; one given up at once is not.
#[tokio::test(start_paused = true)]
async fn calls_given_up_on_count_as_failures() {
    let health = Health::default();
    let layer = HealthLayer::new(health.clone(), Duration::from_secs(10));
    let stalled = tower::service_fn(|_: Request<()>| {
        std::future::pending::<Result<Response<Empty<Bytes>>, BoxError>>()
    });
    let quick = tokio::time::timeout(
        Duration::from_millis(10),
        layer.layer(stalled).oneshot(request("/x")),
    )
    .await;
    assert!(quick.is_err());
    assert_eq!(health.unanswered_for(), None);
    let late = tokio::time::timeout(
        Duration::from_secs(3),
        layer.layer(stalled).oneshot(request("/x")),
    )
    .await;
    assert!(late.is_err());
    assert!(health.unanswered_for().is_some());
}

// R34: an answer clears the failures; a 5xx is one; a body that stalls
// past the deadline fails.
#[tokio::test(start_paused = true)]
async fn answers_and_failures_are_recorded() {
    let health = Health::default();
    let layer = HealthLayer::new(health.clone(), Duration::from_secs(10));
    let answering = |status: u16| {
        tower::service_fn(move |_: Request<()>| async move {
            let mut response = Response::new(Full::new(Bytes::from_static(b"{}")));
            *response.status_mut() =
                hyper::StatusCode::from_u16(status).unwrap_or_else(|e| panic!("{e}"));
            Ok::<_, BoxError>(response)
        })
    };
    let response = layer
        .layer(answering(503))
        .oneshot(request("/x"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(response.status(), 503);
    assert!(health.unanswered_for().is_some());
    let response = layer
        .layer(answering(404))
        .oneshot(request("/x"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(health.unanswered_for(), None);
    let body = response
        .into_body()
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(body.to_bytes(), Bytes::from_static(b"{}"));

    // A head at once, then a body that never ends.
    let slow_body = tower::service_fn(|_: Request<()>| async {
        Ok::<_, BoxError>(Response::new(http_body_util::StreamBody::new(
            futures::stream::pending::<Result<Frame<Bytes>, std::convert::Infallible>>(),
        )))
    });
    let response = layer
        .layer(slow_body)
        .oneshot(request("/x"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let err = response
        .into_body()
        .collect()
        .await
        .err()
        .unwrap_or_else(|| panic!("a stalled body must fail"));
    assert!(err.to_string().contains("did not answer"), "{err}");
    assert!(health.unanswered_for().is_some());
}

// R34: under a bound on silence, a watcher's request fails when its head, or the
// next piece of its body, does not come within the bound; each piece gives it the bound anew.
// Other calls keep their deadline.
#[tokio::test(start_paused = true)]
async fn watches_fail_when_silent_for_the_bound() {
    let health = Health::default();
    let layer = HealthLayer::new(health.clone(), Duration::from_secs(10))
        .watch_silence(Some(Duration::from_secs(4)));
    let stalled = tower::service_fn(|_: Request<()>| {
        std::future::pending::<Result<Response<Empty<Bytes>>, BoxError>>()
    });
    let started = Instant::now();
    let err = layer
        .layer(stalled)
        .oneshot(request("/api/v1/secrets?watch=true"))
        .await
        .err()
        .unwrap_or_else(|| panic!("a silent watch must fail"));
    assert_eq!(started.elapsed(), Duration::from_secs(4));
    assert_eq!(
        WatchSilent::cause_of(err.as_ref()),
        Some(WatchSilent(Duration::from_secs(4)))
    );
    assert!(
        err.to_string()
            .contains("heard nothing (no answer, event or bookmark)"),
        "{err}"
    );
    // Under a longer bound, a head waits no longer than any other call's.
    let started = Instant::now();
    let err = HealthLayer::new(health.clone(), Duration::from_secs(10))
        .watch_silence(Some(Duration::from_secs(120)))
        .layer(stalled)
        .oneshot(request("/api/v1/secrets?limit=100"))
        .await
        .err()
        .unwrap_or_else(|| panic!("a silent list must fail"));
    assert_eq!(started.elapsed(), Duration::from_secs(10));
    assert_eq!(
        WatchSilent::cause_of(err.as_ref()),
        Some(WatchSilent(Duration::from_secs(10)))
    );
    let started = Instant::now();
    let err = layer
        .layer(stalled)
        .oneshot(request("/api/v1/secrets/x"))
        .await
        .err()
        .unwrap_or_else(|| panic!("a stalled call must fail"));
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(10),
        "its own deadline"
    );
    assert!(
        err.to_string().contains("did not answer within 10 s"),
        "{err}"
    );

    // A body of three pieces 3 s apart, then silence: the pieces pass, the silence fails.
    let (sender, pieces) = futures::channel::mpsc::unbounded::<Result<Frame<Bytes>, BoxError>>();
    let body = std::sync::Mutex::new(Some(pieces));
    let watch = tower::service_fn(move |_: Request<()>| {
        let pieces = body.lock().unwrap_or_else(|e| panic!("{e}")).take();
        async move {
            let pieces = pieces.unwrap_or_else(|| panic!("called once"));
            Ok::<_, BoxError>(Response::new(http_body_util::StreamBody::new(pieces)))
        }
    });
    let response = layer
        .layer(watch)
        .oneshot(request("/api/v1/secrets?watch=1&resourceVersion=1"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut body = response.into_body();
    let feeder = tokio::spawn(async move {
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_secs(3)).await;
            let piece = Frame::data(Bytes::from_static(b"{\"type\":\"BOOKMARK\"}\n"));
            sender
                .unbounded_send(Ok(piece))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        sender
    });
    let started = Instant::now();
    for _ in 0..3 {
        let piece = body.frame().await;
        assert!(matches!(piece, Some(Ok(_))), "{piece:?}");
    }
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(9),
        "longer than the bound in all"
    );
    let _sender = feeder.await.unwrap_or_else(|e| panic!("{e}"));
    let err = match body.frame().await {
        Some(Err(err)) => err,
        other => panic!("{other:?}"),
    };
    assert_eq!(started.elapsed(), Duration::from_secs(13));
    assert!(WatchSilent::cause_of(err.as_ref()).is_some(), "{err}");
    assert_eq!(
        health.unanswered_for(),
        None,
        "the watch's head was an answer, and its body's silence is no failure of the server: \
         other calls tell whether it answers"
    );
}

// R34: the silence is found beneath the errors the watcher wraps it in, as the
// watcher reports a watch's body failing (kube reads the body through an `io::Error`, whose
// sources skip the error it wraps).
#[test]
fn silence_is_found_beneath_the_watchers_errors() {
    let silent: BoxError = Box::new(WatchSilent(Duration::from_secs(4)));
    let read = std::io::Error::other(kube::Error::Service(silent));
    let error = kube::runtime::watcher::Error::WatchFailed(kube::Error::ReadEvents(read));
    assert_eq!(
        WatchSilent::cause_of(&error),
        Some(WatchSilent(Duration::from_secs(4)))
    );
    let other = kube::runtime::watcher::Error::WatchFailed(kube::Error::ReadEvents(
        std::io::Error::other("reset"),
    ));
    assert_eq!(WatchSilent::cause_of(&other), None);
}
