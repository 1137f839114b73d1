//! R42: when a sleeping variant is up, without a cluster.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::crd::{
    DeviceState, DeviceStatus, PollStats, Reported, SleepSpec, SleepState, VariantSleep,
    VariantStatus, WakeCause,
};
use crate::variant::devices::rfc3339;
use crate::variant::sleep::*;
use crate::variant::wake::*;

pub(super) fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap_or_else(|e| panic!("{e}"))
}

pub(super) fn policy() -> SleepPolicy {
    SleepPolicy {
        idle_after: Duration::from_secs(60),
        warmup: Duration::from_secs(10),
        keep_warm: Duration::from_secs(20),
        expire_after: Duration::from_secs(600),
        max_wake_per_hour: 30,
        site_silent_min: 5,
        quiet: None,
    }
}

/// A device of the variant that last polled at `last` (seconds), every `interval`.
pub(super) fn device(
    id: &str,
    last: i64,
    interval: Option<u32>,
    state: DeviceState,
) -> DeviceStatus {
    DeviceStatus {
        id: id.into(),
        variant: "v".into(),
        enrolled_at: rfc3339(t(-1000)),
        last_seen: rfc3339(t(last)),
        state,
        reported: Reported::default(),
        poll: Some(PollStats {
            last: rfc3339(t(last)),
            interval_seconds: interval,
            lateness_seconds: None,
            retry_at: None,
        }),
    }
}

pub(super) fn moment(now: i64) -> Moment {
    Moment {
        now: t(now),
        quiet_until: None,
        site_silent: false,
    }
}

pub(super) fn run(
    devices: &[DeviceStatus],
    previous: Option<&VariantSleep>,
    m: &Moment,
) -> Decision {
    let refs: Vec<&DeviceStatus> = devices.iter().collect();
    let sleeper = Sleeper {
        devices: &refs,
        previous,
        late_after: Duration::from_secs(300),
        screen: None,
    };
    decide(&policy(), &sleeper, m)
}

pub(super) fn state(s: SleepState, since: i64) -> VariantSleep {
    VariantSleep {
        state: s,
        since: rfc3339(t(since)),
        reason: String::new(),
        cause: None,
        wakes: Vec::new(),
    }
}

// R42: a display polling every 100 s: up from warmup + margin before each
// expected poll to keepWarm + margin after it, down between, and told when to look again
#[test]
fn a_variant_is_up_around_each_expected_poll_and_down_between() {
    let d = [device("a", 0, Some(100), DeviceState::Online)];
    let awake = state(SleepState::Awake, 0);
    // within keepWarm of the poll: up, looked at again when keepWarm ends
    let at5 = run(&d, Some(&awake), &moment(5));
    assert_eq!(at5.sleep.state, SleepState::Awake);
    assert_eq!(at5.sleep.cause, Some(WakeCause::Poll));
    assert_eq!(at5.next, Some(Duration::from_secs(15)));
    // keepWarm over: down, until 100 - 10 (warmup) - 2 (margin) = 88
    let at20 = run(&d, Some(&awake), &moment(20));
    assert_eq!(at20.sleep.state, SleepState::Idle);
    assert_eq!(at20.sleep.since, rfc3339(t(20)));
    assert!(
        at20.sleep.reason.contains("next poll"),
        "{}",
        at20.sleep.reason
    );
    assert_eq!(at20.next, Some(Duration::from_secs(68)));
    // at 88 it starts, ahead of the poll, and one wake is counted
    let at88 = run(&d, Some(&at20.sleep), &moment(88));
    assert_eq!(at88.sleep.state, SleepState::Awake);
    assert_eq!(at88.woke, Some(WakeCause::Ahead));
    assert_eq!(at88.sleep.wakes, [rfc3339(t(88))]);
    // the device did not come: the window ends at 100 + 2 + 20
    assert_eq!(at88.next, Some(Duration::from_secs(34)));
    let at122 = run(&d, Some(&at88.sleep), &moment(122));
    assert_eq!(at122.sleep.state, SleepState::Idle);
    // and the next window is the poll after, at 200
    assert_eq!(at122.next, Some(Duration::from_secs(188 - 122)));
}

