//! The HTTP API (R19–R24): nine routes under `/api/v1/namespaces/{ns}/mutations`, JSON in and
//! out, routed by a `match` on method and path segments. The API never writes Deployments: it
//! edits Mutations (read-modify-write on their resourceVersion) and the controller does the
//! rest. Reads are served from the operator's watch caches; after a write the handler waits
//! until the cache has caught up, so a client reads its own writes.

pub mod auth;
pub mod json;
mod mutations;
mod variants;

use std::{sync::Arc, time::Duration};

use hyper::{Method, Request, Response, StatusCode, body::Incoming};
use kube::{Client, runtime::reflector::ObjectRef};
use serde::de::DeserializeOwned;

use crate::{
    cache::{CacheState, Caches},
    crd::Mutation,
    http::{self, Body, ServerConfig},
    variant::validate_label,
};
use auth::{Auth, Caller, UNAUTHORIZED};

/// Every route: method, path template, what it does. The OpenAPI document (docs/api.yaml) is
/// checked against this table by a test.
pub const ROUTES: &[(Method, &str, &str)] = &[
    (
        Method::GET,
        "/api/v1/namespaces/{ns}/mutations",
        "list the Mutations of a namespace (admin)",
    ),
    (
        Method::POST,
        "/api/v1/namespaces/{ns}/mutations",
        "create a Mutation (admin)",
    ),
    (
        Method::GET,
        "/api/v1/namespaces/{ns}/mutations/{name}",
        "get a Mutation",
    ),
    (
        Method::DELETE,
        "/api/v1/namespaces/{ns}/mutations/{name}",
        "delete a Mutation (admin)",
    ),
    (
        Method::GET,
        "/api/v1/namespaces/{ns}/mutations/{name}/variants",
        "list its variants",
    ),
    (
        Method::POST,
        "/api/v1/namespaces/{ns}/mutations/{name}/variants",
        "add a variant",
    ),
    (
        Method::GET,
        "/api/v1/namespaces/{ns}/mutations/{name}/variants/{label}",
        "get a variant",
    ),
    (
        Method::PATCH,
        "/api/v1/namespaces/{ns}/mutations/{name}/variants/{label}",
        "scale a variant",
    ),
    (
        Method::DELETE,
        "/api/v1/namespaces/{ns}/mutations/{name}/variants/{label}",
        "remove a variant",
    ),
];

/// How many times a variant edit is retried on a resourceVersion conflict before it gives up
/// with 503.
pub const MAX_ATTEMPTS: usize = 20;
/// How long a write waits for the cache to show it.
const CACHE_CATCH_UP: Duration = Duration::from_secs(3);

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
    /// The one namespace this operator serves (`MUTANT_WATCH_NAMESPACE`), if it is limited.
    pub namespace: Option<String>,
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
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError(status, message.into())
    }
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
    pub(crate) fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, message)
    }
    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }
    fn unauthorized() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, UNAUTHORIZED)
    }
    fn response(self) -> Response<Body> {
        let mut response = http::error(self.0, self.1);
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
    /// the rest is the server's or the network's, 502/503.
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

/// The handler result.
pub type ApiResult = Result<Response<Body>, ApiError>;

/// Which route a path is, with its parameters.
#[derive(Debug, PartialEq, Eq)]
enum Route<'a> {
    Mutations {
        ns: &'a str,
    },
    Mutation {
        ns: &'a str,
        name: &'a str,
    },
    Variants {
        ns: &'a str,
        name: &'a str,
    },
    Variant {
        ns: &'a str,
        name: &'a str,
        label: &'a str,
    },
}

impl Route<'_> {
    fn allowed(&self) -> &'static [Method] {
        match self {
            Route::Mutations { .. } | Route::Variants { .. } => &[Method::GET, Method::POST],
            Route::Mutation { .. } => &[Method::GET, Method::DELETE],
            Route::Variant { .. } => &[Method::GET, Method::PATCH, Method::DELETE],
        }
    }
}

fn route(path: &str) -> Option<Route<'_>> {
    let rest = path.strip_prefix("/api/v1/namespaces/")?;
    let segments: Vec<&str> = rest.split('/').collect();
    if segments.iter().any(|s| s.is_empty()) {
        return None;
    }
    match segments.as_slice() {
        [ns, "mutations"] => Some(Route::Mutations { ns }),
        [ns, "mutations", name] => Some(Route::Mutation { ns, name }),
        [ns, "mutations", name, "variants"] => Some(Route::Variants { ns, name }),
        [ns, "mutations", name, "variants", label] => Some(Route::Variant { ns, name, label }),
        _ => None,
    }
}

