//! The HTTP API (R19–R24, R39–R43): seventeen routes on ten paths under
//! `/api/v1/namespaces/{ns}/mutations` ([`routes::ROUTES`]), JSON in and out. The API never
//! writes Deployments: it hands edits of Mutations and their Secrets to the store (R52), and
//! the controller does the rest. Reads are served from the operator's caches; after a write
//! the handler waits until the cache has caught up, so a client reads its own writes.
//!
//! This file holds the request's way through the API: [`handle`] puts one deadline over it and
//! holds its answer within the caller's share; `dispatch` resolves the route, the caches'
//! readiness, the namespace, the caller, its share of requests in flight, its rights, the
//! heartbeat, the budgets and the body limit, then calls the handler; [`serve`] runs the
//! listener. The rooms, lowest first (each uses only those before it; checked by
//! tests/layers.rs, and CONTRIBUTING.md's layout names each): `routes` the one table of
//! routes, `placement` and `json` the wire shapes, `auth` who calls, `budget` what a caller
//! may cost the API server, `error` the handlers' result, `heartbeats` what this replica heard
//! from devices, `namespaces` which namespaces are served, `state` what handlers share,
//! `body` reading request bodies, `check` the checks with the API server before a write,
//! `fresh` the reads and waits on the cache (across replicas too), `registry` a Mutation's
//! devices Secret and status list, `liveness` which heartbeats are written, and the handlers:
//! `mutations`, `variants`, `devices`, `poll` and `rollout`.

pub mod auth;
mod body;
mod budget;
mod check;
mod devices;
mod error;
mod fresh;
mod heartbeats;
mod json;
mod liveness;
mod mutations;
pub mod namespaces;
mod placement;
mod poll;
mod registry;
mod rollout;
pub mod routes;
mod state;
mod variants;

use std::sync::Arc;

use hyper::{Method, Request, Response, StatusCode, body::Incoming};

use crate::{
    cache::Serving,
    http::{self, Body},
    variant::{access::DeviceLimits, devices::validate_device_id, validate_label, validate_name},
};
use auth::{Caller, Denied};
use body::read_json;
use error::{ApiError, ApiResult};
pub use routes::ROUTES;
use routes::{Action, Params, Resolved};
pub use state::ApiState;

/// Serves one request.
pub async fn handle(state: Arc<ApiState>, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    // Whose share the answer holds: the caller's once known, else the client's address.
    let mut key = req.extensions().get::<http::Peer>().map_or_else(
        || http::Key::from("unknown client"),
        |peer| http::Key::from(format!("address {}", peer.0.ip())),
    );
    // R34: one deadline over the whole request, every API-server call included.
    // The handler's future is large (every route's state): boxed, it is moved as a pointer
    // into the deadline's and the loop's futures, not copied at each (copied whole, it nearly
    // doubled the instructions of a GET: BENCHMARKS.md).
    let handler = Box::pin(dispatch(&state, req, &mut key));
    let result = match http::overdue::within(state.deadline, handler).await {
        Ok(result) => result,
        Err(overdue) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            overdue.message(),
        )),
    };
    let response = result.unwrap_or_else(ApiError::response);
    // R44: the answer holds its bytes until the client has taken it.
    let response = http::hold_answer(response, state.buffers.open(key)).unwrap_or_else(|refused| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("answer not sent: {refused}"),
        )
        .response()
    });
    let status = response.status().as_u16();
    if response.status().is_server_error() {
        tracing::warn!(%method, %path, status, "api request failed");
    } else {
        tracing::debug!(%method, %path, status, "api request");
    }
    response
}

