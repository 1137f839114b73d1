//! A request's way through the API (R19–R24, R34, R40, R44), resolved once: the route and its
//! names, the Mutation the path names as cached (looked up once and handed to every step that
//! needs it), and the caller ([`Ctx`]). The steps before the handler are small gates over that
//! context, in the order the answers depend on: whether the caches may be answered from
//! ([`ready`]), who calls ([`authenticate`]), whether the namespace is served and the caller may
//! call this route ([`admit`]), the heartbeat and a device's budget of changes ([`heard`]), a
//! read that must be validated ([`validated`]), and how large a body the caller may send
//! ([`body_limit`]).

use std::sync::Arc;

use hyper::{HeaderMap, Method, StatusCode};

use super::{
    auth::{self, Caller, Denied},
    budget,
    error::ApiError,
    fresh, liveness,
    routes::{Action, Params, Route},
    state::ApiState,
};
use crate::{
    cache::Serving,
    crd::Mutation,
    variant::{
        access::DeviceLimits, devices::validate_device_id, parsed::Parsed, validate_label,
        validate_name,
    },
};

/// A request as resolved: its route, the names of its path, and the Mutation they name as
/// this replica has it cached.
pub struct Ctx<'r> {
    /// The route.
    pub route: &'static Route,
    /// The namespace of the path.
    pub ns: &'r str,
    /// The Mutation's name, on routes below a Mutation.
    pub name: Option<&'r str>,
    /// The variant's label, on variant routes.
    pub label: Option<&'r str>,
    /// The device's id, on device routes.
    pub id: Option<&'r str>,
    /// The Mutation the path names, from the cache: looked up once per request (again only
    /// after a check with the API server or a validated read has refreshed the cache).
    pub mutation: Option<Arc<Mutation>>,
    /// Its policies, parsed when it entered the cache (R50), looked up with it when it has
    /// devices.
    pub parsed: Option<Arc<Parsed>>,
    /// Whether the API serves the namespace ([`Ctx::served_by`]).
    pub served: bool,
    /// What a device's heartbeat found that its poll answers with ([`heard`]).
    pub heard: liveness::Heard,
}

impl<'r> Ctx<'r> {
    /// The request for `route` with path names `params`, its names checked (400 naming a
    /// malformed one) and its Mutation looked up.
    pub fn new(
        state: &ApiState,
        route: &'static Route,
        params: Params<'r>,
    ) -> Result<Self, ApiError> {
        check_names(&params)?;
        let Params {
            ns,
            name,
            label,
            id,
        } = params;
        let mut ctx = Ctx {
            route,
            ns,
            name,
            label,
            id,
            mutation: None,
            parsed: None,
            served: false,
            heard: liveness::Heard::default(),
        };
        ctx.refresh(state);
        Ok(ctx)
    }

    /// Notes whether the API serves the namespace (503 while that is not known yet).
    pub fn served_by(&mut self, state: &ApiState) -> Result<(), ApiError> {
        self.served = state.serves(self.ns)?;
        Ok(())
    }

    /// Looks the Mutation up (again, after something refreshed the cache), and its policies
    /// when it has devices: only a device's requests read them, and a Mutation without
    /// `spec.devices` has none, so its requests skip the look-up.
    fn refresh(&mut self, state: &ApiState) {
        self.mutation = self
            .name
            .and_then(|name| state.caches.mutation(self.ns, name));
        self.parsed = self
            .mutation
            .as_deref()
            .filter(|m| m.spec.devices.is_some())
            .map(|m| state.caches.parsed(m));
    }

    /// Whether the Mutation has `spec.devices` (its token then enrolls only, R39).
    fn devices_on(&self) -> bool {
        self.mutation
            .as_ref()
            .is_some_and(|m| m.spec.devices.is_some())
    }
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

/// 503 while this replica's caches may not be answered from (R26, R34): starting, cut off from
/// the API server, or a watch gone silent.
pub fn ready(state: &ApiState) -> Result<(), ApiError> {
    let message = match state.caches.serving() {
        Serving::Yes => return Ok(()),
        Serving::Starting => "starting: the operator's caches are not synced yet".to_owned(),
        Serving::CutOff(silent) => format!(
            "this replica has not reached the Kubernetes API for {} s, so what it knows may be \
             out of date; try again, or another replica",
            silent.as_secs()
        ),
        Serving::Stale(cache) => format!(
            "{}; try again, or another replica",
            crate::cache::stale_message(cache)
        ),
    };
    Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message))
}