/// Path parameters are Kubernetes names, checked before anything else is done with them.
fn check_names(route: &Route<'_>) -> Result<(), ApiError> {
    let check = |what: &str, value: &str| {
        validate_label(value).map_err(|e| ApiError::bad_request(format!("{what} in the path: {e}")))
    };
    match route {
        Route::Mutations { ns } => check("namespace", ns),
        Route::Mutation { ns, name } | Route::Variants { ns, name } => {
            check("namespace", ns)?;
            check("mutation name", name)
        }
        Route::Variant { ns, name, label } => {
            check("namespace", ns)?;
            check("mutation name", name)?;
            check("variant label", label)
        }
    }
}

/// Serves one request.
pub async fn handle(state: Arc<ApiState>, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let result = dispatch(&state, req).await;
    let response = result.unwrap_or_else(ApiError::response);
    let status = response.status().as_u16();
    if response.status().is_server_error() {
        tracing::warn!(%method, %path, status, "api request failed");
    } else {
        tracing::debug!(%method, %path, status, "api request");
    }
    response
}

async fn dispatch(state: &ApiState, req: Request<Incoming>) -> ApiResult {
    let path = req.uri().path().to_string();
    let Some(route) = route(&path) else {
        return Ok(http::not_found());
    };
    if !route.allowed().contains(req.method()) {
        return Ok(http::method_not_allowed(route.allowed()));
    }
    check_names(&route)?;
    if !state.caches.ready() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "starting: the operator's caches are not synced yet",
        ));
    }
    let (ns, mutation) = match &route {
        Route::Mutations { ns } => (*ns, None),
        Route::Mutation { ns, name }
        | Route::Variants { ns, name }
        | Route::Variant { ns, name, .. } => (*ns, Some(*name)),
    };
    let caller = state
        .auth
        .caller(req.headers(), &state.caches, ns, mutation)
        .ok_or_else(ApiError::unauthorized)?;
    // After the token, so that only the admin learns which namespace is served: no Mutation of
    // another namespace is cached, so any other token got 401 above.
    if let Some(served) = &state.namespace
        && served != ns
    {
        return Err(ApiError::not_found(format!(
            "this operator serves only namespace {served:?}"
        )));
    }
    let admin = || {
        if caller == Caller::Admin {
            Ok(())
        } else {
            Err(ApiError::unauthorized())
        }
    };
    let method = req.method().clone();
    match (method, route) {
        (Method::GET, Route::Mutations { ns }) => {
            admin()?;
            mutations::list(state, ns)
        }
        (Method::POST, Route::Mutations { ns }) => {
            admin()?;
            let body = read_json(state, req).await?;
            mutations::create(state, ns, body).await
        }
        (Method::GET, Route::Mutation { ns, name }) => mutations::get(state, &caller, ns, name),
        (Method::DELETE, Route::Mutation { ns, name }) => {
            admin()?;
            mutations::delete(state, ns, name).await
        }
        (Method::GET, Route::Variants { ns, name }) => variants::list(state, &caller, ns, name),
        (Method::POST, Route::Variants { ns, name }) => {
            let body = read_json(state, req).await?;
            variants::add(state, &caller, ns, name, body).await
        }
        (Method::GET, Route::Variant { ns, name, label }) => {
            variants::get(state, &caller, ns, name, label)
        }
        (Method::PATCH, Route::Variant { ns, name, label }) => {
            let body = read_json(state, req).await?;
            variants::scale(state, &caller, ns, name, label, body).await
        }
        (Method::DELETE, Route::Variant { ns, name, label }) => {
            variants::remove(state, &caller, ns, name, label).await
        }
        (_, route) => Ok(http::method_not_allowed(route.allowed())),
    }
}

/// Reads and decodes a JSON body (R24): over the limit 413, too slow 408, malformed or of the
/// wrong shape 400 with serde's message.
async fn read_json<T: DeserializeOwned>(
    state: &ApiState,
    req: Request<Incoming>,
) -> Result<T, ApiError> {
    let bytes = http::read_body(req.into_body(), &state.server)
        .await
        .map_err(|e| {
            let response = e.response();
            ApiError::new(response.status(), e.to_string())
        })?;
    if json_depth(&bytes) > MAX_JSON_DEPTH {
        return Err(ApiError::bad_request(format!(
            "invalid request body: nested deeper than {MAX_JSON_DEPTH} levels"
        )));
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("invalid request body: {e}")))
}

