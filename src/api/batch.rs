//! Variant edits of one Mutation are written together (R22). Each edit is a read-modify-write
//! of the Mutation's variants guarded by its resourceVersion; this replica's edits of one
//! Mutation used to queue up and take turns, one read and one write each, so fifty devices
//! that added their variants at once made fifty writes in a row, and the last ones ran past
//! their request's deadline (`MUTANT_API_REQUEST_DEADLINE_SECONDS`) on a busy API server.
//! Now a Mutation being edited has one writer task: it takes every edit waiting, reads the
//! Mutation once, applies the edits in the order they came (each sees those before it; one
//! refused changes nothing of the others) and writes the result once, retrying the lot on a
//! conflict with fresh data. Each request waits for its own answer within its own deadline.
//!
//! The writer runs apart from the requests, so a request cut off at its deadline does not cut
//! off the edits of the others; an edit whose request was told that nothing was changed, or
//! whose client went away before it was sent, is left out ([`overdue::Claim`]).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use hyper::StatusCode;
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};
use serde_json::json;
use tokio::sync::oneshot;

use super::error::ApiError;
use crate::{
    crd::{Mutation, Variant},
    http::overdue::{self, Claim},
};

/// How many times a write (of variant edits, of a devices Secret) is retried on a
/// resourceVersion conflict before it gives up with 503.
pub const MAX_ATTEMPTS: usize = 20;

/// An edit of a Mutation's variants: from the Mutation as read (and as the edits before it
/// left it), the new list, or a refusal.
pub type Change = Box<dyn Fn(&Mutation) -> Result<Vec<Variant>, ApiError> + Send + Sync>;

/// One edit waiting for its Mutation's writer.
struct Pending {
    change: Change,
    claim: Claim,
    answer: oneshot::Sender<Result<Mutation, ApiError>>,
}

/// The edits waiting, per Mutation that has a writer; an entry lives while its writer does.
#[derive(Default, Clone)]
pub struct Batches(Arc<Mutex<HashMap<String, Vec<Pending>>>>);

impl Batches {
    /// Applies `change` to Mutation `ns/name` together with the other edits waiting for it,
    /// and answers the Mutation as written (or as read, when nothing changed). Each call to
    /// the API server is bounded by `limit`.
    pub async fn edit(
        &self,
        client: &Client,
        limit: Duration,
        ns: &str,
        name: &str,
        change: Change,
    ) -> Result<Mutation, ApiError> {
        let (answer, answered) = oneshot::channel();
        let pending = Pending {
            change,
            claim: overdue::claim(),
            answer,
        };
        let key = format!("{ns}/{name}");
        let start = {
            let mut waiting = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            match waiting.get_mut(&key) {
                Some(queue) => {
                    queue.push(pending);
                    false
                }
                None => {
                    waiting.insert(key.clone(), vec![pending]);
                    true
                }
            }
        };
        if start {
            let writer = Writer {
                api: Api::namespaced(client.clone(), ns),
                ns: ns.to_string(),
                name: name.to_string(),
                limit,
            };
            tokio::spawn(writer.run(self.clone(), key));
        }
        answered.await.unwrap_or_else(|_| {
            Err(ApiError(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the edit of mutation {ns}/{name} was dropped unanswered; read it"),
            ))
        })
    }

    /// The edits waiting for `key`'s writer, or none: then the writer is gone.
    fn take(&self, key: &str) -> Vec<Pending> {
        let mut waiting = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let taken = waiting.get_mut(key).map(std::mem::take).unwrap_or_default();
        if taken.is_empty() {
            waiting.remove(key);
        }
        taken
    }
}

/// A Mutation's writer.
struct Writer {
    api: Api<Mutation>,
    ns: String,
    name: String,
    limit: Duration,
}

impl Writer {
    /// Writes the edits waiting until there are none.
    async fn run(self, batches: Batches, key: String) {
        loop {
            let batch = batches.take(&key);
            if batch.is_empty() {
                return;
            }
            self.write(batch).await;
        }
    }

