//! The poll of a device (R40, R42): `GET .../devices/{id}/poll`, answered from this
//! replica's cache alone, at once; with `spec.devices.sleep`, whether its variant is ready,
//! when to ask again, and when to poll next.

use hyper::StatusCode;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use super::{
    auth::Caller, devices::service_of, error::ApiResult, fresh, registry::listed, state::ApiState,
};
use crate::{
    crd::{Mutation, SleepState, VariantService, VariantState, VariantStatus},
    http,
    variant::sleep::SleepPolicy,
};

/// The answer to a poll: what a device needs to show its variant.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PollView<'a> {
    variant: &'a str,
    ready: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    service: Option<&'a VariantService>,
    /// Not ready: when to ask again (also `Retry-After`).
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_seconds: Option<u64>,
    /// When to poll next: its refresh rate, or the end of quiet hours.
    #[serde(skip_serializing_if = "Option::is_none")]
    refresh_seconds: Option<u64>,
}

/// `GET .../devices/{id}/poll` (that device only): `{variant, ready, service}`, from this
/// replica's cache alone: it never waits on the API server or on a pod (R42). The heartbeat
/// itself is `liveness::heard_from`, as for every request of a device; of a Mutation whose
/// variants sleep it is written at once, and that write is what wakes an idle variant.
///
/// Not ready (an idle or starting variant): `ready: false` with `retryAfterSeconds` and
/// `Retry-After`, what is left of `warmup` since it started (`warmup` while it has not). With
/// sleep, `refreshSeconds` says when to poll next: inside quiet hours, when they end; else the
/// device's own interval when known.
pub async fn poll(state: &ApiState, caller: &Caller, ns: &str, name: &str) -> ApiResult {
    let m = fresh::cached_mutation(state, caller, ns, name)?;
    let Caller::Device { variant, id, .. } = caller else {
        return Err(super::error::ApiError::forbidden(
            "only a device's own token polls",
        ));
    };
    let status = m
        .status
        .as_ref()
        .and_then(|s| s.variants.iter().find(|v| v.label == *variant));
    let ready = status.is_some_and(|v| v.state == VariantState::Ready && v.ready_replicas > 0);
    let told = state
        .heartbeats
        .get(ns, name, id)
        .and_then(|beat| beat.reported.refresh_rate);
    let timing = sleep_timing(&m, status, id, told);
    let retry = (!ready).then(|| timing.as_ref().map_or(1, |t| t.retry_after));
    let view = PollView {
        variant,
        ready,
        service: service_of(&m, variant),
        retry_after_seconds: retry,
        refresh_seconds: timing.and_then(|t| t.refresh),
    };
    let mut answer = http::json(StatusCode::OK, &view);
    if let Some(seconds) = retry {
        state.metrics.late_wake();
        if let Ok(value) = hyper::header::HeaderValue::from_str(&seconds.to_string()) {
            answer
                .headers_mut()
                .insert(hyper::header::RETRY_AFTER, value);
        }
    }
    Ok(answer)
}

/// When a polling device is to ask again: not ready, and in general.
struct Timing {
    retry_after: u64,
    refresh: Option<u64>,
}

/// The poll's timing under `spec.devices.sleep`; None without it.
fn sleep_timing(
    m: &Mutation,
    status: Option<&VariantStatus>,
    id: &str,
    told: Option<u32>,
) -> Option<Timing> {
    let spec = m.spec.devices.as_ref()?.sleep.as_ref()?;
    let policy = SleepPolicy::of(spec).ok()?;
    let now = Timestamp::now();
    let warmup = policy.warmup.as_secs().max(1);
    let started = status
        .and_then(|v| v.sleep.as_ref())
        .filter(|s| s.state == SleepState::Awake)
        .and_then(|s| s.since.parse::<Timestamp>().ok());
    let retry_after = match started {
        Some(since) => {
            let gone = u64::try_from(now.as_second() - since.as_second()).unwrap_or(0);
            warmup.saturating_sub(gone).max(1)
        }
        None => warmup,
    };
    let quiet = policy.quiet_until(now).map(|(end, _)| {
        u64::try_from(end.as_second() - now.as_second())
            .unwrap_or(0)
            .max(1)
    });
    let interval = told
        .or_else(|| {
            let d = listed(m).iter().find(|d| d.id == id)?;
            d.poll
                .as_ref()?
                .interval_seconds
                .or(d.reported.refresh_rate)
        })
        .map(u64::from);
    Some(Timing {
        retry_after,
        refresh: quiet.or(interval),
    })
}