/// The deepest nesting of arrays and objects a request body may have. The operator's
/// Kubernetes client decodes objects with serde_json's limit of 128 levels, and a Mutation's
/// base sits deeper in a watch event or a list than in the request that made it: a body
/// nested close to that limit would be stored and then break every list of Mutations. A real
/// Deployment is about a dozen levels deep.
const MAX_JSON_DEPTH: usize = 64;

/// How deeply arrays and objects nest in JSON text (brackets inside strings do not count).
/// Malformed text gets a number too; the parser rejects it afterwards.
fn json_depth(bytes: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// A Mutation from the cache. For a caller that may not see it, and for one that does not
/// exist, a Mutation token gets the same 401 as a wrong token; the admin gets 404.
fn cached_mutation(
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
async fn catch_up(state: &ApiState, ns: &str, name: &str, resource_version: Option<&str>) {
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

/// Serves the API on `listener` until `shutdown`.
pub async fn serve(
    state: Arc<ApiState>,
    listener: tokio::net::TcpListener,
    shutdown: crate::shutdown::Shutdown,
) -> crate::Result<()> {
    let config = state.server;
    http::serve("api", listener, config, shutdown, move |req| {
        let state = state.clone();
        async move { handle(state, req).await }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_by_segments() {
        // R19
        let base = "/api/v1/namespaces/ns/mutations";
        assert_eq!(route(base), Some(Route::Mutations { ns: "ns" }));
        assert_eq!(
            route(&format!("{base}/web")),
            Some(Route::Mutation {
                ns: "ns",
                name: "web"
            })
        );
        assert_eq!(
            route(&format!("{base}/web/variants")),
            Some(Route::Variants {
                ns: "ns",
                name: "web"
            })
        );
        assert_eq!(
            route(&format!("{base}/web/variants/beta")),
            Some(Route::Variant {
                ns: "ns",
                name: "web",
                label: "beta"
            })
        );
        for unknown in [
            "/",
            "/api/v1/namespaces/ns",
            "/api/v1/namespaces/ns/deployments",
            "/api/v1/namespaces/ns/mutations/",
            "/api/v1/namespaces/ns/mutations/web/variants/beta/extra",
            "/api/v2/namespaces/ns/mutations",
        ] {
            assert_eq!(route(unknown), None, "{unknown}");
        }
    }

    #[test]
    fn every_route_in_the_table_routes_and_allows_its_method() {
        for (method, template, _) in ROUTES {
            let path = template
                .replace("{ns}", "ns")
                .replace("{name}", "web")
                .replace("{label}", "beta");
            let route = route(&path).unwrap_or_else(|| panic!("{path} does not route"));
            assert!(route.allowed().contains(method), "{method} {template}");
        }
        // And nothing else is allowed.
        let count: usize = [
            "/api/v1/namespaces/ns/mutations",
            "/api/v1/namespaces/ns/mutations/web",
            "/api/v1/namespaces/ns/mutations/web/variants",
            "/api/v1/namespaces/ns/mutations/web/variants/beta",
        ]
        .iter()
        .map(|p| route(p).map_or(0, |r| r.allowed().len()))
        .sum();
        assert_eq!(count, ROUTES.len());
    }

    #[test]
    fn json_depth_counts_brackets_outside_strings() {
        // R24
        assert_eq!(json_depth(b"1"), 0);
        assert_eq!(json_depth(br#"{"a":[1,{"b":[]}]}"#), 4);
        assert_eq!(json_depth(br#"{"a":"[[[{{{\"[["}"#), 1);
        assert_eq!(json_depth(br#"[[]][[[]]]"#), 3);
        assert_eq!(json_depth("[".repeat(100_000).as_bytes()), 100_000);
    }

    #[test]
    fn path_names_are_checked() {
        // R24
        assert!(check_names(&Route::Mutations { ns: "Bad_NS" }).is_err());
        assert!(
            check_names(&Route::Mutation {
                ns: "ns",
                name: "web%2F"
            })
            .is_err()
        );
        assert!(
            check_names(&Route::Variant {
                ns: "ns",
                name: "web",
                label: "-x"
            })
            .is_err()
        );
        assert!(
            check_names(&Route::Variant {
                ns: "ns",
                name: "web",
                label: "beta"
            })
            .is_ok()
        );
    }
}
