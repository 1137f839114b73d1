//! R52: one writer of a Mutation and its Secrets, against the local control plane. The bounds
//! it holds are held on every path that can grow a Mutation: a token adding variants and a
//! board enrolling with a variant of its own meet the size bound (413 naming it) and leave the
//! Mutation writable; a board cannot enroll into a label its token could not have made; a
//! device polling a sleeping variant ten times a second costs one status write per wake.

use std::time::{Duration, Instant};

use mutantops::crd::{SleepState, VariantState};

use super::audit::{audit_events, audit_log, log_size};
use super::devices::{create, create_with, enroll, enrolled};
use super::sleep::poll;
use super::*;

/// Sixteen env entries of 8,000 characters each: about 128 KB of a variant.
fn heavy_env() -> Value {
    let value = "x".repeat(8000);
    let env: serde_json::Map<String, Value> = (0..16)
        .map(|i| (format!("BLOB{i}"), Value::String(value.clone())))
        .collect();
    Value::Object(env)
}

/// What the bounds of a token must let it send: sixteen env entries of 8,000 characters.
fn heavy_access() -> Value {
    let names: Vec<String> = (0..16).map(|i| format!("BLOB{i}")).collect();
    json!({"maxVariants": 50, "maxEnv": 16, "maxValueLength": 8192, "env": names})
}

/// The error message of a refusal.
fn error_of(reply: &common::http::Reply) -> String {
    serde_json::from_str::<Value>(&reply.body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Asserts that `reply` is the store's refusal of a Mutation grown past its size bound.
fn assert_size_refusal(reply: &common::http::Reply) {
    assert_eq!(reply.status, 413, "{reply:?}");
    let error = error_of(reply);
    assert!(
        error.contains("over the bound of 524288 bytes") && error.contains("nothing was changed"),
        "the refusal names the bound: {error}"
    );
}

/// R52: a Mutation's token adds heavy variants until the next would take the Mutation past
/// 512 KiB: that one is refused with 413 naming the bound (never the API server's "request is
/// too large"), nothing of it is stored, and the Mutation stays writable: a variant removed,
/// a small one added.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_token_cannot_grow_a_mutation_past_the_size_bound() {
    let f = Fixture::with_api("store-size").await;
    let body = json!({
        "name": "m",
        "deployment": base("m"),
        "variants": [],
        "deviceAccess": heavy_access(),
    });
    let created = f.call("POST", "/mutations", Some(ADMIN), Some(&body)).await;
    assert_eq!(created.status, 201, "{created:?}");
    let token = f.token("m").await;
    let mut added = Vec::new();
    let refused = loop {
        let label = format!("heavy{}", added.len());
        let variant = json!({"label": label, "instances": 0, "env": heavy_env()});
        let reply = f.add_variant("m", &token, &variant).await;
        if reply.status != 201 {
            break reply;
        }
        added.push(label);
        assert!(added.len() <= 5, "5 variants of 128 KB taken: {added:?}");
    };
    assert_size_refusal(&refused);
    assert!(added.len() >= 3, "{added:?} before the refusal");
    assert_eq!(
        f.spec_labels("m").await,
        added,
        "the refused variant is not stored"
    );

    let path = format!("/mutations/m/variants/{}", added[0]);
    let removed = f.call("DELETE", &path, Some(&token), None).await;
    assert!(matches!(removed.status, 200 | 204), "{removed:?}");
    let small = json!({"label": "small", "instances": 0, "env": {"BLOB0": "a"}});
    let reply = f.add_variant("m", &token, &small).await;
    assert_eq!(reply.status, 201, "writable after the refusal: {reply:?}");
}

/// R52 through enrollment: boards enrolling with heavy variants of their own meet the same
/// bound (413 naming it); the refused board is not enrolled, and a board still enrolls into an
/// existing variant afterwards.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn enrollment_cannot_grow_a_mutation_past_the_size_bound() {
    let f = Fixture::with_api("store-enroll").await;
    let key = create(&f, "m", json!({"enrollment": "Open"}), heavy_access()).await;
    let mut enrolled_ids = Vec::new();
    let refused = loop {
        let id = format!("board-{}", enrolled_ids.len());
        let variant = json!({"label": id, "instances": 0, "env": heavy_env()});
        let reply = enroll(&f, "m", &key, json!({"id": id, "variant": variant})).await;
        if reply.status != 201 {
            break (id, reply);
        }
        enrolled_ids.push(id);
        assert!(
            enrolled_ids.len() <= 5,
            "5 boards of 128 KB: {enrolled_ids:?}"
        );
    };
    let (refused_id, reply) = refused;
    assert_size_refusal(&reply);
    assert!(
        !f.spec_labels("m").await.contains(&refused_id),
        "the refused board's variant is not stored"
    );
    let listed = f
        .call("GET", "/mutations/m/devices", Some(ADMIN), None)
        .await;
    assert_eq!(listed.status, 200, "{listed:?}");
    assert!(
        !listed.body.contains(&format!("\"{refused_id}\"")),
        "the refused board is not enrolled: {}",
        listed.body
    );
    // Into the variant the owner opened to enrollment (R39).
    let joined = enroll(&f, "m", &key, json!({"id": "small", "label": "admin-only"})).await;
    assert_eq!(joined.status, 201, "writable after the refusal: {joined:?}");
}

