//! R39, R40: the devices policy, ids, the registry and liveness, without a cluster.

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::{ByteString, jiff::Timestamp};

use crate::crd::{DeviceState, DeviceStatus, DevicesSpec, Enrollment, Reported};
use crate::variant::devices::*;
use crate::variant::registry::{ByHash, MADE_KEY};

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap_or_else(|e| panic!("{e}"))
}

fn policy(late: u64, gone: u64, persist: u64) -> Policy {
    Policy {
        open: true,
        open_until: None,
        max_devices: 50,
        late_after: Duration::from_secs(late),
        gone_after: Duration::from_secs(gone),
        persist_every: Duration::from_secs(persist),
        ids: None,
    }
}

fn entry(id: &str, last_seen: i64, state: DeviceState) -> DeviceStatus {
    DeviceStatus {
        id: id.into(),
        variant: "radxa".into(),
        enrolled_at: rfc3339(t(0)),
        last_seen: rfc3339(t(last_seen)),
        state,
        reported: Reported::default(),
        poll: None,
    }
}

#[test]
fn durations_are_read_as_kubernetes_writes_them() {
    assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
    assert_eq!(parse_duration("45m"), Ok(Duration::from_secs(2700)));
    assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
    assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
    for bad in [
        "",
        "10",
        "m",
        "1.5h",
        "1d",
        "-1s",
        "1h 2m",
        "99999999999999999999h",
    ] {
        assert!(parse_duration(bad).is_err(), "{bad:?} was accepted");
    }
}

// R39: defaults, bounds and order of spec.devices
#[test]
fn the_policy_is_checked() {
    let p = Policy::of(&DevicesSpec::default()).unwrap_or_else(|e| panic!("{e}"));
    assert!(!p.open);
    assert_eq!(p.max_devices, 50);
    assert_eq!(
        (p.late_after, p.gone_after, p.persist_every),
        (
            Duration::from_secs(1800),
            Duration::from_secs(86_400),
            Duration::from_secs(600)
        )
    );
    let spec = |late: &str, gone: &str, persist: &str| DevicesSpec {
        late_after: Some(late.into()),
        gone_after: Some(gone.into()),
        persist_every: Some(persist.into()),
        ..DevicesSpec::default()
    };
    assert!(Policy::of(&spec("3s", "6s", "1s")).is_ok());
    let said = |s: &DevicesSpec| Policy::of(s).err().unwrap_or_default();
    assert!(said(&spec("3s", "3s", "1s")).contains("goneAfter"));
    assert!(said(&spec("3s", "6s", "3s")).contains("persistEvery"));
    assert!(said(&spec("0s", "6s", "1s")).contains("lateAfter"));
    assert!(said(&spec("3s", "9000h", "1s")).contains("goneAfter"));
    let max = |n| DevicesSpec {
        max_devices: Some(n),
        ..DevicesSpec::default()
    };
    assert!(Policy::of(&max(500)).is_ok());
    assert!(said(&max(501)).contains("maxDevices"));
    assert!(said(&max(0)).contains("maxDevices"));
    let until = |u: &str| DevicesSpec {
        enrollment: Enrollment::Open,
        open_until: Some(u.into()),
        ..DevicesSpec::default()
    };
    assert!(said(&until("tomorrow")).contains("openUntil"));
    let p = Policy::of(&until(&rfc3339(t(100)))).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.enrollment_open(t(99)), Ok(()));
    assert!(
        p.enrollment_open(t(100))
            .is_err_and(|e| e.contains("closed at"))
    );
    let closed = Policy::of(&DevicesSpec::default()).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        closed
            .enrollment_open(t(0))
            .is_err_and(|e| e.contains("Closed"))
    );
}

// R39: with spec.devices.ids the key enrolls only the ids listed; each listed id is checked
#[test]
fn the_owner_may_list_the_ids_a_key_enrolls() {
    assert_eq!(policy(60, 120, 30).may_enroll_id("anything"), Ok(()));
    let listed = Policy {
        ids: Some(["aa-01".to_owned()].into()),
        ..policy(60, 120, 30)
    };
    assert_eq!(listed.may_enroll_id("aa-01"), Ok(()));
    let e = listed.may_enroll_id("zz-99").unwrap_err();
    assert!(
        e.contains("\"zz-99\"") && e.contains("spec.devices.ids"),
        "{e}"
    );
    let spec = DevicesSpec {
        ids: Some(vec!["aa-01".into(), "bad id".into()]),
        ..DevicesSpec::default()
    };
    let e = Policy::of(&spec).unwrap_err();
    assert!(e.contains("spec.devices.ids"), "{e}");
}

#[test]
fn device_ids_are_bounded() {
    for good in ["a", "lilygo-47", "Radxa_8.hd", "0"] {
        assert_eq!(validate_device_id(good), Ok(()), "{good}");
    }
    for bad in ["", "-a", "a-", "aa:bb", "a/b", "a b", &"a".repeat(64), "ü"] {
        assert!(validate_device_id(bad).is_err(), "{bad:?}");
    }
}

