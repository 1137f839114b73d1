//! What every handler shares: [`ApiState`] (client, caches, auth, limits, edit locks), the
//! handlers' error type [`ApiError`], and the reads and waits on the cache that make a client
//! read its own writes.

use std::{sync::Arc, time::Duration};

use hyper::{Response, StatusCode};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Api, Client, runtime::reflector::ObjectRef};

use super::auth::{Auth, Caller, UNAUTHORIZED};
use crate::{
    cache::{CacheState, Caches},
    crd::{Mutation, OwnerKind, Variant},
    http::{self, Body, ServerConfig},
    submit::{DryRun, dry_run, pod_security},
    variant::{Base, ObservedDeployment, Owner, deployment_name, foreign},
};

/// How many times a variant edit is retried on a resourceVersion conflict before it gives up
/// with 503.
pub const MAX_ATTEMPTS: usize = 20;
/// How long a write waits for the cache to show it.
const CACHE_CATCH_UP: Duration = Duration::from_secs(3);
/// The `Retry-After` of every 503 and 429 (seconds): starting, shutting down, the Kubernetes
/// API unreachable or busy, edits that kept conflicting. A device waits this long, then asks
/// again (issue 25, item 9).
pub const RETRY_AFTER_SECONDS: &str = "1";

/// What every handler needs.
pub struct ApiState {
    /// The API client (writes, and reads that must be fresh).
    pub client: Client,
    /// The controllers' caches.
    pub caches: Caches,
    /// How callers are authenticated.
    pub auth: Auth,
    /// Body limits and timeouts.
    pub server: ServerConfig,
    /// One lock per Mutation being edited, so this replica's edits of one Mutation queue up
    /// instead of racing (the resourceVersion check still guards against other writers).
    pub edits: EditLocks,
    /// The namespaces the API serves (`MUTANT_API_NAMESPACES`, else `MUTANT_WATCH_NAMESPACE`);
    /// `None` for every namespace.
    pub namespaces: Option<Vec<String>>,
    /// The budget of misses checked with the API server ([`super::fresh`]).
    pub misses: super::fresh::MissChecks,
    /// The budget of validated reads (`Cache-Control: no-cache`, [`super::fresh`]).
    pub validations: super::fresh::Validations,
    /// The operator's own ServiceAccount, when known: no base may run as it (R33).
    pub own_account: Option<crate::variant::ServiceAccountRef>,
}

impl ApiState {
    /// What the handlers share: the client and caches, how callers are authenticated, the
    /// listener's limits, the namespaces served (`None`: all) and the operator's own
    /// ServiceAccount; edit locks and budgets start empty.
    pub fn new(
        client: Client,
        caches: Caches,
        auth: Auth,
        server: ServerConfig,
        namespaces: Option<Vec<String>>,
        own_account: Option<crate::variant::ServiceAccountRef>,
    ) -> Self {
        ApiState {
            client,
            caches,
            auth,
            server,
            edits: EditLocks::default(),
            namespaces,
            misses: super::fresh::MissChecks::default(),
            validations: super::fresh::Validations::default(),
            own_account,
        }
    }

    /// Whether the API serves namespace `ns`.
    pub fn serves(&self, ns: &str) -> bool {
        self.namespaces
            .as_ref()
            .is_none_or(|served| served.iter().any(|s| s == ns))
    }
}

/// Per-Mutation locks for variant edits; an entry lives only while someone holds or waits for
/// it.
#[derive(Default)]
pub struct EditLocks(
    std::sync::Mutex<std::collections::HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
);

impl EditLocks {
    /// Waits for the lock of Mutation `ns/name`.
    pub async fn lock(&self, ns: &str, name: &str) -> EditGuard<'_> {
        let key = format!("{ns}/{name}");
        let lock = match self.0.lock() {
            Ok(mut map) => map.entry(key.clone()).or_default().clone(),
            // A poisoned map only loses the queueing; the resourceVersion check still holds.
            Err(_) => Arc::default(),
        };
        let guard = lock.clone().lock_owned().await;
        EditGuard {
            locks: self,
            key,
            lock,
            _guard: guard,
        }
    }
}

/// Holds a Mutation's edit lock; dropping it releases the lock and forgets unused entries.
pub struct EditGuard<'a> {
    locks: &'a EditLocks,
    key: String,
    lock: Arc<tokio::sync::Mutex<()>>,
    _guard: tokio::sync::OwnedMutexGuard<()>,
}

impl Drop for EditGuard<'_> {
    fn drop(&mut self) {
        if let Ok(mut map) = self.locks.0.lock() {
            // Three holders: the map, this guard's `lock`, and the owned guard inside it.
            if Arc::strong_count(&self.lock) <= 3 {
                map.remove(&self.key);
            }
        }
    }
}

