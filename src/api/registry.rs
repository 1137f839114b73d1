//! A Mutation's devices Secret `<name>-devices` (R39) as the device routes use it: its registry
//! in this replica's cache, waiting for the cache to show a change, and read-modify-write of
//! the Secret on the API server, on its resourceVersion; and the device list of the status.

use std::{sync::Arc, time::Duration};

use kube::runtime::reflector::ObjectRef;

use super::{error::ApiError, state::ApiState};
use crate::{
    cache::{CacheState, Caches},
    crd::{DeviceStatus, Mutation},
    variant::{
        CachedSecret, Owner,
        devices::{DeviceRecord, Registry, devices_secret_name},
        is_controlled_by, rights,
    },
};

/// How long a write waits for this replica's cache to show it.
pub(super) const CACHE_CATCH_UP: Duration = Duration::from_secs(3);

/// The devices listed in `m`'s status.
pub(super) fn listed(m: &Mutation) -> &[DeviceStatus] {
    m.status.as_ref().map_or(&[][..], |s| &s.devices[..])
}

/// `read` of the registry of `m`'s devices Secret in this replica's cache (of an empty one
/// when there is none, or it is not `m`'s), where it is cached: a registry lists up to
/// `maxDevices` devices, and a request needs a look at it, not a copy.
pub(super) fn cached_registry<T>(
    caches: &Caches,
    m: &Mutation,
    read: impl FnOnce(&Registry) -> T,
) -> T {
    let secret = cached_secret(caches, m);
    match secret.as_ref().and_then(|s| s.devices.as_deref()) {
        Some(registry) => read(registry),
        None => read(&Registry::default()),
    }
}

/// Device `id`'s record in the registry of `m`'s devices Secret in this replica's cache: one
/// record, without a copy of the whole registry (a heartbeat needs no more).
pub(super) fn cached_record(caches: &Caches, m: &Mutation, id: &str) -> Option<DeviceRecord> {
    cached_devices(caches, m, |r| r.devices.get(id).cloned()).flatten()
}

/// Whether device `id` may change variant `label` of `m` (R39), as the registry of `m`'s
/// devices Secret in this replica's cache has it: the one read of the registry a device's
/// change adds, on its write path (its authentication found only its record).
pub(super) fn device_may_change(
    caches: &Caches,
    m: &Mutation,
    id: &str,
    label: &str,
) -> Result<(), String> {
    cached_devices(caches, m, |r| rights::device_may_change(r, id, label))
        .unwrap_or_else(|| rights::device_may_change(&Registry::default(), id, label))
}

/// `read` of the registry of `m`'s devices Secret in this replica's cache, when there is one
/// and it is `m`'s.
fn cached_devices<T>(
    caches: &Caches,
    m: &Mutation,
    read: impl FnOnce(&Registry) -> T,
) -> Option<T> {
    cached_secret(caches, m)?.devices.as_deref().map(read)
}

/// `m`'s devices Secret in this replica's cache, when it is `m`'s.
fn cached_secret(caches: &Caches, m: &Mutation) -> Option<Arc<CachedSecret>> {
    let (ns, name, uid) = (
        m.metadata.namespace.as_deref()?,
        m.metadata.name.as_deref()?,
        m.metadata.uid.as_deref()?,
    );
    caches
        .secrets
        .get(&ObjectRef::new(&devices_secret_name(name)).within(ns))
        .filter(|s| is_controlled_by(&s.metadata, uid))
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
            // Read where it is cached: a copy per waiting request and cache change was a
            // registry of up to `maxDevices` devices each time.
            let secret = caches.secrets.get(&key);
            match secret.as_ref().and_then(|s| s.devices.as_deref()) {
                Some(registry) => done(registry),
                None => done(&Registry::default()),
            }
            .then_some(())
        })
        .await;
}

/// The devices Secret of `owner`, read from the API server, and its registry. A Secret of
/// that name that the Mutation does not control is refused (409), never read further.
pub(super) async fn read_registry(state: &ApiState, owner: &Owner) -> Result<Registry, ApiError> {
    state.store.read_registry(owner).await
}

/// Read-modify-write of the devices Secret by the store, together with the other edits of it
/// waiting at the time: `change` edits the registry read from the API server (as the edits
/// before it left it), or refuses, and the Secret is written with the resourceVersion it was
/// read at (created when missing); a conflict reads again; an edit that would hold more than
/// `max_devices` devices is refused (403). Bounded by the request's deadline.
pub(super) async fn edit_registry<F>(
    state: &ApiState,
    owner: &Owner,
    max_devices: usize,
    change: F,
) -> Result<(), ApiError>
where
    F: Fn(&mut Registry) -> Result<(), ApiError> + Send + Sync + 'static,
{
    state
        .store
        .edit_registry(owner, max_devices, state.deadline, change)
        .await?;
    Ok(())
}
