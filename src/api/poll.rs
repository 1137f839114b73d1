//! The poll of a device (R40, R42): `GET .../devices/{id}/poll`, answered from this
//! replica's cache alone, at once; with `spec.devices.sleep`, whether its variant is ready,
//! when to ask again, and when to poll next.

use std::sync::Arc;

use hyper::StatusCode;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use super::{
    auth::Caller,
    devices::service_of,
    error::{ApiError, ApiResult},
    liveness::Heard,
    registry::listed,
    state::ApiState,
};
use crate::{
    crd::{Mutation, VariantService},
    http,
    variant::{
        parsed::Parsed,
        sleep::{SleepPolicy, retry_after},
    },
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
    /// With spec.screen, the screen the API serves for the variant (R53).
    #[serde(skip_serializing_if = "Option::is_none")]
    screen: Option<super::screens::ScreenSummary>,
}

/// `GET .../devices/{id}/poll` (that device only): `{variant, ready, service}`, from this
/// replica's cache alone: it never waits on the API server or on a pod (R42). The heartbeat
/// itself is `liveness::heard_from`, as for every request of a device, and `heard` what it
/// found; of a Mutation whose variants sleep it is written at once, and that write is what
/// wakes an idle variant.
///
/// Not ready (an idle or starting variant): `ready: false` with `retryAfterSeconds` and
/// `Retry-After`, what is left of `warmup` since it started (`warmup` while it has not). With
/// sleep, `refreshSeconds` says when to poll next: inside quiet hours, when they end; else the
/// device's own interval when known.
pub async fn poll(
    state: &ApiState,
    caller: &Caller,
    m: Option<(Arc<Mutation>, Arc<Parsed>)>,
    heard: Heard,
) -> ApiResult {
    // The request's own look-up of the Mutation: its caller is this Mutation's device.
    let Some((m, parsed)) = m else {
        return Err(ApiError::unauthorized());
    };
    let Caller::Device { variant, id, .. } = caller else {
        return Err(super::error::ApiError::forbidden(
            "only a device's own token polls",
        ));
    };
    let sleep = parsed.sleep();
    let refresh = sleep.and_then(|sleep| refresh_seconds(&m, sleep, id, heard.refresh_rate));
    // Its heartbeat asked already, with sleep.
    let waiting = heard
        .retry_after
        .unwrap_or_else(|| retry_after(&m, sleep, variant, Timestamp::now()));
    // R53: with spec.screen the device takes the screen the API serves; its variant sleeping
    // is no reason to come back sooner.
    let retry = waiting.filter(|_| m.spec.screen.is_none());
    let view = PollView {
        variant,
        ready: waiting.is_none(),
        service: service_of(&m, variant),
        retry_after_seconds: retry,
        refresh_seconds: refresh,
        screen: super::screens::summary(state, &m, &parsed, variant),
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

/// When the device is to poll next under `spec.devices.sleep` (inside quiet hours: when they
/// end; else its own interval, when known); None without sleep.
fn refresh_seconds(m: &Mutation, policy: &SleepPolicy, id: &str, told: Option<u32>) -> Option<u64> {
    let now = Timestamp::now();
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
    quiet.or(interval)
}
