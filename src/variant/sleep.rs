//! Variants that sleep with their displays, pure (R42, issue 36): what `spec.devices.sleep`
//! says ([`SleepPolicy`]), what a poll teaches of a device ([`polled`]), and for one variant,
//! from what is persisted (its devices' status entries and its own sleep status) and the
//! clock, whether it is up, why, and when to look again ([`decide`]). No I/O: the leader and
//! any replica that reads the same status decide the same, so a new leader resumes where the
//! last one was.
//!
//! A variant is up while a device polled it within `keepWarm`, from `warmup` (and the margin
//! its devices' lateness asks) before a device's next expected poll until `keepWarm` after it,
//! and while an Online device polls at no known interval; with no Online device it stays up
//! `idleAfter` after the last went Late. Inside quiet hours it is down. A variant that started
//! `maxWakePerHour` times within the hour stays up rather than start again; one whose site went
//! silent is not put down.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::devices::{parse_duration, rfc3339};
use super::quiet::Quiet;
use crate::crd::{
    DeviceState, DeviceStatus, PollStats, SleepSpec, SleepState, VariantSleep, WakeCause,
    sleep::{
        DEFAULT_EXPIRE_AFTER, DEFAULT_IDLE_AFTER, DEFAULT_KEEP_WARM, DEFAULT_MAX_WAKE_PER_HOUR,
        DEFAULT_SITE_SILENT_MIN, DEFAULT_WARMUP,
    },
};

/// The least margin a device is given around its expected poll.
pub const MIN_MARGIN: Duration = Duration::from_secs(2);
/// How long the wakes of [`VariantSleep::wakes`] are remembered.
const HOUR: i64 = 3600;

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
    /// When quiet hours end, and how to say it, if `now` is inside them.
    pub fn quiet_until(&self, now: Timestamp) -> Option<(Timestamp, String)> {
        let quiet = self.quiet.as_ref()?;
        let end = quiet.end_of(now)?;
        Some((end, quiet.local(end)))
    }
}

fn at(text: &str) -> Option<Timestamp> {
    text.parse().ok()
}

fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

fn plus(t: Timestamp, seconds: i64) -> Timestamp {
    Timestamp::from_second(t.as_second().saturating_add(seconds)).unwrap_or(t)
}

/// A device's poll statistics after a poll at `now`: its interval is what it reports
/// (`Refresh-Rate`), else a moving average of the gaps between its polls (a gap of more than
/// one and a half intervals is a missed poll and not counted); its lateness a moving average
/// of how far from the expected time it came.
pub fn polled(
    previous: Option<&PollStats>,
    now: Timestamp,
    refresh_rate: Option<u32>,
) -> PollStats {
    let last = previous.and_then(|p| at(&p.last));
    let gap = last.map(|l| now.as_second().saturating_sub(l.as_second()));
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
    PollStats {
        last: rfc3339(now),
        interval_seconds: refresh_rate.or(measured),
        lateness_seconds: lateness,
    }
}

/// One variant, as [`decide`] sees it.
#[derive(Clone, Copy, Debug)]
pub struct Sleeper<'a> {
    /// Its devices' status entries.
    pub devices: &'a [&'a DeviceStatus],
    /// Its sleep status as last written, if any.
    pub previous: Option<&'a VariantSleep>,
    /// Silent this long, a device is Late (the Mutation's lateAfter).
    pub late_after: Duration,
}

/// The clock and what holds for every variant of the namespace at once.
#[derive(Clone, Debug)]
pub struct Moment {
    /// Now.
    pub now: Timestamp,
    /// When quiet hours end, if now is inside them, and how to say it.
    pub quiet_until: Option<(Timestamp, String)>,
    /// Whether the site went silent (nothing is put down).
    pub site_silent: bool,
}

/// What [`decide`] found for one variant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Its sleep status now.
    pub sleep: VariantSleep,
    /// Whether it started now, and why.
    pub woke: Option<WakeCause>,
    /// How long until the decision may change by time alone.
    pub next: Option<Duration>,
}

/// Why a variant should be up now, and until when that holds.
struct Up {
    cause: WakeCause,
    reason: String,
    until: Option<Timestamp>,
}

