//! Unit tests of the Lease decision logic.

#![allow(clippy::unwrap_used, reason = "a failed step must fail the test")]

use k8s_openapi::{api::coordination::v1::LeaseSpec, apimachinery::pkg::apis::meta::v1::MicroTime};

use super::*;

const D: Duration = Duration::from_secs(15);

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).unwrap()
}

fn held(holder: Option<&str>, renewed: Option<i64>, seconds: Option<i32>) -> Observed {
    Observed {
        holder: holder.map(str::to_string),
        renew_time: renewed.map(at),
        duration_seconds: seconds,
    }
}

/// This replica's monotonic clock, in seconds from an arbitrary start.
fn mono(secs: f64) -> Instant {
    base() + Duration::from_secs_f64(secs)
}

fn base() -> Instant {
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

fn follow(holder: &str, expires: f64) -> Decision {
    Decision::Follow {
        holder: holder.to_string(),
        expires: mono(expires),
    }
}

/// The decision for `lease` read at `now`, seen unchanged since `since` (local seconds).
fn decide_at(lease: &Observed, since: f64, now: f64) -> Decision {
    decide(Some(lease), "me", mono(since), mono(now), D)
}

#[test]
fn absent_is_created() {
    assert_eq!(
        decide(None, "me", mono(0.0), mono(0.0), D),
        Decision::Create
    );
}

#[test]
fn held_by_another_is_followed_until_unchanged_for_its_duration() {
    let lease = held(Some("other"), Some(0), Some(15));
    assert_eq!(decide_at(&lease, 0.0, 0.0), follow("other", 15.0));
    assert_eq!(decide_at(&lease, 0.0, 10.0), follow("other", 15.0));
    // Exactly at the expiry it is still valid; a moment later it is not.
    assert_eq!(decide_at(&lease, 0.0, 15.0), follow("other", 15.0));
    assert_eq!(decide_at(&lease, 0.0, 15.001), Decision::TakeOver);
    assert_eq!(decide_at(&lease, 0.0, 100.0), Decision::TakeOver);
    // Seen changing later: counted from then.
    assert_eq!(decide_at(&lease, 90.0, 100.0), follow("other", 105.0));
}

#[test]
fn the_lease_says_how_long_it_lasts() {
    let short = held(Some("other"), Some(0), Some(4));
    assert_eq!(decide_at(&short, 0.0, 5.0), Decision::TakeOver);
    // Without (or with a nonsensical) duration, ours is used.
    for seconds in [None, Some(0), Some(-3)] {
        let lease = held(Some("other"), Some(0), seconds);
        assert_eq!(decide_at(&lease, 0.0, 5.0), follow("other", 15.0));
        assert_eq!(decide_at(&lease, 0.0, 16.0), Decision::TakeOver);
    }
}

#[test]
fn held_by_me_is_renewed_even_when_expired() {
    for now in [0.0, 10.0, 1000.0] {
        let lease = held(Some("me"), Some(0), Some(15));
        assert_eq!(decide_at(&lease, 0.0, now), Decision::Renew);
    }
}

#[test]
fn without_a_holder_it_is_taken() {
    for holder in [None, Some("")] {
        let lease = held(holder, Some(0), Some(15));
        assert_eq!(decide_at(&lease, 0.0, 0.0), Decision::TakeOver);
    }
}

#[test]
fn the_wall_clock_takes_no_part() {
    // renewTime an hour, a day or years away from anything: only the local timing counts.
    for renewed in [-100_000_000, -86_400, -3_600, 0, 3_600, 86_400, 100_000_000] {
        let lease = held(Some("other"), Some(renewed), Some(15));
        assert_eq!(decide_at(&lease, 0.0, 1.0), follow("other", 15.0));
        assert_eq!(decide_at(&lease, 0.0, 16.0), Decision::TakeOver);
    }
    // A holder without renewTime is timed the same way.
    let undated = held(Some("other"), None, Some(15));
    assert_eq!(decide_at(&undated, 0.0, 1.0), follow("other", 15.0));
    assert_eq!(decide_at(&undated, 0.0, 16.0), Decision::TakeOver);
    // A duration beyond what the clock can add: valid, no panic.
    let far = held(Some("other"), Some(0), Some(i32::MAX));
    assert!(matches!(
        decide_at(&far, 0.0, 1_000_000.0),
        Decision::Follow { .. }
    ));
    // The identity compares exactly.
    let similar = held(Some("me-2"), Some(0), Some(15));
    assert_eq!(decide_at(&similar, 0.0, 1.0), follow("me-2", 15.0));
}

#[test]
fn seen_counts_from_the_last_change() {
    let mut seen = Seen::default();
    let first = held(Some("other"), Some(0), Some(15));
    assert_eq!(seen.observe(Some(&first), mono(1.0)), mono(1.0));
    // The same record read again: still since the first sight.
    assert_eq!(seen.observe(Some(&first), mono(4.0)), mono(1.0));
    assert_eq!(seen.observe(Some(&first.clone()), mono(9.0)), mono(1.0));
    // A renewal (renewTime moved, whichever way the holder's clock went) restarts it.
    let renewed = held(Some("other"), Some(-3_600), Some(15));
    assert_eq!(seen.observe(Some(&renewed), mono(10.0)), mono(10.0));
    assert_eq!(seen.observe(Some(&renewed), mono(12.0)), mono(10.0));
    // So does a new holder, or a new duration.
    let taken = held(Some("third"), Some(-3_600), Some(15));
    assert_eq!(seen.observe(Some(&taken), mono(13.0)), mono(13.0));
    let longer = held(Some("third"), Some(-3_600), Some(30));
    assert_eq!(seen.observe(Some(&longer), mono(14.0)), mono(14.0));
    // After the Lease was gone, the same record again counts as new.
    assert_eq!(seen.observe(None, mono(19.0)), mono(19.0));
    assert_eq!(seen.observe(Some(&longer), mono(20.0)), mono(20.0));
}

/// A follower polling every `retry` seconds, with its wall clock `skew` seconds off, while
/// the holder renews every `renew` seconds until it dies at `dies` (local seconds): when does
/// the follower decide to take over? `None` when it does not before `until`.
fn take_over_at(skew: i64, renew: f64, retry: f64, dies: f64, until: f64) -> Option<f64> {
    let mut seen = Seen::default();
    let mut now = 0.0;
    while now <= until {
        // The holder's last renewal before `now` (it stops at `dies`), in its wall clock.
        let last = (now.min(dies) / renew).floor() * renew;
        let record = held(Some("other"), Some(last as i64 + skew), Some(15));
        let since = seen.observe(Some(&record), mono(now));
        match decide(Some(&record), "me", since, mono(now), D) {
            Decision::TakeOver => return Some(now),
            Decision::Follow { expires, .. } => {
                // As Elector::run: the next read at the retry or just after the expiry.
                let expiry = (expires - base()).as_secs_f64() + 0.05;
                now = (now + retry).min(expiry);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    None
}

#[test]
fn a_skewed_follower_neither_takes_a_live_lease_nor_waits_on_a_dead_one() {
    // Lease 15 s: the holder renews every 5 s, the follower reads every 3 s.
    for skew in [-3_600, 0, 3_600, -10 * 365 * 86_400] {
        // A live holder for 10 minutes: never taken.
        assert_eq!(
            take_over_at(skew, 5.0, 3.0, 1e9, 600.0),
            None,
            "skew {skew}"
        );
        // Dies at 100 s: taken within the duration plus one renew period.
        let at = take_over_at(skew, 5.0, 3.0, 100.0, 600.0).unwrap();
        assert!(at > 100.0 && at <= 100.0 + 15.0 + 5.0, "skew {skew}: {at}");
    }
}

#[test]
fn specs_written() {
    let old = LeaseSpec {
        holder_identity: Some("other".into()),
        acquire_time: Some(MicroTime(at(-100))),
        renew_time: Some(MicroTime(at(-20))),
        lease_duration_seconds: Some(15),
        lease_transitions: Some(3),
        ..LeaseSpec::default()
    };
    assert_eq!(
        next_spec(&follow("other", 1.0), Some(&old), "me", at(0), 15),
        None
    );

    let created = next_spec(&Decision::Create, None, "me", at(0), 15).unwrap();
    assert_eq!(created.holder_identity.as_deref(), Some("me"));
    assert_eq!(created.acquire_time, Some(MicroTime(at(0))));
    assert_eq!(created.renew_time, Some(MicroTime(at(0))));
    assert_eq!(created.lease_duration_seconds, Some(15));
    assert_eq!(created.lease_transitions, Some(0));

    let taken = next_spec(&Decision::TakeOver, Some(&old), "me", at(0), 4).unwrap();
    assert_eq!(taken.holder_identity.as_deref(), Some("me"));
    assert_eq!(taken.acquire_time, Some(MicroTime(at(0))));
    assert_eq!(taken.renew_time, Some(MicroTime(at(0))));
    assert_eq!(taken.lease_duration_seconds, Some(4));
    assert_eq!(taken.lease_transitions, Some(4));

    let mine = LeaseSpec {
        holder_identity: Some("me".into()),
        ..old.clone()
    };
    let renewed = next_spec(&Decision::Renew, Some(&mine), "me", at(0), 15).unwrap();
    assert_eq!(renewed.acquire_time, Some(MicroTime(at(-100))));
    assert_eq!(renewed.renew_time, Some(MicroTime(at(0))));
    assert_eq!(renewed.lease_transitions, Some(3));

    let released = released_spec(Some(&mine), at(5));
    assert_eq!(released.holder_identity, None);
    assert_eq!(released.lease_duration_seconds, Some(1));
    assert_eq!(released.lease_transitions, Some(3));
    // A released Lease is taken at once by the next replica.
    let observed = Observed {
        holder: released.holder_identity.clone(),
        renew_time: released.renew_time.as_ref().map(|t| t.0),
        duration_seconds: released.lease_duration_seconds,
    };
    assert_eq!(
        decide(Some(&observed), "next", mono(5.0), mono(5.0), D),
        Decision::TakeOver
    );
}

#[test]
fn timings_follow_the_duration() {
    let s = Settings {
        namespace: "ns".into(),
        identity: "me".into(),
        duration: D,
    };
    assert_eq!(s.renew_every(), Duration::from_secs(5));
    assert_eq!(s.retry_every(), Duration::from_secs(3));
    assert_eq!(s.step_down_after(), Duration::from_secs(10));
    assert!(s.step_down_after() < s.duration);
}

#[test]
fn settings_defaults() {
    let config = |vars: &[(&str, &str)]| {
        let vars: Vec<(String, std::ffi::OsString)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.into()))
            .collect();
        Config::from_env(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
            .unwrap()
    };
    let s = Settings::from_config(&config(&[]));
    assert_eq!(s.namespace, "default");
    assert!(
        s.identity.ends_with(&format!("-{}", std::process::id())),
        "{}",
        s.identity
    );
    let s = Settings::from_config(&config(&[("MUTANT_WATCH_NAMESPACE", "edge")]));
    assert_eq!(s.namespace, "edge");
    let s = Settings::from_config(&config(&[
        ("MUTANT_WATCH_NAMESPACE", "edge"),
        ("POD_NAMESPACE", "mutants"),
        ("POD_NAME", "pod-1"),
    ]));
    assert_eq!(
        (s.namespace.as_str(), s.identity.as_str()),
        ("mutants", "pod-1")
    );
}

#[tokio::test]
async fn the_stream_yields_on_each_rise() {
    use futures::StreamExt;
    let (tx, rx) = watch::channel(false);
    let mut rises = Box::pin(became_leader(rx));
    tx.send_replace(true);
    assert_eq!(rises.next().await, Some(()));
    tx.send_replace(false);
    tx.send_replace(true);
    assert_eq!(rises.next().await, Some(()));
    tx.send_replace(false);
    drop(tx);
    assert_eq!(rises.next().await, None);
}
