//! One deadline per request (R34): a request that needs the API server
//! makes several calls in a row (a read, dry runs, the write, a wait for the cache), and each
//! call's own deadline does not bound their sum. A device's firmware gives up after 4.5 to
//! 5 s; the request's whole handling is bounded instead, and what it had done by then is
//! known: [`within`] runs a handler under its deadline, [`write`] marks the API-server writes
//! it makes, and [`until`] ends a wait of its own (for the cache to show a write) in time for
//! the answer. The time the client takes to send its body is not counted ([`excluding`]): it
//! has a bound of its own (`ServerConfig::body_timeout`, then 408), and a slow sender is not
//! the API server stalling.
//!
//! A handler cut off at its deadline is dropped: a call in flight is abandoned. Whether its
//! write reached the API server is then unknown, and the answer says so.

use std::{
    future::Future,
    pin::pin,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU8, Ordering},
    },
    time::Duration,
};

use tokio::{sync::Notify, time::Instant};

/// What a request's writes had come to when its deadline passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// No write was sent: nothing was changed.
    NothingWritten,
    /// A write was sent and not answered: it may or may not have been made.
    Unknown,
    /// Every write sent was acknowledged; what followed (waiting to see it) was cut off.
    Written,
}

/// A request its deadline cut off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overdue {
    /// The deadline it had.
    pub after: Duration,
    /// What its writes had come to.
    pub outcome: Outcome,
}

impl Overdue {
    /// What the client is told.
    pub fn message(&self) -> String {
        let after = self.after.as_secs_f64();
        let done = match self.outcome {
            Outcome::NothingWritten => "nothing was changed; retry",
            Outcome::Unknown => {
                "a change was sent to the Kubernetes API and not confirmed, so it may or may not \
                 have been made: read it before you retry"
            }
            Outcome::Written => {
                "the change was made, but this replica has not seen it yet: read it before you \
                 change it again"
            }
        };
        format!(
            "the Kubernetes API did not answer within this request's deadline of {after} s \
             (MUTANT_API_REQUEST_DEADLINE_SECONDS); {done}"
        )
    }
}

const NONE: u8 = 0;
const SENT: u8 = 1;
const ACKNOWLEDGED: u8 = 2;
/// Cut off with nothing written: no write may be sent for it any more ([`Claim::sent`]).
const CLOSED: u8 = 3;

/// The current request's deadline and its writes' state.
struct Request {
    clock: Mutex<Clock>,
    resumed: Notify,
    writes: AtomicU8,
}

/// When a request's deadline passes, and whether its clock is stopped.
#[derive(Clone, Copy)]
struct Clock {
    ends: Instant,
    /// Since when the clock is stopped (a body being read), if it is.
    stopped: Option<Instant>,
}

impl Request {
    fn clock(&self) -> Clock {
        *self.clock.lock().unwrap_or_else(PoisonError::into_inner)
    }
    fn set(&self, change: impl FnOnce(&mut Clock)) {
        change(&mut self.clock.lock().unwrap_or_else(PoisonError::into_inner));
    }
    fn outcome(&self) -> Outcome {
        match self.writes.load(Ordering::SeqCst) {
            NONE | CLOSED => Outcome::NothingWritten,
            SENT => Outcome::Unknown,
            _ => Outcome::Written,
        }
    }
}

tokio::task_local! {
    static REQUEST: Arc<Request>;
}

/// What [`until`] leaves of the deadline for the answer to be written and sent.
const ANSWER_MARGIN: Duration = Duration::from_millis(250);

