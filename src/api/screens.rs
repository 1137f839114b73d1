//! Screens served by the API (R53): `GET .../devices/{id}/screen` and
//! `GET .../variants/{label}/screen` answer the variant's last good screen from this
//! replica's cache (the Secret the leader keeps it in), never from the renderer: `ETag` (its
//! SHA-256), `Content-Length`, `Content-Type`, `Cache-Control`, and `Age` when it is stale; 304
//! with no body for an `If-None-Match` that names it; 503 with `Retry-After` while there is
//! none yet. The poll's answer carries the same in a few bytes ([`summary`]), so a board that
//! holds the etag sleeps again without a second request.

use std::sync::Arc;

use hyper::{
    HeaderMap, Response, StatusCode,
    body::Bytes,
    header::{self, HeaderValue},
};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::ObjectRef;
use serde::Serialize;

use super::{
    auth::Caller,
    error::{ApiError, ApiResult},
    fresh,
    registry::cached_registry,
    state::ApiState,
};
use crate::{
    crd::{Mutation, VariantScreen},
    http::Body,
    variant::{
        is_controlled_by,
        parsed::Parsed,
        screen::{Screen, screen_secret_name},
    },
};

/// How soon a device without a screen yet is told to ask again.
const NONE_YET_RETRY: u64 = 10;

/// What the poll says of the variant's screen: enough for a board to know whether it holds it.
#[derive(Serialize, Debug, PartialEq, Eq)]
pub struct ScreenSummary {
    /// The ETag of the screen served.
    pub etag: String,
    /// Its content type.
    #[serde(rename = "type")]
    pub content_type: String,
    /// Its size.
    pub bytes: usize,
    /// Seconds since the renderer last answered it.
    pub age: u64,
    /// Whether it is the last good screen rather than a fresh one.
    pub stale: bool,
}

/// The screen of `label` in `m` as this replica serves it, and what the status says of it.
struct Served {
    screen: Arc<Screen>,
    age: u64,
    stale: bool,
}

/// `label`'s screen in `m`, if `m` has `spec.screen` and this replica holds one; `parsed`
/// is `m`'s policies as the cache parsed them.
fn served(state: &ApiState, m: &Mutation, parsed: &Parsed, label: &str) -> Option<Served> {
    m.spec.screen.as_deref()?;
    let (ns, name, uid) = (
        m.metadata.namespace.as_deref()?,
        m.metadata.name.as_deref()?,
        m.metadata.uid.as_deref()?,
    );
    let key = ObjectRef::new(&screen_secret_name(name, label)).within(ns);
    let cached = state.caches.secrets.get(&key)?;
    if !is_controlled_by(&cached.metadata, uid) {
        return None;
    }
    let screen = cached.screen.clone()?;
    let status: Option<&VariantScreen> = m
        .status
        .as_ref()
        .and_then(|s| s.variants.iter().find(|v| v.label == label))
        .and_then(|v| v.screen.as_deref());
    let now = Timestamp::now();
    let age = status
        .and_then(|s| s.fetched_at.as_deref())
        .and_then(crate::variant::clock::parse_rfc3339)
        .map_or(0, |t| {
            u64::try_from(now.as_second() - t.as_second()).unwrap_or(0)
        });
    // Stale when the last fetch failed, or when no fetch has come for longer than a refresh
    // and its timeout (no leader, say).
    let overdue = parsed
        .screen()
        .is_some_and(|p| age > p.stale_after().as_secs());
    let stale = status.is_some_and(|s| s.stale) || overdue;
    Some(Served { screen, age, stale })
}

/// The poll's `screen` for variant `label` of `m`, when there is one.
pub fn summary(
    state: &ApiState,
    m: &Mutation,
    parsed: &Parsed,
    label: &str,
) -> Option<ScreenSummary> {
    let s = served(state, m, parsed, label)?;
    Some(ScreenSummary {
        etag: s.screen.etag.clone(),
        content_type: s.screen.content_type.clone(),
        bytes: s.screen.bytes.len(),
        age: s.age,
        stale: s.stale,
    })
}

/// `GET .../devices/{id}/screen`: the screen of device `id`'s variant (the device's own token,
/// or the admin's).
pub async fn of_device(
    state: &ApiState,
    caller: &Caller,
    (ns, name, id): (&str, &str, &str),
    known: Option<std::sync::Arc<Mutation>>,
    headers: &HeaderMap,
) -> ApiResult {
    let m = fresh::mutation(state, caller, ns, name, known).await?;
    let label = match caller {
        Caller::Device { variant, .. } => variant.clone(),
        _ => cached_registry(&state.caches, &m, |r| {
            r.devices.get(id).map(|d| d.variant.clone())
        })
        .ok_or_else(|| {
            ApiError::not_found(format!("device {id:?} not found in mutation {ns}/{name}"))
        })?,
    };
    answer(state, &m, &label, headers)
}

/// `GET .../variants/{label}/screen`: the screen of variant `label` (a Mutation's token, a
/// device's for its own variant, or the admin's).
pub async fn of_variant(
    state: &ApiState,
    caller: &Caller,
    (ns, name, label): (&str, &str, &str),
    known: Option<std::sync::Arc<Mutation>>,
    headers: &HeaderMap,
) -> ApiResult {
    let m = fresh::mutation(state, caller, ns, name, known).await?;
    if !m.spec.variants.iter().any(|v| v.label == label) {
        return Err(ApiError::not_found(format!(
            "variant {label:?} not found in mutation {ns}/{name}"
        )));
    }
    answer(state, &m, label, headers)
}

/// The answer for `label`'s screen in `m`: 200 with the bytes, 304 for the etag the client
/// holds, 503 while there is none, 404 without `spec.screen`.
fn answer(state: &ApiState, m: &Mutation, label: &str, headers: &HeaderMap) -> ApiResult {
    if m.spec.screen.is_none() {
        return Err(ApiError::not_found(format!(
            "mutation {}/{} has no spec.screen: the API serves no screens for it",
            m.metadata.namespace.as_deref().unwrap_or_default(),
            m.metadata.name.as_deref().unwrap_or_default()
        )));
    }
    let Some(served) = served(state, m, &state.caches.parsed(m), label) else {
        let mut refused = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "variant {label:?} has no screen yet: its renderer has not answered one (see \
                 the variant's status.screen); retry later"
            ),
        )
        .response();
        refused
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(NONE_YET_RETRY));
        return Ok(refused);
    };
    let held = headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().trim_start_matches("W/"))
        .any(|t| t == "*" || t == served.screen.etag);
    let mut response = if held {
        let mut r = Response::new(Body::new(Bytes::new()));
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        let mut r = Response::new(Body::new(Bytes::from_owner(Shared(Arc::clone(
            &served.screen,
        )))));
        if let Ok(value) = HeaderValue::from_str(&served.screen.content_type) {
            r.headers_mut().insert(header::CONTENT_TYPE, value);
        }
        r
    };
    let h = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&served.screen.etag) {
        h.insert(header::ETAG, value);
    }
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, no-cache"),
    );
    if served.stale {
        h.insert(header::AGE, HeaderValue::from(served.age));
    }
    Ok(response)
}

/// A cached screen handed to a response body without a copy of its bytes.
struct Shared(Arc<Screen>);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        &self.0.bytes
    }
}
