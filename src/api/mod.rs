//! The HTTP API (R19–R24, R39–R43): seventeen routes on ten paths under
//! `/api/v1/namespaces/{ns}/mutations` ([`routes::ROUTES`]), JSON in and out. The API never
//! writes Deployments: it hands edits of Mutations and their Secrets to the store (R52), and
//! the controller does the rest. Reads are served from the operator's caches; after a write
//! the handler waits until the cache has caught up, so a client reads its own writes.
//!
//! This file holds the request's way through the API: [`handle`] puts one deadline over it and
//! holds its answer within the caller's share; `dispatch` resolves the route, the caches'
//! readiness, the namespace, the caller, its and its Mutation's shares of requests in flight,
//! its rights, the heartbeat, the budgets and the body limit, then calls the handler;
//! [`serve`] runs the listener. The rooms, lowest first (each uses only those before it;
//! checked by tests/layers.rs, and CONTRIBUTING.md's layout names each): `routes` the one
//! table of routes, `placement` and `json` the wire shapes, `auth` who calls, `budget` what a
//! caller may cost the API server and its shares of the connections, `error` the handlers'
//! result, `heartbeats` what this replica heard from devices, `namespaces` which namespaces
//! are served, `state` what handlers share,
//! `body` reading request bodies, `check` the checks with the API server before a write,
//! `fresh` the reads and waits on the cache (across replicas too), `registry` a Mutation's
//! devices Secret and status list, `liveness` which heartbeats are written, `request` the
//! request resolved once (route, names, cached Mutation, caller) and its gates, and the handlers:
//! `mutations`, `variants`, `devices`, `enroll`, `poll` and `rollout`.

pub mod auth;
mod body;
mod budget;
mod check;
mod devices;
mod enroll;
mod error;
mod fresh;
mod heartbeats;
mod json;
mod liveness;
mod mutations;
pub(crate) mod namespaces;
mod placement;
mod poll;
mod registry;
mod request;
mod rollout;
pub(crate) mod routes;
mod screens;
mod state;
mod variants;

use std::sync::Arc;

use hyper::{Request, Response, StatusCode, body::Incoming};

use crate::http;
use auth::Caller;
use body::read_json;
use error::{ApiError, ApiResult};
use request::Ctx;
pub use routes::ROUTES;
use routes::{Action, Resolved};
pub use state::ApiState;

/// Serves one request.
pub async fn handle(state: Arc<ApiState>, req: Request<Incoming>) -> Response<http::Body> {
    let method = req.method().clone();
    // For the log line: a `Uri` shares its bytes with the request's, where a path copied
    // out would be an allocation per request.
    let uri = req.uri().clone();
    // Whose share the answer holds: the caller's once known, else the client's address (the
    // peer's, or the one a trusted proxy names).
    let client = req.extensions().get::<http::Client>().map(|c| c.0);
    let mut key = None;
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
    // A request refused before its caller was known: its client's address, made only then.
    let key = key.unwrap_or_else(|| {
        client.map_or_else(
            || http::Key::from("unknown client"),
            |ip| http::Key::from(format!("address {ip}")),
        )
    });
    // R44: the answer holds its bytes until the client has taken it.
    let response = http::hold_answer(response, state.buffers.open(key)).unwrap_or_else(|refused| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("answer not sent: {refused}"),
        )
        .response()
    });
    let status = response.status().as_u16();
    let path = uri.path();
    let client = client.map(tracing::field::display);
    if response.status().is_server_error() {
        tracing::warn!(%method, %path, status, client, "api request failed");
    } else {
        tracing::debug!(%method, %path, status, client, "api request");
    }
    response
}

