//! The one batching engine of the store: edits of one object that arrive together are written
//! together: a Mutation's variants (R22), its devices Secret (R39), its device list (R40),
//! whoever asks (a request of the HTTP API, a heartbeat, the controller). Each edit is a
//! read-modify-write guarded by the object's resourceVersion. An object being edited has one
//! writer task: it takes every edit waiting, starts from the object as known (its own last
//! write, the cache) or as read, applies the edits in the order they came (each sees those
//! before it; one refused changes nothing of the others), checks the object's invariants after
//! each ([`Target::check`]: an edit that would break one is refused alone) and writes the
//! result once, retrying the lot on a conflict with fresh data, at most [`MAX_ATTEMPTS`]
//! times. Each caller waits for its own answer; edits nobody waits on may be gathered for a
//! while first ([`Batches::edit_gathered`]).
//!
//! Every object has a budget of read-modify-writes ([`super::budget`]): a writer that has spent
//! it waits for the next one it may make, and the edits that arrive meanwhile are written with
//! the ones it holds.
//!
//! The writer runs apart from the callers, so a request cut off at its deadline does not cut
//! off the edits of the others; an edit whose request was told that nothing was changed, or
//! whose caller went away before it was sent, is left out ([`overdue::Claim`]).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use hyper::StatusCode;
use tokio::{
    sync::{Notify, oneshot},
    time::Instant,
};

use super::budget::Budgets;
use crate::http::{
    ApiError,
    overdue::{self, Claim},
};

/// How many times the store tries a write on a resourceVersion conflict before it gives up
/// with 503: the one retry bound of every write of a Mutation or of its Secrets.
pub const MAX_ATTEMPTS: usize = 20;

/// What a writer edits: one object on the API server, and the part of it that edits change.
pub trait Target: Send + Sync + 'static {
    /// The object as read and written.
    type Object: Clone + Send + Sync + 'static;
    /// The part of it that edits change.
    type Part: Clone + PartialEq + Send + 'static;
    /// What the log says when a batch was written.
    const WRITTEN: &'static str;

    /// The object as the API server has it now, or why there is none to edit.
    fn read(&self) -> impl Future<Output = Result<Self::Object, ApiError>> + Send;
    /// The object as this replica knows it without asking (its cache), if it does: what a
    /// writer's first attempt starts from (none by default: every attempt reads).
    fn known(&self) -> Option<Self::Object> {
        None
    }
    /// Its part that edits change.
    fn part(object: &Self::Object) -> &Self::Part;
    /// Puts `part` into `object`; answers the part it replaced.
    fn set(object: &mut Self::Object, part: Self::Part) -> Self::Part;
    /// Writes `object` with `part`, guarded by the resourceVersion it was read at.
    fn write(
        &self,
        object: &Self::Object,
        part: &Self::Part,
    ) -> impl Future<Output = kube::Result<Self::Object>> + Send;
    /// The object, for messages ("mutation ns/name").
    fn describe(&self) -> String;
    /// Its key among the batches: the edits of one key share a writer.
    fn key(&self) -> String;
    /// Whether `object` with `part` differs from `object` as it is (by default: whether the
    /// part does), so that it must be written.
    fn needs_write(object: &Self::Object, part: &Self::Part) -> bool {
        part != Self::part(object)
    }
    /// The object's invariants, checked after each edit (its part `before` it, the object
    /// `after` it), before anything is written: one broken refuses the edit, naming it.
    fn check(&self, _before: &Self::Part, _after: &Self::Object) -> Result<(), ApiError> {
        Ok(())
    }
    /// [`Target::check`] for a bound whose measure is costly (the size): asked of a batch's
    /// sum, and of each of its edits only when the sum breaks it.
    fn fits(&self, _before: &Self::Part, _after: &Self::Object) -> Result<(), ApiError> {
        Ok(())
    }
    /// The namespace and name of the Mutation whose object it is, for the log.
    fn owner(&self) -> (&str, &str);
}

/// An edit: from the object as read (and as the edits before it left it), the new part, or a
/// refusal.
pub type Change<T> =
    Box<dyn Fn(&<T as Target>::Object) -> Result<<T as Target>::Part, ApiError> + Send + Sync>;

