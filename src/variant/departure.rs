//! When devices are gone for good, and when they only went quiet together, pure (R42):
//! which variants made by enrollment expire ([`expiring`]), and whether a
//! Mutation's devices (or its site group's) went silent at once, as in a power cut
//! ([`site_silent`]).

use std::{collections::BTreeSet, time::Duration};

use k8s_openapi::jiff::Timestamp;

use super::devices::rfc3339;
use super::sleep::{at, secs};
use crate::crd::{DeviceState, DeviceStatus};

/// When device `d` was last heard: its last poll or its last-seen time, the later.
fn heard(d: &DeviceStatus) -> Option<Timestamp> {
    let poll = d.poll.as_ref().and_then(|p| at(&p.last));
    [at(&d.last_seen), poll].into_iter().flatten().max()
}

/// The labels of `made` (variants made by enrollment) whose devices in `listed` are all Gone
/// and have been for `expire_after` (Gone `gone_after` after they were last heard), and how
/// long until the next of the others is due. A made label with no device listed is left to
/// the removal of its last device, which removes it.
pub fn expiring(
    made: &BTreeSet<String>,
    listed: &[DeviceStatus],
    gone_after: Duration,
    expire_after: Duration,
    now: Timestamp,
) -> (Vec<String>, Option<Duration>) {
    let mut due = Vec::new();
    let mut next: Option<i64> = None;
    for label in made {
        let devices: Vec<&DeviceStatus> = listed.iter().filter(|d| d.variant == *label).collect();
        let Some(last) = devices.iter().map(|d| heard(d)).collect::<Option<Vec<_>>>() else {
            continue;
        };
        let Some(last) = last.into_iter().max() else {
            continue;
        };
        let at = last
            .as_second()
            .saturating_add(secs(gone_after))
            .saturating_add(secs(expire_after));
        let all_gone = devices.iter().all(|d| d.state == DeviceState::Gone);
        if all_gone && now.as_second() >= at {
            due.push(label.clone());
        } else {
            let left = at - now.as_second();
            if left > 0 {
                next = Some(next.map_or(left, |n| n.min(left)));
            }
        }
    }
    let next = next.map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)));
    (due, next)
}

/// Whether the site went silent: more than half of `devices` (every device of a Mutation, or
/// of the Mutations of its site group), and at least `min`, are not Online and were last heard within one `late_after` of each
/// other. Silences that began before `accepted` are departures, not counted. Says what it
/// found when so.
pub fn site_silent(
    devices: &[&DeviceStatus],
    late_after: Duration,
    min: usize,
    accepted: Option<Timestamp>,
) -> Option<String> {
    let mut silent: Vec<Timestamp> = devices
        .iter()
        .filter(|d| d.state != DeviceState::Online)
        .filter_map(|d| heard(d))
        .filter(|t| accepted.is_none_or(|a| *t >= a))
        .collect();
    silent.sort_unstable();
    let window = secs(late_after);
    let mut best = (0, 0);
    let mut from = 0;
    for to in 0..silent.len() {
        while silent[to].as_second() - silent[from].as_second() > window {
            from += 1;
        }
        if to + 1 - from > best.1 - best.0 {
            best = (from, to + 1);
        }
    }
    let count = best.1 - best.0;
    if count < min.max(1) || count * 2 <= devices.len() {
        return None;
    }
    Some(format!(
        "{count} of {} devices went silent together (last heard from {} to {}): taken for a \
         power cut or a network fault, so no variant is put down or expired until they come \
         back or annotation mutantops.neiam.org/silence-accepted on this Mutation (or one of \
         its site group, label mutantops.neiam.org/site) names a later time",
        devices.len(),
        rfc3339(silent[best.0]),
        rfc3339(silent[best.1 - 1]),
    ))
}
