//! Unit tests of the heartbeats: what a device reports, what is written and when.

use super::*;
use hyper::header::HeaderValue;

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (name, value) in pairs {
        h.append(
            *name,
            HeaderValue::from_str(value).unwrap_or_else(|e| panic!("{e}")),
        );
    }
    h
}

// R40: the TRMNL headers are read strictly, a refusal names the header
#[test]
fn reported_headers_are_parsed_strictly() {
    let r = reported(&headers(&[
        ("Refresh-Rate", "900"),
        ("Battery-Voltage", "4.12"),
        ("RSSI", "-67"),
        ("FW-Version", "1.5.2"),
        ("Width", "800"),
        ("Height", "480"),
    ]))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        r,
        Reported {
            refresh_rate: Some(900),
            battery_millivolts: Some(4120),
            rssi: Some(-67),
            fw_version: Some("1.5.2".into()),
            width: Some(800),
            height: Some(480),
        }
    );
    assert_eq!(reported(&HeaderMap::new()), Ok(Reported::default()));
    for (name, value) in [
        ("Refresh-Rate", "0"),
        ("Refresh-Rate", "15m"),
        ("Battery-Voltage", "4,12"),
        ("Battery-Voltage", "11"),
        ("Battery-Voltage", "-1"),
        ("Battery-Voltage", "4.1234"),
        ("RSSI", "12"),
        ("FW-Version", "1.0 beta"),
        ("Width", "99999"),
        ("Height", "x"),
    ] {
        let err = reported(&headers(&[(name, value)]))
            .err()
            .unwrap_or_else(|| panic!("{name}: {value} was accepted"));
        assert!(err.starts_with(&format!("header {name}:")), "{err}");
    }
    let twice = reported(&headers(&[("Width", "1"), ("Width", "2")]));
    assert!(twice.is_err_and(|e| e.contains("more than once")));
    assert_eq!(millivolts("3.7"), Some(3700));
    assert_eq!(millivolts("10"), Some(10_000));
    assert_eq!(millivolts("10.001"), None);
    assert_eq!(millivolts(".5"), None);
}

// R40: one write per persistEvery on this replica, however many requests arrive together
#[test]
fn a_replica_claims_one_write_per_period() {
    let beats = Heartbeats::default();
    let t = |s: i64| Timestamp::from_second(1_800_000_000 + s).unwrap_or_else(|e| panic!("{e}"));
    let every = Duration::from_secs(600);
    beats.heard("ns", "web", "a", t(0), &Reported::default());
    assert!(beats.claim_write("ns", "web", "a", t(0), every));
    assert!(!beats.claim_write("ns", "web", "a", t(1), every));
    assert!(!beats.claim_write("ns", "web", "a", t(599), every));
    assert!(beats.claim_write("ns", "web", "a", t(600), every));
    beats.unclaim("ns", "web", "a");
    assert!(beats.claim_write("ns", "web", "a", t(601), every));
    // what a device reports is merged over what it reported before
    let first = Reported {
        width: Some(800),
        ..Reported::default()
    };
    beats.heard("ns", "web", "a", t(2), &first);
    let second = Reported {
        rssi: Some(-50),
        ..Reported::default()
    };
    let beat = beats.heard("ns", "web", "a", t(3), &second);
    assert_eq!(
        (beat.reported.width, beat.reported.rssi),
        (Some(800), Some(-50))
    );
    assert_eq!(beat.seen, t(3));
    beats.forget("ns", "web", "a");
    assert_eq!(beats.get("ns", "web", "a"), None);
}

// R40: each device is its own entry, however long its names: heard, claimed, read and
// forgotten by namespace, Mutation and id.
#[test]
fn each_device_is_remembered_apart() {
    let beats = Heartbeats::default();
    let now = Timestamp::from_second(1_800_000_000).unwrap_or_else(|e| panic!("{e}"));
    let long = "d".repeat(600);
    let reported = Reported {
        rssi: Some(-60),
        ..Reported::default()
    };
    for (ns, name, id) in [
        ("ns", "web", "a"),
        ("ns", "web", "b"),
        ("ns", "we", "ba"),
        ("ns", "web", long.as_str()),
    ] {
        beats.heard(ns, name, id, now, &reported);
    }
    assert!(beats.claim_write("ns", "web", "a", now, Duration::from_secs(60)));
    assert!(!beats.claim_write("ns", "web", "a", now, Duration::from_secs(60)));
    assert!(beats.claim_write("ns", "web", "b", now, Duration::from_secs(60)));
    assert!(beats.claim_write("ns", "we", "ba", now, Duration::from_secs(60)));
    assert_eq!(
        beats.get("ns", "web", &long).map(|b| b.reported.rssi),
        Some(Some(-60))
    );
    assert!(beats.get("ns", "web", "c").is_none());
    beats.unclaim("ns", "web", "a");
    assert!(beats.claim_write("ns", "web", "a", now, Duration::from_secs(60)));
    beats.forget("ns", "web", &long);
    assert!(beats.get("ns", "web", &long).is_none());
    assert!(beats.get("ns", "web", "b").is_some());
}

// R40: each reported header is found by its name as a `HeaderMap` holds it.
#[test]
fn reported_names_are_their_lower_case() {
    for (name, lower) in REPORTED.iter().zip(LOWER) {
        assert_eq!(name.to_ascii_lowercase(), lower);
    }
}

// R42: a poll's statistics are made from what this replica kept of the device's polls and
// its refresh rate as now known, and kept, in the same look-up as its heartbeat
#[test]
fn a_poll_learns_from_the_beat_it_is_heard_with() {
    let beats = Heartbeats::default();
    let t = |s: i64| Timestamp::from_second(1_800_000_000 + s).unwrap_or_else(|e| panic!("{e}"));
    let told = Reported {
        refresh_rate: Some(900),
        ..Reported::default()
    };
    let mut asked = Vec::new();
    let taught = |now: i64| {
        move |kept: Option<PollSeen>, rate: Option<u32>| {
            (
                kept,
                rate,
                crate::variant::sleep::polled(kept.as_ref(), t(now), rate, None),
            )
        }
    };
    for now in [0, 5] {
        let f = taught(now);
        let beat = beats.heard_polled("ns", "web", "a", t(now), &told, |kept, rate| {
            let (kept, rate, seen) = f(kept, rate);
            asked.push((kept.map(|k| k.last), rate));
            seen
        });
        assert_eq!(beat.poll.map(|p| p.last), Some(t(now)), "kept at once");
    }
    assert_eq!(
        asked,
        [(None, Some(900)), (Some(t(0)), Some(900))],
        "the second poll is taught from the first, with the rate the first reported"
    );
    // a heartbeat that is no poll keeps what the polls taught
    let beat = beats.heard("ns", "web", "a", t(6), &Reported::default());
    assert_eq!(beat.poll.map(|p| p.last), Some(t(5)));
    assert_eq!(beat.reported.refresh_rate, Some(900));
}