/// R32, R39, R52: `spec.deviceAccess.labelPattern` bounds the labels a token may use, and
/// enrolling into an existing variant keeps to it: the enrollment key cannot hand a board a
/// token for the admin's variant (not marked `enrollable`, outside the pattern), an owner's
/// variant the pattern matches is open to boards, another board's is not, and the admin can
/// enroll anywhere.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn enrollment_into_an_existing_label_keeps_to_the_label_pattern() {
    let f = Fixture::with_api("store-pattern").await;
    let key = create_with(
        &f,
        "m",
        json!([{"label": "admin-only", "instances": 0}, {"label": "board-hall", "instances": 0}]),
        json!({"enrollment": "Open"}),
        json!({"labelPattern": "board-*"}),
    )
    .await;
    let reply = enroll(
        &f,
        "m",
        &key,
        json!({"id": "sneaky", "label": "admin-only"}),
    )
    .await;
    assert_eq!(reply.status, 403, "{reply:?}");
    let error = error_of(&reply);
    assert!(
        error.contains("labelPattern") && error.contains("admin-only"),
        "{error}"
    );
    enrolled(
        &f,
        "m",
        &key,
        json!({"id": "board-1", "variant": {"label": "board-1", "instances": 0}}),
    )
    .await;
    // The pattern opens the owner's variants it matches, never another board's.
    enrolled(
        &f,
        "m",
        &key,
        json!({"id": "board-2", "label": "board-hall"}),
    )
    .await;
    let reply = enroll(&f, "m", &key, json!({"id": "board-3", "label": "board-1"})).await;
    assert_eq!(reply.status, 403, "{reply:?}");
    assert!(
        error_of(&reply).contains("another board's enrollment"),
        "{reply:?}"
    );
    enrolled(&f, "m", ADMIN, json!({"id": "desk", "label": "admin-only"})).await;
}

/// A poll of device `id` of Mutation `m` with `token`, saying it polls every hour.
async fn poll_hourly(f: &Fixture, id: &str, token: &str) -> common::http::Reply {
    poll(f, "m", id, token, &[("Refresh-Rate", "3600")]).await
}

/// R42, R52: a device polling its idle variant ten times a second for ten seconds wakes it,
/// and costs one write of the device list for that wake (counted in the API server's audit
/// log), where every poll used to be written; the controller's own status writes stay few.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn polls_of_a_sleeping_variant_cost_one_status_write_per_wake() {
    let audit = audit_log();
    let f = Fixture::with_api("store-polls").await;
    let sleep =
        json!({"idleAfter": "2s", "warmup": "2s", "keepWarm": "14s", "maxWakePerHour": 3600});
    let devices = json!({"enrollment": "Open", "lateAfter": "60s", "goneAfter": "120s",
        "persistEvery": "30s", "sleep": sleep});
    let key = create(&f, "m", devices, json!({})).await;
    let token = enrolled(
        &f,
        "m",
        &key,
        json!({"id": "d", "variant": {"label": "d", "instances": 1}}),
    )
    .await;
    // One poll teaches that the device comes back in an hour: keepWarm after it, the variant
    // sleeps.
    assert_eq!(poll_hourly(&f, "d", &token).await.status, 200);
    let idle = f
        .wait_status::<Mutation>("m", "d Idle", |s| {
            s.variants
                .iter()
                .any(|v| v.label == "d" && v.state == VariantState::Idle)
        })
        .await;
    let wakes = |s: &OwnerStatus| {
        s.variants
            .iter()
            .find(|v| v.label == "d")
            .and_then(|v| v.sleep.as_ref())
            .map_or(0, |s| s.wakes.len())
    };
    let wakes_before = wakes(&idle);
    let offset = log_size(&audit);

    let started = Instant::now();
    for _ in 0..100 {
        let reply = poll_hourly(&f, "d", &token).await;
        assert_eq!(reply.status, 200, "{reply:?}");
        tokio::time::sleep(Duration::from_millis(90)).await;
    }
    let took = started.elapsed();
    let awake = f
        .wait_status::<Mutation>("m", "d Ready again", |s| {
            s.variants.iter().any(|v| {
                v.label == "d"
                    && v.state == VariantState::Ready
                    && v.sleep
                        .as_ref()
                        .is_some_and(|s| s.state == SleepState::Awake)
            })
        })
        .await;
    // What the last polls and the wake bring is written within a second or two.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let woke = wakes(&awake) - wakes_before;
    let status_writes: Vec<String> = audit_events(&audit, offset)
        .into_iter()
        .filter(|e| e["verb"] == "patch")
        .filter_map(|e| e["requestURI"].as_str().map(str::to_owned))
        .filter(|uri| uri.contains(&format!("/namespaces/{}/mutations/m/status", f.ns.name)))
        .collect();
    let device_writes = status_writes
        .iter()
        .filter(|uri| uri.contains("fieldManager=mutantops-devices"))
        .count();
    eprintln!(
        "100 polls in {took:?}: {woke} wake(s), {device_writes} device-list write(s), {} status \
         write(s) in all",
        status_writes.len()
    );
    assert_eq!(woke, 1, "the polls woke the variant once");
    assert!(
        device_writes <= woke,
        "{device_writes} device-list writes for {woke} wake: {status_writes:#?}"
    );
    assert!(
        status_writes.len() <= 10,
        "the controller's status writes stay few: {status_writes:#?}"
    );
}