// R42: a poll of an idle variant wakes it (the poll is persisted first)
#[test]
fn a_poll_wakes_an_idle_variant() {
    let mut d = [device("a", 50, Some(3600), DeviceState::Online)];
    let idle = state(SleepState::Idle, 10);
    let woke = run(&d, Some(&idle), &moment(51));
    assert_eq!(woke.sleep.state, SleepState::Awake);
    assert_eq!(woke.woke, Some(WakeCause::Poll));
    assert_eq!(woke.sleep.since, rfc3339(t(51)));
    assert_eq!(
        woke.next,
        Some(Duration::from_secs(19)),
        "keepWarm after the poll"
    );
    // answered not ready, the device was told to come back at 60: the variant waits for it,
    // keepWarm (20) after that, past keepWarm after the poll itself (70)
    if let Some(p) = d[0].poll.as_mut() {
        p.retry_at = Some(rfc3339(t(60)));
    }
    let woke = run(&d, Some(&idle), &moment(51));
    assert_eq!(woke.next, Some(Duration::from_secs(29)));
    let at75 = run(&d, Some(&woke.sleep), &moment(75));
    assert_eq!(at75.sleep.state, SleepState::Awake, "{:?}", at75.sleep);
    assert_eq!(at75.next, Some(Duration::from_secs(5)));
    let at80 = run(&d, Some(&at75.sleep), &moment(80));
    assert_eq!(at80.sleep.state, SleepState::Idle, "{:?}", at80.sleep);
}

// R42: a device whose interval is unknown keeps its variant up while it is Online; with no
// device Online the variant goes down idleAfter after the last went Late
#[test]
fn no_known_interval_keeps_it_up_and_idle_after_counts_from_late() {
    let awake = state(SleepState::Awake, 0);
    let unknown = [device("a", 0, None, DeviceState::Online)];
    let d = run(&unknown, Some(&awake), &moment(100));
    assert_eq!(d.sleep.state, SleepState::Awake);
    assert!(d.sleep.reason.contains("no known interval"));
    // Late since 300 (lateAfter): up until 360
    let late = [device("a", 0, None, DeviceState::Late)];
    let d = run(&late, Some(&awake), &moment(330));
    assert_eq!(d.sleep.state, SleepState::Awake);
    assert_eq!(d.next, Some(Duration::from_secs(30)));
    let d = run(&late, Some(&awake), &moment(360));
    assert_eq!(d.sleep.state, SleepState::Idle);
    // no device at all: idleAfter after it was put up
    let d = run(&[], Some(&awake), &moment(59));
    assert_eq!(d.sleep.state, SleepState::Awake);
    let d = run(&[], Some(&awake), &moment(60));
    assert_eq!(
        (d.sleep.state, d.sleep.reason.as_str()),
        (SleepState::Idle, "no device uses it")
    );
}

// R42: a variant that started maxWakePerHour times in the hour stays up
#[test]
fn a_variant_that_woke_too_often_stays_up() {
    let d = [device("a", 0, Some(100), DeviceState::Online)];
    let mut awake = state(SleepState::Awake, 0);
    awake.wakes = (0..30).map(|i| rfc3339(t(-3000 + i * 100))).collect();
    let stay = run(&d, Some(&awake), &moment(50));
    assert_eq!(stay.sleep.state, SleepState::Awake);
    assert!(stay.sleep.reason.contains("maxWakePerHour"));
    // looked at again when the next window starts (88), well before the oldest wake leaves
    // the hour (600)
    assert_eq!(stay.next, Some(Duration::from_secs(38)));
    let later = run(&d, Some(&stay.sleep), &moment(130));
    assert_eq!(later.sleep.state, SleepState::Awake);
    assert_eq!(
        later.next,
        Some(Duration::from_secs(58)),
        "the next window, at 188"
    );
}

// R42: a silent site puts nothing down; quiet hours put it down and say
// until when
#[test]
fn site_silence_and_quiet_hours() {
    let d = [device("a", 0, Some(100), DeviceState::Online)];
    let awake = state(SleepState::Awake, 0);
    let silent = Moment {
        site_silent: true,
        ..moment(50)
    };
    assert_eq!(
        run(&d, Some(&awake), &silent).sleep.state,
        SleepState::Awake
    );
    let quiet = Moment {
        quiet_until: Some((t(5000), "07:00 Europe/Berlin".into())),
        ..moment(5)
    };
    let q = run(&d, Some(&awake), &quiet);
    assert_eq!(q.sleep.state, SleepState::Idle);
    assert_eq!(q.sleep.reason, "quiet hours until 07:00 Europe/Berlin");
    assert_eq!(q.next, Some(Duration::from_secs(4995)));
    // and a poll inside them wakes nothing
    let idle = state(SleepState::Idle, 0);
    assert_eq!(run(&d, Some(&idle), &quiet).woke, None);
}

