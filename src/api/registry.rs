//! A Mutation's devices Secret `<name>-devices` (R39) as the device routes use it: its registry
//! in this replica's cache, waiting for the cache to show a change, and read-modify-write of
//! the Secret on the API server, on its resourceVersion; and the device list of the status.

use std::time::Duration;

use hyper::StatusCode;
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api,
    api::{ObjectMeta, PostParams},
    runtime::reflector::ObjectRef,
};

use super::{batch::MAX_ATTEMPTS, error::ApiError, state::ApiState};
use crate::{
    cache::{CacheState, Caches},
    controller::secret::owned_metadata,
    crd::{DeviceStatus, Mutation},
    variant::{
        Owner,
        devices::{Registry, devices_secret_name},
        is_controlled_by,
    },
};

/// How long a write waits for this replica's cache to show it.
pub(super) const CACHE_CATCH_UP: Duration = Duration::from_secs(3);

/// The devices listed in `m`'s status.
pub(super) fn listed(m: &Mutation) -> &[DeviceStatus] {
    m.status.as_ref().map_or(&[][..], |s| &s.devices[..])
}

/// The registry of `m`'s devices Secret in this replica's cache (empty when there is none, or
/// it is not `m`'s).
pub(super) fn cached_registry(caches: &Caches, m: &Mutation) -> Registry {
    let (Some(ns), Some(name), Some(uid)) = (
        m.metadata.namespace.as_deref(),
        m.metadata.name.as_deref(),
        m.metadata.uid.as_deref(),
    ) else {
        return Registry::default();
    };
    caches
        .secrets
        .get(&ObjectRef::new(&devices_secret_name(name)).within(ns))
        .filter(|s| is_controlled_by(&s.metadata, uid))
        .and_then(|s| s.devices.as_deref().cloned())
        .unwrap_or_default()
}

/// Waits (a few seconds at most) until this replica's cache of Mutation `ns/name`'s devices
/// Secret satisfies `done`.
pub(super) async fn wait_registry<F: Fn(&Registry) -> bool>(
    state: &ApiState,
    ns: &str,
    name: &str,
    done: F,
) {
    let key = ObjectRef::new(&devices_secret_name(name)).within(ns);
    let deadline = crate::http::overdue::until(tokio::time::Instant::now() + CACHE_CATCH_UP);
    let _ = state
        .caches
        .until(Some(deadline), |caches: &Caches, _: &CacheState| {
            let registry = caches
                .secrets
                .get(&key)
                .and_then(|s| s.devices.as_deref().cloned())
                .unwrap_or_default();
            done(&registry).then_some(())
        })
        .await;
}

/// The devices Secret of `owner`, read from the API server, and its registry. A Secret of
/// that name that the Mutation does not control is refused (409), never read further.
pub(super) async fn read_registry(state: &ApiState, owner: &Owner) -> Result<Registry, ApiError> {
    Ok(read_secret(state, owner).await?.1)
}

pub(super) async fn read_secret(
    state: &ApiState,
    owner: &Owner,
) -> Result<(Option<Secret>, Registry), ApiError> {
    let api: Api<Secret> = Api::namespaced(state.client.clone(), &owner.namespace);
    let name = devices_secret_name(&owner.name);
    let Some(secret) = api.get_opt(&name).await? else {
        return Ok((None, Registry::default()));
    };
    if !is_controlled_by(&secret.metadata, &owner.uid) {
        return Err(ApiError::conflict(format!(
            "Secret {name:?} exists and is not owned by mutation {}/{}: devices cannot \
             enroll until it is deleted",
            owner.namespace, owner.name
        )));
    }
    let registry = Registry::from_data(secret.data.as_ref().unwrap_or(&Default::default()));
    Ok((Some(secret), registry))
}

/// Read-modify-write of the devices Secret: `change` edits the registry read from the API
/// server (or refuses), and the Secret is written with the resourceVersion it was read at
/// (created when missing); a conflict reads again. Returns the registry before and after.
pub(super) async fn edit_registry<F>(
    state: &ApiState,
    owner: &Owner,
    change: F,
) -> Result<(Registry, Registry), ApiError>
where
    F: Fn(&mut Registry) -> Result<(), ApiError>,
{
    let api: Api<Secret> = Api::namespaced(state.client.clone(), &owner.namespace);
    let name = devices_secret_name(&owner.name);
    let params = PostParams {
        field_manager: Some("mutantops-api".into()),
        ..PostParams::default()
    };
    for attempt in 1..=MAX_ATTEMPTS {
        let (existing, before) = read_secret(state, owner).await?;
        let mut after = before.clone();
        change(&mut after)?;
        let data = Some(after.to_data());
        let result = match existing {
            Some(mut secret) => {
                secret.data = data;
                secret.string_data = None;
                crate::http::overdue::write(api.replace(&name, &params, &secret)).await
            }
            None => {
                let secret = Secret {
                    metadata: ObjectMeta {
                        annotations: Some(
                            [(
                                "mutantops.neiam.org/contents".to_owned(),
                                "SHA-256 hashes of device tokens; no token".to_owned(),
                            )]
                            .into(),
                        ),
                        ..owned_metadata(owner, &name)
                    },
                    type_: Some("Opaque".to_owned()),
                    data,
                    ..Secret::default()
                };
                crate::http::overdue::write(api.create(&params, &secret)).await
            }
        };
        match result {
            Ok(_) => return Ok((before, after)),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                tracing::debug!(namespace = %owner.namespace, secret = %name, attempt, "devices Secret changed meanwhile; retrying");
                tokio::time::sleep(Duration::from_millis(2 * attempt as u64)).await;
            }
            Err(err) => return Err(err.into()),
        }
    }
    Err(ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("Secret {name:?} kept changing: gave up after {MAX_ATTEMPTS} attempts; try again"),
    ))
}
