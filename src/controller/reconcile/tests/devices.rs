//! Devices as time changes them: one gone silent, and a variant of enrollment's expired.

use std::time::{Duration, Instant};

use super::super::super::context::RESYNC_AFTER;
use super::*;
use crate::{
    crd::VariantState,
    store::{DEVICES_MANAGER, OPERATOR_MANAGER},
};

/// The series of the variants expired.
const EXPIRED: &str = "mutantops_variants_expired_total";

/// A day, in seconds.
const DAY: i64 = 24 * 3600;

/// The status the devices' writer writes: `devices` and their summary.
fn listed(devices: &[DeviceStatus]) -> Value {
    json!({"devices": devices, "deviceSummary": variant::devices::summary(devices)})
}

/// R40, R12: a device whose entry was last written two days ago, when it was Online, is Gone
/// by the clock (goneAfter 24h): the reconcile writes the device list alone, as the store
/// writes it (the Mutation read, then a merge patch of the status under the devices' field
/// manager, on the resourceVersion read), with the device Gone and the summary counting it;
/// the controller's own status, unchanged, is not written, and no Event is told.
#[tokio::test]
async fn a_device_silent_past_gone_after_is_listed_gone() {
    let devices = json!({"lateAfter": "30m", "goneAfter": "24h", "persistEvery": "10m"});
    let spec = json!({"variants": [{"label": "lobby", "instances": 1}], "devices": devices});
    let m = mutation(spec);
    let mut scene = Scene::of(&m, Vec::new());
    scene.registry(&registry(&[("board-1", "lobby")], &[]));
    let online = device("board-1", "lobby", 60, DeviceState::Online, None);
    let m = scene.heard(&m, vec![online]);
    let m = scene.settle(&m).await;

    // Two days on, its entry is as it was written then.
    let silent = device("board-1", "lobby", 2 * DAY, DeviceState::Online, None);
    let m = scene.heard(&m, vec![silent.clone()]);
    let gone = DeviceStatus {
        state: DeviceState::Gone,
        ..silent
    };
    let after = listing(&m, vec![gone.clone()]);
    scene.script(vec![
        on("GET", MUTATION, Reply::Json(200, json!(m))),
        on("PATCH", format!("{MUTATION}/status"), stored(&after)),
    ]);
    let (action, asked) = scene.reconcile(&m).await;
    let list = format!("PATCH {MUTATION}/status?&fieldManager={DEVICES_MANAGER} {MERGE}");
    assert_eq!(asked.lines(), [&*format!("GET {MUTATION} []"), &list]);
    let body = asked.body(&list);
    assert_eq!(
        body["metadata"]["resourceVersion"],
        json!(m.metadata.resource_version)
    );
    assert_eq!(body["status"], listed(&[gone]));
    assert!(asked.events.is_empty(), "{asked:?}");
    assert_eq!(action, Action::requeue(RESYNC_AFTER));
    assert!(scene.server.all_answered());
}