/// What an edit is answered: the object as written (shared by the edits of its batch), or
/// why not.
type Answer<T> = Result<Arc<<T as Target>::Object>, ApiError>;

/// One edit waiting for its object's writer.
struct Pending<T: Target> {
    change: Change<T>,
    claim: Claim,
    answer: oneshot::Sender<Answer<T>>,
    /// Until when it may wait for others to be written with ([`Batches::edit_gathered`]);
    /// `None`: written at once.
    gather: Option<Instant>,
}

/// The edits waiting, per object that has a writer (an entry lives while its writer does),
/// each object's budget of writes, and the writers gathering edits, told when an edit arrives
/// that may wait less than they do.
pub struct Batches<T: Target>(Arc<Mutex<HashMap<String, Queue<T>>>>, Budgets, Arc<Notify>);

/// The edits waiting for one object's writer, and until when it gathers (`None`: it does not).
struct Queue<T: Target> {
    pending: Vec<Pending<T>>,
    gathering: Option<Instant>,
}

impl<T: Target> Default for Batches<T> {
    fn default() -> Self {
        Batches(Arc::default(), Budgets::default(), Arc::default())
    }
}

impl<T: Target> Clone for Batches<T> {
    fn clone(&self) -> Self {
        Batches(Arc::clone(&self.0), self.1.clone(), Arc::clone(&self.2))
    }
}

impl<T: Target> Batches<T> {
    /// Applies `change` to the object of `target` together with the other edits waiting for
    /// it, and answers the object as written (or as read, when nothing changed): one copy
    /// shared by every edit of the batch (a batch of a hundred devices' edits of a Mutation
    /// listing hundreds of devices made a hundred copies of it). Each call to the API server is
    /// bounded by `limit`.
    pub async fn edit(&self, target: T, limit: Duration, change: Change<T>) -> Answer<T> {
        self.submit(target, limit, change, None).await
    }

    /// [`Batches::edit`], for an edit nobody waits on (a heartbeat): it waits up to `gather`
    /// for others of its object, so a steady stream of them is one write per `gather`, not one
    /// per round trip (a device list's write costs the API server as much as the list is
    /// long). An edit that may not wait ends the window.
    pub async fn edit_gathered(
        &self,
        target: T,
        limit: Duration,
        change: Change<T>,
        gather: Duration,
    ) -> Answer<T> {
        let until = Instant::now() + gather;
        self.submit(target, limit, change, Some(until)).await
    }

    async fn submit(
        &self,
        target: T,
        limit: Duration,
        change: Change<T>,
        gather: Option<Instant>,
    ) -> Answer<T> {
        let (answer, answered) = oneshot::channel();
        let pending = Pending {
            change,
            claim: overdue::claim(),
            answer,
            gather,
        };
        let key = target.key();
        let (start, sooner) = {
            let mut waiting = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            match waiting.get_mut(&key) {
                Some(queue) => {
                    let sooner = (queue.gathering).is_some_and(|g| gather.is_none_or(|u| u < g));
                    queue.pending.push(pending);
                    (false, sooner)
                }
                None => {
                    let (pending, gathering) = (vec![pending], None);
                    waiting.insert(key.clone(), Queue { pending, gathering });
                    (true, false)
                }
            }
        };
        let what = target.describe();
        if start {
            tokio::spawn(Writer { target, limit }.run(self.clone(), key));
        } else if sooner {
            self.2.notify_waiters();
        }
        answered.await.unwrap_or_else(|_| {
            Err(ApiError(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the edit of {what} was dropped unanswered; read it"),
            ))
        })
    }

    /// The edits that came for `key`'s writer while it held a batch, which it goes on with.
    fn take_more(&self, key: &str) -> Vec<Pending<T>> {
        let mut waiting = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        (waiting.get_mut(key)).map_or_else(Vec::new, |q| std::mem::take(&mut q.pending))
    }

    /// Waits until the end of the gathering window of `batch` and of the edits of `key` waiting
    /// (the soonest of theirs: an edit that may wait less, a change of state among refreshes,
    /// ends a longer window), or at once when one of them may not wait.
    async fn gather(&self, key: &str, batch: &[Pending<T>]) {
        loop {
            let told = self.2.notified();
            let Some(until) = self.gathering(key, batch, true) else {
                return;
            };
            tokio::select! {
                () = tokio::time::sleep_until(until) => break,
                () = told => {}
            }
        }
        self.gathering(key, batch, false);
    }

