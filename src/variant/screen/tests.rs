use super::*;
use crate::crd::{ServicePortSpec, ServiceSpec};
use crate::variant::wake::Rhythm;

fn spec(port: IntOrString) -> ScreenSpec {
    ScreenSpec {
        port,
        path: "/screen.bmp".to_string(),
        paths: Default::default(),
        refresh_every: None,
        timeout: None,
        max_bytes: None,
        types: Vec::new(),
    }
}

#[test]
fn defaults_and_bounds_of_spec_screen() {
    // R53: 15m, 10s, 256 KiB, bmp/png/jpeg by default; each bound refused naming its field.
    let p = ScreenPolicy::parse(&spec(IntOrString::Int(80))).unwrap();
    assert_eq!(p.refresh_every, Duration::from_secs(900));
    assert_eq!(p.timeout, Duration::from_secs(10));
    assert_eq!(p.max_bytes, 262_144);
    assert_eq!(p.types, ["image/bmp", "image/png", "image/jpeg"]);
    let refused = |edit: fn(&mut ScreenSpec), field: &str| {
        let mut s = spec(IntOrString::Int(80));
        edit(&mut s);
        let e = ScreenPolicy::parse(&s).unwrap_err();
        assert!(e.contains(field), "{e}");
    };
    refused(|s| s.refresh_every = Some("5s".into()), "refreshEvery");
    refused(|s| s.timeout = Some("61s".into()), "timeout");
    refused(|s| s.timeout = Some("0s".into()), "timeout");
    refused(|s| s.max_bytes = Some(2 * 1024 * 1024), "maxBytes");
    refused(|s| s.max_bytes = Some(0), "maxBytes");
    refused(|s| s.path = "screen.bmp".into(), "path");
    refused(|s| s.path = "/a b".into(), "path");
    refused(|s| s.port = IntOrString::Int(0), "port");
    refused(|s| s.paths = [("b".into(), "x".into())].into(), "paths.b");
}

#[test]
fn a_variant_may_have_a_path_of_its_own() {
    let mut s = spec(IntOrString::Int(80));
    s.paths = [("b".into(), "/b.bmp".into())].into();
    let p = ScreenPolicy::parse(&s).unwrap();
    let variant = |label: &str| -> Variant {
        serde_json::from_value(serde_json::json!({"label": label})).unwrap()
    };
    assert_eq!(p.path_of(&variant("a")), "/screen.bmp");
    assert_eq!(p.path_of(&variant("b")), "/b.bmp");
}

#[test]
fn the_port_is_one_of_the_owners_service() {
    let service = |name: Option<&str>, port: i32| ServiceSpec {
        ports: vec![ServicePortSpec {
            name: name.map(str::to_string),
            port,
            target_port: None,
            protocol: None,
            node_port: None,
            app_protocol: None,
        }],
        ..serde_json::from_value(serde_json::json!({"ports": []})).unwrap()
    };
    let by_number = ScreenPolicy::parse(&spec(IntOrString::Int(80))).unwrap();
    assert_eq!(by_number.port_name(Some(&service(None, 80))).unwrap(), "");
    assert_eq!(
        by_number
            .port_name(Some(&service(Some("http"), 80)))
            .unwrap(),
        "http"
    );
    assert!(
        by_number
            .port_name(Some(&service(None, 81)))
            .unwrap_err()
            .contains("no such port")
    );
    assert!(
        by_number
            .port_name(None)
            .unwrap_err()
            .contains("spec.service")
    );
    let by_name = ScreenPolicy::parse(&spec(IntOrString::String("http".into()))).unwrap();
    assert_eq!(
        by_name
            .port_name(Some(&service(Some("http"), 8080)))
            .unwrap(),
        "http"
    );
    assert!(
        by_name
            .port_name(Some(&service(Some("web"), 8080)))
            .is_err()
    );
}

