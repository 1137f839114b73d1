//! The variant routes: list, add, get, scale, remove. Edits are read-modify-write on the
//! Mutation guarded by its resourceVersion, retried on a conflict with fresh data, so
//! concurrent edits all land and none is lost (R22).

use std::sync::Arc;

use hyper::StatusCode;
use kube::Api;

use super::{
    auth::Caller,
    budget::Asker,
    check::check_with_server,
    error::{ApiError, ApiResult},
    fresh::{self, Need, cached_mutation, catch_up},
    json::{ScaleRequest, VariantRequest, VariantView, variant_view},
    registry::device_may_change,
    state::ApiState,
};
use crate::{
    crd::{Mutation, OwnerKind, ServiceType, Variant, limits::MAX_INSTANCES},
    http,
    store::API_MANAGER,
    variant::{
        Base, Owner,
        access::{device_may_add, device_may_scale, route_device_env},
        deployment_name,
        placement::validate_containers,
        rights::{self, Change},
        rollout::REVISION_LABEL,
        totals, validate_variants,
    },
};

/// `GET .../variants`.
pub async fn list(
    state: &ApiState,
    caller: &Caller,
    ns: &str,
    name: &str,
    known: Option<std::sync::Arc<Mutation>>,
) -> ApiResult {
    let m = fresh::mutation(state, caller, ns, name, known).await?;
    let items: Vec<_> = (0..m.spec.variants.len())
        .filter_map(|i| view_for(caller, &m, i))
        .map(|mut view| {
            view.revision = running_revision(state, &m, view.label);
            view
        })
        .collect();
    Ok(http::json(StatusCode::OK, &items))
}

/// With spec.rollout, the base revision variant `label`'s Deployment runs, as cached (its
/// label `mutantops.neiam.org/revision`): what a device's variant answer says of a rollout.
fn running_revision(state: &ApiState, m: &Mutation, label: &str) -> Option<String> {
    m.spec.rollout.as_ref()?;
    let ns = m.metadata.namespace.as_deref()?;
    let deployment = deployment_name(&base_name(m), label);
    let cached = state.caches.mutation_deployments.get(ns, &deployment)?;
    let labels = cached.metadata.labels.as_ref()?;
    labels.get(REVISION_LABEL).map(str::to_owned)
}

/// The variant a request names: `.../namespaces/{ns}/mutations/{name}/variants/{label}`.
#[derive(Clone, Copy, Debug)]
pub struct At<'a> {
    /// The namespace.
    pub ns: &'a str,
    /// The Mutation's name.
    pub name: &'a str,
    /// The variant's label.
    pub label: &'a str,
}

/// `GET .../variants/{label}`.
pub async fn get(
    state: &ApiState,
    caller: &Caller,
    at: At<'_>,
    known: Option<std::sync::Arc<Mutation>>,
) -> ApiResult {
    let At { ns, name, label } = at;
    let mut m = fresh::mutation(state, caller, ns, name, known).await?;
    // A label this replica does not show may have been added through another one.
    if position(&m, label).is_none()
        && fresh::refresh(
            state,
            &Asker::Caller(caller.clone()),
            ns,
            name,
            Need::Mutation,
        )
        .await
    {
        m = cached_mutation(state, caller, ns, name)?;
    }
    let index = position(&m, label).ok_or_else(|| absent(ns, name, label))?;
    let mut view = view_for(caller, &m, index).ok_or_else(|| absent(ns, name, label))?;
    view.revision = running_revision(state, &m, label);
    Ok(http::json(StatusCode::OK, &view))
}

/// `POST .../variants` `{label, env, instances, nodeSelector, tolerations, containers}`: 201,
/// 400 when invalid (a container the base does not have too), 403 when a Mutation's token asks
/// what its owner does not allow (R32, R37) or the API server's dry run answers 403 (a
/// quota, an admission policy: R35), 409 when the label is taken, its Deployment name belongs
/// to someone else, or the Mutation is read-only.
pub async fn add(
    state: &ApiState,
    caller: &Caller,
    ns: &str,
    name: &str,
    body: VariantRequest,
) -> ApiResult {
    let variant = Variant::from(body);
    let label = variant.label.clone();
    let updated = insert(state, caller, ns, name, variant).await?;
    respond(caller, &updated, &label, StatusCode::CREATED, ns, name)
}

