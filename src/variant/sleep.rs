//! Variants that sleep with their displays, pure (R42): what `spec.devices.sleep`
//! says ([`SleepPolicy`]) and what a poll teaches of a device ([`polled`]). When a variant is
//! up is `wake`'s; when its devices are gone, `departure`'s.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::devices::{parse_duration, rfc3339};
use super::quiet::Quiet;
use crate::crd::{
    DeviceStatus, Mutation, PollStats, SleepSpec, SleepState, VariantState, VariantStatus,
    sleep::{
        DEFAULT_EXPIRE_AFTER, DEFAULT_IDLE_AFTER, DEFAULT_KEEP_WARM, DEFAULT_MAX_WAKE_PER_HOUR,
        DEFAULT_SITE_SILENT_MIN, DEFAULT_WARMUP,
    },
};

/// The least margin a device is given around its expected poll.
pub const MIN_MARGIN: Duration = Duration::from_secs(2);

/// What `spec.devices.sleep` says, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SleepPolicy {
    /// No Online device this long: idle.
    pub idle_after: Duration,
    /// Started this long before an expected poll.
    pub warmup: Duration,
    /// Kept up this long after a poll.
    pub keep_warm: Duration,
    /// A made variant whose devices were all Gone this long is removed.
    pub expire_after: Duration,
    /// Most starts in an hour.
    pub max_wake_per_hour: u32,
    /// Fewest silent devices that make a site silent.
    pub site_silent_min: usize,
    /// Quiet hours, if any.
    pub quiet: Option<Quiet>,
}

impl SleepPolicy {
    /// Checks `spec.devices.sleep`: durations within bounds, and `warmup + keepWarm` long
    /// enough that no device's polls can start and stop a variant more than
    /// `maxWakePerHour` times an hour (a start needs at least that long between two).
    pub fn of(spec: &SleepSpec) -> Result<SleepPolicy, String> {
        let duration = |field: &str, value: &Option<String>, default: &str| {
            let text = value.as_deref().unwrap_or(default);
            let d = parse_duration(text).map_err(|e| format!("spec.devices.sleep.{field}: {e}"))?;
            if d > super::devices::MAX_DURATION {
                return Err(format!(
                    "spec.devices.sleep.{field}: {text} is out of range: at most 8784h"
                ));
            }
            Ok(d)
        };
        let idle_after = duration("idleAfter", &spec.idle_after, DEFAULT_IDLE_AFTER)?;
        let warmup = duration("warmup", &spec.warmup, DEFAULT_WARMUP)?;
        let keep_warm = duration("keepWarm", &spec.keep_warm, DEFAULT_KEEP_WARM)?;
        let expire_after = duration("expireAfter", &spec.expire_after, DEFAULT_EXPIRE_AFTER)?;
        let max = spec.max_wake_per_hour.unwrap_or(DEFAULT_MAX_WAKE_PER_HOUR);
        if !(1..=3600).contains(&max) {
            return Err(format!(
                "spec.devices.sleep.maxWakePerHour {max}: from 1 to 3600"
            ));
        }
        let min = spec.site_silent_min.unwrap_or(DEFAULT_SITE_SILENT_MIN);
        if !(1..=500).contains(&min) {
            return Err(format!(
                "spec.devices.sleep.siteSilentMin {min}: from 1 to 500"
            ));
        }
        let max_wake_per_hour = u32::try_from(max).unwrap_or(1);
        let cycle = (warmup + keep_warm).as_secs().max(1);
        let starts = 3600_u64.div_ceil(cycle);
        if starts > u64::from(max_wake_per_hour) {
            return Err(format!(
                "spec.devices.sleep: warmup ({}s) + keepWarm ({}s) lets a device that polls \
                 every {cycle}s start and stop its variant {starts} times an hour, more than \
                 maxWakePerHour ({max_wake_per_hour}): make them longer (together at least \
                 {}s) or allow more wakes",
                warmup.as_secs(),
                keep_warm.as_secs(),
                3600_u64.div_ceil(u64::from(max_wake_per_hour)),
            ));
        }
        let quiet = spec.quiet_hours.as_ref().map(Quiet::of).transpose()?;
        Ok(SleepPolicy {
            quiet,
            idle_after,
            warmup,
            keep_warm,
            expire_after,
            max_wake_per_hour,
            site_silent_min: usize::try_from(min).unwrap_or(1),
        })
    }
}

