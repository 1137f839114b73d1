//! Deadlines on the operator's calls, and whether the API server still answers
//! (R34).
//!
//! [`HealthLayer`] sits outermost in the client's stack, so it sees every call as its caller
//! does, kube's retries of 429/503/504 included:
//!
//! - **Deadlines.** A call other than a watch must have its answer, head and body, within
//!   [`CALL_DEADLINE`]; after that it fails with [`DeadlineElapsed`] (which the HTTP API
//!   answers 503 with `Retry-After`). A stalled API server (TCP accepted, nothing answered)
//!   then costs a request 10 s, not forever.
//! - **Silence** (R34). The watchers' requests, watches and paged lists
//!   (`limit=`), are long-lived by design and have no deadline; instead, when the layer is
//!   given a bound ([`HealthLayer::watch_silence`]), each must have its head within the bound
//!   or [`CALL_DEADLINE`], whichever is shorter (the API server answers a watch at once; a
//!   dead connection from the pool then costs a new list 10 s, not the bound), and then each
//!   next piece of its body within the bound, or it fails with [`WatchSilent`]. A watch that
//!   asked for bookmarks (kube-runtime asks by default) hears from the API server at least
//!   once a minute, so a watch silent for twice that is stalled (a dropped connection, a hung
//!   server), where kube-runtime's own idle timeout would wait almost five minutes. The
//!   caches (`crate::cache`) list such a watch again, and are not answered from meanwhile.
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

/// The error of a watcher's request (a watch or a paged list) that went without its head or
/// without any more of its body (an event or a bookmark) for this long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchSilent(pub Duration);

impl fmt::Display for WatchSilent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the watch heard nothing (no answer, event or bookmark) from the Kubernetes API \
             server for {} s",
            self.0.as_secs()
        )
    }
}

impl std::error::Error for WatchSilent {}

impl WatchSilent {
    /// The silence that caused `error`, if any: found among its sources.
    pub fn cause_of(error: &(dyn std::error::Error + 'static)) -> Option<WatchSilent> {
        let mut next = Some(error);
        while let Some(error) = next {
            if let Some(silent) = error.downcast_ref::<WatchSilent>() {
                return Some(*silent);
            }
            next = error.source();
        }
        None
    }
}

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
/// backoff already retries. Those have a bound on their silence instead; the deadline is for
/// the calls a request of the API or a reconcile waits on.
fn is_watch<B>(request: &Request<B>) -> bool {
    request.uri().query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| matches!(pair, "watch=true" | "watch=1") || pair.starts_with("limit="))
    })
}

/// The [`Layer`] of [`Guard`]: deadlines, silences and reachability (see the module).
#[derive(Clone, Debug)]
pub struct HealthLayer {
    health: Health,
    deadline: Duration,
    silence: Option<Duration>,
}

impl HealthLayer {
    /// Records into `health`; calls other than watches get `deadline`, watches no bound.
    pub fn new(health: Health, deadline: Duration) -> Self {
        HealthLayer {
            health,
            deadline,
            silence: None,
        }
    }

    /// The watchers' requests fail when silent for `silence` (`None`: never).
    pub fn watch_silence(self, silence: Option<Duration>) -> Self {
        HealthLayer { silence, ..self }
    }
}

impl<S> Layer<S> for HealthLayer {
    type Service = Guard<S>;

    fn layer(&self, inner: S) -> Guard<S> {
        Guard {
            inner,
            health: self.health.clone(),
            deadline: self.deadline,
            silence: self.silence,
        }
    }
}

/// See [`HealthLayer`].
#[derive(Clone, Debug)]
pub struct Guard<S> {
    inner: S,
    health: Health,
    deadline: Duration,
    silence: Option<Duration>,
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
        let watcher = is_watch(&request);
        // A watcher's request has a bound on its silence (if any), every other call a deadline.
        let silence = self.silence.filter(|_| watcher);
        let limit = self.deadline;
        let head = if watcher {
            silence.map(|bound| bound.min(limit))
        } else {
            Some(limit)
        };
        let deadline = head.map(|head| Instant::now() + head);
        let expired = move || -> BoxError {
            match (silence, head) {
                (Some(_), Some(head)) => WatchSilent(head).into(),
                _ => DeadlineElapsed(limit).into(),
            }
        };
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
                    Err(_elapsed) => Err(expired()),
                },
                None => answer.await.map_err(Into::into),
            };
            outstanding.done = true;
            match &answered {
                Ok(response) if !response.status().is_server_error() => health.answered(),
                _ => health.failed(),
            }
            let response = answered?;
            // A watcher's body gets its bound anew from its head on, and at each piece.
            let deadline = match silence {
                Some(bound) => Some(Instant::now() + bound),
                None => deadline,
            };
            Ok(response.map(|body| Timed {
                inner: body,
                sleep: deadline.map(|at| Box::pin(tokio::time::sleep_until(at))),
                limit,
                silence,
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

/// A response body that must arrive before the call's deadline, or for a watcher's request
/// (with a bound on its silence) each piece of which must follow the one before within the
/// bound.
pub struct Timed<B> {
    inner: B,
    sleep: Option<Pin<Box<Sleep>>>,
    limit: Duration,
    silence: Option<Duration>,
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
        if let Some(bound) = this.silence {
            // What has arrived is taken first: a reader that polls late is not silence.
            let polled = Pin::new(&mut this.inner).poll_frame(cx);
            if polled.is_ready() {
                if let Some(sleep) = this.sleep.as_mut() {
                    sleep.as_mut().reset(Instant::now() + bound);
                }
                return polled.map_err(Into::into);
            }
            if let Some(sleep) = this.sleep.as_mut()
                && sleep.as_mut().poll(cx).is_ready()
            {
                this.sleep = None;
                return Poll::Ready(Some(Err(WatchSilent(bound).into())));
            }
            return Poll::Pending;
        }
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
mod tests;
