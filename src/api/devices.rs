//! The device routes (R39, R40): enroll, list, get, remove and rotate a token
//! (the poll is `poll`'s).
//!
//! A Mutation with `spec.devices` keeps its devices in Secret `<name>-devices`, owned by it
//! (`registry`): per device the SHA-256 of its token, its variant and when it enrolled (never a
//! token), and the variants enrollment made. What is known of each device's liveness is in
//! `status.devices` (the store's), written by the replica that heard it (`liveness`).

use std::sync::{Arc, Mutex, PoisonError};

use hyper::StatusCode;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::{
    auth::Caller,
    error::{ApiError, ApiResult},
    fresh,
    json::VariantRequest,
    registry::{cached_registry, edit_registry, listed, read_registry, wait_registry},
    state::ApiState,
    variants,
};
use crate::{
    crd::{DeviceStatus, Mutation, OwnerKind, Variant, VariantService},
    http,
    store::new_token,
    variant::{
        Owner,
        devices::{DeviceRecord, Policy, Registry, heard, rfc3339, token_hash, validate_device_id},
        totals::may_use_label,
        validate_label,
    },
};

/// `POST .../devices`: a device's id and either a variant of its own, made with the device
/// bounds, or the label of an existing variant, which enrolling does not change.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct EnrollRequest {
    /// The device's id.
    pub id: String,
    /// A new variant for it.
    #[serde(default)]
    pub variant: Option<VariantRequest>,
    /// The label of an existing variant.
    #[serde(default)]
    pub label: Option<String>,
}

/// The answer to an enrollment or a rotation: the token, shown this once.
#[derive(Serialize)]
struct Issued<'a> {
    id: &'a str,
    token: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    variant: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    service: Option<&'a VariantService>,
}

/// The Mutation's devices policy, or why it has none.
fn policy(m: &Mutation, ns: &str, name: &str) -> Result<Policy, ApiError> {
    let spec = m.spec.devices.as_ref().ok_or_else(|| {
        ApiError::conflict(format!(
            "mutation {ns}/{name} has no spec.devices: it has no devices"
        ))
    })?;
    Policy::of(spec).map_err(|e| ApiError::conflict(format!("mutation {ns}/{name}: {e}")))
}

fn owner_of(m: &Mutation) -> Result<Owner, ApiError> {
    Owner::from_resource(OwnerKind::Mutation, m)
        .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))
}

/// A new device token (64 hex characters from the OS random source).
fn issue_token() -> Result<String, ApiError> {
    new_token().map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))
}

/// What a change of a Mutation's devices starts with: the Mutation (which must have
/// `spec.devices`) and its owner reference. This replica's changes of one devices Secret are
/// written together (`registry::edit_registry`).
async fn begin(
    state: &ApiState,
    caller: &Caller,
    ns: &str,
    name: &str,
) -> Result<(std::sync::Arc<Mutation>, Policy, Owner), ApiError> {
    let m = fresh::mutation(state, caller, ns, name).await?;
    let policy = policy(&m, ns, name)?;
    let owner = owner_of(&m)?;
    Ok((m, policy, owner))
}

fn absent(ns: &str, name: &str, id: &str) -> ApiError {
    ApiError::not_found(format!("device {id:?} not found in mutation {ns}/{name}"))
}

/// A board just enrolled: its device's record, and when.
struct Enrolled<'a> {
    id: &'a str,
    label: &'a str,
    token: &'a str,
    record: &'a DeviceRecord,
    now: Timestamp,
}

