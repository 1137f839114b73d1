//! The device routes (R39, R40): list, get, remove and rotate a token (enrolling is
//! `enroll`'s, the poll `poll`'s), and what they share with enrolling.
//!
//! A Mutation with `spec.devices` keeps its devices in Secret `<name>-devices`, owned by it
//! (`registry`): per device the SHA-256 of its token, its variant and when it enrolled (never a
//! token), and the variants enrollment made. What is known of each device's liveness is in
//! `status.devices` (the store's), written by the replica that heard it (`liveness`).

use std::sync::{Arc, Mutex, PoisonError};

use hyper::StatusCode;
use serde::Serialize;

use super::{
    auth::Caller,
    error::{ApiError, ApiResult},
    fresh,
    registry::{cached_registry, edit_registry, listed, wait_registry},
    state::ApiState,
    variants,
};
use crate::{
    crd::{DeviceStatus, Mutation, OwnerKind, VariantService},
    http,
    store::new_token,
    variant::{
        Owner,
        devices::{Policy, Registry, heard, token_hash},
    },
};

/// The answer to an enrollment or a rotation: the token, shown this once.
#[derive(Serialize)]
pub(super) struct Issued<'a> {
    pub(super) id: &'a str,
    pub(super) token: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) variant: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) service: Option<&'a VariantService>,
}

/// The Mutation's devices policy (parsed when it entered the cache, R50), or why it has none.
fn policy(state: &ApiState, m: &Mutation, ns: &str, name: &str) -> Result<Policy, ApiError> {
    match &state.caches.parsed(m).devices {
        None => Err(ApiError::conflict(format!(
            "mutation {ns}/{name} has no spec.devices: it has no devices"
        ))),
        Some(Ok(policy)) => Ok(policy.clone()),
        Some(Err(e)) => Err(ApiError::conflict(format!("mutation {ns}/{name}: {e}"))),
    }
}

fn owner_of(m: &Mutation) -> Result<Owner, ApiError> {
    Owner::from_resource(OwnerKind::Mutation, m)
        .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))
}

/// A new device token (64 hex characters from the OS random source).
pub(super) fn issue_token() -> Result<String, ApiError> {
    new_token().map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))
}

/// What a change of a Mutation's devices starts with: the Mutation (which must have
/// `spec.devices`) and its owner reference. This replica's changes of one devices Secret are
/// written together (`registry::edit_registry`).
pub(super) async fn begin(
    state: &ApiState,
    caller: &Caller,
    ns: &str,
    name: &str,
) -> Result<(std::sync::Arc<Mutation>, Policy, Owner), ApiError> {
    let m = fresh::mutation(state, caller, ns, name, None).await?;
    let policy = policy(state, &m, ns, name)?;
    let owner = owner_of(&m)?;
    Ok((m, policy, owner))
}

fn absent(ns: &str, name: &str, id: &str) -> ApiError {
    ApiError::not_found(format!("device {id:?} not found in mutation {ns}/{name}"))
}

/// `GET .../devices` (admin): every device, as this replica knows it.
pub async fn list(
    state: &ApiState,
    caller: &Caller,
    ns: &str,
    name: &str,
    known: Option<std::sync::Arc<Mutation>>,
) -> ApiResult {
    let m = fresh::mutation(state, caller, ns, name, known).await?;
    policy(state, &m, ns, name)?;
    let items: Vec<DeviceStatus> = cached_registry(&state.caches, &m, |registry| {
        let mut ids: Vec<&String> = registry.devices.keys().collect();
        for d in listed(&m) {
            if !registry.devices.contains_key(&d.id) {
                ids.push(&d.id);
            }
        }
        ids.into_iter()
            .filter_map(|id| view(state, &m, registry, ns, name, id))
            .collect()
    });
    Ok(http::json(StatusCode::OK, &items))
}

/// `GET .../devices/{id}` (the admin or that device).
pub async fn get(
    state: &ApiState,
    caller: &Caller,
    (ns, name, id): (&str, &str, &str),
    known: Option<std::sync::Arc<Mutation>>,
) -> ApiResult {
    let m = fresh::mutation(state, caller, ns, name, known).await?;
    policy(state, &m, ns, name)?;
    let device = cached_registry(&state.caches, &m, |r| view(state, &m, r, ns, name, id))
        .ok_or_else(|| absent(ns, name, id))?;
    Ok(http::json(StatusCode::OK, &device))
}