/// R42, R40, R26, R25: a variant that enrollment made, whose one device has been Gone for
/// longer than goneAfter + expireAfter, idles with the spec's variant whose device is gone too;
/// it is not expired while this process has watched it be due for less than ten minutes of its
/// own clock (no request at all). Once it has (the watch as if begun ten minutes ago), one
/// reconcile removes it from the spec, then its device's record and its label from the
/// devices Secret, then its device from the list, in that order, each as the store writes
/// it; one `VariantExpired` Event, counted. The spec's variant stays: it is only idled.
#[tokio::test]
async fn a_made_variant_whose_device_is_gone_expires_once_watched() {
    let sleep = json!({"expireAfter": "168h"});
    let devices =
        json!({"lateAfter": "30m", "goneAfter": "24h", "persistEvery": "10m", "sleep": sleep});
    let variants = json!([{"label": "lobby", "instances": 1}, {"label": "kiosk", "instances": 1}]);
    let m = mutation(json!({"variants": variants, "devices": devices}));
    let mut scene = Scene::of(&m, Vec::new());
    let made = registry(&[("board-1", "kiosk"), ("board-2", "lobby")], &["kiosk"]);
    scene.registry(&made);
    let kiosk = device("board-1", "kiosk", 10 * DAY, DeviceState::Gone, None);
    let lobby = device("board-2", "lobby", 10 * DAY, DeviceState::Gone, None);
    let m = scene.heard(&m, vec![kiosk, lobby.clone()]);
    let m = scene.settle(&m).await;
    let states = m.status.as_ref().map(|s| {
        let of = |v: &crate::crd::VariantStatus| (v.label.clone(), v.state);
        s.variants.iter().map(of).collect::<Vec<_>>()
    });
    let idle = |l: &str| (l.to_owned(), VariantState::Idle);
    assert_eq!(states, Some(vec![idle("lobby"), idle("kiosk")]));

    // Due by the wall clock, watched since the first reconcile only.
    let (action, asked) = scene.reconcile(&m).await;
    assert!(
        asked.writes.is_empty() && asked.events.is_empty(),
        "{asked:?}"
    );
    assert_eq!(action, Action::requeue(RESYNC_AFTER));

    // Watched for ten minutes.
    let watch = Duration::from_secs(600);
    let since = Instant::now().checked_sub(watch);
    let since = since.unwrap_or_else(|| panic!("an instant ten minutes back"));
    let expiry = &scene.ctx.expiry;
    expiry.watched(NAMESPACE, NAME, &[], watch, since);
    expiry.watched(NAMESPACE, NAME, &["kiosk".to_owned()], watch, since);
    let mut without = m.clone();
    without.spec.variants.retain(|v| v.label == "lobby");
    let unlisted = listing(&without, vec![lobby.clone()]);
    let secret = secret("snap-devices", made.to_data());
    scene.script(vec![
        on("GET", MUTATION, Reply::Json(200, json!(m))),
        on("PATCH", MUTATION, stored(&without)),
        on(
            "GET",
            format!("{SECRETS}/snap-devices"),
            Reply::Json(200, json!(secret)),
        ),
        on("PUT", format!("{SECRETS}/snap-devices"), Reply::Echo(200)),
        on("GET", MUTATION, Reply::Json(200, json!(without))),
        on("PATCH", format!("{MUTATION}/status"), stored(&unlisted)),
    ]);
    let expired = scene.counted(EXPIRED);
    let (action, asked) = scene.reconcile(&m).await;
    let spec = format!("PATCH {MUTATION}?&fieldManager={OPERATOR_MANAGER} {MERGE}");
    let records = format!("PUT {SECRETS}/snap-devices?&fieldManager=mutantops-api {JSON}");
    let list = format!("PATCH {MUTATION}/status?&fieldManager={DEVICES_MANAGER} {MERGE}");
    let get = format!("GET {MUTATION} []");
    let read = format!("GET {SECRETS}/snap-devices []");
    assert_eq!(asked.lines(), [&*get, &spec, &read, &records, &get, &list]);
    let labels = &asked.body(&spec)["spec"]["variants"];
    assert_eq!(labels.as_array().map(Vec::len), Some(1), "{labels}");
    assert_eq!(labels[0]["label"], "lobby");
    let left = registry(&[("board-2", "lobby")], &[]).to_data();
    assert_eq!(asked.body(&records)["data"], json!(left));
    assert_eq!(asked.body(&list)["status"], listed(&[lobby]));
    assert_eq!(asked.reasons(), ["VariantExpired"]);
    assert!(
        asked.events[0]
            .1
            .starts_with("removed variant(s) kiosk made by enrollment")
    );
    assert_eq!(scene.counted(EXPIRED), expired + 1);
    assert_eq!(action, Action::requeue(RESYNC_AFTER));
    assert!(scene.server.all_answered());
}
