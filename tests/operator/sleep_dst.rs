//! R42: quiet hours on both daylight-saving nights, against the control
//! plane: the operator runs with its wall clock set (libfaketime) half an hour or so before the
//! next change of Europe/Berlin's offset, inside quiet hours that end after it. The variant
//! stays idle, says when the quiet hours end, and a poll is told to come back when they end in
//! real seconds: one hour (not two) across the night that loses an hour, three (not two)
//! across the night that gains one.

use std::time::Duration;

use k8s_openapi::jiff::{Timestamp, tz::TimeZone};
use mutantops::crd::VariantState;

use super::leader::libfaketime;
use super::sleep::one_device;
use super::*;

const ZONE: &str = "Europe/Berlin";

/// The next change of `ZONE`'s offset after now that moves clocks forward (`forward`) or back.
fn next_change(forward: bool) -> Timestamp {
    let tz = TimeZone::get(ZONE).unwrap();
    let now = Timestamp::now();
    let mut before = tz.to_offset(now);
    for t in tz.following(now).take(4) {
        let after = t.offset();
        if (after > before) == forward {
            return t.timestamp();
        }
        before = after;
    }
    panic!("{ZONE} changes its offset no more within two years")
}

/// With the operator's clock at `fake_now`, inside quiet hours 01:00 to 03:30 of `ZONE`: the
/// enrolled variant is Idle until 03:30, and a poll is told to come back in about `seconds`.
async fn quiet_across(prefix: &str, fake_now: Timestamp, seconds: i64) {
    let offset = (fake_now.as_second() - Timestamp::now().as_second()).to_string();
    let preload = libfaketime();
    let f = Fixture::with_env(
        prefix,
        &[
            ("MUTANT_API_TOKEN", ADMIN),
            ("LD_PRELOAD", preload.as_str()),
            ("FAKETIME", format!("+{offset}").as_str()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
            ("FAKETIME_DONT_RESET", "1"),
        ],
    )
    .await;
    wait_api(f.operator.api_port, &f.ns.name).await;
    let sleep = json!({"warmup": "2s", "keepWarm": "60s", "maxWakePerHour": 60,
                       "quietHours": {"from": "01:00", "to": "03:30", "timeZone": ZONE}});
    let token = one_device(&f, json!({"enrollment": "Open", "sleep": sleep}), "night").await;
    let idle = f
        .wait_status::<Mutation>("m", "night Idle", |s| {
            s.variants
                .iter()
                .any(|v| v.label == "night" && v.state == VariantState::Idle)
        })
        .await;
    let night = idle.variants.iter().find(|v| v.label == "night").unwrap();
    assert_eq!(
        night.message.as_deref(),
        Some("quiet hours until 03:30 Europe/Berlin"),
        "{night:?}"
    );
    let path = format!(
        "/api/v1/namespaces/{}/mutations/m/devices/night/poll",
        f.ns.name
    );
    let reply = common::http::Request {
        headers: &[("Refresh-Rate", "60")],
        ..common::http::Request::new("GET", &path, Some(&token), None)
    }
    .send(f.operator.api_port)
    .await;
    let answer = reply.json();
    assert_eq!(answer["ready"], false, "{answer}");
    let refresh = answer["refreshSeconds"].as_i64().unwrap();
    assert!(
        (seconds - 180..=seconds).contains(&refresh),
        "told to come back in {refresh} s, not about {seconds} s: {answer}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let d = f.deployments().get("m-night").await.unwrap();
    assert_eq!(
        d.spec.and_then(|s| s.replicas),
        Some(0),
        "a poll inside quiet hours wakes nothing"
    );
}

/// R42: the night that loses an hour (02:00 CET -> 03:00 CEST). At 01:30 CET
/// the quiet hours end at 03:30 CEST, one real hour later.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn quiet_hours_across_the_night_that_loses_an_hour() {
    let change = next_change(true);
    quiet_across("sleep-dst-spring", change - Duration::from_secs(1800), 3600).await;
}

/// R42: the night that gains an hour (03:00 CEST -> 02:00 CET). At 01:30 CEST
/// the quiet hours end at 03:30 CET, three real hours later.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn quiet_hours_across_the_night_that_gains_an_hour() {
    let change = next_change(false);
    quiet_across(
        "sleep-dst-autumn",
        change - Duration::from_secs(5400),
        10800,
    )
    .await;
}