// R42: the same persisted state gives the same decision, so a new leader
// neither wakes nor idles early
#[test]
fn the_decision_depends_only_on_what_is_persisted() {
    let d = [device("a", 0, Some(100), DeviceState::Online)];
    let idle = state(SleepState::Idle, 20);
    for now in [21, 50, 87, 88, 121] {
        assert_eq!(
            run(&d, Some(&idle), &moment(now)),
            run(&d, Some(&idle), &moment(now))
        );
    }
    assert_eq!(
        run(&d, Some(&idle), &moment(87)).sleep.state,
        SleepState::Idle
    );
}

// R42: the owner is refused durations that would start a variant more often
// than maxWakePerHour
#[test]
fn durations_that_wake_too_often_are_refused() {
    let spec = |warmup: &str, keep: &str, max: i32| SleepSpec {
        warmup: Some(warmup.into()),
        keep_warm: Some(keep.into()),
        max_wake_per_hour: Some(max),
        ..SleepSpec::default()
    };
    assert!(
        SleepPolicy::of(&SleepSpec::default()).is_ok(),
        "the defaults hold"
    );
    let err = SleepPolicy::of(&spec("5s", "5s", 30))
        .err()
        .unwrap_or_default();
    assert!(err.contains("360 times an hour"), "{err}");
    assert!(err.contains("at least 120s"), "{err}");
    assert!(SleepPolicy::of(&spec("60s", "60s", 30)).is_ok());
    let err = SleepPolicy::of(&SleepSpec {
        idle_after: Some("soon".into()),
        ..SleepSpec::default()
    });
    assert!(err.is_err_and(|e| e.starts_with("spec.devices.sleep.idleAfter")));
}

// R42: what a poll is told: nothing while the variant has a ready replica;
// else what is left of warmup since it started, warmup while it is down, 1 s without sleep
#[test]
fn a_poll_is_told_when_to_ask_again() {
    use crate::crd::fixtures::{mutation, variant, variant_status};
    use crate::crd::{DevicesSpec, OwnerStatus, VariantState};

    let mut m = mutation("web", vec![variant("v", &[], 1)]);
    let status = |state, ready, sleep: Option<VariantSleep>| OwnerStatus {
        variants: vec![VariantStatus {
            sleep: sleep.map(Box::new),
            ..variant_status("v", state, ready)
        }],
        ..OwnerStatus::default()
    };
    m.status = Some(status(VariantState::Progressing, 0, None));
    assert_eq!(retry_after(&m, None, "v", t(0)), Some(1), "without sleep");
    m.spec.devices = Some(Box::new(DevicesSpec {
        sleep: Some(SleepSpec {
            warmup: Some("40s".into()),
            ..SleepSpec::default()
        }),
        ..DevicesSpec::default()
    }));
    let parsed = crate::variant::parsed::Parsed::of(&m);
    let sleep = parsed.sleep();
    assert!(sleep.is_some(), "{parsed:?}");
    let idle = status(VariantState::Idle, 0, Some(state(SleepState::Idle, 0)));
    m.status = Some(idle);
    assert_eq!(
        retry_after(&m, sleep, "v", t(5)),
        Some(40),
        "down: all of warmup"
    );
    let starting = status(
        VariantState::Progressing,
        0,
        Some(state(SleepState::Awake, 0)),
    );
    m.status = Some(starting);
    assert_eq!(retry_after(&m, sleep, "v", t(3)), Some(37), "warmup left");
    assert_eq!(
        retry_after(&m, sleep, "v", t(60)),
        Some(1),
        "late: at least 1 s"
    );
    let ready = status(VariantState::Ready, 1, Some(state(SleepState::Awake, 0)));
    m.status = Some(ready);
    assert_eq!(retry_after(&m, sleep, "v", t(3)), None, "ready");
    assert_eq!(
        retry_after(&m, sleep, "other", t(3)),
        Some(40),
        "a variant not in status yet"
    );
}

