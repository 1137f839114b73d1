//! The Mutation routes: list (admin), create (admin), get, delete (admin).

use std::{sync::Arc, time::Duration};

use hyper::StatusCode;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt, api::ObjectMeta};

use super::{
    auth::Caller,
    check::check_with_server,
    error::{ApiError, ApiResult},
    fresh,
    fresh::catch_up,
    json::{CreateMutation, mutation_view},
    state::ApiState,
};
use crate::{
    cache::{CacheState, Caches},
    crd::{
        DeviceAccess, DevicesSpec, EmbeddedJson, Mutation, MutationSpec, OwnerKind, ServiceSpec,
        Variant,
    },
    http,
    variant::{
        Base, Owner, access::validate_device_access, build_service, devices::Policy,
        placement::validate_containers, sleep::SleepPolicy, validate_mutation_name,
        validate_variants,
    },
};

/// How long creating a Mutation waits for the controller to report its Secret.
const SECRET_WAIT: Duration = Duration::from_secs(5);

/// `GET /api/v1/namespaces/{ns}/mutations`: every Mutation of the namespace, by name.
pub fn list(state: &ApiState, ns: &str) -> ApiResult {
    let cached = state.caches.mutations.state();
    let mut items: Vec<_> = cached
        .iter()
        .filter(|m| m.namespace().as_deref() == Some(ns))
        .map(|m| mutation_view(m))
        .collect();
    items.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(http::json(StatusCode::OK, &items))
}

/// `GET /api/v1/namespaces/{ns}/mutations/{name}`.
pub async fn get(
    state: &ApiState,
    caller: &Caller,
    ns: &str,
    name: &str,
    known: Option<std::sync::Arc<Mutation>>,
) -> ApiResult {
    let m = fresh::mutation(state, caller, ns, name, known).await?;
    Ok(http::json(StatusCode::OK, &mutation_view(&m)))
}

/// `POST /api/v1/namespaces/{ns}/mutations` `{name, deployment, variants, deviceAccess,
/// service, devices}`: 201, 400 when
/// invalid, 403 when the API server's dry run of a variant answers 403 (a quota, an admission
/// policy: R35), 409 when the name is taken.
pub async fn create(state: &ApiState, ns: &str, body: CreateMutation) -> ApiResult {
    // A name the operator could not label its Deployments and Secret with is refused here,
    // rather than stored and reported Invalid (R8, R24).
    validate_mutation_name(&body.name).map_err(|e| ApiError::bad_request(format!("name: {e}")))?;
    let base = Base::parse(&body.deployment).map_err(ApiError::bad_request)?;
    let device_access = body.device_access.map(DeviceAccess::from);
    if let Some(access) = &device_access {
        validate_device_access(access).map_err(ApiError::bad_request)?;
    }
    let devices = body.devices.map(|d| Box::new(DevicesSpec::from(d)));
    if let Some(spec) = &devices {
        Policy::of(spec).map_err(ApiError::bad_request)?;
        if let Some(sleep) = &spec.sleep {
            SleepPolicy::of(sleep).map_err(ApiError::bad_request)?;
        }
    }
    let variants: Vec<Variant> = body.variants.into_iter().map(Variant::from).collect();
    validate_variants(base.name(), &variants).map_err(ApiError::bad_request)?;
    validate_containers(&body.deployment, &variants).map_err(ApiError::bad_request)?;
    // The Mutation has no uid yet: its Deployments are checked with a placeholder reference.
    let owner = Owner {
        kind: OwnerKind::Mutation,
        name: body.name.clone(),
        namespace: ns.to_string(),
        uid: "00000000-0000-0000-0000-000000000000".to_string(),
    };
    // R36: each variant's Service must be one the controller can make.
    let service = body.service.map(ServiceSpec::from);
    if let Some(spec) = &service {
        for v in &variants {
            build_service(&base, &owner, &v.label, spec).map_err(ApiError::bad_request)?;
        }
        crate::variant::service_ports(&base, spec).map_err(ApiError::bad_request)?;
    }
    check_with_server(state, &owner, &base, &variants, service.as_ref()).await?;
    let mutation = Mutation {
        metadata: ObjectMeta {
            name: Some(body.name.clone()),
            namespace: Some(ns.to_string()),
            ..ObjectMeta::default()
        },
        spec: MutationSpec {
            deployment: EmbeddedJson::from(&body.deployment),
            variants,
            device_access: device_access.map(Box::new),
            service,
            devices,
            rollout: None,
            screen: None,
        },
        status: None,
    };
    let created = state.store.create_mutation(&mutation).await?;
    catch_up(
        state,
        ns,
        &body.name,
        created.metadata.resource_version.as_deref(),
    )
    .await;
    tracing::info!(namespace = ns, name = %body.name, "mutation created through the API");
    // The controller makes the token's Secret right away; answering once it has, the client
    // can read the token as soon as it has the answer (waiting a few seconds at most).
    let reported = wait_for_secret(state, ns, &body.name).await;
    let view = mutation_view(reported.as_deref().unwrap_or(&created));
    Ok(http::json(StatusCode::CREATED, &view))
}

/// Waits (briefly) until the cached Mutation reports its Secret, and returns it.
async fn wait_for_secret(state: &ApiState, ns: &str, name: &str) -> Option<Arc<Mutation>> {
    let key = ObjectRef::new(name).within(ns);
    let deadline = crate::http::overdue::until(tokio::time::Instant::now() + SECRET_WAIT);
    let reported = |caches: &Caches, _: &CacheState| {
        caches
            .mutations
            .get(&key)
            .filter(|m| m.status.as_ref().is_some_and(|s| s.secret.is_some()))
    };
    state.caches.until(Some(deadline), reported).await
}

/// `DELETE /api/v1/namespaces/{ns}/mutations/{name}`: 204, 404 when absent, 409 when Argo CD
/// syncs it (R16).
pub async fn delete(state: &ApiState, ns: &str, name: &str) -> ApiResult {
    let api: Api<Mutation> = Api::namespaced(state.client.clone(), ns);
    let Some(current) = api.get_opt(name).await? else {
        return Err(ApiError::not_found(format!(
            "mutation {ns}/{name} not found"
        )));
    };
    if current.argo_synced() {
        return Err(ApiError::conflict(format!(
            "mutation {ns}/{name} is synced by Argo CD: delete it from git instead"
        )));
    }
    // The uid makes sure it is the object just checked, not a new one of that name.
    state.store.delete_mutation(ns, name, current.uid()).await?;
    catch_up(state, ns, name, None).await;
    tracing::info!(namespace = ns, name, "mutation deleted through the API");
    Ok(http::no_content())
}