/// A handler's failure, as an HTTP status and a message for the client.
#[derive(Debug)]
pub struct ApiError(pub StatusCode, pub String);

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError(status, message.into())
    }
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
    pub(crate) fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, message)
    }
    pub(crate) fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, message)
    }
    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }
    pub(crate) fn unauthorized() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, UNAUTHORIZED)
    }
    pub(crate) fn response(self) -> Response<Body> {
        let retry = matches!(
            self.0,
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS
        );
        let mut response = http::error(self.0, self.1);
        if retry {
            response.headers_mut().insert(
                hyper::header::RETRY_AFTER,
                hyper::header::HeaderValue::from_static(RETRY_AFTER_SECONDS),
            );
        }
        if self.0 == StatusCode::UNAUTHORIZED
            && let Ok(value) = hyper::header::HeaderValue::from_str("Bearer")
        {
            response
                .headers_mut()
                .insert(hyper::header::WWW_AUTHENTICATE, value);
        }
        response
    }
}

impl From<kube::Error> for ApiError {
    /// An error of the Kubernetes API: what the client sent that the server rejects is 400;
    /// the server asking to slow down (429) is passed on as 429; the rest is the server's or
    /// the network's, 502/503.
    fn from(err: kube::Error) -> Self {
        match err {
            kube::Error::Api(status) if status.code == 422 || status.code == 400 => {
                ApiError::bad_request(format!(
                    "rejected by the Kubernetes API: {}",
                    status.message
                ))
            }
            kube::Error::Api(status) if status.code == 404 => ApiError::not_found(status.message),
            kube::Error::Api(status) if status.code == 409 => ApiError::conflict(status.message),
            kube::Error::Api(status) if status.code == 429 => {
                tracing::info!(message = %status.message, "the kubernetes api asks to slow down");
                ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    format!("the Kubernetes API is busy: {}", status.message),
                )
            }
            // The namespace is being deleted: the request conflicts with that, and it is no
            // fault of the operator's or the server's.
            err @ kube::Error::Api(_) if crate::expected_api_error(&err) => {
                let message = match &err {
                    kube::Error::Api(status) => status.message.clone(),
                    _ => String::new(),
                };
                tracing::info!(message, "the namespace is being deleted");
                ApiError::conflict(message)
            }
            kube::Error::Api(status) => {
                tracing::warn!(code = status.code, message = %status.message, "kubernetes api error");
                ApiError::new(
                    StatusCode::BAD_GATEWAY,
                    format!("kubernetes api: {}", status.message),
                )
            }
            other => {
                tracing::warn!(error = %crate::error_chain(&other), "kubernetes api unreachable");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the Kubernetes API is unreachable",
                )
            }
        }
    }
}

/// Asks the API server, without writing anything, whether it would accept the Deployment of
/// each of `variants` (a dry-run create with strict field validation, answered by code), and
/// answers with the server's message for the first it refuses (R24, R35): 403 when the server
/// said 403 (a ResourceQuota, an admission policy), else 400 (a malformed object, a
/// ValidatingAdmissionPolicy's 422). A base or variant the server refuses is refused up front
/// rather than reported in status later. A variant whose Deployment name is taken by someone
/// else's Deployment answers 409 (R9, issue 25), when that is known: from the caches (a
/// Deployment generated for another owner), or from the dry run (the name is taken: then its
/// metadata is read). When the server cannot say, the write goes ahead and the controller
/// reports what happens.
///
/// First, what the operator does not make (R33): a base whose pod template breaks Pod
/// Security "baseline", unless the namespace is labelled privileged (read from the API server
/// only then), or runs as the operator's own ServiceAccount, is 400 naming the fields.
pub async fn check_with_server(
    state: &ApiState,
    owner: &Owner,
    base: &Base,
    variants: &[Variant],
) -> Result<(), ApiError> {
    let built: Vec<_> = variants
        .iter()
        .map(|v| crate::variant::build(base, owner, v))
        .collect();
    let deployments = std::iter::once(base.value()).chain(&built);
    let own = state.own_account.as_ref();
    if let Some(problem) =
        pod_security::refusal(&state.client, own, &owner.namespace, deployments).await?
    {
        return Err(ApiError::bad_request(problem));
    }
    for (variant, object) in variants.iter().zip(&built) {
        let name = deployment_name(base.name(), &variant.label);
        let taken = |meta: &ObjectMeta| {
            foreign(meta, owner).filter(|f| !f.passing).map(|f| {
                ApiError::conflict(format!(
                    "variant {:?}: Deployment {name:?} already exists and {}; it is not \
                         this Mutation's and is left alone: choose another label",
                    variant.label, f.by
                ))
            })
        };
        let key = ObjectRef::new(&name).within(&owner.namespace);
        for kind in [OwnerKind::Mutation, OwnerKind::MutantDeployment] {
            if let Some(cached) = state.caches.deployments(kind).store.get(&key)
                && let Some(conflict) = taken(&cached.metadata)
            {
                return Err(conflict);
            }
        }
        match dry_run(&state.client, &owner.namespace, object).await {
            DryRun::Refused { code, message, .. } => {
                let message = format!(
                    "variant {:?}: rejected by the Kubernetes API: {message}",
                    variant.label
                );
                // The server's 403 (a quota, an admission policy) is the caller's 403 (R35);
                // its 400 or 422 (a malformed object, or an admission policy's denial) is 400.
                return Err(if code == 403 {
                    ApiError::forbidden(message)
                } else {
                    ApiError::bad_request(message)
                });
            }
            DryRun::Taken => {
                let api: Api<ObservedDeployment> =
                    Api::namespaced(state.client.clone(), &owner.namespace);
                if let Ok(Some(existing)) = api.get_metadata_opt(&name).await
                    && let Some(conflict) = taken(&existing.metadata)
                {
                    return Err(conflict);
                }
            }
            DryRun::Accepted | DryRun::Unknown => {}
        }
    }
    Ok(())
}