/// Whether `variant` should be up at `moment`, and when to look again.
pub fn decide(policy: &SleepPolicy, variant: &Sleeper<'_>, moment: &Moment) -> Decision {
    let now = moment.now;
    let previous = variant.previous;
    let was = previous.map_or(SleepState::Awake, |p| p.state);
    let since = previous.and_then(|p| at(&p.since)).unwrap_or(now);
    let wakes: Vec<Timestamp> = previous
        .map(|p| p.wakes.iter().filter_map(|w| at(w)).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|w| now.as_second() - w.as_second() < HOUR)
        .collect();
    let mut next: Option<Timestamp> = wakes.first().map(|w| plus(*w, HOUR));
    let (state, cause, reason, until) = if let Some((end, local)) = &moment.quiet_until {
        (
            SleepState::Idle,
            None,
            format!("quiet hours until {local}"),
            Some(*end),
        )
    } else {
        match up(policy, variant, now, was, since, &mut next) {
            Some(up) => (SleepState::Awake, Some(up.cause), up.reason, up.until),
            None => (SleepState::Idle, None, String::new(), None),
        }
    };
    let mut decision = match (was, state) {
        (SleepState::Idle, SleepState::Awake) => {
            let mut wakes = wakes.clone();
            wakes.push(now);
            Decision {
                sleep: VariantSleep {
                    state,
                    since: rfc3339(now),
                    reason,
                    cause,
                    wakes: wakes.iter().map(|w| rfc3339(*w)).collect(),
                },
                woke: cause,
                next: None,
            }
        }
        (SleepState::Awake, SleepState::Idle) if moment.quiet_until.is_none() => {
            let stay = if moment.site_silent {
                Some("the site went silent (condition SiteSilent): nothing is put down".to_owned())
            } else if wakes.len() >= usize::try_from(policy.max_wake_per_hour).unwrap_or(0) {
                Some(format!(
                    "started {} times within the hour (maxWakePerHour): stays up",
                    wakes.len()
                ))
            } else {
                None
            };
            match stay {
                Some(reason) => keep(previous, SleepState::Awake, reason, &wakes, now),
                None => went_idle(reason, variant, now, &wakes),
            }
        }
        (SleepState::Awake, SleepState::Idle) => went_idle(reason, variant, now, &wakes),
        (_, state) => {
            let reason = if state == SleepState::Idle && reason.is_empty() {
                idle_reason(variant, now)
            } else {
                reason
            };
            let mut d = keep(previous, state, reason, &wakes, now);
            if state == SleepState::Awake {
                d.sleep.cause = cause.or(d.sleep.cause);
            }
            d
        }
    };
    next = [next, until].into_iter().flatten().min();
    if moment.quiet_until.is_none() {
        next = [next, wake_ahead(policy, variant, now)]
            .into_iter()
            .flatten()
            .min();
    }
    decision.next = next
        .map(|t| Duration::from_secs(u64::try_from(t.as_second() - now.as_second()).unwrap_or(0)));
    decision
}

fn keep(
    previous: Option<&VariantSleep>,
    state: SleepState,
    reason: String,
    wakes: &[Timestamp],
    now: Timestamp,
) -> Decision {
    Decision {
        sleep: VariantSleep {
            state,
            since: previous.map_or_else(|| rfc3339(now), |p| p.since.clone()),
            reason,
            cause: previous.and_then(|p| p.cause),
            wakes: wakes.iter().map(|w| rfc3339(*w)).collect(),
        },
        woke: None,
        next: None,
    }
}

fn went_idle(
    reason: String,
    variant: &Sleeper<'_>,
    now: Timestamp,
    wakes: &[Timestamp],
) -> Decision {
    let reason = if reason.is_empty() {
        idle_reason(variant, now)
    } else {
        reason
    };
    Decision {
        sleep: VariantSleep {
            state: SleepState::Idle,
            since: rfc3339(now),
            reason,
            cause: None,
            wakes: wakes.iter().map(|w| rfc3339(*w)).collect(),
        },
        woke: None,
        next: None,
    }
}

fn online<'a>(variant: &'a Sleeper<'_>) -> impl Iterator<Item = &'a DeviceStatus> {
    variant
        .devices
        .iter()
        .copied()
        .filter(|d| d.state == DeviceState::Online)
}

/// The last poll of device `d`, if it polled.
fn last_poll(d: &DeviceStatus) -> Option<Timestamp> {
    d.poll.as_ref().and_then(|p| at(&p.last))
}

