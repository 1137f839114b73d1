//! What this replica heard from devices (R40): every authenticated request of a device is a
//! heartbeat, kept here in memory with what the device reported in its headers; the status is
//! written only when [`crate::variant::devices::must_persist`] says so, and this replica does
//! not write the same device twice within its `persistEvery`. Bounded: at most
//! [`MAX_REMEMBERED`] devices; past that the oldest are forgotten (which costs at most an
//! early write).

use std::{sync::Mutex, time::Duration};

use hyper::{HeaderMap, header::HeaderValue};
use k8s_openapi::jiff::Timestamp;

use crate::{HashMap, crd::Reported, variant::sleep::PollSeen};

/// Most devices one replica remembers.
pub const MAX_REMEMBERED: usize = 20_000;

/// The headers a device reports itself in, as TRMNL firmware writes them.
const REPORTED: [&str; 6] = [
    "Refresh-Rate",
    "Battery-Voltage",
    "RSSI",
    "FW-Version",
    "Width",
    "Height",
];

/// [`REPORTED`] as a `HeaderMap` holds names: in lower case.
const LOWER: [&str; REPORTED.len()] = [
    "refresh-rate",
    "battery-voltage",
    "rssi",
    "fw-version",
    "width",
    "height",
];

/// Where header `name` (lower case, as a `HeaderMap` holds it) is in [`REPORTED`]: its length
/// first, so that most of a request's headers are passed over after one comparison.
fn reported_at(name: &str) -> Option<usize> {
    LOWER
        .iter()
        .position(|r| r.len() == name.len() && *r == name)
}

/// Reads what a device reports in `headers` (`Refresh-Rate`, `Battery-Voltage`, `RSSI`,
/// `FW-Version`, `Width`, `Height`, as TRMNL firmware sends them); a header that is there and
/// malformed is refused, naming it.
pub fn reported(headers: &HeaderMap) -> Result<Reported, String> {
    // One pass over the request's few headers, comparing names (lower case in a `HeaderMap`),
    // rather than a look-up of each of the six names: a poll carries them all or none.
    let mut found: [Option<&HeaderValue>; REPORTED.len()] = [None; REPORTED.len()];
    let mut any = false;
    for (name, value) in headers {
        let Some(at) = reported_at(name.as_str()) else {
            continue;
        };
        if found[at].replace(value).is_some() {
            return Err(format!("header {}: sent more than once", REPORTED[at]));
        }
        any = true;
    }
    if !any {
        return Ok(Reported::default());
    }
    let text = |name: &str| -> Result<Option<&str>, String> {
        let Some(at) = REPORTED.iter().position(|r| *r == name) else {
            return Ok(None);
        };
        let Some(value) = found[at] else {
            return Ok(None);
        };
        let value = value
            .to_str()
            .map_err(|_| format!("header {name}: not printable ASCII"))?
            .trim();
        Ok(Some(value))
    };
    let number = |name: &str, min: i64, max: i64| -> Result<Option<i64>, String> {
        let Some(value) = text(name)? else {
            return Ok(None);
        };
        match value.parse::<i64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(Some(n)),
            _ => Err(format!(
                "header {name}: {:?} is not a whole number from {min} to {max}",
                shorten(value)
            )),
        }
    };
    let unsigned = |name: &str, min: i64, max: i64| -> Result<Option<u32>, String> {
        Ok(number(name, min, max)?.and_then(|n| u32::try_from(n).ok()))
    };
    let battery_millivolts = match text("Battery-Voltage")? {
        None => None,
        Some(value) => Some(millivolts(value).ok_or_else(|| {
            format!(
                "header Battery-Voltage: {:?} is not a voltage from 0 to 10 (volts, e.g. 4.12)",
                shorten(value)
            )
        })?),
    };
    let fw_version = match text("FW-Version")? {
        None => None,
        Some(value) => {
            let fine = !value.is_empty()
                && value.len() <= 64
                && value
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-+".contains(&b));
            if !fine {
                return Err(format!(
                    "header FW-Version: {:?} is not 1 to 64 letters, digits, '.', '_', '-' and '+'",
                    shorten(value)
                ));
            }
            Some(value.to_owned())
        }
    };
    Ok(Reported {
        refresh_rate: unsigned("Refresh-Rate", 1, 7 * 24 * 3600)?,
        battery_millivolts,
        rssi: number("RSSI", -200, 0)?.and_then(|n| i32::try_from(n).ok()),
        fw_version,
        width: unsigned("Width", 1, 16_384)?,
        height: unsigned("Height", 1, 16_384)?,
    })
}

fn shorten(value: &str) -> String {
    value.chars().take(40).collect()
}

/// `4.12` volts as 4120 millivolts: a decimal number from 0 to 10 with at most 3 decimals.
fn millivolts(value: &str) -> Option<u32> {
    let (whole, fraction) = value.split_once('.').unwrap_or((value, ""));
    if whole.is_empty()
        || whole.len() > 2
        || fraction.len() > 3
        || !whole
            .bytes()
            .chain(fraction.bytes())
            .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let whole: u32 = whole.parse().ok()?;
    let mut fraction = fraction.to_owned();
    while fraction.len() < 3 {
        fraction.push('0');
    }
    let mv = whole * 1000 + fraction.parse::<u32>().ok()?;
    (mv <= 10_000).then_some(mv)
}

/// One device as this replica last heard it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Beat {
    /// When.
    pub seen: Timestamp,
    /// What it reported (merged over what it reported before).
    pub reported: Reported,
    /// When this replica last wrote its status entry.
    pub written: Option<Timestamp>,
    /// What its polls taught this replica (R42), written or not.
    pub poll: Option<PollSeen>,
}