impl Enrolled<'_> {
    /// Lists the board in the Mutation's status, remembers its first heartbeat, waits (a few
    /// seconds at most) until this replica's cache has its record, and answers 201 with its
    /// token and its variant's Service.
    async fn listed_and_answered(
        self,
        state: &ApiState,
        caller: &Caller,
        m: Arc<Mutation>,
    ) -> ApiResult {
        let Enrolled {
            id,
            label,
            token,
            record,
            now,
        } = self;
        let (ns, name) = (
            m.metadata.namespace.clone().unwrap_or_default(),
            m.metadata.name.clone().unwrap_or_default(),
        );
        let (ns, name) = (ns.as_str(), name.as_str());
        let entry = record.entry(id);
        // The token is in the Secret: a failed status write is the leader's to make good.
        let add = move |list: &[DeviceStatus]| {
            let mut list = list.to_vec();
            list.retain(|d| d.id != entry.id);
            list.push(entry.clone());
            list
        };
        relist(
            state,
            ns,
            name,
            id,
            "list the enrolled device in status",
            add,
        )
        .await;
        state
            .heartbeats
            .heard(ns, name, id, now, &Default::default());
        let hash = token_hash(token);
        wait_registry(state, ns, name, |r| {
            r.devices.get(id).is_some_and(|d| d.hash == hash)
        })
        .await;
        tracing::info!(namespace = ns, name, device = %id, variant = %label, "enrolled a device");
        let m = fresh::cached_mutation(state, caller, ns, name).unwrap_or(m);
        let service = service_of(&m, label);
        Ok(http::json(
            StatusCode::CREATED,
            &Issued {
                id,
                token,
                variant: Some(label),
                service,
            },
        ))
    }
}

/// The variant a board enrolls into: a new one of its own (`variant`) or an existing one's
/// `label`, one of the two (400 otherwise, or for a malformed label).
fn target_of(
    variant: Option<VariantRequest>,
    label: Option<String>,
) -> Result<(String, Option<Variant>), ApiError> {
    match (variant, label) {
        (Some(v), None) => {
            let v = Variant::from(v);
            Ok((v.label.clone(), Some(v)))
        }
        (None, Some(label)) => {
            validate_label(&label).map_err(ApiError::bad_request)?;
            Ok((label, None))
        }
        _ => Err(ApiError::bad_request(
            "give either variant (a new variant for this device) or label (an existing \
             variant's)",
        )),
    }
}

/// Makes the board's own variant `new` (with every check of an added variant), or checks that
/// it may join the existing variant `label` of `m`: 409 for a new variant whose label is
/// taken, 404 for a label that is not there, 403 for a label the caller could not have given
/// a variant (enrolling hands the board a token for it).
async fn join_or_make(
    state: &ApiState,
    caller: &Caller,
    m: &Mutation,
    label: &str,
    new: Option<&Variant>,
) -> Result<(), ApiError> {
    let (ns, name) = (
        m.metadata.namespace.as_deref().unwrap_or_default(),
        m.metadata.name.as_deref().unwrap_or_default(),
    );
    let exists = m.spec.variants.iter().any(|v| v.label == label);
    match (new, exists) {
        (Some(_), true) => Err(ApiError::conflict(format!(
            "variant {label:?} already exists in mutation {ns}/{name}: enroll into it with \
             {{\"id\": ..., \"label\": {label:?}}}, which does not change it"
        ))),
        (None, false) => Err(ApiError::not_found(format!(
            "variant {label:?} not found in mutation {ns}/{name}"
        ))),
        (Some(variant), false) => {
            variants::insert(state, caller, ns, name, variant.clone()).await?;
            Ok(())
        }
        (None, true) if *caller != Caller::Admin => {
            may_use_label(m.spec.device_access.as_deref(), label).map_err(ApiError::forbidden)
        }
        (None, true) => Ok(()),
    }
}

/// Whether `r` has room for device `id`: not enrolled yet, and fewer than `max` devices.
fn room_for(r: &Registry, id: &str, ns: &str, name: &str, max: usize) -> Result<(), ApiError> {
    if r.devices.contains_key(id) {
        return Err(ApiError::conflict(format!(
            "device {id:?} is already enrolled in mutation {ns}/{name}"
        )));
    }
    if r.devices.len() >= max {
        return Err(ApiError::forbidden(format!(
            "mutation {ns}/{name} has {} devices, its maxDevices: no more enroll",
            r.devices.len()
        )));
    }
    Ok(())
}