/// Adds `variant` to Mutation `ns/name` for `caller` (held to the device bounds unless it is
/// the admin): what [`add`] and the enrollment of a device with a variant of its own do.
pub(super) async fn insert(
    state: &ApiState,
    caller: &Caller,
    ns: &str,
    name: &str,
    variant: Variant,
) -> Result<Arc<Mutation>, ApiError> {
    // Checked on the cached Mutation first, so that an allowed request costs no extra request
    // to the API server, then again in the edit, on the Mutation as read from the API server.
    // The cache can be older than a change acknowledged before this request, so a refusal is
    // confirmed on the Mutation as the API server holds it before it is answered (R32). The
    // device bounds judge what was sent.
    let cached = fresh::mutation(state, caller, ns, name, None).await?;
    let admissible = |m: &Mutation| {
        let routed = stored(caller, &variant, m);
        validate_variants(&base_name(m), std::slice::from_ref(&routed))
            .map_err(ApiError::bad_request)?;
        known(m, &routed)?;
        device_check(caller, m, &variant)?;
        Ok::<_, ApiError>(routed)
    };
    let (cached, routed) = match admissible(&cached) {
        Ok(routed) => (cached, routed),
        Err(_) => {
            let current = Arc::new(
                Api::<Mutation>::namespaced(state.client.clone(), ns)
                    .get(name)
                    .await?,
            );
            let routed = admissible(&current)?;
            (current, routed)
        }
    };
    if let (Ok(owner), Ok(base)) = (
        Owner::from_resource(OwnerKind::Mutation, cached.as_ref()),
        Base::parse(&cached.spec.deployment.value()),
    ) {
        let service = cached.spec.service.as_ref();
        check_with_server(state, &owner, &base, std::slice::from_ref(&routed), service).await?;
    }
    let (caller, taken) = (caller.clone(), taken(ns, name, &variant.label));
    edit(state, ns, name, move |m| {
        if position(m, &variant.label).is_some() {
            return Err(taken.clone());
        }
        device_check(&caller, m, &variant)?;
        let routed = stored(&caller, &variant, m);
        known(m, &routed)?;
        let mut variants = m.spec.variants.clone();
        variants.push(routed);
        Ok(variants)
    })
    .await
}

/// `variant` as it is stored in `m` when `caller` sends it: a token's with each env name the
/// owner allows only in some containers moved into those containers' own env (R41); the
/// admin's as sent.
fn stored(caller: &Caller, variant: &Variant, m: &Mutation) -> Variant {
    if *caller == Caller::Admin {
        return variant.clone();
    }
    let access = m.spec.device_access.as_deref();
    let mut routed = route_device_env(access, variant);
    // R41: its env stays held to the owner's list if the base changes.
    routed.by_token = Some(true);
    // R32, R36: a Service only when the owner opted in, so that no token claims a name
    // another app expects.
    if !totals::token_variants_served(access) {
        routed.service = Some(false);
    }
    routed
}

/// 400 when `v` names a container that `m`'s base does not have.
fn known(m: &Mutation, v: &Variant) -> Result<(), ApiError> {
    validate_containers(&m.spec.deployment.value(), std::slice::from_ref(v))
        .map_err(ApiError::bad_request)
}

/// 409: variant `label` is already in Mutation `ns/name`.
fn taken(ns: &str, name: &str, label: &str) -> ApiError {
    ApiError::conflict(format!(
        "variant {label:?} already exists in mutation {ns}/{name}"
    ))
}

/// For a Mutation's own token: whether it may add `variant` to `m` (R32), as sent (only the
/// owner marks a variant `byToken` or `enrollable`); 403 naming the variable or the bound if
/// not. The admin is not held to it.
fn device_check(caller: &Caller, m: &Mutation, variant: &Variant) -> Result<(), ApiError> {
    if *caller == Caller::Admin {
        return Ok(());
    }
    rights::token_may_mark(variant).map_err(ApiError::forbidden)?;
    let base = m.spec.deployment.value();
    let access = m.spec.device_access.as_deref();
    let devices_on = m.spec.devices.is_some();
    device_may_add(&base, access, variant, m.spec.variants.len(), devices_on)
        .map_err(ApiError::forbidden)?;
    let exposed = m
        .spec
        .service
        .as_ref()
        .is_some_and(|s| s.type_ != ServiceType::ClusterIP);
    totals::may_add(access, &m.spec.variants, variant, exposed).map_err(ApiError::forbidden)
}

