//! The admin's word on a Mutation's rollout in steps (R43):
//! `POST .../mutations/{name}/rollout/resume` and `.../rollout/abort`. Each writes the
//! annotation the leader reads (`variant::rollout::RESUME_ANNOTATION`, `ABORT_ANNOTATION`)
//! with a merge patch of the annotations alone, for the rollout as just read; the leader acts
//! on it at its next reconcile, which the annotation brings.

use hyper::StatusCode;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use serde_json::json;

use super::{
    error::{ApiError, ApiResult},
    state::ApiState,
};
use crate::{
    crd::{Mutation, RolloutPhase, RolloutStatus},
    http,
    variant::rollout::{ABORT_ANNOTATION, RESUME_ANNOTATION},
};

/// The answer: the rollout the word was given on, and the annotation written.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Said<'a> {
    revision: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    previous_revision: Option<&'a str>,
    step: i32,
    phase: &'static str,
    annotation: &'static str,
    value: &'a str,
}

/// The Mutation and its rollout's status, read from the API server.
async fn rollout_of(
    state: &ApiState,
    ns: &str,
    name: &str,
) -> Result<(Mutation, RolloutStatus), ApiError> {
    let api: kube::Api<Mutation> = kube::Api::namespaced(state.client.clone(), ns);
    let Some(m) = api.get_opt(name).await? else {
        return Err(ApiError::not_found(format!(
            "mutation {ns}/{name} not found"
        )));
    };
    if m.spec.rollout.is_none() {
        return Err(ApiError::conflict(format!(
            "mutation {ns}/{name} has no spec.rollout: its variants take a base change at once"
        )));
    }
    let Some(status) = m
        .status
        .as_ref()
        .and_then(|s| s.rollout.as_deref())
        .cloned()
    else {
        return Err(ApiError::conflict(format!(
            "mutation {ns}/{name} has no status.rollout yet: the operator has not reconciled it"
        )));
    };
    Ok((m, status))
}

/// Writes `annotations` (a value, or null to remove) on `m`, through the store.
async fn annotate(
    state: &ApiState,
    m: &Mutation,
    annotations: serde_json::Value,
) -> Result<(), ApiError> {
    let (ns, name) = (
        m.metadata.namespace.as_deref().unwrap_or_default(),
        m.metadata.name.as_deref().unwrap_or_default(),
    );
    state.store.annotate(ns, name, annotations).await
}

/// `POST .../rollout/resume`: a rollout held at a pause step, or whose step failed, goes on
/// (the failed step is tried again); an abort is taken back. Refused (409) while nothing
/// holds it, and while `spec.rollout.paused` does (the owner's own hold).
pub async fn resume(state: &ApiState, ns: &str, name: &str) -> ApiResult {
    let (m, r) = rollout_of(state, ns, name).await?;
    if m.spec.rollout.as_ref().and_then(|s| s.paused) == Some(true) {
        return Err(ApiError::conflict(format!(
            "mutation {ns}/{name}'s rollout is held by spec.rollout.paused: set it to false"
        )));
    }
    if !matches!(r.phase, RolloutPhase::Paused | RolloutPhase::Degraded) {
        return Err(ApiError::conflict(format!(
            "mutation {ns}/{name}'s rollout of revision {} is {}: nothing to resume",
            r.revision,
            r.phase.as_str()
        )));
    }
    let value = format!(
        "{}/{}/{}",
        r.revision,
        r.step,
        Timestamp::now().as_nanosecond()
    );
    let annotations = json!({ RESUME_ANNOTATION: value, ABORT_ANNOTATION: null });
    annotate(state, &m, annotations).await?;
    tracing::info!(namespace = ns, name, revision = %r.revision, step = r.step, "rollout resumed through the API");
    let said = Said {
        revision: &r.revision,
        previous_revision: r.previous_revision.as_deref(),
        step: r.step,
        phase: r.phase.as_str(),
        annotation: RESUME_ANNOTATION,
        value: &value,
    };
    Ok(http::json(StatusCode::ACCEPTED, &said))
}

/// `POST .../rollout/abort`: every variant returns to the previous revision, until the base
/// changes or the rollout is resumed. Refused (409) when there is no previous revision.
pub async fn abort(state: &ApiState, ns: &str, name: &str) -> ApiResult {
    let (m, r) = rollout_of(state, ns, name).await?;
    let Some(previous) = r.previous_revision.as_deref() else {
        return Err(ApiError::conflict(format!(
            "mutation {ns}/{name}'s rollout of revision {} has no previous revision to return to",
            r.revision
        )));
    };
    annotate(state, &m, json!({ ABORT_ANNOTATION: r.revision })).await?;
    tracing::info!(namespace = ns, name, revision = %r.revision, previous, "rollout aborted through the API");
    let said = Said {
        revision: &r.revision,
        previous_revision: Some(previous),
        step: r.step,
        phase: r.phase.as_str(),
        annotation: ABORT_ANNOTATION,
        value: &r.revision,
    };
    Ok(http::json(StatusCode::ACCEPTED, &said))
}
