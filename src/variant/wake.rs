//! When a sleeping variant is up, pure (R42): for one variant, from what is
//! persisted (its devices' status entries and its own sleep status) and the clock, whether it
//! is up, why, and when to look again ([`decide`]). No I/O: the leader and any replica that
//! reads the same status decide the same, so a new leader resumes where the last one was.
//!
//! A variant is up while a device polled it within `keepWarm` (one told to come back, its
//! variant not ready: `keepWarm` after that), from `warmup` (and the margin
//! its devices' lateness asks) before a device's next expected poll until `keepWarm` after it,
//! and while an Online device polls at no known interval; with no Online device it stays up
//! `idleAfter` after the last went Late. Inside quiet hours it is down. A variant that started
//! `maxWakePerHour` times within the hour stays up rather than start again; one whose site went
//! silent is not put down. With `spec.screen` (R53) its screen's refresh takes the polls' place:
//! while a device is online it is up from `warmup` before its screen is due until `keepWarm`
//! after the fetch, and no poll wakes it.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::devices::rfc3339;
use super::sleep::{SleepPolicy, at, plus, secs};
use crate::crd::{DeviceState, DeviceStatus, SleepState, VariantSleep, WakeCause};

pub use super::sleep::MIN_MARGIN;
/// How long the wakes of [`VariantSleep::wakes`] are remembered.
const HOUR: i64 = 3600;

/// One variant, as [`decide`] sees it.
#[derive(Clone, Copy, Debug)]
pub struct Sleeper<'a> {
    /// Its devices' status entries.
    pub devices: &'a [&'a DeviceStatus],
    /// Its sleep status as last written, if any.
    pub previous: Option<&'a VariantSleep>,
    /// Silent this long, a device is Late (the Mutation's lateAfter).
    pub late_after: Duration,
    /// With `spec.screen` (R53): the rhythm of its screen, which alone wakes it while a device
    /// is online; polls do not.
    pub screen: Option<Rhythm>,
}

/// When a variant's screen was last fetched and when the next fetch is due (R53).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rhythm {
    /// When its renderer last answered a screen, if it did.
    pub fetched: Option<Timestamp>,
    /// When the next fetch is due: now or past when there is no good screen.
    pub due: Timestamp,
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
    if let Some(rhythm) = variant.screen {
        if online(variant).next().is_some() {
            return screen_up(policy, rhythm, now, next);
        }
        return no_device_online(policy, variant, now, was, since, next);
    }
    // Each poll keeps it up keepWarm; one that found it not ready, keepWarm after the device
    // was told to come back.
    let recent = variant
        .devices
        .iter()
        .filter_map(|d| {
            let last = last_poll(d)?;
            let back = d.poll.as_ref().and_then(|p| at(p.retry_at.as_deref()?));
            let until = plus(back.map_or(last, |b| b.max(last)), secs(policy.keep_warm));
            Some((until, last, d.id.as_str()))
        })
        .max();
    if let Some((until, last, id)) = recent
        && now < until
    {
        return Some(Up {
            cause: WakeCause::Poll,
            reason: format!("device {id} polled at {}", rfc3339(last)),
            until: Some(until),
        });
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
    no_device_online(policy, variant, now, was, since, next)
}

/// With a device online and `spec.screen` (R53): up from `warmup` before its screen is due
/// until it is fetched, and `keepWarm` after a fetch; else down until `warmup` before the next
/// is due.
fn screen_up(
    policy: &SleepPolicy,
    rhythm: Rhythm,
    now: Timestamp,
    next: &mut Option<Timestamp>,
) -> Option<Up> {
    let start = plus(rhythm.due, -secs(policy.warmup));
    if now >= start {
        return Some(Up {
            cause: WakeCause::Ahead,
            reason: format!("its screen is due at {}", rfc3339(rhythm.due)),
            until: None,
        });
    }
    if let Some(fetched) = rhythm.fetched {
        let until = plus(fetched, secs(policy.keep_warm));
        if now < until {
            return Some(Up {
                cause: WakeCause::Ahead,
                reason: format!("its screen was fetched at {}", rfc3339(fetched)),
                until: Some(until),
            });
        }
    }
    *next = [*next, Some(start)].into_iter().flatten().min();
    None
}

/// With no device online: up for idleAfter after the last went Late (or, with none ever
/// heard, after the variant was last put up).
fn no_device_online(
    policy: &SleepPolicy,
    variant: &Sleeper<'_>,
    now: Timestamp,
    was: SleepState,
    since: Timestamp,
    next: &mut Option<Timestamp>,
) -> Option<Up> {
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
    if let Some(rhythm) = variant.screen {
        let start = plus(rhythm.due, -secs(policy.warmup));
        return (start > now && online(variant).next().is_some()).then_some(start);
    }
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
    if let Some(rhythm) = variant.screen
        && online(variant).next().is_some()
    {
        return format!(
            "asleep until its screen is due at {} (polls do not wake it: spec.screen)",
            rfc3339(rhythm.due)
        );
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