async fn dispatch(
    state: &Arc<ApiState>,
    req: Request<Incoming>,
    share: &mut Option<http::Key>,
) -> ApiResult {
    // The head is kept apart from the body: the path's names are borrowed from it for the
    // whole request, the body read (or not) by the route.
    let (head, incoming) = req.into_parts();
    let (route, params) = match routes::resolve(&head.method, head.uri.path()) {
        Resolved::NotFound => return Ok(http::not_found()),
        Resolved::MethodNotAllowed(allowed) => return Ok(http::method_not_allowed(&allowed)),
        Resolved::Found(route, params) => (route, params),
    };
    let mut ctx = Ctx::new(state, route, params)?;
    request::ready(state)?;
    ctx.served_by(state)?;
    let client = head.extensions.get::<http::Client>().map(|c| c.0);
    let caller = request::authenticate(state, &mut ctx, &head.headers, client).await?;
    let key = share.insert(caller.budget_key());
    // R44: a caller, and its Mutation with all its devices, have at most their shares of the
    // connections busy.
    let _in_flight = match state.in_flight.enter(&caller, key.clone()) {
        Ok(flying) => flying,
        Err(message) => return Ok(http::at_share(message)),
    };
    request::admit(state, &ctx, &caller)?;
    request::heard(state, &mut ctx, &caller, &head.method, &head.headers)?;
    request::validated(state, &mut ctx, &caller, &head.method, &head.headers).await?;
    // R44: a body is held in the caller's share while it is read and handled.
    let limit = request::body_limit(state, &ctx, &caller);
    let mut held = state.buffers.open(key.clone());
    let body = Unread {
        incoming,
        headers: &head.headers,
        limit,
        held: &mut held,
    };
    run(state, ctx, &caller, body).await
}

/// A request's body, not read yet: read only by the routes that take one, within `limit`,
/// held in the caller's share.
struct Unread<'h> {
    incoming: Incoming,
    /// The request's headers.
    headers: &'h hyper::HeaderMap,
    limit: usize,
    held: &'h mut http::Reservation,
}

impl Unread<'_> {
    /// The body as JSON of type `T` (400, 408 or 413 naming what was wrong); the time the
    /// client takes to send it is not counted against the request's deadline.
    async fn json<T: serde::de::DeserializeOwned>(self, state: &ApiState) -> Result<T, ApiError> {
        http::overdue::excluding(read_json(state, self.incoming, self.limit, self.held)).await
    }
}

/// Calls the handler of `ctx`'s route. The table gives every route below a Mutation its name,
/// and every variant route a label.
async fn run(state: &Arc<ApiState>, ctx: Ctx<'_>, caller: &Caller, body: Unread<'_>) -> ApiResult {
    let ns = ctx.ns;
    let (name, label, id) = (
        ctx.name.unwrap_or_default(),
        ctx.label.unwrap_or_default(),
        ctx.id.unwrap_or_default(),
    );
    let at = variants::At { ns, name, label };
    // The Mutation as the request looked it up: the reads answer from it.
    let known = ctx.mutation.clone();
    match ctx.route.action {
        Action::ListMutations => mutations::list(state, ns),
        Action::CreateMutation => mutations::create(state, ns, body.json(state).await?).await,
        Action::GetMutation => mutations::get(state, caller, ns, name, known).await,
        Action::DeleteMutation => mutations::delete(state, ns, name).await,
        Action::ListVariants => variants::list(state, caller, ns, name, known).await,
        Action::AddVariant => {
            let request = body.json(state).await?;
            charge(state, caller)?;
            variants::add(state, caller, ns, name, request).await
        }
        Action::GetVariant => variants::get(state, caller, at, known).await,
        Action::ScaleVariant => {
            let request = body.json(state).await?;
            charge(state, caller)?;
            variants::scale(state, caller, at, request).await
        }
        Action::RemoveVariant => {
            charge(state, caller)?;
            variants::remove(state, caller, at).await
        }
        Action::EnrollDevice => {
            let request = body.json(state).await?;
            charge(state, caller)?;
            enroll::enroll(state, caller, ns, name, request).await
        }
        Action::ListDevices => devices::list(state, caller, ns, name, known).await,
        Action::GetDevice => devices::get(state, caller, (ns, name, id), known).await,
        Action::RemoveDevice => devices::remove(state, caller, ns, name, id).await,
        Action::RotateToken => devices::rotate(state, caller, ns, name, id).await,
        Action::Poll => poll::poll(state, caller, known.zip(ctx.parsed), ctx.heard).await,
        Action::DeviceScreen => {
            screens::of_device(state, caller, (ns, name, id), known, body.headers).await
        }
        Action::VariantScreen => {
            screens::of_variant(state, caller, (ns, name, label), known, body.headers).await
        }
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