/// Runs `handler` with `limit` as its deadline.
pub async fn within<F: Future>(limit: Duration, handler: F) -> Result<F::Output, Overdue> {
    let request = Arc::new(Request {
        clock: Mutex::new(Clock {
            ends: Instant::now() + limit,
            stopped: None,
        }),
        resumed: Notify::new(),
        writes: AtomicU8::new(NONE),
    });
    let mut run = pin!(REQUEST.scope(request.clone(), handler));
    loop {
        let clock = request.clock();
        if clock.stopped.is_some() {
            tokio::select! {
                output = &mut run => return Ok(output),
                () = request.resumed.notified() => continue,
            }
        }
        if let Ok(output) = tokio::time::timeout_at(clock.ends, &mut run).await {
            return Ok(output);
        }
        // The clock may have been stopped, or moved on, meanwhile.
        let clock = request.clock();
        if clock.stopped.is_none() && clock.ends <= Instant::now() {
            // Told that nothing was changed, it stays so: a write another task would make for
            // it ([`Claim`]) is not sent.
            let _ =
                request
                    .writes
                    .compare_exchange(NONE, CLOSED, Ordering::SeqCst, Ordering::SeqCst);
            return Err(Overdue {
                after: limit,
                outcome: request.outcome(),
            });
        }
    }
}

/// Runs `body` (the reading of a request's body) with the current request's clock stopped.
pub async fn excluding<F: Future>(body: F) -> F::Output {
    let Ok(request) = REQUEST.try_with(Arc::clone) else {
        return body.await;
    };
    request.set(|c| c.stopped = Some(Instant::now()));
    let output = body.await;
    request.set(|c| {
        if let Some(since) = c.stopped.take() {
            c.ends += since.elapsed();
        }
    });
    // A permit is kept when nobody waits yet: the resume is never missed.
    request.resumed.notify_one();
    output
}

/// Sends a write to the API server on behalf of the current request (if any): until it is
/// answered, the request's outcome is unknown; answered with success, it was made.
pub async fn write<T, E>(call: impl Future<Output = Result<T, E>>) -> Result<T, E> {
    mark(SENT);
    let result = call.await;
    if result.is_ok() {
        mark(ACKNOWLEDGED);
    }
    result
}

fn mark(state: u8) {
    // Outside a request (the controller's writes) there is nothing to mark.
    let _ = REQUEST.try_with(|r| r.writes.store(state, Ordering::SeqCst));
}

/// The current request's writes (if any), for another task that writes on its behalf: a
/// variant edit is sent by its Mutation's writer, together with those of other requests.
pub fn claim() -> Claim {
    Claim(REQUEST.try_with(Arc::clone).ok())
}

/// A request's writes, as another task sees them: see [`claim`].
pub struct Claim(Option<Arc<Request>>);

impl Claim {
    /// Marks a write for the request as sent, unless the request was cut off first and told
    /// that nothing was changed: then false, and the write must not be sent.
    pub fn sent(&self) -> bool {
        self.0.as_ref().is_none_or(|r| {
            r.writes
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |s| {
                    (s != CLOSED).then_some(SENT)
                })
                .is_ok()
        })
    }

    /// Marks the write sent for the request as made.
    pub fn acknowledged(&self) {
        if let Some(r) = &self.0 {
            let _ = r
                .writes
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |s| {
                    (s == SENT).then_some(ACKNOWLEDGED)
                });
        }
    }
}

/// `deadline`, or earlier when the current request must be answered before it: a wait of the
/// handler's own (for the cache to show a write) ends in time for the answer.
pub fn until(deadline: Instant) -> Instant {
    REQUEST
        .try_with(|r| r.clock().ends)
        .map_or(deadline, |ends| {
            ends.checked_sub(ANSWER_MARGIN)
                .unwrap_or(ends)
                .min(deadline)
        })
}

