//! Liveness (R40): every request of a device is a heartbeat. This replica keeps it in memory
//! (`heartbeats`) and has the store write the device's status entry only when it must: the
//! store batches the entries of one Mutation that are due together into one write.

use std::{borrow::Cow, sync::Arc};

use hyper::{HeaderMap, StatusCode};
use k8s_openapi::jiff::Timestamp;

use super::{
    auth::Caller,
    error::ApiError,
    heartbeats::{Beat, reported},
    registry::{cached_record, listed},
    state::ApiState,
};
use crate::{
    crd::{DeviceStatus, Mutation, Reported, VariantStatus},
    store::HEARTBEAT_GATHER,
    variant::{
        devices::{Policy, changes, heard, must_persist},
        parsed::Parsed,
        sleep::{PollSeen, poll_must_persist, poll_refresh, polled, retry_after},
    },
};

/// A heartbeat to be written: what the device's entry becomes, and when it must be.
#[derive(Clone, Debug)]
struct Due<'a> {
    id: Cow<'a, str>,
    variant: Cow<'a, str>,
    now: Timestamp,
    reported: Reported,
    /// A poll of a Mutation whose variants sleep: what it teaches of the device's polls, and
    /// how often a poll is written anyway.
    poll: Option<(PollSeen, std::time::Duration)>,
    /// Whether a poll wakes its variant: not with `spec.screen`, whose refresh does (R53).
    polls_wake: bool,
}

impl Due<'_> {
    /// Whether the entry `entry` (None: not listed), with its variant's status `variant`, must
    /// be written for this heartbeat.
    fn must_write(
        &self,
        entry: Option<&DeviceStatus>,
        variant: Option<&VariantStatus>,
        policy: &Policy,
    ) -> bool {
        match &self.poll {
            Some((stats, refresh)) => {
                poll_must_persist(entry, variant, stats, self.now, *refresh, self.polls_wake)
                    || must_persist(entry, self.now, policy, &self.reported)
            }
            None => must_persist(entry, self.now, policy, &self.reported),
        }
    }

    /// `list` with this heartbeat written into it, or `None` when nothing must be; `fallback`
    /// is the device's entry for a list that does not have it yet.
    fn apply(
        &self,
        m: &Mutation,
        policy: &Policy,
        fallback: &DeviceStatus,
    ) -> Option<Vec<DeviceStatus>> {
        let mut list = listed(m).to_vec();
        let at = list.iter().position(|e| e.id == self.id);
        let variant = variant_status(m, &self.variant);
        if !self.must_write(at.map(|i| &list[i]), variant, policy) {
            return None;
        }
        let entry = at.map_or(fallback, |i| &list[i]);
        let mut updated = heard(entry, self.now, &self.reported);
        if let Some((stats, _)) = &self.poll {
            updated.poll = Some(stats.written());
        }
        match at {
            Some(i) => list[i] = updated,
            None => list.push(updated),
        }
        Some(list)
    }
}

/// The status of variant `label` of `m`.
fn variant_status<'a>(m: &'a Mutation, label: &str) -> Option<&'a VariantStatus> {
    m.status
        .as_ref()?
        .variants
        .iter()
        .find(|v| v.label == label)
}

/// What a device's heartbeat found that its poll answers with (R42), so that the poll does
/// not look it up again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Heard {
    /// The refresh rate the device last reported (`Refresh-Rate`), this request's or before.
    pub refresh_rate: Option<u32>,
    /// With `spec.devices.sleep`, what `retry_after` said (None: not asked).
    pub retry_after: Option<Option<u64>>,
}

