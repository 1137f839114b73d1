//! The devices of a Mutation with `spec.devices`, as the leader sees them (R40): every device of
//! its devices Secret listed in `status.devices`, each in the state that time has made it
//! (Online, Late, Gone, from its last-seen time as written), and the reconcile requeued for
//! the next change of state. Heartbeats are written by the replica that hears them
//! (`api::heartbeats`); this step writes only what time alone changes, and only when it does.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::ObjectRef;

use super::context::Context;
use crate::{
    Result,
    crd::OwnerStatus,
    variant::{
        Owner,
        devices::{Policy, Registry, devices_secret_name, next_change, summary, sync},
        is_controlled_by,
    },
};

/// The devices of the owner's devices Secret, from the cache; none when the Secret is missing
/// or not the owner's.
pub fn registry(ctx: &Context, owner: &Owner) -> Registry {
    let key = ObjectRef::new(&devices_secret_name(&owner.name)).within(&owner.namespace);
    ctx.secrets
        .as_ref()
        .and_then(|store| store.get(&key))
        .filter(|s| is_controlled_by(&s.metadata, &owner.uid))
        .and_then(|s| s.devices.as_deref().cloned())
        .unwrap_or_default()
}

/// Brings `status.devices` in line with the registry and the clock, writing only when it
/// differs from `listed` (the status as cached). Returns how long until a device changes
/// state by time alone.
pub async fn converge(
    ctx: &Context,
    owner: &Owner,
    policy: &Policy,
    previous: &OwnerStatus,
) -> Result<Option<Duration>> {
    let registry = registry(ctx, owner);
    let now = Timestamp::now();
    let listed = &previous.devices[..];
    let wanted = sync(listed, &registry, now, policy);
    let mut wait = next_change(&wanted, now, policy);
    if wanted != listed || previous.device_summary.as_deref() != Some(&summary(&wanted)) {
        let owned = policy.clone();
        let written = ctx.edit_devices(owner, move |m| {
            let current = m.status.as_ref().map_or(&[][..], |s| &s.devices[..]);
            Ok(sync(current, &registry, Timestamp::now(), &owned))
        });
        if let Some(m) = written.await? {
            let devices = m.status.as_ref().map_or(&[][..], |s| &s.devices[..]);
            wait = next_change(devices, Timestamp::now(), policy);
            tracing::debug!(namespace = %owner.namespace, name = %owner.name, devices = devices.len(), "wrote the device list");
        }
    }
    Ok(wait)
}
