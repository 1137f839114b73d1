//! R42: what a device's polls teach, and when a poll is written, without a cluster.

use std::time::Duration;

use crate::crd::{DeviceState, DeviceStatus, PollStats, SleepState, VariantStatus};
use crate::variant::devices::rfc3339;
use crate::variant::sleep::*;

use super::sleep::{device, moment, run, state, t};

// R42: a device that comes late learns a margin; a poll far off is a missed
// one and does not teach an interval
#[test]
fn polls_teach_an_interval_and_a_margin() {
    let first = polled(None, t(0), None, None);
    assert_eq!(
        (first.interval_seconds, first.lateness_seconds),
        (None, None)
    );
    let second = polled(Some(&first), t(100), None, None);
    assert_eq!(second.interval_seconds, Some(100));
    let third = polled(Some(&second), t(212), None, None);
    assert_eq!(third.interval_seconds, Some(103));
    assert_eq!(third.lateness_seconds, Some(3));
    // a missed poll (gap of 2 intervals) changes neither
    let fourth = polled(Some(&third), t(418), None, None);
    assert_eq!(
        (fourth.interval_seconds, fourth.lateness_seconds),
        (Some(103), Some(3))
    );
    // Refresh-Rate wins over what was measured
    let told = polled(Some(&fourth), t(520), Some(900), None);
    assert_eq!(told.interval_seconds, Some(900));
    // kept as times between polls, text only in the status, and read back the same
    let back = PollSeen::read(&told.written());
    assert_eq!(back, Some(told));
    let written = PollSeen {
        retry_at: Some(t(530)),
        ..told
    }
    .written();
    assert_eq!(
        (written.last.as_str(), written.retry_at.as_deref()),
        (rfc3339(t(520)).as_str(), Some(rfc3339(t(530)).as_str()))
    );
    let garbled = PollStats {
        last: "yesterday".to_owned(),
        ..written
    };
    assert_eq!(
        PollSeen::read(&garbled),
        None,
        "a last poll that is no time"
    );
    // the margin widens the window: 2 x 3 s of lateness
    let mut d = device("a", 0, Some(100), DeviceState::Online);
    if let Some(p) = d.poll.as_mut() {
        p.lateness_seconds = Some(3);
    }
    let idle = state(SleepState::Idle, 30);
    let early = run(&[d.clone()], Some(&idle), &moment(83));
    assert_eq!(early.sleep.state, SleepState::Idle, "100 - 10 - 6 = 84");
    let on_time = run(&[d], Some(&idle), &moment(84));
    assert_eq!(on_time.sleep.state, SleepState::Awake);
}

/// What a poll at `now` (seconds) taught: polls every `interval`, told to come back at
/// `retry_at` when the variant was not ready.
fn stats(now: i64, interval: Option<u32>, retry_at: Option<i64>) -> PollSeen {
    PollSeen {
        last: t(now),
        interval_seconds: interval,
        lateness_seconds: None,
        retry_at: retry_at.map(t),
    }
}

/// Variant `v` asleep (or awake) since `since`.
fn sleeping(state_now: SleepState, since: i64) -> VariantStatus {
    VariantStatus {
        sleep: Some(Box::new(state(state_now, since))),
        ..crate::crd::fixtures::variant_status("v", crate::crd::VariantState::Ready, 1)
    }
}

// R42, R52: a poll is written only when the leader's decision needs it: the first, the one
// that wakes an idle variant (once: a poll written since it went idle already asks), another
// interval, the first "come back at", and a written poll refresh-old; a device polling ten
// times a second writes nothing else
#[test]
fn a_poll_is_written_only_when_the_decision_needs_it() {
    let refresh = poll_refresh(Duration::from_secs(12), Duration::from_secs(60));
    assert_eq!(refresh, Duration::from_secs(10), "keepWarm less the margin");
    assert_eq!(
        poll_refresh(Duration::from_secs(90), Duration::from_secs(30)),
        Duration::from_secs(30),
        "never more often than a heartbeat"
    );
    assert_eq!(
        poll_refresh(Duration::from_secs(1), Duration::from_secs(30)),
        Duration::from_secs(1),
        "at least a second"
    );
    let written = device("d", 100, Some(3600), DeviceState::Online);
    let awake = sleeping(SleepState::Awake, 50);
    let same = stats(101, Some(3600), None);
    let must = |entry: Option<&DeviceStatus>, v: &VariantStatus, s: &PollSeen, now: i64| {
        poll_must_persist(entry, Some(v), s, t(now), refresh, true)
    };
    assert!(must(None, &awake, &same, 101), "a device not listed yet");
    let unpolled = DeviceStatus {
        poll: None,
        ..written.clone()
    };
    assert!(must(Some(&unpolled), &awake, &same, 101), "its first poll");
    assert!(
        !must(Some(&written), &awake, &same, 101),
        "a poll a second after the written one, awake: nothing to write"
    );
    for now in 101..110 {
        let s = stats(now, Some(3600), None);
        assert!(!must(Some(&written), &awake, &s, now), "{now}");
    }
    assert!(
        must(Some(&written), &awake, &stats(110, Some(3600), None), 110),
        "refresh-old: written again, to keep the variant up"
    );
    let idle_since_after = sleeping(SleepState::Idle, 105);
    assert!(
        must(
            Some(&written),
            &idle_since_after,
            &stats(106, Some(3600), Some(136)),
            106
        ),
        "the variant went idle after the written poll: this poll wakes it"
    );
    let woken = device("d", 106, Some(3600), DeviceState::Online);
    let woken = DeviceStatus {
        poll: Some(stats(106, Some(3600), Some(136)).written()),
        ..woken
    };
    assert!(
        !must(
            Some(&woken),
            &idle_since_after,
            &stats(107, Some(3600), Some(137)),
            107
        ),
        "the wake is written already (the status not caught up yet): not again"
    );
    let idle_same_second = sleeping(SleepState::Idle, 100);
    assert!(
        !must(
            Some(&written),
            &idle_same_second,
            &stats(101, Some(3600), None),
            101
        ),
        "a poll written in the second it went idle asks for the wake already"
    );
    assert!(
        must(Some(&written), &awake, &stats(101, Some(60), None), 101),
        "another interval"
    );
    assert!(
        !must(Some(&written), &awake, &stats(101, Some(3601), None), 101),
        "an average moved by a second: inside the window's margin"
    );
    assert!(
        must(Some(&written), &awake, &stats(101, Some(3598), None), 101),
        "moved by two seconds, the device never late: more than the margin absorbs"
    );
    let late = DeviceStatus {
        poll: written.poll.clone().map(|p| PollStats {
            lateness_seconds: Some(20),
            ..p
        }),
        ..written.clone()
    };
    assert!(
        !must(Some(&late), &awake, &stats(101, Some(3620), None), 101),
        "a device 20 s late on average: 20 s of drift is inside its window"
    );
    assert!(
        must(Some(&late), &awake, &stats(101, Some(3621), None), 101),
        "21 s is not"
    );
    assert!(
        must(Some(&written), &awake, &stats(101, None, None), 101),
        "an interval forgotten"
    );
    assert!(
        must(
            Some(&written),
            &awake,
            &stats(101, Some(3600), Some(120)),
            101
        ),
        "the first time it is told to come back"
    );
}
