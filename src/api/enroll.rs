//! Enrolling a board (R39): `POST .../devices` with an id and either a variant of its own or
//! an existing variant's label; the device's token is answered this once, its hash kept in the
//! devices Secret, the device listed in the Mutation's status.

use hyper::StatusCode;
use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;

use super::{
    auth::Caller,
    devices::{Issued, begin, issue_token, relist, service_of},
    error::{ApiError, ApiResult},
    fresh,
    json::VariantRequest,
    registry::{cached_registry, edit_registry, read_registry, wait_registry},
    state::ApiState,
    variants,
};
use crate::{
    crd::{DeviceAccess, DeviceStatus, Mutation, Variant, VariantService},
    http,
    variant::{
        devices::{DeviceRecord, Registry, rfc3339, token_hash, validate_device_id},
        rights::may_join,
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
        policy
            .may_enroll_id(&body.id)
            .map_err(ApiError::forbidden)?;
    }
    let (label, new_variant) = target_of(body.variant, body.label)?;
    let id = body.id;
    let max = policy.max_devices;
    let admin = *caller == Caller::Admin;
    let at = (ns, name);
    let joining = Joining::of(&m, &label);
    let new = new_variant.as_ref();
    let check = |r: &Registry| {
        room_for(r, &id, at, max, admin)?;
        joining.check(caller, at, &label, new.is_some(), r)
    };
    // Checked first on this replica's cache, so that an enrollment refused there costs the API
    // server nothing (the enrollment key is shared by every board not enrolled yet); the
    // registry's edit checks again on the Secret as the API server has it, as it writes. Neither
    // the registry nor the Mutation is held after: each lists up to `maxDevices` devices, and
    // while a fleet powers up, hundreds of enrollments wait on the API server at once.
    cached_registry(&state.caches, &m, check)?;
    drop(m);
    if let Some(variant) = new {
        // Its variant is made before the device is written: checked on the Secret as the API
        // server has it first, so that a refused enrollment makes none.
        check(&read_registry(state, &owner).await?)?;
        variants::insert(state, caller, ns, name, variant.clone()).await?;
    }
    let made = new.is_some();
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
        // A board that joins a variant: who may join it is checked on the registry written.
        let joined = (!made && !admin)
            .then(|| joining.existing.clone())
            .flatten();
        let access = joining.access.clone();
        move |r: &mut Registry| {
            room_for(r, &id, (&ns, &name), max, admin)?;
            if let Some(v) = &joined {
                let made_by_another = r.made.contains(&label);
                may_join(access.as_deref(), v, made_by_another).map_err(ApiError::forbidden)?;
            }
            r.devices.insert(id.clone(), record.clone());
            if made {
                r.made.insert(label.clone());
            }
            Ok(())
        }
    };
    let written = edit_registry(state, &owner, max, enrolled).await;
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
    done.listed_and_answered(state, caller, at, joining.service)
        .await
}

/// What an enrollment needs of its Mutation once it has read it: the variant it joins, if
/// that exists, who may join it, and that variant's Service as it was.
struct Joining {
    existing: Option<Variant>,
    access: Option<Box<DeviceAccess>>,
    service: Option<VariantService>,
}

impl Joining {
    fn of(m: &Mutation, label: &str) -> Self {
        Joining {
            existing: m.spec.variants.iter().find(|v| v.label == label).cloned(),
            access: m.spec.device_access.clone(),
            service: service_of(m, label).cloned(),
        }
    }