/// `POST .../devices` (the admin, or the Mutation's token while enrollment is open): 201
/// `{id, token, variant, service}`; 400 for a bad id or variant, 403 when enrollment is closed
/// or full or the variant asks what the device bounds refuse, 404 for an unknown label, 409
/// when the id or a new variant's label is taken or the Mutation has no `spec.devices`.
pub async fn enroll(
    state: &ApiState,
    caller: &Caller,
    ns: &str,
    name: &str,
    body: EnrollRequest,
) -> ApiResult {
    let (m, policy, owner) = begin(state, caller, ns, name).await?;
    validate_device_id(&body.id).map_err(ApiError::bad_request)?;
    let now = Timestamp::now();
    if *caller != Caller::Admin {
        policy.enrollment_open(now).map_err(ApiError::forbidden)?;
    }
    let (label, new_variant) = target_of(body.variant, body.label)?;
    let id = body.id;
    let max = policy.max_devices;
    let free = |r: &Registry| room_for(r, &id, ns, name, max);
    // Checked before anything is written, so that a refused enrollment changes nothing: first
    // on this replica's cache, so that one refused there costs the API server nothing (the
    // enrollment key is shared by every board not enrolled yet), then on the Secret as the API
    // server has it.
    free(&cached_registry(&state.caches, &m))?;
    free(&read_registry(state, &owner).await?)?;
    join_or_make(state, caller, &m, &label, new_variant.as_ref()).await?;
    let made = new_variant.is_some();
    let token = issue_token()?;
    let enrolled_at = rfc3339(now);
    let record = DeviceRecord {
        hash: token_hash(&token),
        variant: label.clone(),
        enrolled_at: enrolled_at.clone(),
    };
    let enrolled = {
        let (id, record, label) = (id.clone(), record.clone(), label.clone());
        let (ns, name) = (ns.to_string(), name.to_string());
        move |r: &mut Registry| {
            room_for(r, &id, &ns, &name, max)?;
            r.devices.insert(id.clone(), record.clone());
            if made {
                r.made.insert(label.clone());
            }
            Ok(())
        }
    };
    let written = edit_registry(state, &owner, enrolled).await;
    if let Err(err) = written {
        if made && let Err(undo) = variants::remove_if_there(state, ns, name, &label).await {
            tracing::warn!(namespace = ns, name, variant = %label, error = %undo.1, "could not remove the variant of a failed enrollment");
        }
        return Err(err);
    }
    let done = Enrolled {
        id: &id,
        label: &label,
        token: &token,
        record: &record,
        now,
    };
    done.listed_and_answered(state, caller, m).await
}

/// `GET .../devices` (admin): every device, as this replica knows it.
pub async fn list(state: &ApiState, caller: &Caller, ns: &str, name: &str) -> ApiResult {
    let m = fresh::mutation(state, caller, ns, name).await?;
    policy(&m, ns, name)?;
    let registry = cached_registry(&state.caches, &m);
    let mut ids: Vec<&String> = registry.devices.keys().collect();
    for d in listed(&m) {
        if !registry.devices.contains_key(&d.id) {
            ids.push(&d.id);
        }
    }
    let items: Vec<DeviceStatus> = ids
        .into_iter()
        .filter_map(|id| view(state, &m, &registry, ns, name, id))
        .collect();
    Ok(http::json(StatusCode::OK, &items))
}

/// `GET .../devices/{id}` (the admin or that device).
pub async fn get(state: &ApiState, caller: &Caller, ns: &str, name: &str, id: &str) -> ApiResult {
    let m = fresh::mutation(state, caller, ns, name).await?;
    policy(&m, ns, name)?;
    let registry = cached_registry(&state.caches, &m);
    let device = view(state, &m, &registry, ns, name, id).ok_or_else(|| absent(ns, name, id))?;
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
    let (_, _, owner) = begin(state, caller, ns, name).await?;
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
    edit_registry(state, &owner, removal).await?;
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
    let (_, _, owner) = begin(state, caller, ns, name).await?;
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
    edit_registry(state, &owner, rotation).await?;
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
async fn relist<F>(state: &ApiState, ns: &str, name: &str, id: &str, doing: &str, change: F)
where
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
        .as_ref()
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
    let written = entry.last_seen.parse::<Timestamp>().ok();
    if written.is_some_and(|w| w >= beat.seen) {
        return Some(entry);
    }
    Some(heard(&entry, beat.seen, &beat.reported))
}