/// `PATCH .../variants/{label}` `{instances}`: changes only the replica count, so the running
/// pods are kept (R21).
pub async fn scale(state: &ApiState, caller: &Caller, at: At<'_>, body: ScaleRequest) -> ApiResult {
    let At { ns, name, label } = at;
    let cached = fresh::mutation(state, caller, ns, name, None).await?;
    if body.instances < 0 {
        return Err(ApiError::bad_request(format!(
            "instances {}: must not be negative",
            body.instances
        )));
    }
    if body.instances > MAX_INSTANCES {
        return Err(ApiError::bad_request(format!(
            "instances {}: at most {MAX_INSTANCES} allowed",
            body.instances
        )));
    }
    let instances = body.instances;
    let device = move |caller: &Caller, m: &Mutation, label: &str| match caller {
        Caller::Admin => Ok(()),
        Caller::Mutation { .. } | Caller::Device { .. } => {
            let access = m.spec.device_access.as_deref();
            device_may_scale(access, instances)
                .and_then(|()| totals::may_total(access, &m.spec.variants, label, instances))
                .map_err(ApiError::forbidden)
        }
    };
    // Who may change the variant, then by how much: a device's registry is read once, here;
    // what the Mutation says is checked only in the edit, on the Mutation as read from the API
    // server. The cache can be older than a change acknowledged before this request (a spec
    // edit, another replica's write), and an answer must hold for what was there when it was
    // given (R32); a refusal costs one read, within the caller's write budget (R34).
    if let Caller::Device { id, .. } = caller {
        device_may_change(&state.caches, &cached, id, label).map_err(ApiError::forbidden)?;
    }
    let (who, owned, missing) = (caller.clone(), label.to_string(), absent(ns, name, label));
    let updated = edit(state, ns, name, move |m| {
        let index = position(m, &owned).ok_or_else(|| missing.clone())?;
        may_change(&who, m, &owned, Change::Scale)?;
        device(&who, m, &owned)?;
        let mut variants = m.spec.variants.clone();
        variants[index].instances = instances;
        Ok(variants)
    })
    .await?;
    respond(caller, &updated, label, StatusCode::OK, ns, name)
}

/// Removes variant `label` of Mutation `ns/name` if it is there: a variant enrollment made,
/// when its last device goes or its enrollment fails (R39). The operator's own clean-up, not a
/// caller's request, so held to no caller's rights. Whether it was there.
pub(super) async fn remove_if_there(
    state: &ApiState,
    ns: &str,
    name: &str,
    label: &str,
) -> Result<bool, ApiError> {
    let owned = label.to_string();
    let removed = edit(state, ns, name, move |m| {
        let mut variants = m.spec.variants.clone();
        variants.retain(|v| v.label != owned);
        Ok(variants)
    })
    .await?;
    Ok(position(&removed, label).is_none())
}

/// `DELETE .../variants/{label}`: 204, 404 when absent, 403 when the caller may not remove
/// it (R32: a Mutation's token removes only the token's variants).
pub async fn remove(state: &ApiState, caller: &Caller, at: At<'_>) -> ApiResult {
    let At { ns, name, label } = at;
    // Checked only in the edit, on the Mutation as read from the API server (as a scale).
    fresh::mutation(state, caller, ns, name, None).await?;
    let (who, owned, missing) = (caller.clone(), label.to_string(), absent(ns, name, label));
    edit(state, ns, name, move |m| {
        let index = position(m, &owned).ok_or_else(|| missing.clone())?;
        may_change(&who, m, &owned, Change::Remove)?;
        let mut variants = m.spec.variants.clone();
        variants.remove(index);
        Ok(variants)
    })
    .await?;
    Ok(http::no_content())
}