async fn dispatch(state: &Arc<ApiState>, req: Request<Incoming>, key: &mut http::Key) -> ApiResult {
    let path = req.uri().path().to_string();
    let (route, params) = match routes::resolve(req.method(), &path) {
        Resolved::NotFound => return Ok(http::not_found()),
        Resolved::MethodNotAllowed(allowed) => return Ok(http::method_not_allowed(&allowed)),
        Resolved::Found(route, params) => (route, params),
    };
    check_names(&params)?;
    match state.caches.serving() {
        Serving::Yes => {}
        Serving::Starting => {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "starting: the operator's caches are not synced yet",
            ));
        }
        Serving::CutOff(silent) => {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "this replica has not reached the Kubernetes API for {} s, so what it \
                     knows may be out of date; try again, or another replica",
                    silent.as_secs()
                ),
            ));
        }
        // R34: a watch went silent; what it fills is listed again.
        Serving::Stale(cache) => {
            let stale = crate::cache::stale_message(cache);
            let message = format!("{stale}; try again, or another replica");
            return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message));
        }
    }
    let Params {
        ns,
        name,
        label,
        id,
    } = params;
    let served = state.serves(ns)?;
    let mut caller = state.auth.caller(req.headers(), &state.caches, ns, name);
    // A token this replica cannot check may belong to a Mutation made through another one:
    // checked once with the API server (fresh.rs), then against the cache again. Only a token
    // of a Mutation token's shape, in a served namespace, is worth that check, charged to the
    // client's address (R34).
    if caller.is_none()
        && served
        && let Some(name) = name
        && auth::bearer(req.headers()).is_some_and(auth::is_mutation_token)
    {
        let peer = req.extensions().get::<http::Peer>().map_or(
            std::net::IpAddr::from(std::net::Ipv4Addr::UNSPECIFIED),
            |p| p.0.ip(),
        );
        if fresh::refresh(
            state,
            &budget::Asker::Peer(peer),
            ns,
            name,
            fresh::Need::Secret,
        )
        .await
        {
            caller = state
                .auth
                .caller(req.headers(), &state.caches, ns, Some(name));
        }
    }
    let caller = caller.ok_or_else(ApiError::unauthorized)?;
    *key = caller.budget_key();
    // R44: a caller has at most its share of the connections busy.
    let Some(_in_flight) = state.in_flight.enter(caller.budget_key()) else {
        return Ok(http::at_share(format!(
            "this token has {} requests in flight, its share of this replica's connections; \
             retry in a second",
            state.in_flight.max()
        )));
    };
    // After the token, so that only the admin learns which namespaces are served; a Mutation's
    // token of another namespace gets the same 401 as a wrong one.
    if !served {
        return Err(match caller {
            Caller::Admin => state.not_served(ns),
            Caller::Mutation { .. } | Caller::Device { .. } => ApiError::unauthorized(),
        });
    }
    // R20, R39: what this caller may call; with spec.devices the Mutation's token enrolls
    // only, and a device's token reaches only its own record and variant.
    let devices_on = name.is_some_and(|name| {
        state
            .caches
            .mutations
            .get(&kube::runtime::reflector::ObjectRef::new(name).within(ns))
            .is_some_and(|m| m.spec.devices.is_some())
    });
    match auth::permits(&caller, route.access, route.action, label, id, devices_on) {
        Ok(()) => {}
        Err(Denied::Unauthorized) => return Err(ApiError::unauthorized()),
        Err(Denied::Forbidden(what)) => return Err(ApiError::forbidden(what)),
    }
    // R40: every request of a device is its heartbeat (but the one that removes it); its
    // changes are charged to it.
    if route.action != Action::RemoveDevice {
        let poll = route.action == Action::Poll;
        liveness::heard_from(state, &caller, req.headers(), poll)?;
    }
    if let Caller::Device { id, .. } = &caller
        && req.method() != Method::GET
        && !state.device_writes.take(&caller)
    {
        let rate = state.device_writes.rate();
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "device {id:?} asked for too many changes: at most {} a second, {} at once; \
                 retry later",
                rate.per_second, rate.burst
            ),
        ));
    }
    // A read that must reflect every write acknowledged before it, through any replica.
    if req.method() == Method::GET && fresh::wants_validation(req.headers()) {
        fresh::validate(state, &caller, ns, name).await?;
    }
    // The table gives every route below a Mutation its name, and every variant route a label.
    let (name, label, id) = (
        name.unwrap_or_default(),
        label.unwrap_or_default(),
        id.unwrap_or_default(),
    );
    let at = variants::At { ns, name, label };
    // R44: a body is held in the caller's share while it is read and handled;
    // a token's is no larger than the largest variant its Mutation lets it add.
    let limit = match &caller {
        Caller::Admin => state.server.body_limit,
        Caller::Mutation { .. } | Caller::Device { .. } => {
            let access = state
                .caches
                .mutations
                .get(&kube::runtime::reflector::ObjectRef::new(name).within(ns))
                .and_then(|m| m.spec.device_access.clone());
            DeviceLimits::of(access.as_deref())
                .body_bytes()
                .min(state.server.body_limit)
        }
    };
    let mut held = state.buffers.open(caller.budget_key());
    let held = &mut held;
    match route.action {
        Action::ListMutations => mutations::list(state, ns),
        Action::CreateMutation => {
            let body = http::overdue::excluding(read_json(state, req, limit, held)).await?;
            mutations::create(state, ns, body).await
        }
        Action::GetMutation => mutations::get(state, &caller, ns, name).await,
        Action::DeleteMutation => mutations::delete(state, ns, name).await,
        Action::ListVariants => variants::list(state, &caller, ns, name).await,
        Action::AddVariant => {
            let body = http::overdue::excluding(read_json(state, req, limit, held)).await?;
            charge(state, &caller)?;
            variants::add(state, &caller, ns, name, body).await
        }
        Action::GetVariant => variants::get(state, &caller, at).await,
        Action::ScaleVariant => {
            let body = http::overdue::excluding(read_json(state, req, limit, held)).await?;
            charge(state, &caller)?;
            variants::scale(state, &caller, at, body).await
        }
        Action::RemoveVariant => {
            charge(state, &caller)?;
            variants::remove(state, &caller, at).await
        }
        Action::EnrollDevice => {
            let body = http::overdue::excluding(read_json(state, req, limit, held)).await?;
            charge(state, &caller)?;
            devices::enroll(state, &caller, ns, name, body).await
        }
        Action::ListDevices => devices::list(state, &caller, ns, name).await,
        Action::GetDevice => devices::get(state, &caller, ns, name, id).await,
        Action::RemoveDevice => devices::remove(state, &caller, ns, name, id).await,
        Action::RotateToken => devices::rotate(state, &caller, ns, name, id).await,
        Action::Poll => poll::poll(state, &caller, ns, name).await,
        Action::ResumeRollout => rollout::resume(state, ns, name).await,
        Action::AbortRollout => rollout::abort(state, ns, name).await,
    }
}

