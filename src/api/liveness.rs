//! Liveness (R40): every request of a device is a heartbeat. This replica keeps it in memory
//! (`heartbeats`) and writes the device's status entry only when it must, through one writer
//! per Mutation that takes what is due in batches.

use std::sync::Arc;

use hyper::HeaderMap;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::ObjectRef;

use super::{
    auth::Caller,
    error::ApiError,
    heartbeats::{Beat, Due, reported},
    registry::{cached_registry, listed},
    state::ApiState,
};
use crate::{
    submit::devices::write as write_devices,
    variant::{
        devices::{Policy, heard, must_persist},
        sleep::{polled, retry_after},
    },
};

/// Whether Mutation `m`'s variants sleep: `spec.devices.sleep` set and valid.
pub fn sleeps(m: &crate::crd::Mutation) -> bool {
    m.spec
        .devices
        .as_ref()
        .and_then(|d| d.sleep.as_ref())
        .is_some_and(|s| crate::variant::sleep::SleepPolicy::of(s).is_ok())
}

/// A request of a device (R40): a heartbeat, with what its headers report (400 naming a
/// malformed one). Kept in memory; the status entry is written only when [`must_persist`]
/// says so and this replica has not written it within `persistEvery`, by the one writer of the
/// Mutation's heartbeats ([`write_due`]), which the device does not wait for. A failed write
/// fails nothing: the next request tries again.
///
/// A poll (`poll`) of a Mutation whose variants sleep (R42) is written every time, at once:
/// it is what wakes its variant and what teaches when the device comes back.
pub fn heard_from(
    state: &Arc<ApiState>,
    caller: &Caller,
    headers: &HeaderMap,
    poll: bool,
) -> Result<(), ApiError> {
    let Caller::Device {
        namespace: ns,
        name,
        id,
        variant,
        ..
    } = caller
    else {
        return Ok(());
    };
    let reported = reported(headers).map_err(ApiError::bad_request)?;
    let now = Timestamp::now();
    let Beat {
        reported: known, ..
    } = state.heartbeats.heard(ns, name, id, now, &reported);
    let Some(m) = state.caches.mutations.get(&ObjectRef::new(name).within(ns)) else {
        return Ok(());
    };
    let Some(Ok(policy)) = m.spec.devices.as_deref().map(Policy::of) else {
        return Ok(());
    };
    let persisted = listed(&m).iter().find(|d| d.id == *id);
    let poll = poll && sleeps(&m);
    if !poll {
        if !must_persist(persisted, now, &policy, &known) {
            return Ok(());
        }
        if !state
            .heartbeats
            .claim_write(ns, name, id, now, policy.persist_every)
        {
            return Ok(());
        }
    }
    let registry = cached_registry(&state.caches, &m);
    let Some(record) = registry.devices.get(id.as_str()) else {
        return Ok(());
    };
    let due = Due {
        id: id.clone(),
        now,
        reported: known,
        fallback: record.entry(id),
        poll,
        retry_at: poll
            .then(|| retry_after(&m, variant, now))
            .flatten()
            .and_then(|s| Timestamp::from_second(now.as_second() + i64::try_from(s).ok()?).ok()),
    };
    if state.heartbeats.queue(ns, name, due) {
        tokio::spawn(write_due(state.clone(), ns.clone(), name.clone()));
    }
    Ok(())
}

/// The writer of Mutation `ns/name`'s heartbeats: writes what is due, in batches, until
/// nothing is.
async fn write_due(state: Arc<ApiState>, ns: String, name: String) {
    loop {
        let due = state.heartbeats.take_due(&ns, &name);
        if due.is_empty() {
            return;
        }
        let result = write_devices(&state.client, &ns, &name, |m| {
            let policy = Policy::of(m.spec.devices.as_ref()?).ok()?;
            let registry = cached_registry(&state.caches, m);
            let mut list = listed(m).to_vec();
            let mut changed = false;
            for d in &due {
                let at = list.iter().position(|e| e.id == d.id);
                // A device removed meanwhile is not listed again by its last request.
                if !registry.devices.contains_key(&d.id) {
                    continue;
                }
                let entry = at.map_or(&d.fallback, |i| &list[i]);
                if !d.poll
                    && at.is_some()
                    && !must_persist(Some(entry), d.now, &policy, &d.reported)
                {
                    continue;
                }
                let mut updated = heard(entry, d.now, &d.reported);
                if d.poll {
                    let stats = polled(
                        entry.poll.as_ref(),
                        d.now,
                        d.reported.refresh_rate,
                        d.retry_at,
                    );
                    updated.poll = Some(stats);
                }
                match at {
                    Some(i) => list[i] = updated,
                    None => list.push(updated),
                }
                changed = true;
            }
            changed.then_some(list)
        })
        .await;
        if let Err(err) = result {
            for d in &due {
                state.heartbeats.unclaim(&ns, &name, &d.id);
            }
            tracing::warn!(namespace = %ns, name = %name, devices = due.len(), error = %err, "could not write heartbeats");
        }
    }
}