/// Whether `caller` may make `change` to variant `label` of `m`, as `m` says who made it (R32,
/// R39): a Mutation's token only the token's variants ([`rights::token_may_change`]); a device
/// scales only what its placement allows a token (whether the variant is its own alone is
/// its registry's to say: [`device_may_change`]) and never removes a variant (it removes
/// itself). A label `m` does not have, and a read-only `m`, pass: the edit answers them (404,
/// 409). The admin may make any.
fn may_change(caller: &Caller, m: &Mutation, label: &str, change: Change) -> Result<(), ApiError> {
    let Some(v) = m.spec.variants.iter().find(|v| v.label == label) else {
        return Ok(());
    };
    if m.variants_read_only() {
        return Ok(());
    }
    let access = m.spec.device_access.as_deref();
    match (caller, change) {
        (Caller::Admin, _) => Ok(()),
        (Caller::Mutation { .. }, _) => rights::token_may_change(access, v, change),
        (Caller::Device { .. }, Change::Scale) => rights::placed_for_token(access, v),
        (Caller::Device { id, .. }, Change::Remove) => Err(format!(
            "variant {label:?}: device {id:?} removes its variant only by removing itself \
             (DELETE .../devices/{id})"
        )),
    }
    .map_err(ApiError::forbidden)
}

/// The variant at `index` of `m` as `caller` sees it: a device's view carries no env values
/// (R39), the others' all of it.
fn view_for<'m>(caller: &Caller, m: &'m Mutation, index: usize) -> Option<VariantView<'m>> {
    let mut view = variant_view(m, index)?;
    if matches!(caller, Caller::Device { .. }) {
        view.env = None;
    }
    Some(view)
}

fn position(m: &Mutation, label: &str) -> Option<usize> {
    m.spec.variants.iter().position(|v| v.label == label)
}

fn absent(ns: &str, name: &str, label: &str) -> ApiError {
    ApiError::not_found(format!(
        "variant {label:?} not found in mutation {ns}/{name}"
    ))
}

fn base_name(m: &Mutation) -> String {
    m.spec
        .deployment
        .value()
        .pointer("/metadata/name")
        .and_then(|n| n.as_str())
        .unwrap_or_default()
        .to_string()
}

/// The answer `status` with variant `label` of `m` (of Mutation `ns/name`), as `caller` sees it.
fn respond(
    caller: &Caller,
    m: &Mutation,
    label: &str,
    status: StatusCode,
    ns: &str,
    name: &str,
) -> ApiResult {
    let index = position(m, label).ok_or_else(|| absent(ns, name, label))?;
    let view = view_for(caller, m, index).ok_or_else(|| absent(ns, name, label))?;
    Ok(http::json(status, &view))
}

/// Read-modify-write of a Mutation's variants, together with this replica's other edits of
/// it waiting at the time (the store's batches): `change` computes the new list from the
/// Mutation read fresh from the API server (or refuses), and the list is written with the
/// resourceVersion it was read at; a conflict is retried on fresh data. Never a blind
/// overwrite. Then waits (within the request's deadline) for this replica's cache to show it.
async fn edit<F>(
    state: &ApiState,
    ns: &str,
    name: &str,
    change: F,
) -> Result<Arc<Mutation>, ApiError>
where
    F: Fn(&Mutation) -> Result<Vec<Variant>, ApiError> + Send + Sync + 'static,
{
    // Edits of a Mutation whose variants belong in git are refused, each on the Mutation as
    // the store read it.
    let (what_ns, what_name) = (ns.to_string(), name.to_string());
    let change = move |m: &Mutation| {
        if m.variants_read_only() {
            return Err(ApiError::conflict(format!(
                "mutation {what_ns}/{what_name} is synced by Argo CD without annotation \
                 mutantops.neiam.org/runtime-variants: \"true\": its variants belong in git"
            )));
        }
        change(m)
    };
    let updated = state
        .store
        .edit_variants(ns, name, API_MANAGER, state.deadline, change)
        .await?;
    catch_up(
        state,
        ns,
        name,
        updated.metadata.resource_version.as_deref(),
    )
    .await;
    Ok(updated)
}
