//! Devices, pure (R39, R40): the policy a Mutation's `spec.devices` gives ([`Policy`]),
//! device ids, and the states and writes of liveness ([`state_at`], [`sync`],
//! [`must_persist`]). No I/O. The registry of Secret `<name>-devices` is `registry`'s, and
//! re-exported here for the callers that see a device whole.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use k8s_openapi::jiff::Timestamp;

pub use super::registry::{
    DeviceRecord, Registry, constant_time_eq, devices_secret_name, token_hash,
};

use crate::crd::{
    DeviceState, DeviceStatus, DeviceSummary, DevicesSpec, Enrollment, Reported,
    devices::{
        DEFAULT_GONE_AFTER, DEFAULT_LATE_AFTER, DEFAULT_MAX_DEVICES, DEFAULT_PERSIST_EVERY,
        MAX_DEVICES,
    },
};

/// The shortest duration `spec.devices` accepts: short enough for tests to use seconds.
pub const MIN_DURATION: Duration = Duration::from_secs(1);
/// The longest: a year.
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);
/// The longest a refresh of a last-seen time waits for the others of its Mutation
/// ([`Policy::refresh_gather`]).
pub const REFRESH_GATHER_MAX: Duration = Duration::from_secs(300);
/// Longest device id.
pub const MAX_DEVICE_ID: usize = 63;

/// Reads a duration as Kubernetes writes one: whole numbers of `h`, `m` and `s`, in any
/// order, e.g. `90s`, `45m`, `1h30m`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || {
        format!(
            "duration {text:?}: must be whole hours, minutes and seconds such as 90s, 45m, 24h or 1h30m"
        )
    };
    if text.is_empty() || text.len() > 32 {
        return Err(bad());
    }
    let mut total: u64 = 0;
    let mut number: Option<u64> = None;
    for c in text.chars() {
        match c {
            '0'..='9' => {
                let digit = u64::from(c as u8 - b'0');
                number = Some(
                    number
                        .unwrap_or(0)
                        .checked_mul(10)
                        .and_then(|n| n.checked_add(digit))
                        .ok_or_else(bad)?,
                );
            }
            'h' | 'm' | 's' => {
                let unit = match c {
                    'h' => 3600,
                    'm' => 60,
                    _ => 1,
                };
                let n = number.take().ok_or_else(bad)?;
                total = n
                    .checked_mul(unit)
                    .and_then(|s| total.checked_add(s))
                    .ok_or_else(bad)?;
            }
            _ => return Err(bad()),
        }
    }
    if number.is_some() {
        return Err(bad());
    }
    Ok(Duration::from_secs(total))
}

/// What a Mutation's `spec.devices` says, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Whether the Mutation's token may enroll (before `open_until`).
    pub open: bool,
    /// When an open enrollment closes.
    pub open_until: Option<Timestamp>,
    /// Most devices.
    pub max_devices: usize,
    /// Silent this long: Late.
    pub late_after: Duration,
    /// Silent this long: Gone.
    pub gone_after: Duration,
    /// A device's last-seen time is written when the written one is this old.
    pub persist_every: Duration,
    /// The ids the Mutation's token may enroll; `None`: any.
    pub ids: Option<BTreeSet<String>>,
}

impl Policy {
    /// Checks `spec.devices`: durations within bounds and in order (persistEvery < lateAfter <
    /// goneAfter), `openUntil` a time, `maxDevices` within 1..=500.
    pub fn of(spec: &DevicesSpec) -> Result<Policy, String> {
        let duration = |field: &str, value: &Option<String>, default: &str| {
            let text = value.as_deref().unwrap_or(default);
            let d = parse_duration(text).map_err(|e| format!("spec.devices.{field}: {e}"))?;
            if !(MIN_DURATION..=MAX_DURATION).contains(&d) {
                return Err(format!(
                    "spec.devices.{field}: {text} is out of range: from 1s to 8784h"
                ));
            }
            Ok(d)
        };
        let late_after = duration("lateAfter", &spec.late_after, DEFAULT_LATE_AFTER)?;
        let gone_after = duration("goneAfter", &spec.gone_after, DEFAULT_GONE_AFTER)?;
        let persist_every = duration("persistEvery", &spec.persist_every, DEFAULT_PERSIST_EVERY)?;
        if gone_after <= late_after {
            return Err(format!(
                "spec.devices.goneAfter ({}s) must be longer than lateAfter ({}s)",
                gone_after.as_secs(),
                late_after.as_secs()
            ));
        }
        if persist_every >= late_after {
            return Err(format!(
                "spec.devices.persistEvery ({}s) must be shorter than lateAfter ({}s): a device \
                 that keeps calling would be reported Late between two writes",
                persist_every.as_secs(),
                late_after.as_secs()
            ));
        }
        let max = spec.max_devices.unwrap_or(DEFAULT_MAX_DEVICES);
        if !(1..=MAX_DEVICES).contains(&max) {
            return Err(format!(
                "spec.devices.maxDevices {max}: from 1 to {MAX_DEVICES}"
            ));
        }
        let open_until = match spec.open_until.as_deref() {
            None => None,
            Some(text) => Some(text.parse::<Timestamp>().map_err(|e| {
                format!("spec.devices.openUntil {text:?}: not an RFC 3339 time: {e}")
            })?),
        };
        let ids = match &spec.ids {
            None => None,
            Some(ids) if ids.len() > usize::try_from(MAX_DEVICES).unwrap_or(0) => {
                return Err(format!(
                    "spec.devices.ids: {} ids, at most {MAX_DEVICES}",
                    ids.len()
                ));
            }
            Some(ids) => {
                for id in ids {
                    validate_device_id(id).map_err(|e| format!("spec.devices.ids: {e}"))?;
                }
                Some(ids.iter().cloned().collect())
            }
        };
        Ok(Policy {
            open: spec.enrollment == Enrollment::Open,
            open_until,
            max_devices: usize::try_from(max).unwrap_or(0),
            late_after,
            gone_after,
            persist_every,
            ids,
        })
    }