/// The handler result.
pub type ApiResult = Result<Response<Body>, ApiError>;

/// A Mutation from the cache. For a caller that may not see it, and for one that does not
/// exist, a Mutation token gets the same 401 as a wrong token; the admin gets 404.
pub(crate) fn cached_mutation(
    state: &ApiState,
    caller: &Caller,
    ns: &str,
    name: &str,
) -> Result<Arc<Mutation>, ApiError> {
    if !caller.may_use(ns, name) {
        return Err(ApiError::unauthorized());
    }
    state
        .caches
        .mutations
        .get(&ObjectRef::new(name).within(ns))
        .ok_or_else(|| match caller {
            Caller::Admin => ApiError::not_found(format!("mutation {ns}/{name} not found")),
            Caller::Mutation { .. } => ApiError::unauthorized(),
        })
}

/// Waits until the cache shows Mutation `ns/name` at `resource_version` or later (`None`:
/// until it is gone), so the next read sees this write. Gives up quietly after a few seconds.
pub(crate) async fn catch_up(
    state: &ApiState,
    ns: &str,
    name: &str,
    resource_version: Option<&str>,
) {
    let key = ObjectRef::new(name).within(ns);
    let deadline = tokio::time::Instant::now() + CACHE_CATCH_UP;
    let wanted: Option<u64> = resource_version.and_then(|rv| rv.parse().ok());
    let caught_up = |caches: &Caches, _: &CacheState| {
        let cached = caches.mutations.get(&key);
        let done = match (&cached, resource_version) {
            (None, None) => true,
            (Some(m), None) => m.metadata.deletion_timestamp.is_some(),
            (None, Some(_)) => false,
            (Some(m), Some(rv)) => {
                let have = m.metadata.resource_version.as_deref();
                // resourceVersions are opaque, but etcd's are increasing integers; compare them
                // as such when they are, so a newer write by someone else also counts.
                have == Some(rv)
                    || matches!((have.and_then(|h| h.parse::<u64>().ok()), wanted), (Some(h), Some(w)) if h >= w)
            }
        };
        done.then_some(())
    };
    let _ = state.caches.until(Some(deadline), caught_up).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_says(code: u16) -> ApiError {
        ApiError::from(kube::Error::Api(Box::new(
            kube::core::Status::failure("message of the server", "Reason").with_code(code),
        )))
    }

    /// Issue 25, item 9: the server's 429 is a 429 (not a 502), and every 503 and 429 says
    /// when to come back.
    #[test]
    fn busy_and_unavailable_answers_say_when_to_retry() {
        let busy = server_says(429);
        assert_eq!(busy.0, StatusCode::TOO_MANY_REQUESTS);
        assert!(busy.1.contains("message of the server"), "{}", busy.1);
        for err in [
            busy,
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "starting"),
        ] {
            let status = err.0;
            let response = err.response();
            assert_eq!(response.status(), status);
            assert_eq!(
                response.headers().get(hyper::header::RETRY_AFTER),
                Some(&hyper::header::HeaderValue::from_static(
                    RETRY_AFTER_SECONDS
                )),
                "{status}"
            );
        }
        for (code, want) in [
            (500, StatusCode::BAD_GATEWAY),
            (400, StatusCode::BAD_REQUEST),
        ] {
            let err = server_says(code);
            assert_eq!(err.0, want, "{code}");
            assert!(
                err.response()
                    .headers()
                    .get(hyper::header::RETRY_AFTER)
                    .is_none()
            );
        }
    }
}