    /// Until when `key`'s writer may gather `batch` with the edits waiting for it (`None`: one
    /// may not wait), noted for the edits that arrive meanwhile when `on`, else forgotten.
    fn gathering(&self, key: &str, batch: &[Pending<T>], on: bool) -> Option<Instant> {
        let mut waiting = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let queue = waiting.get_mut(key)?;
        let all = batch.iter().chain(&queue.pending);
        let until = all.map(|p| p.gather).min().flatten().filter(|_| on);
        queue.gathering = until;
        until
    }

    /// The edits waiting for `key`'s writer, or none: then the writer is gone.
    fn take(&self, key: &str) -> Vec<Pending<T>> {
        let mut waiting = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let taken =
            (waiting.get_mut(key)).map_or_else(Vec::new, |q| std::mem::take(&mut q.pending));
        if taken.is_empty() {
            waiting.remove(key);
        }
        taken
    }
}

/// An object's writer.
struct Writer<T> {
    target: T,
    limit: Duration,
}

impl<T: Target> Writer<T> {
    /// Writes the edits waiting until there are none.
    async fn run(self, batches: Batches<T>, key: String) {
        let mut last = None;
        loop {
            let mut batch = batches.take(&key);
            if batch.is_empty() {
                return;
            }
            // Edits that arrive while the writer gathers, or waits for its budget, join
            // this batch.
            batches.gather(&key, &batch).await;
            let waited = batches.1.spend(&key).await;
            if waited || batch.iter().any(|p| p.gather.is_some()) {
                batch.append(&mut batches.take_more(&key));
            }
            last = self.write(batch, last.take()).await;
        }
    }

    /// One read-modify-write of the edits of `batch`, retried on a conflict; the object as
    /// written (or as read, when nothing changed), when it was. The first attempt starts from
    /// the object as this writer wrote it last (`last`) or as cached; each write is guarded
    /// by the resourceVersion it started from, so a stale start costs a conflict, never an
    /// edit, and every later attempt reads the API server, as does an edit that changes
    /// nothing of what was known, before it is answered.
    async fn write(
        &self,
        mut batch: Vec<Pending<T>>,
        last: Option<Arc<T::Object>>,
    ) -> Option<Arc<T::Object>> {
        let mut known = last
            .map(|o| T::Object::clone(&o))
            .or_else(|| self.target.known());
        for attempt in 1..=MAX_ATTEMPTS {
            // A client gone before its edit was sent is not written for.
            batch.retain(|p| !p.answer.is_closed());
            if batch.is_empty() {
                return None;
            }
            let (current, fresh) = match known.take() {
                Some(known) => (known, false),
                None => match self.bounded(self.target.read()).await {
                    Ok(Ok(current)) => (current, true),
                    Ok(Err(refused)) | Err(refused) => {
                        refuse_all(batch, &refused);
                        return None;
                    }
                },
            };
            let check = |before: &T::Part, after: &T::Object| self.target.check(before, after);
            let fits = |before: &T::Part, after: &T::Object| self.target.fits(before, after);
            let (part, results) = apply(check, fits, &current, &mut batch);
            if !T::needs_write(&current, &part) {
                if !fresh {
                    continue;
                }
                return Some(answer(batch, results, current));
            }
            let failed = match self.bounded(self.target.write(&current, &part)).await {
                Ok(Ok(written)) => {
                    let (namespace, name) = self.target.owner();
                    let edits = batch.len();
                    tracing::debug!(namespace, name, attempt, edits, "{}", T::WRITTEN);
                    for (p, r) in batch.iter().zip(&results) {
                        if r.is_ok() {
                            p.claim.acknowledged();
                        }
                    }
                    return Some(answer(batch, results, written));
                }
                Ok(Err(err)) if crate::conflict(&err) => {
                    let (namespace, name) = self.target.owner();
                    let what = self.target.describe();
                    tracing::debug!(namespace, name, attempt, "resourceVersion conflict: {what}");
                    // Spread the retries of writers on other replicas a little.
                    tokio::time::sleep(Duration::from_millis(2 * attempt as u64)).await;
                    continue;
                }
                Ok(Err(err)) => ApiError::from(err),
                Err(late) => late,
            };
            // The edits refused keep their own answer; the others get the failure.
            let answers = results.into_iter().map(|r| r.and(Err(failed.clone())));
            answer(batch, answers.collect(), current);
            return None;
        }
        let gave_up = format!(
            "{} kept changing: gave up after {MAX_ATTEMPTS} attempts; try again",
            self.target.describe()
        );
        refuse_all(batch, &ApiError(StatusCode::SERVICE_UNAVAILABLE, gave_up));
        None
    }