// R39: only the hash is kept, and it is what a token is checked against
#[test]
fn the_registry_keeps_hashes_and_round_trips() {
    let token = "0123456789abcdef".repeat(4);
    let mut registry = Registry::default();
    registry.devices.insert(
        "board-8".into(),
        DeviceRecord {
            hash: token_hash(&token),
            variant: "radxa".into(),
            enrolled_at: rfc3339(t(0)),
        },
    );
    registry.made.insert("radxa".into());
    let data = registry.to_data();
    let text: String = data
        .values()
        .map(|v| String::from_utf8_lossy(&v.0).into_owned())
        .collect();
    assert!(!text.contains(&token), "the token itself is stored");
    assert!(data.contains_key("device.board-8") && data.contains_key(MADE_KEY));
    assert_eq!(Registry::from_data(&data), registry);
    let index = ByHash::of(&registry);
    assert_eq!(index.device_of(&token), Some("board-8"));
    assert_eq!(index.device_of(&"f".repeat(64)), None);
    assert_eq!(registry.users_of("radxa"), 1);
    // what does not parse is left out, not an error
    let mut broken = data.clone();
    broken.insert("device.x".into(), ByteString(b"nothex radxa now".to_vec()));
    broken.insert("other".into(), ByteString(b"1".to_vec()));
    assert_eq!(Registry::from_data(&broken), registry);
    assert_eq!(Registry::from_data(&BTreeMap::new()), Registry::default());
    // 500 devices stay far under an object's 1 MiB
    let mut full = Registry::default();
    for i in 0..500 {
        full.devices.insert(
            format!("{i:0>63}"),
            DeviceRecord {
                hash: token_hash(&i.to_string()),
                variant: "a".repeat(63),
                enrolled_at: rfc3339(t(0)),
            },
        );
    }
    let bytes: usize = full
        .to_data()
        .iter()
        .map(|(k, v)| k.len() + v.0.len())
        .sum();
    assert!(bytes < 128 * 1024, "{bytes} bytes");
}

// R40: states follow the written last-seen time, and change only with it
#[test]
fn states_follow_silence() {
    let p = policy(30, 300, 10);
    assert_eq!(state_at(t(0), t(29), &p), DeviceState::Online);
    assert_eq!(state_at(t(0), t(30), &p), DeviceState::Late);
    assert_eq!(state_at(t(0), t(299), &p), DeviceState::Late);
    assert_eq!(state_at(t(0), t(300), &p), DeviceState::Gone);
    let list = vec![
        entry("a", 0, DeviceState::Online),
        entry("b", 100, DeviceState::Online),
    ];
    assert_eq!(next_change(&list, t(10), &p), Some(Duration::from_secs(20)));
    assert_eq!(
        next_change(&list, t(110), &p),
        Some(Duration::from_secs(20))
    );
    assert_eq!(next_change(&list[..1], t(400), &p), None);
    let s = summary(&[
        entry("a", 0, DeviceState::Online),
        entry("b", 0, DeviceState::Late),
        entry("c", 0, DeviceState::Late),
    ]);
    assert_eq!((s.total, s.online, s.late, s.gone), (3, 1, 2, 0));
}

// R40: the status lists what the registry holds; a new device is as seen at enrollment, a
// removed one goes, one listed just now is kept while the registry may lag
#[test]
fn sync_lists_the_registry() {
    let p = policy(30, 300, 10);
    let mut registry = Registry::default();
    for id in ["a", "b"] {
        registry.devices.insert(
            id.into(),
            DeviceRecord {
                hash: token_hash(id),
                variant: "radxa".into(),
                enrolled_at: rfc3339(t(0)),
            },
        );
    }
    let mut lagging = entry("c", 100, DeviceState::Online);
    lagging.enrolled_at = rfc3339(t(100));
    let current = vec![
        entry("a", 90, DeviceState::Online),
        entry("z", 5, DeviceState::Online),
        lagging,
    ];
    let synced = sync(&current, &registry, t(115), &p);
    let ids: Vec<(&str, DeviceState)> = synced.iter().map(|d| (d.id.as_str(), d.state)).collect();
    assert_eq!(
        ids,
        vec![
            ("a", DeviceState::Online),
            ("b", DeviceState::Late),
            ("c", DeviceState::Online)
        ]
    );
    assert_eq!(synced[1].last_seen, rfc3339(t(0)));
    // a lagging entry is dropped once the grace is over
    let later = sync(&current, &registry, t(100 + 61), &p);
    assert!(later.iter().all(|d| d.id != "c"));
}