impl SleepPolicy {
    /// Whether quiet hours explain devices that are silent at `now`: they are inside them, or
    /// were `late_after` ago (the devices, told to poll again when quiet hours end, are due
    /// back within that). Such a silence is no site's silence (`SiteSilent`, R42); a silence
    /// that outlasts it is, and its devices were last heard together when quiet hours began.
    pub fn explains_silence(&self, now: Timestamp, late_after: Duration) -> bool {
        self.quiet.as_ref().is_some_and(|quiet| {
            quiet.end_of(now).is_some() || quiet.end_of(plus(now, -secs(late_after))).is_some()
        })
    }

    /// When quiet hours end, and how to say it, if `now` is inside them.
    pub fn quiet_until(&self, now: Timestamp) -> Option<(Timestamp, String)> {
        let quiet = self.quiet.as_ref()?;
        let end = quiet.end_of(now)?;
        Some((end, quiet.local(end)))
    }
}

pub(super) fn at(text: &str) -> Option<Timestamp> {
    super::clock::parse_rfc3339(text)
}

pub(super) fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

pub(super) fn plus(t: Timestamp, seconds: i64) -> Timestamp {
    Timestamp::from_second(t.as_second().saturating_add(seconds)).unwrap_or(t)
}

/// What a device's polls taught (R42) as this replica keeps it from poll to poll: the
/// status's [`PollStats`] with its times as times, made text only when written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollSeen {
    /// Its last poll.
    pub last: Timestamp,
    /// Seconds between its polls.
    pub interval_seconds: Option<u32>,
    /// A moving average of how early or late it came, in seconds.
    pub lateness_seconds: Option<u32>,
    /// Its last poll found its variant not ready: when it was told to come back.
    pub retry_at: Option<Timestamp>,
}

impl PollSeen {
    /// The statistics a status holds, read; None when its last poll is no time (a retry time
    /// that is none is left out).
    pub fn read(written: &PollStats) -> Option<Self> {
        Some(Self {
            last: at(&written.last)?,
            interval_seconds: written.interval_seconds,
            lateness_seconds: written.lateness_seconds,
            retry_at: written.retry_at.as_deref().and_then(at),
        })
    }

    /// The statistics as the status holds them.
    pub fn written(&self) -> PollStats {
        PollStats {
            last: rfc3339(self.last),
            interval_seconds: self.interval_seconds,
            lateness_seconds: self.lateness_seconds,
            retry_at: self.retry_at.map(rfc3339),
        }
    }
}

/// A device's poll statistics after a poll at `now`: its interval is what it reports
/// (`Refresh-Rate`), else a moving average of the gaps between its polls (a gap of more than
/// one and a half intervals is a missed poll and not counted); its lateness a moving average
/// of how far from the expected time it came; `retry_at`, when the poll found its variant not
/// ready, when the device was told to come back.
pub fn polled(
    previous: Option<&PollSeen>,
    now: Timestamp,
    refresh_rate: Option<u32>,
    retry_at: Option<Timestamp>,
) -> PollSeen {
    let gap = previous.map(|p| now.as_second().saturating_sub(p.last.as_second()));
    let known = previous.and_then(|p| p.interval_seconds);
    let measured = match (gap, known) {
        (Some(g), _) if g < 1 => known,
        (Some(g), Some(i)) if g * 2 > i64::from(i) * 3 => Some(i),
        (Some(g), Some(i)) => Some(u32::try_from((3 * i64::from(i) + g + 2) / 4).unwrap_or(i)),
        (Some(g), None) => u32::try_from(g).ok(),
        (None, _) => known,
    };
    let lateness = match (gap, known) {
        (Some(g), Some(i)) if g >= 1 && g * 2 <= i64::from(i) * 3 => {
            let off = (g - i64::from(i)).unsigned_abs().min(u64::from(i) / 2);
            let before = u64::from(previous.and_then(|p| p.lateness_seconds).unwrap_or(0));
            u32::try_from((3 * before + off).div_ceil(4)).ok()
        }
        _ => previous.and_then(|p| p.lateness_seconds),
    };
    PollSeen {
        last: now,
        interval_seconds: refresh_rate.or(measured),
        lateness_seconds: lateness,
        retry_at,
    }
}