    /// `call` within the writer's limit: its own result, or 503 when it took longer.
    async fn bounded<R, E>(
        &self,
        call: impl Future<Output = Result<R, E>>,
    ) -> Result<Result<R, E>, ApiError> {
        tokio::time::timeout(self.limit, call).await.map_err(|_| {
            ApiError(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the Kubernetes API did not answer within {} s; read {} before you retry",
                    self.limit.as_secs_f64(),
                    self.target.describe()
                ),
            )
        })
    }
}

/// A check of an edit: the part before it, the object after it.
type Check<'a, T> =
    &'a dyn Fn(&<T as Target>::Part, &<T as Target>::Object) -> Result<(), ApiError>;

/// The part after the edits of `batch`, applied in order to `current`, and each edit's result;
/// an edit after which `check` or `fits` refuses is undone. `fits` (the size: measuring the
/// object is what an edit costs most) is asked of the batch's sum, and of each edit only when
/// the sum does not fit (a thousand heartbeats measured a list of hundreds a thousand times,
/// the polls behind them waiting). An edit that changes something is claimed for its request;
/// one whose request was told nothing was changed is dropped. The object is copied once.
fn apply<T: Target>(
    check: impl Fn(&T::Part, &T::Object) -> Result<(), ApiError>,
    fits: impl Fn(&T::Part, &T::Object) -> Result<(), ApiError>,
    current: &T::Object,
    batch: &mut Vec<Pending<T>>,
) -> (T::Part, Vec<Result<(), ApiError>>) {
    'again: loop {
        let (mut edited, mut results) = edit_all(&check, None, current, batch);
        if fits(T::part(current), &edited).is_err() {
            (edited, results) = edit_all(&check, Some(&fits), current, batch);
        }
        for (i, r) in results.iter().enumerate() {
            if matches!(r, Ok(true)) && !batch[i].claim.sent() {
                batch.remove(i);
                continue 'again;
            }
        }
        let results = results.into_iter().map(|r| r.map(|_| ())).collect();
        return (T::part(&edited).clone(), results);
    }
}

/// `current` after the edits of `batch`, each checked by `check` and, when given, `fits`; each
/// edit's result: whether it changed something, or its refusal.
fn edit_all<T: Target>(
    check: Check<'_, T>,
    fits: Option<Check<'_, T>>,
    current: &T::Object,
    batch: &[Pending<T>],
) -> (T::Object, Vec<Result<bool, ApiError>>) {
    let mut edited = current.clone();
    let mut edit = |p: &Pending<T>| {
        let part = (p.change)(&edited)?;
        if &part == T::part(&edited) {
            return Ok(false);
        }
        let before = T::set(&mut edited, part);
        let checked =
            check(&before, &edited).and_then(|()| fits.map_or(Ok(()), |f| f(&before, &edited)));
        match checked {
            Ok(()) => Ok(true),
            Err(refused) => {
                T::set(&mut edited, before);
                Err(refused)
            }
        }
    };
    let results = batch.iter().map(&mut edit).collect();
    (edited, results)
}

/// Answers each edit of `batch`: its refusal, or `object`, shared; returns it.
fn answer<T: Target>(
    batch: Vec<Pending<T>>,
    results: Vec<Result<(), ApiError>>,
    object: T::Object,
) -> Arc<T::Object> {
    let shared = Arc::new(object);
    for (p, r) in batch.into_iter().zip(results) {
        let _ = p.answer.send(r.map(|()| Arc::clone(&shared)));
    }
    shared
}

/// Answers every edit of `batch` with `err`.
fn refuse_all<T: Target>(batch: Vec<Pending<T>>, err: &ApiError) {
    for p in batch {
        let _ = p.answer.send(Err(err.clone()));
    }
}

#[cfg(test)]
mod tests;