/// A request of a device (R40): a heartbeat, with what its headers report (400 naming a
/// malformed one). Kept in memory; the status entry is written only when [`must_persist`]
/// says so and this replica has not written it within `persistEvery`, by the store, which the
/// device does not wait for. A failed write fails nothing: the next request tries again.
///
/// A poll (`poll`) of a Mutation whose variants sleep (R42) teaches when the device comes
/// back (its statistics are kept in memory from poll to poll) and wakes its variant: it is
/// written when [`poll_must_persist`] says the leader's decision needs it, not at every poll.
pub fn heard_from(
    state: &Arc<ApiState>,
    caller: &Caller,
    m: Option<(&Mutation, &Parsed)>,
    headers: &HeaderMap,
    poll: bool,
) -> Result<Heard, ApiError> {
    let Caller::Device {
        namespace: ns,
        name,
        id,
        variant,
        ..
    } = caller
    else {
        return Ok(Heard::default());
    };
    let reported = reported(headers).map_err(ApiError::bad_request)?;
    let now = Timestamp::now();
    let sleep = m.and_then(|(_, parsed)| parsed.sleep()).filter(|_| poll);
    let waiting = m
        .zip(sleep)
        .map(|((m, _), sleep)| retry_after(m, Some(sleep), variant, now));
    let persisted = m.and_then(|(m, _)| listed(m).iter().find(|d| d.id == *id));
    // One look-up of the device's beat: heard, and with sleep what this poll taught, from the
    // statistics this replica kept (else the written ones).
    let mut taught = None;
    let Beat {
        reported: known, ..
    } = if sleep.is_some() {
        state
            .heartbeats
            .heard_polled(ns, name, id, now, &reported, |remembered, refresh_rate| {
                let retry_at = waiting.flatten().and_then(|s| {
                    Timestamp::from_second(now.as_second() + i64::try_from(s).ok()?).ok()
                });
                let previous =
                    remembered.or_else(|| persisted.and_then(|d| PollSeen::read(d.poll.as_ref()?)));
                let stats = polled(previous.as_ref(), now, refresh_rate, retry_at);
                taught = Some(stats);
                stats
            })
    } else {
        state.heartbeats.heard(ns, name, id, now, &reported)
    };
    let heard = Heard {
        refresh_rate: known.refresh_rate,
        retry_after: waiting,
    };
    let Some((m, parsed)) = m else {
        return Ok(heard);
    };
    let Some(policy) = parsed.devices() else {
        return Ok(heard);
    };
    let poll = sleep
        .zip(taught)
        .map(|(sleep, stats)| (stats, poll_refresh(sleep.keep_warm, policy.persist_every)));
    // The device's record in the devices Secret was found by its authentication, from the
    // same cache: it is read again only on the write path, which must see a removal.
    let due = Due {
        id: Cow::Borrowed(id),
        variant: Cow::Borrowed(variant),
        now,
        reported: known,
        poll,
        polls_wake: m.spec.screen.is_none(),
    };
    if !due.must_write(persisted, variant_status(m, variant), policy) {
        return Ok(heard);
    }
    let writes_now = due.poll.is_some() && poll_must_persist_now(&due, persisted, m);
    // A poll is written again after its own refresh period (shorter than persistEvery when
    // keepWarm is short), so that the written poll keeps its variant up.
    let every = due.poll.as_ref().map_or(policy.persist_every, |(_, r)| *r);
    if !writes_now && !state.heartbeats.claim_write(ns, name, id, now, every) {
        return Ok(heard);
    }
    // A refresh of the last-seen time alone waits longer for the others of its Mutation.
    let gather = match persisted {
        Some(entry) if due.poll.is_none() && !changes(entry, &due.reported) => {
            policy.refresh_gather()
        }
        _ => HEARTBEAT_GATHER,
    };
    let due = Due {
        id: Cow::Owned(id.clone()),
        variant: Cow::Owned(variant.clone()),
        ..due
    };
    tokio::spawn(write(
        state.clone(),
        (ns.clone(), name.clone()),
        gather,
        due,
    ));
    Ok(heard)
}

/// Whether a poll must be written now, whenever this replica last wrote the device (R42): it
/// wakes its variant, the entry has no poll yet, or it changes when the leader expects the
/// device (another interval, another time to come back). A poll only newer than the written
/// one waits for its refresh period.
fn poll_must_persist_now(due: &Due, persisted: Option<&DeviceStatus>, m: &Mutation) -> bool {
    let Some((stats, _)) = &due.poll else {
        return false;
    };
    poll_must_persist(
        persisted,
        variant_status(m, &due.variant),
        stats,
        due.now,
        std::time::Duration::MAX,
        due.polls_wake,
    )
}

/// Has the store write heartbeat `due` of Mutation `ns/name`, with the other entries of the
/// Mutation due at the time; whether it must be written is asked again of the Mutation as the
/// store read it, so heartbeats of one device that arrive together are written once.
async fn write(
    state: Arc<ApiState>,
    (ns, name): (String, String),
    gather: std::time::Duration,
    due: Due<'static>,
) {
    let id = due.id.clone();
    let caches = state.caches.clone();
    let at = (ns.as_str(), name.as_str());
    let edit = state
        .store
        .note_devices(at, state.deadline, gather, move |m| {
            let parsed = caches.parsed(m);
            let Some(policy) = parsed.devices() else {
                return Ok(listed(m).to_vec());
            };
            // A device removed meanwhile is not listed again by its last request.
            let Some(record) = cached_record(&caches, m, &due.id) else {
                return Ok(listed(m).to_vec());
            };
            let fallback = record.entry(&due.id);
            Ok(due
                .apply(m, policy, &fallback)
                .unwrap_or_else(|| listed(m).to_vec()))
        });
    match edit.await {
        Ok(_) => {}
        Err(err) if err.0 == StatusCode::NOT_FOUND => {}
        Err(err) => {
            state.heartbeats.unclaim(&ns, &name, &id);
            tracing::warn!(namespace = %ns, name = %name, device = %id, error = %err.1, "could not write a heartbeat");
        }
    }
}