/// Who calls (401 for no one known). A token this replica cannot check may belong to a
/// Mutation made through another replica: checked once with the API server (fresh.rs), then
/// against the cache again. Only a token of a Mutation token's shape, in a served namespace,
/// is worth that check, charged to the client's address (the peer's, or the one a trusted
/// proxy names: R34).
pub async fn authenticate(
    state: &ApiState,
    ctx: &mut Ctx<'_>,
    headers: &HeaderMap,
    client: Option<std::net::IpAddr>,
) -> Result<Caller, ApiError> {
    let caller = state
        .auth
        .caller(headers, &state.caches, ctx.ns, ctx.mutation.as_deref());
    if caller.is_some()
        || !ctx.served
        || !auth::bearer(headers).is_some_and(auth::is_mutation_token)
    {
        return caller.ok_or_else(ApiError::unauthorized);
    }
    let Some(name) = ctx.name else {
        return Err(ApiError::unauthorized());
    };
    let ip = client.unwrap_or(std::net::IpAddr::from(std::net::Ipv4Addr::UNSPECIFIED));
    let asker = budget::Asker::Peer(ip);
    if !fresh::refresh(state, &asker, ctx.ns, name, fresh::Need::Secret).await {
        return Err(ApiError::unauthorized());
    }
    ctx.refresh(state);
    state
        .auth
        .caller(headers, &state.caches, ctx.ns, ctx.mutation.as_deref())
        .ok_or_else(ApiError::unauthorized)
}

/// Whether `caller` may call this route (R20, R39): after the token, so that only the admin
/// learns which namespaces are served (a Mutation's token of another namespace gets the same
/// 401 as a wrong one); with `spec.devices` the Mutation's token enrolls only, and a device's
/// token reaches only its own record and variant.
pub fn admit(state: &ApiState, ctx: &Ctx<'_>, caller: &Caller) -> Result<(), ApiError> {
    if !ctx.served {
        return Err(match caller {
            Caller::Admin => state.not_served(ctx.ns),
            Caller::Mutation { .. } | Caller::Device { .. } => ApiError::unauthorized(),
        });
    }
    let route = ctx.route;
    let devices_on = ctx.devices_on();
    match auth::permits(
        caller,
        route.access,
        route.action,
        ctx.label,
        ctx.id,
        devices_on,
    ) {
        Ok(()) => Ok(()),
        Err(Denied::Unauthorized) => Err(ApiError::unauthorized()),
        Err(Denied::Forbidden(what)) => Err(ApiError::forbidden(what)),
    }
}

/// R40: every request of a device is its heartbeat (but the one that removes it), and its
/// changes are charged to it (429 beyond its budget).
pub fn heard(
    state: &Arc<ApiState>,
    ctx: &mut Ctx<'_>,
    caller: &Caller,
    method: &Method,
    headers: &HeaderMap,
) -> Result<(), ApiError> {
    let action = ctx.route.action;
    if action != Action::RemoveDevice {
        let poll = action == Action::Poll;
        let m = ctx.mutation.as_deref().zip(ctx.parsed.as_deref());
        ctx.heard = liveness::heard_from(state, caller, m, headers, poll)?;
    }
    let Caller::Device { id, .. } = caller else {
        return Ok(());
    };
    if *method == Method::GET || state.device_writes.take(caller) {
        return Ok(());
    }
    let rate = state.device_writes.rate();
    Err(ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        format!(
            "device {id:?} asked for too many changes: at most {} a second, {} at once; retry \
             later",
            rate.per_second, rate.burst
        ),
    ))
}

/// A read that must reflect every write acknowledged before it, through any replica
/// (`Cache-Control: no-cache`): validated with the API server, and the Mutation looked up
/// again from the cache it refreshed.
pub async fn validated(
    state: &ApiState,
    ctx: &mut Ctx<'_>,
    caller: &Caller,
    method: &Method,
    headers: &HeaderMap,
) -> Result<(), ApiError> {
    if *method != Method::GET || !fresh::wants_validation(headers) {
        return Ok(());
    }
    fresh::validate(state, caller, ctx.ns, ctx.name).await?;
    ctx.refresh(state);
    Ok(())
}

/// R44: how large a body `caller` may send: the admin the listener's limit; a token no more
/// than the largest variant its Mutation lets it add.
pub fn body_limit(state: &ApiState, ctx: &Ctx<'_>, caller: &Caller) -> usize {
    match caller {
        Caller::Admin => state.server.body_limit,
        Caller::Mutation { .. } | Caller::Device { .. } => {
            let access = ctx
                .mutation
                .as_ref()
                .and_then(|m| m.spec.device_access.as_deref());
            DeviceLimits::of(access)
                .body_bytes()
                .min(state.server.body_limit)
        }
    }
}

#[cfg(test)]
mod tests;