/// Whether a poll finds `variant` of `m` not ready (no ready replica, as its status says), and
/// then in how many seconds the device is to ask again: what is left of `warmup` since the
/// variant started (`warmup` while it has not; 1 without a valid `spec.devices.sleep`, whose
/// policy `sleep` is).
pub fn retry_after(
    m: &Mutation,
    sleep: Option<&SleepPolicy>,
    variant: &str,
    now: Timestamp,
) -> Option<u64> {
    let status = m
        .status
        .as_ref()
        .and_then(|s| s.variants.iter().find(|v| v.label == variant));
    let ready = status.is_some_and(|v| v.state == VariantState::Ready && v.ready_replicas > 0);
    if ready {
        return None;
    }
    let Some(policy) = sleep else {
        return Some(1);
    };
    let warmup = policy.warmup.as_secs().max(1);
    let started = status
        .and_then(|v| v.sleep.as_ref())
        .filter(|s| s.state == SleepState::Awake)
        .and_then(|s| at(&s.since));
    Some(match started {
        Some(since) => {
            let gone = u64::try_from(now.as_second() - since.as_second()).unwrap_or(0);
            warmup.saturating_sub(gone).max(1)
        }
        None => warmup,
    })
}

/// How often the last poll of a device that keeps polling is written (R42, R52): often enough
/// that the written poll keeps its variant up (`keepWarm` after it, less the margin the
/// leader needs to see it: [`MIN_MARGIN`]), and no more often than a heartbeat is
/// (`persistEvery`); at least a second.
pub fn poll_refresh(keep_warm: Duration, persist_every: Duration) -> Duration {
    keep_warm
        .saturating_sub(MIN_MARGIN)
        .min(persist_every)
        .max(Duration::from_secs(1))
}

/// Whether the interval a poll taught moved from the written one by more than the leader's
/// window absorbs: more than the device's written lateness, and more than a second (the
/// window's margin is twice the lateness, at least [`MIN_MARGIN`]). A device that polls with
/// a jitter moves its average a little at every poll; that is no reason to write.
fn interval_moved(written: &PollStats, stats: &PollSeen) -> bool {
    match (written.interval_seconds, stats.interval_seconds) {
        (Some(was), Some(is)) => {
            let absorbed = written.lateness_seconds.unwrap_or(0).max(1);
            was.abs_diff(is) > absorbed
        }
        (was, is) => was != is,
    }
}

/// Whether a poll whose statistics are now `stats` must be written to its device's status
/// entry `entry` (R42): what the leader decides from is what is written, so a poll is written
/// when the entry has no poll yet, when it would wake its variant (`variant`'s status says
/// Idle, and no poll written since it went idle asks for the wake yet), when it learnt
/// another interval (one its window does not absorb: `interval_moved`), when it is the first
/// to tell the device to come back (the variant waits `keepWarm` after that), and when the
/// written poll is `refresh` old. Every other poll changes no decision, and writes nothing:
/// a device polling ten times a second costs no more writes than one polling once. With
/// `spec.screen` (`polls_wake` false, R53) a poll wakes nothing and tells no device to come
/// back, so neither is a reason to write.
pub fn poll_must_persist(
    entry: Option<&DeviceStatus>,
    variant: Option<&VariantStatus>,
    stats: &PollSeen,
    now: Timestamp,
    refresh: Duration,
    polls_wake: bool,
) -> bool {
    let Some(written) = entry.and_then(|e| e.poll.as_ref()) else {
        return true;
    };
    let Some(last) = at(&written.last) else {
        return true;
    };
    let idle_since = variant
        .and_then(|v| v.sleep.as_deref())
        .filter(|s| s.state == SleepState::Idle)
        .and_then(|s| at(&s.since));
    // A poll written at or after the time it went idle (times have whole seconds) asks for
    // the wake already: the leader that idled it had not seen it, and sees it next.
    if polls_wake && idle_since.is_some_and(|since| last < since) {
        return true;
    }
    if interval_moved(written, stats) {
        return true;
    }
    if polls_wake && written.retry_at.is_none() && stats.retry_at.is_some() {
        return true;
    }
    now.as_second().saturating_sub(last.as_second()) >= secs(refresh)
}