    /// One read-modify-write of the edits of `batch`, retried on a conflict.
    async fn write(&self, mut batch: Vec<Pending>) {
        let (ns, name) = (&self.ns, &self.name);
        for attempt in 1..=MAX_ATTEMPTS {
            // A client gone before its edit was sent is not written for.
            batch.retain(|p| !p.answer.is_closed());
            if batch.is_empty() {
                return;
            }
            let current = match self.bounded(self.api.get_opt(name)).await {
                Ok(Ok(Some(current))) => current,
                Ok(Ok(None)) => {
                    let absent = format!("mutation {ns}/{name} not found");
                    return refuse_all(batch, &ApiError::not_found(absent));
                }
                Ok(Err(err)) => return refuse_all(batch, &err.into()),
                Err(late) => return refuse_all(batch, &late),
            };
            if current.variants_read_only() {
                return refuse_all(batch, &read_only(ns, name));
            }
            let (variants, results) = apply(&current, &mut batch);
            if variants == current.spec.variants {
                return answer(batch, results, &current);
            }
            let patch = json!({
                "metadata": { "resourceVersion": current.metadata.resource_version },
                "spec": { "variants": variants },
            });
            let params = PatchParams {
                field_manager: Some("mutantops-api".into()),
                ..PatchParams::default()
            };
            let merge = Patch::Merge(&patch);
            let failed = match self.bounded(self.api.patch(name, &params, &merge)).await {
                Ok(Ok(updated)) => {
                    tracing::debug!(
                        namespace = ns,
                        name,
                        attempt,
                        edits = batch.len(),
                        "variant edits written"
                    );
                    for (p, r) in batch.iter().zip(&results) {
                        if r.is_ok() {
                            p.claim.acknowledged();
                        }
                    }
                    return answer(batch, results, &updated);
                }
                Ok(Err(kube::Error::Api(status))) if status.code == 409 => {
                    tracing::debug!(namespace = ns, name, attempt, "resourceVersion conflict");
                    // Spread the retries of writers on other replicas a little.
                    tokio::time::sleep(Duration::from_millis(2 * attempt as u64)).await;
                    continue;
                }
                Ok(Err(err)) => ApiError::from(err),
                Err(late) => late,
            };
            // The edits refused keep their own answer; the others get the failure.
            let answers = results.into_iter().map(|r| r.and(Err(failed.clone())));
            return answer(batch, answers.collect(), &current);
        }
        let gave_up = format!(
            "mutation {ns}/{name} kept changing: gave up after {MAX_ATTEMPTS} attempts; try again"
        );
        refuse_all(batch, &ApiError(StatusCode::SERVICE_UNAVAILABLE, gave_up));
    }

    /// `call` within the writer's limit: its own result, or 503 when it took longer.
    async fn bounded<T>(
        &self,
        call: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<Result<T, kube::Error>, ApiError> {
        tokio::time::timeout(self.limit, call).await.map_err(|_| {
            ApiError(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the Kubernetes API did not answer within {} s; read the mutation before \
                     you retry",
                    self.limit.as_secs_f64()
                ),
            )
        })
    }
}

/// The Mutation's variants after the edits of `batch`, applied in order to `current`, and
/// each edit's result. An edit that changes something is claimed for its request first; one
/// whose request was already told that nothing was changed is dropped from the batch.
fn apply(
    current: &Mutation,
    batch: &mut Vec<Pending>,
) -> (Vec<Variant>, Vec<Result<(), ApiError>>) {
    'again: loop {
        let mut edited = current.clone();
        let mut results = Vec::with_capacity(batch.len());
        for (i, p) in batch.iter().enumerate() {
            match (p.change)(&edited) {
                Ok(variants) if variants == edited.spec.variants => results.push(Ok(())),
                Ok(variants) => {
                    if !p.claim.sent() {
                        batch.remove(i);
                        continue 'again;
                    }
                    edited.spec.variants = variants;
                    results.push(Ok(()));
                }
                Err(refused) => results.push(Err(refused)),
            }
        }
        return (edited.spec.variants, results);
    }
}

/// Answers each edit of `batch`: its refusal, or `m`.
fn answer(batch: Vec<Pending>, results: Vec<Result<(), ApiError>>, m: &Mutation) {
    for (p, r) in batch.into_iter().zip(results) {
        let _ = p.answer.send(r.map(|()| m.clone()));
    }
}

/// Answers every edit of `batch` with `err`.
fn refuse_all(batch: Vec<Pending>, err: &ApiError) {
    for p in batch {
        let _ = p.answer.send(Err(err.clone()));
    }
}

/// Why the variants of Mutation `ns/name` are not the API's to change.
fn read_only(ns: &str, name: &str) -> ApiError {
    ApiError::conflict(format!(
        "mutation {ns}/{name} is synced by Argo CD without annotation \
         mutantops.neiam.org/runtime-variants: \"true\": its variants belong in git"
    ))
}

#[cfg(test)]
mod tests;