// R40: 1000 polls cost a write per persistEvery per device, plus changes of state
#[test]
fn heartbeats_are_written_only_when_due() {
    let p = policy(60, 600, 10);
    let none = Reported::default();
    assert!(must_persist(None, t(0), &p, &none));
    let online = entry("a", 0, DeviceState::Online);
    assert!(!must_persist(Some(&online), t(9), &p, &none));
    assert!(must_persist(Some(&online), t(10), &p, &none));
    let late = entry("a", 0, DeviceState::Late);
    assert!(must_persist(Some(&late), t(1), &p, &none));
    let battery = Reported {
        battery_millivolts: Some(3700),
        ..Reported::default()
    };
    assert!(must_persist(Some(&online), t(1), &p, &battery));
    let mut written = heard(&online, t(1), &battery);
    assert_eq!(
        (written.state, written.last_seen.clone()),
        (DeviceState::Online, rfc3339(t(1)))
    );
    assert!(!must_persist(Some(&written), t(2), &p, &battery));
    // what is not reported again is kept
    written = heard(&written, t(20), &none);
    assert_eq!(written.reported.battery_millivolts, Some(3700));
    // a device polling every second for 1000 s after a write at 0: one write per 10 s
    let mut entry = online;
    let mut writes = 0;
    for s in 0..1000 {
        if must_persist(Some(&entry), t(s), &p, &none) {
            entry = heard(&entry, t(s), &none);
            writes += 1;
        }
    }
    assert_eq!(writes, 99);
}

// R40: a refresh of a last-seen time alone waits for the others of its Mutation a quarter of
// persistEvery, never so long that the written time makes a device that keeps calling look
// late (half of what lateAfter leaves), within 1 s and 5 minutes; a change of state is not a
// refresh.
#[test]
fn refreshes_wait_for_each_other_within_what_late_after_leaves() {
    let secs = |p: &Policy| p.refresh_gather().as_secs_f64();
    assert_eq!(secs(&policy(1800, 86400, 600)), 150.0, "the defaults");
    assert_eq!(
        secs(&policy(30, 1440, 10)),
        2.5,
        "the fleet's, 60 times faster"
    );
    assert_eq!(
        secs(&policy(12, 60, 10)),
        1.0,
        "lateAfter leaves 2 s: half of it"
    );
    assert_eq!(secs(&policy(11, 60, 10)), 1.0, "never under a second");
    assert_eq!(
        secs(&policy(86400, 90000, 3600)),
        300.0,
        "never over 5 minutes"
    );
    let online = entry("a", 0, DeviceState::Online);
    assert!(!changes(&online, &Reported::default()));
    assert!(changes(
        &entry("a", 0, DeviceState::Late),
        &Reported::default()
    ));
    let battery = Reported {
        battery_millivolts: Some(3700),
        ..Reported::default()
    };
    assert!(changes(&online, &battery), "a first report");
}

// R39: at 500 devices of the longest ids, each having reported everything
// and (R42) polled a sleeping variant that was not ready, the status's device list stays far
// under the 1 MiB of an object (about 263 KiB)
#[test]
fn the_device_list_of_500_devices_stays_small() {
    let devices: Vec<DeviceStatus> = (0..500)
        .map(|i| DeviceStatus {
            id: format!("{i:0>63}"),
            variant: "v".repeat(63),
            enrolled_at: rfc3339(t(0)),
            last_seen: rfc3339(t(i)),
            state: DeviceState::Online,
            reported: Reported {
                refresh_rate: Some(604_800),
                battery_millivolts: Some(10_000),
                rssi: Some(-200),
                fw_version: Some("f".repeat(64)),
                width: Some(16_384),
                height: Some(16_384),
            },
            poll: Some(crate::crd::PollStats {
                last: rfc3339(t(i)),
                interval_seconds: Some(604_800),
                lateness_seconds: Some(302_400),
                retry_at: Some(rfc3339(t(i))),
            }),
        })
        .collect();
    let json = serde_json::json!({"devices": devices, "deviceSummary": summary(&devices)});
    let bytes = serde_json::to_vec(&json).unwrap_or_default().len();
    assert!(bytes < 288 * 1024, "{bytes} bytes");
}

// R39: a device's token is found among as many devices as maxDevices allows, each by its own
// token and none by another's, whatever order the ids and the hashes come in
#[test]
fn every_device_is_found_by_its_own_token_among_many() {
    let mut registry = Registry::default();
    let token = |i: usize| format!("{i:064x}");
    for i in 0..500 {
        registry.devices.insert(
            format!("board-{i}"),
            DeviceRecord {
                hash: token_hash(&token(i)),
                variant: "radxa".into(),
                enrolled_at: "2026-12-07T00:00:00Z".into(),
            },
        );
    }
    let index = ByHash::of(&registry);
    for i in 0..500 {
        assert_eq!(
            index.device_of(&token(i)),
            Some(format!("board-{i}").as_str())
        );
    }
    assert_eq!(index.device_of(&token(500)), None);
    assert_eq!(ByHash::default().device_of(&token(0)), None, "no devices");
}