#[test]
fn an_answer_is_kept_only_when_it_is_a_picture_within_the_bounds() {
    // R53: non-2xx, a type not accepted, over maxBytes and empty keep the last good screen.
    let p = ScreenPolicy::parse(&spec(IntOrString::Int(80))).unwrap();
    assert_eq!(
        judge(&p, 200, Some("image/BMP; q=1"), 48_062).unwrap(),
        "image/bmp"
    );
    assert_eq!(
        judge(&p, 500, Some("image/bmp"), 10).unwrap_err().0,
        Failure::Status
    );
    assert_eq!(
        judge(&p, 200, Some("text/html"), 10).unwrap_err().0,
        Failure::Type
    );
    assert_eq!(judge(&p, 200, None, 10).unwrap_err().0, Failure::Type);
    assert_eq!(
        judge(&p, 200, Some("image/png"), 262_145).unwrap_err().0,
        Failure::TooLarge
    );
    assert_eq!(
        judge(&p, 200, Some("image/png"), 0).unwrap_err().0,
        Failure::Empty
    );
}

#[test]
fn a_failed_fetch_is_tried_again_sooner_than_a_refresh() {
    let p = ScreenPolicy::parse(&spec(IntOrString::Int(80))).unwrap();
    let good = VariantScreen::default();
    let failed = |reason: Failure| VariantScreen {
        stale: true,
        reason: Some(reason.reason().to_owned()),
        ..VariantScreen::default()
    };
    assert_eq!(
        p.due_in(Duration::from_secs(60), &good, true),
        Duration::from_secs(840)
    );
    assert_eq!(
        p.due_in(Duration::from_secs(10), &failed(Failure::Status), true),
        Duration::from_secs(20)
    );
    assert_eq!(
        p.due_in(Duration::from_secs(1000), &good, false),
        Duration::ZERO
    );
    // No endpoint while the renderer is ready: the EndpointSlice lags; soon again.
    let none = failed(Failure::NoEndpoint);
    assert_eq!(p.due_in(Duration::ZERO, &none, true), RETRY_NO_ENDPOINT);
    assert_eq!(p.due_in(Duration::ZERO, &none, false), RETRY_FAILED);
}

#[test]
fn the_etag_is_the_quoted_sha256() {
    assert_eq!(
        etag_of(b"abc"),
        "\"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\""
    );
    assert_eq!(screen_secret_name("snap", "lobby"), "snap-screen-lobby");
}

#[test]
fn the_next_fetch_is_due_a_refresh_after_a_good_one_and_soon_after_a_failure() {
    // R53: the rhythm sleep follows.
    let p = ScreenPolicy::parse(&spec(IntOrString::Int(80))).unwrap();
    let t = |s: i64| Timestamp::from_second(1_800_000_000 + s).unwrap();
    let now = t(1000);
    let good = VariantScreen {
        fetched_at: Some(t(100).to_string()),
        tried_at: Some(t(100).to_string()),
        ..VariantScreen::default()
    };
    assert_eq!(
        rhythm(&p, &good, now),
        Rhythm {
            fetched: Some(t(100)),
            due: t(1000)
        }
    );
    let failed = VariantScreen {
        tried_at: Some(t(990).to_string()),
        stale: true,
        ..good.clone()
    };
    assert_eq!(
        rhythm(&p, &failed, now),
        Rhythm {
            fetched: Some(t(100)),
            due: t(1020)
        }
    );
    assert_eq!(
        rhythm(&p, &VariantScreen::default(), now),
        Rhythm {
            fetched: None,
            due: now
        }
    );
}

#[test]
fn a_screen_is_stale_a_refresh_and_a_timeout_after_its_fetch() {
    let mut s = spec(IntOrString::Int(80));
    let after = |s: &ScreenSpec| ScreenPolicy::parse(s).map(|p| p.stale_after());
    assert_eq!(after(&s), Ok(Duration::from_secs(910)));
    s.refresh_every = Some("1m".into());
    s.timeout = Some("5s".into());
    assert_eq!(after(&s), Ok(Duration::from_secs(65)));
    s.timeout = Some("soon".into());
    assert!(after(&s).is_err());
}