/// R53, R42: with spec.screen a variant's screen sets when it is up, not its devices' polls:
/// down though a device polled just now, up `warmup` before the screen is due (ahead), kept up
/// `keepWarm` after the fetch, then down until `warmup` before the next; with no device online
/// it idles as without screens.
#[test]
fn with_screens_the_refresh_wakes_the_variant_not_the_polls() {
    let run =
        |devices: &[DeviceStatus], previous: Option<&VariantSleep>, now: i64, rhythm: Rhythm| {
            let refs: Vec<&DeviceStatus> = devices.iter().collect();
            let sleeper = Sleeper {
                devices: &refs,
                previous,
                late_after: Duration::from_secs(300),
                screen: Some(rhythm),
            };
            decide(&policy(), &sleeper, &moment(now))
        };
    let polling = [device("a", 0, Some(60), DeviceState::Online)];
    let first = Rhythm {
        fetched: Some(t(-100)),
        due: t(800),
    };
    let awake = state(SleepState::Awake, -200);
    let d = run(&polling, Some(&awake), 0, first);
    assert_eq!(d.sleep.state, SleepState::Idle, "{d:?}");
    assert_eq!(d.next, Some(Duration::from_secs(790)), "{d:?}");
    let idle = d.sleep.clone();
    assert!(idle.reason.contains("screen is due"), "{idle:?}");
    // Polls while it sleeps do not wake it.
    let polled = [device("a", 400, Some(60), DeviceState::Online)];
    let d = run(&polled, Some(&idle), 400, first);
    assert_eq!((d.sleep.state, d.woke), (SleepState::Idle, None), "{d:?}");
    // Ahead of the refresh.
    let d = run(&polled, Some(&idle), 790, first);
    assert_eq!(d.sleep.state, SleepState::Awake, "{d:?}");
    assert_eq!(d.woke, Some(WakeCause::Ahead));
    let up = d.sleep.clone();
    // Fetched at 805: up until 825, then down until 1695.
    let second = Rhythm {
        fetched: Some(t(805)),
        due: t(1705),
    };
    assert_eq!(
        run(&polled, Some(&up), 810, second).sleep.state,
        SleepState::Awake
    );
    let d = run(&polled, Some(&up), 830, second);
    assert_eq!(d.sleep.state, SleepState::Idle, "{d:?}");
    assert_eq!(d.next, Some(Duration::from_secs(865)), "{d:?}");
    // No good screen yet: up now, whatever the polls.
    let none = Rhythm {
        fetched: None,
        due: t(830),
    };
    assert_eq!(
        run(&polled, Some(&idle), 830, none).sleep.state,
        SleepState::Awake
    );
    // No device online: as without screens, idle once idleAfter has passed.
    let late = [device("a", -1000, Some(60), DeviceState::Late)];
    let d = run(&late, Some(&awake), 0, none);
    assert_eq!(d.sleep.state, SleepState::Idle, "{d:?}");
}

// R42: devices told to sleep through quiet hours go quiet together every night; that is no
// site's silence while quiet hours last, nor for lateAfter after they end (the devices are
// due back then), and is one when it outlasts that
#[test]
fn quiet_hours_explain_a_silence_until_the_devices_are_due_back() {
    let spec = crate::crd::QuietHours {
        days: Vec::new(),
        from: "22:00".into(),
        to: "06:00".into(),
        time_zone: "UTC".into(),
    };
    let quiet = crate::variant::quiet::Quiet::of(&spec).unwrap_or_else(|e| panic!("{e}"));
    let sleeping = SleepPolicy {
        quiet: Some(quiet),
        ..policy()
    };
    let at = |hm: &str| -> Timestamp {
        format!("2026-12-07T{hm}:00Z")
            .parse()
            .unwrap_or_else(|e| panic!("{hm}: {e}"))
    };
    let late_after = Duration::from_secs(30 * 60);
    for (hm, explained) in [
        ("23:00", true),
        ("05:59", true),
        ("06:20", true),
        ("06:31", false),
        ("12:00", false),
        ("21:59", false),
    ] {
        assert_eq!(
            sleeping.explains_silence(at(hm), late_after),
            explained,
            "{hm}"
        );
    }
    assert!(
        !policy().explains_silence(at("23:00"), late_after),
        "no quiet hours: nothing explains a silence"
    );
}