    /// How long a refresh of a device's last-seen time (its entry written for its age alone)
    /// may wait to be written with the other refreshes of its Mutation (R40): a quarter of
    /// `persistEvery`, and at most half of what `lateAfter` leaves above it, so the written time
    /// never makes a device that keeps calling look late; at least 1 s, at most 5 minutes. A
    /// Mutation's refreshes then cost at most four writes of its list per `persistEvery`,
    /// however many devices it lists.
    pub fn refresh_gather(&self) -> Duration {
        let room = self.late_after.saturating_sub(self.persist_every) / 2;
        (self.persist_every / 4)
            .min(room)
            .clamp(MIN_DURATION, REFRESH_GATHER_MAX)
    }

    /// Whether the Mutation's token may enroll device `id` (R39): any id, or one of
    /// `spec.devices.ids` when the owner lists them; why not if not.
    pub fn may_enroll_id(&self, id: &str) -> Result<(), String> {
        match &self.ids {
            Some(ids) if !ids.contains(id) => Err(format!(
                "device id {id:?}: not in spec.devices.ids, the ids the owner lets the \
                 Mutation's token enroll (the admin token enrolls any)"
            )),
            _ => Ok(()),
        }
    }

    /// Whether the Mutation's token may enroll at `now`; why not if not.
    pub fn enrollment_open(&self, now: Timestamp) -> Result<(), String> {
        if !self.open {
            return Err(
                "enrollment is closed (spec.devices.enrollment: Closed): only the admin \
                        token enrolls devices"
                    .to_owned(),
            );
        }
        match self.open_until {
            Some(until) if now >= until => Err(format!(
                "enrollment closed at {until} (spec.devices.openUntil): only the admin token \
                 enrolls devices"
            )),
            _ => Ok(()),
        }
    }
}

/// Checks a device id: 1 to 63 letters, digits, '-', '_' and '.', starting and ending with a
/// letter or digit (it is part of a Secret's key and of the API's paths).
pub fn validate_device_id(id: &str) -> Result<(), String> {
    let b = id.as_bytes();
    let alnum = |c: &u8| c.is_ascii_alphanumeric();
    let ok = (1..=MAX_DEVICE_ID).contains(&b.len())
        && b.iter()
            .all(|c| alnum(c) || matches!(c, b'-' | b'_' | b'.'))
        && b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum);
    if ok {
        Ok(())
    } else {
        Err(format!(
            "device id {:?}: must be 1 to {MAX_DEVICE_ID} letters, digits, '-', '_' and '.', \
             starting and ending with a letter or digit",
            id.chars().take(80).collect::<String>()
        ))
    }
}

/// A device's state `since` its last-seen time, at `now`.
pub fn state_at(last_seen: Timestamp, now: Timestamp, policy: &Policy) -> DeviceState {
    let silent = silence(last_seen, now);
    if silent >= policy.gone_after {
        DeviceState::Gone
    } else if silent >= policy.late_after {
        DeviceState::Late
    } else {
        DeviceState::Online
    }
}

fn silence(last_seen: Timestamp, now: Timestamp) -> Duration {
    let seconds = now.as_second().saturating_sub(last_seen.as_second());
    Duration::from_secs(u64::try_from(seconds).unwrap_or(0))
}

pub use super::clock::rfc3339;

fn parse_time(text: &str) -> Option<Timestamp> {
    super::clock::parse_rfc3339(text)
}