/// `DELETE .../devices/{id}` (the admin or that device): 204; its token is dead at once. The
/// variant enrollment made for it goes with its last device; a variant of the spec never does.
pub async fn remove(
    state: &ApiState,
    caller: &Caller,
    ns: &str,
    name: &str,
    id: &str,
) -> ApiResult {
    let (_, policy, owner) = begin(state, caller, ns, name).await?;
    // The variant enrollment made that this removal leaves without a device, as the edit
    // that was written found it (an edit may be applied more than once: on a conflict, or
    // when another of its batch is left out).
    let unused = Arc::new(Mutex::new(None::<String>));
    let removal = {
        let (unused, id) = (Arc::clone(&unused), id.to_string());
        let (ns, name) = (ns.to_string(), name.to_string());
        move |r: &mut Registry| {
            let record = r
                .devices
                .remove(&id)
                .ok_or_else(|| absent(&ns, &name, &id))?;
            let last = r.users_of(&record.variant) == 0 && r.made.remove(&record.variant);
            *unused.lock().unwrap_or_else(PoisonError::into_inner) = last.then_some(record.variant);
            Ok(())
        }
    };
    edit_registry(state, &owner, policy.max_devices, removal).await?;
    state.heartbeats.forget(ns, name, id);
    wait_registry(state, ns, name, |r| !r.devices.contains_key(id)).await;
    let unused = unused.lock().unwrap_or_else(PoisonError::into_inner).take();
    if let Some(label) = unused {
        variants::remove_if_there(state, ns, name, &label).await?;
    }
    let gone = id.to_string();
    let drop = move |list: &[DeviceStatus]| list.iter().filter(|d| d.id != gone).cloned().collect();
    relist(
        state,
        ns,
        name,
        id,
        "drop the removed device from status",
        drop,
    )
    .await;
    tracing::info!(namespace = ns, name, device = id, "removed a device");
    Ok(http::no_content())
}

/// `POST .../devices/{id}/token` (the admin or that device): 200 `{id, token}`, a new token;
/// the old one is dead on this replica when this answers, and on the others as soon as their
/// caches see the Secret change.
pub async fn rotate(
    state: &ApiState,
    caller: &Caller,
    ns: &str,
    name: &str,
    id: &str,
) -> ApiResult {
    let (_, policy, owner) = begin(state, caller, ns, name).await?;
    let token = issue_token()?;
    let hash = token_hash(&token);
    let rotation = {
        let (id, ns, name) = (id.to_string(), ns.to_string(), name.to_string());
        move |r: &mut Registry| {
            let record = r
                .devices
                .get_mut(&id)
                .ok_or_else(|| absent(&ns, &name, &id))?;
            record.hash = hash;
            Ok(())
        }
    };
    edit_registry(state, &owner, policy.max_devices, rotation).await?;
    wait_registry(state, ns, name, |r| {
        r.devices.get(id).is_some_and(|d| d.hash == hash)
    })
    .await;
    tracing::info!(
        namespace = ns,
        name,
        device = id,
        "gave a device a new token"
    );
    Ok(http::json(
        StatusCode::OK,
        &Issued {
            id,
            token: &token,
            variant: None,
            service: None,
        },
    ))
}

/// Changes the device list in Mutation `ns/name`'s status for device `id` (`doing` says what
/// for), together with this replica's other changes of it waiting, then waits until this
/// replica's cache shows it, so the client reads its own write. A failed write is logged and
/// left to the leader, which lists what the devices Secret holds.
pub(super) async fn relist<F>(
    state: &ApiState,
    ns: &str,
    name: &str,
    id: &str,
    doing: &str,
    change: F,
) where
    F: Fn(&[DeviceStatus]) -> Vec<DeviceStatus> + Send + Sync + 'static,
{
    let change = move |m: &Mutation| Ok(change(listed(m)));
    let written = state.store.edit_devices(ns, name, state.deadline, change);
    match written.await {
        Ok(m) => fresh::catch_up(state, ns, name, m.metadata.resource_version.as_deref()).await,
        Err(err) if err.0 == StatusCode::NOT_FOUND => {}
        Err(err) => {
            tracing::warn!(namespace = ns, name, device = id, error = %err.1, "could not {doing}");
        }
    }
}

/// The Service of variant `label`, as its status says.
pub(super) fn service_of<'a>(m: &'a Mutation, label: &str) -> Option<&'a VariantService> {
    m.status
        .as_ref()?
        .variants
        .iter()
        .find(|v| v.label == label)?
        .service
        .as_deref()
}

/// Device `id` as this replica knows it: its status entry (or, not listed yet, its record),
/// seen when this replica last heard it if that is later than what was written.
fn view(
    state: &ApiState,
    m: &Mutation,
    registry: &Registry,
    ns: &str,
    name: &str,
    id: &str,
) -> Option<DeviceStatus> {
    let entry = match listed(m).iter().find(|d| d.id == id) {
        Some(entry) => entry.clone(),
        None => registry.devices.get(id)?.entry(id),
    };
    let Some(beat) = state.heartbeats.get(ns, name, id) else {
        return Some(entry);
    };
    let written = crate::variant::clock::parse_rfc3339(&entry.last_seen);
    if written.is_some_and(|w| w >= beat.seen) {
        return Some(entry);
    }
    Some(heard(&entry, beat.seen, &beat.reported))
}