    /// Whether the board may make its own variant `label` (`new`; the checks of an added
    /// variant follow when it is made) or join the existing one, by what registry `r` says
    /// was made by enrollment: 409 for a new variant whose label is taken, 404 for a label that
    /// is not there, 403 when the enrollment key asks to join a variant its owner has not
    /// opened to enrollment (`enrollable: true`, or a `spec.deviceAccess.labelPattern` its
    /// label matches, the latter only for a variant no board's enrollment `made`). A board that
    /// joins a variant reads and polls it, and never changes it (`rights::device_may_change`).
    fn check(
        &self,
        caller: &Caller,
        (ns, name): (&str, &str),
        label: &str,
        new: bool,
        r: &Registry,
    ) -> Result<(), ApiError> {
        match (new, self.existing.as_ref()) {
            (true, Some(_)) => Err(ApiError::conflict(format!(
                "variant {label:?} already exists in mutation {ns}/{name}: enroll into it with \
                 {{\"id\": ..., \"label\": {label:?}}}, which does not change it"
            ))),
            (false, None) => Err(ApiError::not_found(format!(
                "variant {label:?} not found in mutation {ns}/{name}"
            ))),
            (false, Some(v)) if *caller != Caller::Admin => {
                may_join(self.access.as_deref(), v, r.made.contains(label))
                    .map_err(ApiError::forbidden)
            }
            (true, None) | (false, Some(_)) => Ok(()),
        }
    }
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
        (ns, name): (&str, &str),
        service_before: Option<VariantService>,
    ) -> ApiResult {
        let Enrolled {
            id,
            label,
            token,
            record,
            now,
        } = self;
        let entry = record.entry(id);
        // The token is in the Secret: a failed status write is the leader's to make good.
        let add = move |list: &[DeviceStatus]| {
            let mut list = list.to_vec();
            list.retain(|d| d.id != entry.id);
            list.push(entry.clone());
            list
        };
        let listed = relist(
            state,
            ns,
            name,
            id,
            "list the enrolled device in status",
            add,
        );
        // The token exists nowhere but in this answer now: a board that does not get it can
        // only enroll again under another id (its own is taken). So listing it in status, a
        // write behind the other writes of a busy Mutation, waits only while the request's
        // deadline leaves the answer its time (R34). An edit not sent by then is dropped, and
        // the leader lists the device from the Secret, as after a failed write (R40).
        let by = crate::http::overdue::until(tokio::time::Instant::now() + state.deadline);
        if tokio::time::timeout_at(by, listed).await.is_err() {
            tracing::info!(namespace = ns, name, device = %id, "enrolled a device before its status listed it: answering with its token first");
        }
        state
            .heartbeats
            .heard(ns, name, id, now, &Default::default());
        let hash = token_hash(token);
        wait_registry(state, ns, name, |r| {
            r.devices.get(id).is_some_and(|d| d.hash == hash)
        })
        .await;
        tracing::info!(namespace = ns, name, device = %id, variant = %label, "enrolled a device");
        // The variant's Service as the cache has it now (a variant just made has none
        // before), else as it was.
        let m = fresh::cached_mutation(state, caller, ns, name).ok();
        let service = (m.as_deref().and_then(|m| service_of(m, label))).or(service_before.as_ref());
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

/// Whether `r` has room for device `id`: not enrolled yet, and fewer than `max` devices. The
/// store holds the devices Secret to `max` on every write; this checks a registry before
/// anything is written, so that a refused enrollment costs nothing. The enrollment key gets
/// one answer for both (409, naming both): told apart, a full Mutation would say which ids
/// are enrolled (R39); the admin is told which.
fn room_for(
    r: &Registry,
    id: &str,
    at: (&str, &str),
    max: usize,
    admin: bool,
) -> Result<(), ApiError> {
    let (ns, name) = at;
    let taken = r.devices.contains_key(id);
    let full = r.devices.len() >= max;
    match (taken || full, admin) {
        (false, _) => Ok(()),
        (true, true) if taken => not_enrolled(r, id, ns, name),
        (true, true) => Err(ApiError::forbidden(format!(
            "mutation {ns}/{name} has {} devices, its maxDevices: no more enroll",
            r.devices.len()
        ))),
        (true, false) => Err(ApiError::conflict(format!(
            "device {id:?} cannot enroll in mutation {ns}/{name}: its id is enrolled already, \
             or the Mutation has its maxDevices devices (the two are not told apart)"
        ))),
    }
}

/// 409 when device `id` is enrolled in `r` already.
fn not_enrolled(r: &Registry, id: &str, ns: &str, name: &str) -> Result<(), ApiError> {
    if r.devices.contains_key(id) {
        return Err(ApiError::conflict(format!(
            "device {id:?} is already enrolled in mutation {ns}/{name}"
        )));
    }
    Ok(())
}
