//! Unit tests of the Lease decision logic.

#![allow(clippy::unwrap_used, reason = "a failed step must fail the test")]

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

fn follow(holder: &str) -> Decision {
    Decision::Follow {
        holder: holder.to_string(),
    }
}

#[test]
fn absent_is_created() {
    assert_eq!(decide(None, "me", at(0), D), Decision::Create);
}

#[test]
fn held_by_another_is_followed_until_it_expires() {
    let lease = held(Some("other"), Some(0), Some(15));
    assert_eq!(decide(Some(&lease), "me", at(0), D), follow("other"));
    assert_eq!(decide(Some(&lease), "me", at(10), D), follow("other"));
    // Exactly at renewTime + duration it is still valid; a moment later it is not.
    assert_eq!(decide(Some(&lease), "me", at(15), D), follow("other"));
    let just_after = at(15).checked_add(SignedDuration::from_millis(1)).unwrap();
    assert_eq!(
        decide(Some(&lease), "me", just_after, D),
        Decision::TakeOver
    );
    assert_eq!(decide(Some(&lease), "me", at(100), D), Decision::TakeOver);
}

#[test]
fn the_lease_says_how_long_it_lasts() {
    let short = held(Some("other"), Some(0), Some(4));
    assert_eq!(decide(Some(&short), "me", at(5), D), Decision::TakeOver);
    // Without (or with a nonsensical) duration, ours is used.
    for seconds in [None, Some(0), Some(-3)] {
        let lease = held(Some("other"), Some(0), seconds);
        assert_eq!(decide(Some(&lease), "me", at(5), D), follow("other"));
        assert_eq!(decide(Some(&lease), "me", at(16), D), Decision::TakeOver);
    }
}

#[test]
fn held_by_me_is_renewed_even_when_expired() {
    for now in [0, 10, 1000] {
        let lease = held(Some("me"), Some(0), Some(15));
        assert_eq!(decide(Some(&lease), "me", at(now), D), Decision::Renew);
    }
}

#[test]
fn without_a_holder_it_is_taken() {
    for holder in [None, Some("")] {
        let lease = held(holder, Some(0), Some(15));
        assert_eq!(decide(Some(&lease), "me", at(0), D), Decision::TakeOver);
    }
}

#[test]
fn clock_edges() {
    // Renewed in our future (the other's clock runs ahead): valid.
    let ahead = held(Some("other"), Some(60), Some(15));
    assert_eq!(decide(Some(&ahead), "me", at(0), D), follow("other"));
    // A holder without renewTime cannot be dated: expired.
    let undated = held(Some("other"), None, Some(15));
    assert_eq!(decide(Some(&undated), "me", at(0), D), Decision::TakeOver);
    // renewTime + duration beyond the representable range: not expired, no panic.
    let far = Observed {
        holder: Some("other".into()),
        renew_time: Some(Timestamp::MAX),
        duration_seconds: Some(i32::MAX),
    };
    assert_eq!(decide(Some(&far), "me", at(0), D), follow("other"));
    // The identity compares exactly.
    let similar = held(Some("me-2"), Some(0), Some(15));
    assert_eq!(decide(Some(&similar), "me", at(1), D), follow("me-2"));
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
        next_spec(&follow("other"), Some(&old), "me", at(0), 15),
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
        decide(Some(&observed), "next", at(5), D),
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