/// How long a listed device that the registry does not show is kept: the registry (a cached
/// Secret) may lag behind a status written just after it.
pub const REGISTRY_GRACE: Duration = Duration::from_secs(60);

/// The device list the status should hold at `now`: one entry per device of the registry, by
/// id, keeping what was written of each (last seen, reported, polls) and its state as time
/// made it.
/// A device the status does not list yet was last seen when it enrolled; one the registry does
/// not show is dropped unless it enrolled within [`REGISTRY_GRACE`].
pub fn sync(
    current: &[DeviceStatus],
    registry: &Registry,
    now: Timestamp,
    policy: &Policy,
) -> Vec<DeviceStatus> {
    let known: BTreeMap<&str, &DeviceStatus> = current.iter().map(|d| (d.id.as_str(), d)).collect();
    let recent = |d: &DeviceStatus| {
        parse_time(&d.enrolled_at).is_some_and(|at| silence(at, now) < REGISTRY_GRACE)
    };
    let unregistered = current
        .iter()
        .filter(|d| !registry.devices.contains_key(&d.id) && recent(d))
        .map(|d| DeviceStatus {
            state: parse_time(&d.last_seen).map_or(d.state, |seen| state_at(seen, now, policy)),
            ..d.clone()
        });
    let mut devices: Vec<DeviceStatus> = registry
        .devices
        .iter()
        .map(|(id, record)| {
            let mut entry = record.entry(id);
            if let Some(d) = known.get(id.as_str()) {
                entry.last_seen.clone_from(&d.last_seen);
                entry.reported = d.reported.clone();
                entry.poll.clone_from(&d.poll);
            }
            entry.state = parse_time(&entry.last_seen)
                .map_or(DeviceState::Online, |seen| state_at(seen, now, policy));
            entry
        })
        .chain(unregistered)
        .collect();
    devices.sort_by(|a, b| a.id.cmp(&b.id));
    devices
}

/// How long from `now` until a device of `devices` changes state by time alone.
pub fn next_change(devices: &[DeviceStatus], now: Timestamp, policy: &Policy) -> Option<Duration> {
    devices
        .iter()
        .filter_map(|d| {
            let silent = silence(parse_time(&d.last_seen)?, now);
            [policy.late_after, policy.gone_after]
                .into_iter()
                .find(|limit| silent < *limit)
                .map(|limit| limit - silent)
        })
        .min()
}

/// How many devices are in each state.
pub fn summary(devices: &[DeviceStatus]) -> DeviceSummary {
    let count = |state| {
        i32::try_from(devices.iter().filter(|d| d.state == state).count()).unwrap_or(i32::MAX)
    };
    DeviceSummary {
        total: i32::try_from(devices.len()).unwrap_or(i32::MAX),
        online: count(DeviceState::Online),
        late: count(DeviceState::Late),
        gone: count(DeviceState::Gone),
    }
}

/// Whether a request of a device heard at `now`, which reported `reported`, must be written
/// to its status entry `persisted` (None: not listed yet): when it is not Online there, when
/// the written last-seen time is `persistEvery` old, or when it reports for the first time.
pub fn must_persist(
    persisted: Option<&DeviceStatus>,
    now: Timestamp,
    policy: &Policy,
    reported: &Reported,
) -> bool {
    let Some(entry) = persisted else {
        return true;
    };
    if changes(entry, reported) {
        return true;
    }
    match parse_time(&entry.last_seen) {
        Some(seen) => silence(seen, now) >= policy.persist_every,
        None => true,
    }
}

/// Whether a request that reported `reported` changes more of the device's status entry
/// `entry` than its last-seen time: the device is not Online there, or reports for the first
/// time.
pub fn changes(entry: &DeviceStatus, reported: &Reported) -> bool {
    entry.state != DeviceState::Online || (entry.reported.is_empty() && !reported.is_empty())
}

/// The device's status entry after a request heard at `now`: Online, seen now, with what it
/// reported (what it did not report this time is kept).
pub fn heard(entry: &DeviceStatus, now: Timestamp, reported: &Reported) -> DeviceStatus {
    let keep = &entry.reported;
    DeviceStatus {
        last_seen: rfc3339(now),
        state: DeviceState::Online,
        reported: Reported {
            refresh_rate: reported.refresh_rate.or(keep.refresh_rate),
            battery_millivolts: reported.battery_millivolts.or(keep.battery_millivolts),
            rssi: reported.rssi.or(keep.rssi),
            fw_version: reported
                .fw_version
                .clone()
                .or_else(|| keep.fw_version.clone()),
            width: reported.width.or(keep.width),
            height: reported.height.or(keep.height),
        },
        ..entry.clone()
    }
}