impl Beat {
    /// The first beat of a device, heard at `now` reporting `reported`.
    fn first(now: Timestamp, reported: Reported) -> Beat {
        Beat {
            seen: now,
            reported,
            written: None,
            poll: None,
        }
    }
}

/// The devices this replica heard, by namespace, Mutation and id.
#[derive(Default)]
pub struct Heartbeats {
    beats: Mutex<HashMap<Box<str>, Beat>>,
}

/// `f` of the map's key of device `id` of `ns/name` (the three names joined by a character
/// none of them may hold), made on the stack: a poll looks its device up several times.
fn with_key<R>(ns: &str, name: &str, id: &str, f: impl FnOnce(&str) -> R) -> R {
    crate::http::with_joined(&[ns, "\n", name, "\n", id], f)
}

impl Heartbeats {
    /// Records a request of device `id` of `ns/name` heard at `now`; returns the beat as now
    /// known.
    pub fn heard(
        &self,
        ns: &str,
        name: &str,
        id: &str,
        now: Timestamp,
        reported: &Reported,
    ) -> Beat {
        self.beat(ns, name, id, now, reported, None::<fn(_, _) -> PollSeen>)
    }

    /// [`Heartbeats::heard`] of a poll (R42): `taught` makes what the poll taught from what
    /// this replica kept of the device's polls and its refresh rate as now known, and it is
    /// kept, all in the one look-up.
    pub fn heard_polled(
        &self,
        ns: &str,
        name: &str,
        id: &str,
        now: Timestamp,
        reported: &Reported,
        taught: impl FnOnce(Option<PollSeen>, Option<u32>) -> PollSeen,
    ) -> Beat {
        self.beat(ns, name, id, now, reported, Some(taught))
    }

    fn beat(
        &self,
        ns: &str,
        name: &str,
        id: &str,
        now: Timestamp,
        reported: &Reported,
        taught: Option<impl FnOnce(Option<PollSeen>, Option<u32>) -> PollSeen>,
    ) -> Beat {
        // A poisoned map (a panic while it was held): the beat as this request has it.
        let alone = || Beat::first(now, reported.clone());
        let Ok(mut beats) = self.beats.lock() else {
            return alone();
        };
        if beats.len() >= MAX_REMEMBERED {
            forget_oldest(&mut beats);
        }
        with_key(ns, name, id, |key| {
            if !beats.contains_key(key) {
                beats.insert(Box::from(key), Beat::first(now, Reported::default()));
            }
            let beat = beats.get_mut(key)?;
            beat.seen = beat.seen.max(now);
            merge(&mut beat.reported, reported);
            if let Some(taught) = taught {
                beat.poll = Some(taught(beat.poll, beat.reported.refresh_rate));
            }
            Some(beat.clone())
        })
        .unwrap_or_else(alone)
    }

    /// Whether this replica wrote device `id` within `every` of `now`; if not, notes that it
    /// writes now (so that requests arriving together write once).
    pub fn claim_write(
        &self,
        ns: &str,
        name: &str,
        id: &str,
        now: Timestamp,
        every: Duration,
    ) -> bool {
        let Ok(mut beats) = self.beats.lock() else {
            return true;
        };
        with_key(ns, name, id, |key| {
            let Some(beat) = beats.get_mut(key) else {
                return true;
            };
            claim(beat, now, every)
        })
    }

    /// Forgets that this replica wrote device `id` (the write failed: the next request tries).
    pub fn unclaim(&self, ns: &str, name: &str, id: &str) {
        if let Ok(mut beats) = self.beats.lock() {
            with_key(ns, name, id, |key| {
                if let Some(beat) = beats.get_mut(key) {
                    beat.written = None;
                }
            });
        }
    }

    /// The last beat this replica heard of device `id`.
    pub fn get(&self, ns: &str, name: &str, id: &str) -> Option<Beat> {
        let beats = self.beats.lock().ok()?;
        with_key(ns, name, id, |key| beats.get(key).cloned())
    }

    /// Forgets device `id` (it was removed).
    pub fn forget(&self, ns: &str, name: &str, id: &str) {
        if let Ok(mut beats) = self.beats.lock() {
            with_key(ns, name, id, |key| beats.remove(key));
        }
    }
}

/// Whether `beat` may be written at `now`, its last write being older than `every`; notes
/// the write if so.
fn claim(beat: &mut Beat, now: Timestamp, every: Duration) -> bool {
    let recent = beat.written.is_some_and(|w| {
        now.as_second().saturating_sub(w.as_second())
            < i64::try_from(every.as_secs()).unwrap_or(i64::MAX)
    });
    if recent {
        return false;
    }
    beat.written = Some(now);
    true
}

fn forget_oldest(beats: &mut HashMap<Box<str>, Beat>) {
    let mut seen: Vec<Timestamp> = beats.values().map(|b| b.seen).collect();
    seen.sort_unstable();
    // The oldest tenth goes at once, so that this sort is rare.
    let cut = seen.get(seen.len() / 10).copied();
    if let Some(cut) = cut {
        beats.retain(|_, b| b.seen > cut);
    }
}

fn merge(into: &mut Reported, new: &Reported) {
    let Reported {
        refresh_rate,
        battery_millivolts,
        rssi,
        fw_version,
        width,
        height,
    } = new.clone();
    into.refresh_rate = refresh_rate.or(into.refresh_rate);
    into.battery_millivolts = battery_millivolts.or(into.battery_millivolts);
    into.rssi = rssi.or(into.rssi);
    into.fw_version = fw_version.or_else(|| into.fw_version.take());
    into.width = width.or(into.width);
    into.height = height.or(into.height);
}

#[cfg(test)]
mod tests;
