//! Deadlines on the operator's calls, and whether the API server still answers (issue 25,
//! items 8 and 9; R34).
//!
//! [`HealthLayer`] sits outermost in the client's stack, so it sees every call as its caller
//! does, kube's retries of 429/503/504 included:
//!
//! - **Deadlines.** A call other than a watch must have its answer, head and body, within
//!   [`CALL_DEADLINE`]; after that it fails with [`DeadlineElapsed`] (which the HTTP API
//!   answers 503 with `Retry-After`). A stalled API server (TCP accepted, nothing answered)
//!   then costs a request 10 s, not forever. Watches are long-lived by design and keep only
//!   the watcher's own idle timeout; the watchers' paged lists (`limit=`) are left to the
//!   watchers' own backoff too.
//! - **Reachability.** Every answer (any status below 500, a watch's first bytes included)
//!   marks the server reachable; every failure (no answer, the deadline, a 5xx, a call its
//!   caller gave up on after waiting a second or more) marks it failing, from the first
//!   failure after the last answer on. [`Health::unanswered_for`] says
//!   for how long the server has failed without answering once: the followers read the Lease
//!   every few seconds and the watchers re-open their watches, so a replica cut off from the
//!   API server sees failures within seconds, and its first answer clears them.

use std::{
    fmt,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll},
    time::Duration,
};

use hyper::{
    Request, Response,
    body::{Body, Bytes, Frame, SizeHint},
};
use tokio::time::{Instant, Sleep};
use tower::{BoxError, Layer, Service};

/// How long a call other than a watch may take, answer and body.
pub const CALL_DEADLINE: Duration = Duration::from_secs(10);

/// The error of a call that had no complete answer within its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadlineElapsed(pub Duration);

impl fmt::Display for DeadlineElapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the Kubernetes API server did not answer within {} s",
            self.0.as_secs()
        )
    }
}

impl std::error::Error for DeadlineElapsed {}

/// Whether the API server answers: shared by every clone, cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Health(Arc<Mutex<Option<Instant>>>);

impl Health {
    /// The server answered: it is reachable.
    pub fn answered(&self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// A call failed without an answer (or with a 5xx): failing from now, unless it already
    /// was.
    pub fn failed(&self) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert_with(Instant::now);
    }

    /// How long calls have failed without one answer in between; `None` while the last call
    /// was answered (or none was made).
    pub fn unanswered_for(&self) -> Option<Duration> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .map(|since| since.elapsed())
    }
}

/// Whether a request is one of the watchers': a watch (`watch=true` or `watch=1`), or a paged
/// list (`limit=`), which the watchers make to fill their caches and which kube-runtime's
/// backoff already retries. Those keep their own timeouts; the deadline is for the calls a
/// request of the API or a reconcile waits on.
fn is_watch<B>(request: &Request<B>) -> bool {
    request.uri().query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| matches!(pair, "watch=true" | "watch=1") || pair.starts_with("limit="))
    })
}

/// The [`Layer`] of [`Guard`]: deadlines and reachability (see the module).
#[derive(Clone, Debug)]
pub struct HealthLayer {
    health: Health,
    deadline: Duration,
}

impl HealthLayer {
    /// Records into `health`; calls other than watches get `deadline`.
    pub fn new(health: Health, deadline: Duration) -> Self {
        HealthLayer { health, deadline }
    }
}

impl<S> Layer<S> for HealthLayer {
    type Service = Guard<S>;

    fn layer(&self, inner: S) -> Guard<S> {
        Guard {
            inner,
            health: self.health.clone(),
            deadline: self.deadline,
        }
    }
}

/// See [`HealthLayer`].
#[derive(Clone, Debug)]
pub struct Guard<S> {
    inner: S,
    health: Health,
    deadline: Duration,
}

impl<S, Req, Res> Service<Request<Req>> for Guard<S>
where
    S: Service<Request<Req>, Response = Response<Res>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    Res: Body,
{
    type Response = Response<Timed<Res>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<Req>) -> Self::Future {
        let deadline = (!is_watch(&request)).then(|| Instant::now() + self.deadline);
        let limit = self.deadline;
        let health = self.health.clone();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let mut outstanding = Outstanding {
                health: health.clone(),
                started: Instant::now(),
                done: false,
            };
            let answered = match deadline {
                Some(at) => match tokio::time::timeout_at(at, answer).await {
                    Ok(answered) => answered.map_err(Into::into),
                    Err(_elapsed) => Err(DeadlineElapsed(limit).into()),
                },
                None => answer.await.map_err(Into::into),
            };
            outstanding.done = true;
            match &answered {
                Ok(response) if !response.status().is_server_error() => health.answered(),
                _ => health.failed(),
            }
            let response = answered?;
            Ok(response.map(|body| Timed {
                inner: body,
                sleep: deadline.map(|at| Box::pin(tokio::time::sleep_until(at))),
                limit,
                health,
            }))
        })
    }
}

/// How long a call must have waited for its answer before its caller gave up on it for that
/// to count as a failure: the Lease's reads give up after a fifth of the Lease's duration
/// (3 s), before [`CALL_DEADLINE`].
const ABANDONED_AFTER: Duration = Duration::from_secs(1);

/// A call waiting for its answer; dropped unanswered after [`ABANDONED_AFTER`] (its caller
/// timed out), it counts as a failure.
struct Outstanding {
    health: Health,
    started: Instant,
    done: bool,
}

impl Drop for Outstanding {
    fn drop(&mut self) {
        if !self.done && self.started.elapsed() >= ABANDONED_AFTER {
            self.health.failed();
        }
    }
}

/// A response body that must arrive before the call's deadline (none for a watch).
pub struct Timed<B> {
    inner: B,
    sleep: Option<Pin<Box<Sleep>>>,
    limit: Duration,
    health: Health,
}

impl<B> Body for Timed<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Some(sleep) = this.sleep.as_mut()
            && sleep.as_mut().poll(cx).is_ready()
        {
            this.sleep = None;
            this.health.failed();
            return Poll::Ready(Some(Err(DeadlineElapsed(this.limit).into())));
        }
        Pin::new(&mut this.inner).poll_frame(cx).map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
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

    // Issue 25, item 9: a call without an answer fails at its deadline; a watch waits.
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

    // Issue 25, item 8: a call its caller gives up on after a while (the Lease's own timeout)
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

    // Issue 25, items 8 and 9: an answer clears the failures; a 5xx is one; a body that stalls
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
}