/// For tests: a request that hands out its claim, then waits for ever; its deadline is `limit`.
#[cfg(test)]
pub(crate) fn stalling_request(
    limit: Duration,
) -> (
    impl Future<Output = Result<(), Overdue>>,
    tokio::sync::oneshot::Receiver<Claim>,
) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let request = within(limit, async move {
        let _ = tx.send(claim());
        std::future::pending::<()>().await
    });
    (request, rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_secs(4);

    async fn stalled() -> Result<(), ()> {
        std::future::pending().await
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_within_its_deadline_is_answered_as_it_was() {
        let answered = within(LIMIT, async { 7 }).await;
        assert_eq!(answered, Ok(7));
    }

    #[tokio::test(start_paused = true)]
    async fn reads_cut_off_changed_nothing() {
        // R34: a read that stalls ends at the deadline, with nothing written.
        let began = Instant::now();
        let cut = within(LIMIT, stalled()).await.unwrap_err();
        assert_eq!(began.elapsed(), LIMIT);
        assert_eq!(cut.outcome, Outcome::NothingWritten);
        assert!(
            cut.message().contains("nothing was changed"),
            "{}",
            cut.message()
        );
        assert!(
            cut.message().contains("deadline of 4 s"),
            "{}",
            cut.message()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_without_an_answer_is_unknown() {
        let cut = within(LIMIT, async {
            write(async { Ok::<_, ()>(()) }).await?;
            write(stalled()).await
        })
        .await
        .unwrap_err();
        assert_eq!(cut.outcome, Outcome::Unknown);
        assert!(
            cut.message().contains("may or may not"),
            "{}",
            cut.message()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_answered_then_a_stalled_wait_was_made() {
        let cut = within(LIMIT, async {
            write(async { Ok::<_, ()>(()) }).await?;
            stalled().await
        })
        .await
        .unwrap_err();
        assert_eq!(cut.outcome, Outcome::Written);
        assert!(
            cut.message().contains("the change was made"),
            "{}",
            cut.message()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_time_a_body_takes_to_arrive_is_not_counted() {
        let began = Instant::now();
        let answered = within(LIMIT, async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            excluding(tokio::time::sleep(Duration::from_secs(9))).await;
            tokio::time::sleep(Duration::from_secs(2)).await;
            "answered"
        })
        .await;
        assert_eq!(answered, Ok("answered"));
        assert_eq!(began.elapsed(), Duration::from_secs(12));
        // What is counted still ends it: 1 s, then the body, then 3 s more.
        let began = Instant::now();
        let cut = within(LIMIT, async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            excluding(tokio::time::sleep(Duration::from_secs(9))).await;
            stalled().await
        })
        .await
        .unwrap_err();
        assert_eq!(cut.outcome, Outcome::NothingWritten);
        assert_eq!(began.elapsed(), Duration::from_secs(13));
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_claimed_for_a_request_counts_as_its_own() {
        // Claimed for a request that then stalls: its outcome is unknown, then made.
        let (cut, rx) = stalling_request(LIMIT);
        let (cut, claimed) = tokio::join!(cut, async {
            let claim = rx.await.unwrap();
            assert!(claim.sent());
            claim
        });
        assert_eq!(cut.unwrap_err().outcome, Outcome::Unknown);
        claimed.acknowledged();
        // Outside a request, a claim always may send.
        assert!(claim().sent());
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_told_nothing_changed_cannot_be_claimed_after() {
        // R34: "nothing was changed" stays true once it is said.
        let (cut, rx) = stalling_request(LIMIT);
        let cut = cut.await.unwrap_err();
        assert_eq!(cut.outcome, Outcome::NothingWritten);
        let late = rx.await.unwrap();
        assert!(!late.sent(), "a write claimed after the answer");
        late.acknowledged();
    }

    #[tokio::test(start_paused = true)]
    async fn waits_of_the_handler_end_before_the_deadline() {
        let far = Instant::now() + Duration::from_secs(60);
        // Outside a request: as asked.
        assert_eq!(until(far), far);
        let began = Instant::now();
        let ends = within(LIMIT, async { until(far) }).await.unwrap();
        assert_eq!(ends, began + LIMIT - ANSWER_MARGIN);
        let near = Instant::now() + Duration::from_secs(1);
        assert_eq!(within(LIMIT, async move { until(near) }).await, Ok(near));
    }
}