/// The next window of device `d` that ends after `now`: from `warmup` and its margin before
/// its next expected poll to `keepWarm` and its margin after it.
fn window(
    policy: &SleepPolicy,
    d: &DeviceStatus,
    now: Timestamp,
) -> Option<(Timestamp, Timestamp, Timestamp)> {
    let poll = d.poll.as_ref()?;
    let last = at(&poll.last)?;
    let interval = i64::from(poll.interval_seconds?).max(1);
    let margin = secs(MIN_MARGIN).max(2 * i64::from(poll.lateness_seconds.unwrap_or(0)));
    let tail = margin + secs(policy.keep_warm);
    // The first expected poll whose window has not ended yet.
    let behind = now.as_second() - last.as_second() - tail;
    let k = if behind < interval {
        1
    } else {
        behind / interval + 1
    };
    let expected = plus(last, k.saturating_mul(interval));
    Some((
        plus(expected, -(secs(policy.warmup) + margin)),
        expected,
        plus(expected, tail),
    ))
}

/// Why `variant` should be up at `now`, if it should; `next` gets the earliest time it
/// should come up when it should not.
fn up(
    policy: &SleepPolicy,
    variant: &Sleeper<'_>,
    now: Timestamp,
    was: SleepState,
    since: Timestamp,
    next: &mut Option<Timestamp>,
) -> Option<Up> {
    let recent = variant
        .devices
        .iter()
        .filter_map(|d| Some((last_poll(d)?, d.id.as_str())))
        .max();
    if let Some((last, id)) = recent {
        let until = plus(last, secs(policy.keep_warm));
        if now < until {
            return Some(Up {
                cause: WakeCause::Poll,
                reason: format!("device {id} polled at {}", rfc3339(last)),
                until: Some(until),
            });
        }
    }
    let mut ahead: Option<(Timestamp, Timestamp, &str)> = None;
    for d in online(variant) {
        match window(policy, d, now) {
            None => {
                return Some(Up {
                    cause: WakeCause::Unknown,
                    reason: format!(
                        "device {} is online and polls at no known interval yet",
                        d.id
                    ),
                    until: None,
                });
            }
            Some((start, expected, end)) if now >= start => {
                if ahead.is_none_or(|(e, _, _)| end > e) {
                    ahead = Some((end, expected, d.id.as_str()));
                }
            }
            Some(_) => {}
        }
    }
    if let Some((end, expected, id)) = ahead {
        return Some(Up {
            cause: WakeCause::Ahead,
            reason: format!("device {id} is expected at {}", rfc3339(expected)),
            until: Some(end),
        });
    }
    if online(variant).next().is_some() {
        return None;
    }
    // No device online: up for idleAfter after the last went Late (or, with none ever heard,
    // after the variant was last put up).
    let late = variant
        .devices
        .iter()
        .filter_map(|d| at(&d.last_seen))
        .max()
        .map(|seen| plus(seen, secs(variant.late_after)));
    let from = match (late, was) {
        (Some(late), _) => late,
        (None, SleepState::Awake) => since,
        (None, SleepState::Idle) => return None,
    };
    let until = plus(from, secs(policy.idle_after));
    if now < until {
        *next = [*next, Some(until)].into_iter().flatten().min();
        return Some(Up {
            cause: WakeCause::Unknown,
            reason: format!(
                "no device online since {}: idle at {}",
                rfc3339(from),
                rfc3339(until)
            ),
            until: Some(until),
        });
    }
    None
}

/// When `variant` (down now) is next started ahead of a device's poll.
fn wake_ahead(policy: &SleepPolicy, variant: &Sleeper<'_>, now: Timestamp) -> Option<Timestamp> {
    online(variant)
        .filter_map(|d| window(policy, d, now))
        .map(|(start, _, _)| start)
        .filter(|start| *start > now)
        .min()
}

fn idle_reason(variant: &Sleeper<'_>, now: Timestamp) -> String {
    if variant.devices.is_empty() {
        return "no device uses it".to_owned();
    }
    let next = online(variant)
        .filter_map(|d| {
            let p = d.poll.as_ref()?;
            Some((
                plus(at(&p.last)?, i64::from(p.interval_seconds?)),
                d.id.as_str(),
            ))
        })
        .filter(|(t, _)| *t >= now)
        .min();
    match next {
        Some((t, id)) => format!(
            "asleep until device {id}'s next poll, expected at {}",
            rfc3339(t)
        ),
        None => "no device online".to_owned(),
    }
}