/// Charges a change to a Mutation's token (an enrollment key too), once its body has been
/// read: 429 beyond its budget (R34). A request refused before it could write
/// (a body too large, malformed, over the memory budget) costs nothing.
fn charge(state: &ApiState, caller: &Caller) -> Result<(), ApiError> {
    let Caller::Mutation { name, .. } = caller else {
        return Ok(());
    };
    if state.token_writes.take(caller) {
        return Ok(());
    }
    let rate = state.token_writes.rate();
    Err(ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        format!(
            "the token of Mutation {name:?} asked for too many changes: at most {} a second, {} \
             at once; retry later",
            rate.per_second, rate.burst
        ),
    ))
}

/// Path parameters are Kubernetes names, checked before anything else is done with them: the
/// namespace and the variant label are DNS-1123 labels, the Mutation's name a DNS-1123
/// subdomain (dots allowed), as Kubernetes has them.
fn check_names(params: &Params<'_>) -> Result<(), ApiError> {
    let check = |what: &str, value: Option<&str>, rule: fn(&str) -> Result<(), String>| {
        value.map_or(Ok(()), |value| {
            rule(value).map_err(|e| ApiError::bad_request(format!("{what} in the path: {e}")))
        })
    };
    check("namespace", Some(params.ns), validate_label)?;
    check("mutation name", params.name, validate_name)?;
    check("variant label", params.label, validate_label)?;
    check("device id", params.id, validate_device_id)
}

/// Serves the API on `listener` until `shutdown`: HTTPS with `tls`, else plain HTTP.
pub async fn serve(
    state: Arc<ApiState>,
    listener: tokio::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: crate::shutdown::Shutdown,
) -> crate::Result<()> {
    let (config, open) = (state.server, state.connections.clone());
    http::serve_on("api", listener, config, tls, shutdown, open, move |req| {
        let state = state.clone();
        async move { handle(state, req).await }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_names_are_checked() {
        // R24
        let p = |ns, name, label| Params {
            ns,
            name,
            label,
            id: None,
        };
        assert!(check_names(&p("Bad_NS", None, None)).is_err());
        assert!(check_names(&p("ns", Some("web%2F"), None)).is_err());
        assert!(check_names(&p("ns", Some("web"), Some("-x"))).is_err());
        assert!(check_names(&p("ns", Some("web"), Some("beta"))).is_ok());
        // R24: a Mutation's name is a DNS-1123 subdomain, dots allowed; labels are not.
        assert!(check_names(&p("ns", Some("web.v2"), Some("beta"))).is_ok());
        assert!(check_names(&p("ns", Some("web.v2"), Some("b.eta"))).is_err());
        assert!(check_names(&p("n.s", Some("web"), None)).is_err());
        assert!(check_names(&p("ns", Some("web..v2"), None)).is_err());
        let device = |id| Params {
            ns: "ns",
            name: Some("web"),
            label: None,
            id: Some(id),
        };
        assert!(check_names(&device("AA:BB")).is_err());
        assert!(check_names(&device("lilygo-47_a.b")).is_ok());
        let long = "a".repeat(254);
        assert!(check_names(&p("ns", Some(long.as_str()), None)).is_err());
    }
}
