//! R42: variants that sleep with their displays, against the local control plane,
//! with durations of seconds: a variant no device needs goes to zero replicas with its spec
//! untouched and the Mutation Ready; a poll answers at once and wakes it; a device that says
//! when it comes back finds its variant started ahead of its poll; a variant made by
//! enrollment expires when its device is gone while a spec variant stays; a site whose
//! devices went silent together expires nothing until the silence is accepted.

use std::time::{Duration, Instant};

use kube::api::{ListParams, Patch, PatchParams};
use mutantops::crd::{SleepState, VariantState, VariantStatus, WakeCause};

use super::devices::{create, enrolled};
use super::*;

/// Variant `label`'s status line.
fn variant<'a>(s: &'a OwnerStatus, label: &str) -> Option<&'a VariantStatus> {
    s.variants.iter().find(|v| v.label == label)
}

fn state_of(s: &OwnerStatus, label: &str) -> Option<VariantState> {
    variant(s, label).map(|v| v.state)
}

fn replicas(d: &Deployment) -> Option<i32> {
    d.spec.as_ref().and_then(|s| s.replicas)
}

/// Creates Mutation `m` with `devices` and enrolls device `id` into a variant of its own,
/// labelled `id`; returns the device's token.
pub(super) async fn one_device(f: &Fixture, devices: serde_json::Value, id: &str) -> String {
    let key = create(f, "m", devices, json!({})).await;
    enrolled(f, "m", &key, json!({"id": id, "variant": {"label": id}})).await
}

/// Waits until variant `label` of Mutation `m` has a ready replica, as a poll sees it.
async fn ready(f: &Fixture, label: &str) {
    f.wait_status::<Mutation>("m", &format!("{label} Ready"), |s| {
        variant(s, label).is_some_and(|v| v.state == VariantState::Ready && v.ready_replicas > 0)
    })
    .await;
}

/// A poll of device `id` with `token` and extra headers.
pub(super) async fn poll(
    f: &Fixture,
    name: &str,
    id: &str,
    token: &str,
    headers: &[(&str, &str)],
) -> common::http::Reply {
    let path = format!(
        "/api/v1/namespaces/{}/mutations/{name}/devices/{id}/poll",
        f.ns.name
    );
    common::http::Request {
        headers,
        ..common::http::Request::new("GET", &path, Some(token), None)
    }
    .send(f.operator.api_port)
    .await
}

/// R42: a spec variant no device uses goes idle after idleAfter (zero
/// replicas, spec instances kept, state Idle and why, Mutation Ready, summary counting it);
/// fifty devices enrolled into it poll together: each answered at once `ready: false` with
/// Retry-After, and the polls wake it, once; a later poll finds it ready.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn an_unused_variant_idles_and_a_poll_wakes_it() {
    let f = Fixture::with_api("sleep-wake").await;
    let sleep =
        json!({"idleAfter": "3s", "warmup": "2s", "keepWarm": "2s", "maxWakePerHour": 3600});
    let key = create(
        &f,
        "m",
        json!({"enrollment": "Open", "lateAfter": "30s", "goneAfter": "60s", "persistEvery": "10s", "sleep": sleep}),
        json!({}),
    )
    .await;
    let add = f
        .add_variant(
            "m",
            ADMIN,
            &json!({"label": "lobby", "instances": 2, "enrollable": true}),
        )
        .await;
    assert_eq!(add.status, 201, "{add:?}");
    let idle = f
        .wait_status::<Mutation>("m", "lobby Idle", |s| {
            state_of(s, "lobby") == Some(VariantState::Idle)
        })
        .await;
    let lobby = variant(&idle, "lobby").unwrap();
    assert_eq!(
        lobby.message.as_deref(),
        Some("no device uses it"),
        "{lobby:?}"
    );
    assert_eq!(
        lobby.sleep.as_ref().map(|s| s.state),
        Some(SleepState::Idle)
    );
    assert!(
        idle.summary.ends_with("variants ready (2 idle)"),
        "{}",
        idle.summary
    );
    let ready = idle.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(
        ready.status, "True",
        "idle is as the owner wants it: {ready:?}"
    );
    f.wait_deployment("m-lobby", "at zero", |d| replicas(d) == Some(0))
        .await;
    let m = f.mutations().get("m").await.unwrap();
    let spec = m.spec.variants.iter().find(|v| v.label == "lobby").unwrap();
    assert_eq!(spec.instances, 2, "the spec is untouched");

    // Fifty devices enroll into it, which wakes it (Online devices that poll at no known
    // interval yet), and each polls, saying it comes back in an hour: after keepWarm it sleeps.
    let mut boards = Vec::new();
    for i in 0..50 {
        let id = format!("board-{i}");
        let token = enrolled(&f, "m", &key, json!({"id": id, "label": "lobby"})).await;
        boards.push((id, token));
    }
    let hourly = [("Refresh-Rate", "3600")];
    let first = poll(&f, "m", "board-0", &boards[0].1, &hourly).await;
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.json()["refreshSeconds"], 3600, "{}", first.body);
    for (id, token) in &boards[1..] {
        assert_eq!(poll(&f, "m", id, token, &hourly).await.status, 200);
    }
    let asleep = f
        .wait_status::<Mutation>("m", "lobby asleep until the next poll", |s| {
            variant(s, "lobby").is_some_and(|v| {
                v.state == VariantState::Idle
                    && v.message
                        .as_deref()
                        .is_some_and(|m| m.contains("'s next poll, expected at"))
            })
        })
        .await;
    let wakes_before = variant(&asleep, "lobby")
        .unwrap()
        .sleep
        .as_ref()
        .unwrap()
        .wakes
        .len();
    f.wait_deployment("m-lobby", "at zero again", |d| replicas(d) == Some(0))
        .await;
    // The operator answers from its caches, which hear of its own status write a moment
    // after the API server shows it: the polls below start once it answers lobby idle too.
    let lobby = format!(
        "/api/v1/namespaces/{}/mutations/m/variants/lobby",
        f.ns.name
    );
    common::wait_for("the operator's answer: lobby idle", CONVERGE, || async {
        let reply = common::http::Request::new("GET", &lobby, Some(ADMIN), None)
            .send(f.operator.api_port)
            .await;
        let state = reply.json()["status"]["state"].clone();
        if state == "Idle" { Ok(()) } else { Err(state) }
    })
    .await;

    // The fifty poll together, early: each answered at once, not ready, told when to retry.
    let polls = boards
        .iter()
        .map(|(id, token)| poll(&f, "m", id, token, &hourly));
    let started = Instant::now();
    let replies = futures::future::join_all(polls).await;
    let took = started.elapsed();
    for reply in &replies {
        assert_eq!(reply.status, 200, "{reply:?}");
        let answer = reply.json();
        assert_eq!(answer["ready"], false, "{answer}");
        assert_eq!(answer["retryAfterSeconds"], 2, "{answer}");
        assert_eq!(reply.header("retry-after"), Some("2"));
    }
    assert!(
        took < Duration::from_secs(3),
        "fifty polls held their sockets for {took:?}"
    );
    // They wake it once: two replicas, Awake, woken by a poll. A device comes back as it was
    // told (Retry-After) until its variant is ready, and finds it up each time.
    f.wait_deployment("m-lobby", "woken", |d| replicas(d) == Some(2))
        .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let again = loop {
        let reply = poll(&f, "m", "board-7", &boards[7].1, &hourly).await;
        assert_eq!(reply.status, 200, "{reply:?}");
        let answer = reply.json();
        if answer["ready"] == true {
            break answer;
        }
        assert!(Instant::now() < deadline, "never ready: {answer}");
        let wait = answer["retryAfterSeconds"].as_u64().unwrap();
        tokio::time::sleep(Duration::from_secs(wait)).await;
    };
    assert_eq!(again.get("retryAfterSeconds"), None, "{again}");
    let awake = f
        .wait_status::<Mutation>("m", "lobby Ready", |s| {
            state_of(s, "lobby") == Some(VariantState::Ready)
        })
        .await;
    let sleep = variant(&awake, "lobby").unwrap().sleep.clone().unwrap();
    assert_eq!(
        (sleep.state, sleep.cause),
        (SleepState::Awake, Some(WakeCause::Poll))
    );
    assert_eq!(
        sleep.wakes.len(),
        wakes_before + 1,
        "one wake for fifty polls: {sleep:?}"
    );

    // R25: the series say it: two wakes (the enrollment's, counted as a poll's or as
    // unknown by whether the first poll was written before the leader saw the new device, and
    // the fifty polls'), each with its time to ready, fifty late polls, one variant awake and
    // one idle.
    let metrics = common::http::request(f.operator.metrics_port, "GET", "/metrics", None, None)
        .await
        .body;
    let value = |series: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {series}"))
    };
    let by_poll = value("mutantops_variant_wakes_total{cause=\"poll\"}");
    let unknown = value("mutantops_variant_wakes_total{cause=\"unknown\"}");
    assert!(
        by_poll >= 1.0 && by_poll + unknown == 2.0,
        "{by_poll} + {unknown}"
    );
    assert_eq!(value("mutantops_variant_wake_to_ready_seconds_count"), 2.0);
    assert!(value("mutantops_late_wakes_total") >= 50.0);
    assert_eq!(value("mutantops_sleeping_variants{state=\"Awake\"}"), 1.0);
    assert_eq!(value("mutantops_sleeping_variants{state=\"Idle\"}"), 1.0);
}

/// R42: a device that says it polls every 12 s (`Refresh-Rate`) finds its
/// variant down between polls and up before the next one, started ahead without a poll; the
/// wake is counted as `ahead`.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_variant_wakes_ahead_of_the_next_expected_poll() {
    let f = Fixture::with_api("sleep-ahead").await;
    let sleep =
        json!({"idleAfter": "60s", "warmup": "3s", "keepWarm": "2s", "maxWakePerHour": 3600});
    let token = one_device(&f, json!({"enrollment": "Open", "lateAfter": "60s", "goneAfter": "120s", "persistEvery": "30s", "sleep": sleep}), "epaper").await;
    // Enrolled, it is up (its interval unknown); a poll finds it ready once the replica's cache
    // (which answers polls, R42) has the status the test saw through its own watch: that
    // cache can trail by a moment, and a poll before it says to ask again.
    ready(&f, "epaper").await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let first = poll(&f, "m", "epaper", &token, &[("Refresh-Rate", "12")]).await;
        assert_eq!(first.status, 200, "{first:?}");
        assert_eq!(first.json()["refreshSeconds"], 12, "{}", first.body);
        if first.json()["ready"] == true {
            break;
        }
        assert!(Instant::now() < deadline, "never ready: {}", first.body);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let polled = Instant::now();
    // After keepWarm (2 s) it goes down ...
    f.wait_deployment("m-epaper", "down after keepWarm", |d| {
        replicas(d) == Some(0)
    })
    .await;
    let down = polled.elapsed();
    // ... and comes up again before the next poll is due (12 s - 3 s warmup - 2 s margin).
    f.wait_deployment("m-epaper", "up ahead of the poll", |d| {
        replicas(d) == Some(1)
    })
    .await;
    let up = polled.elapsed();
    assert!(down < Duration::from_secs(6), "down after {down:?}");
    assert!(
        up >= Duration::from_secs(5) && up < Duration::from_secs(12),
        "up {up:?} after the poll, expected from 7 s to before 12 s"
    );
    let status = f
        .wait_status::<Mutation>("m", "awake ahead", |s| {
            variant(s, "epaper")
                .and_then(|v| v.sleep.as_ref())
                .is_some_and(|s| s.state == SleepState::Awake && s.cause == Some(WakeCause::Ahead))
        })
        .await;
    let reason = &variant(&status, "epaper")
        .unwrap()
        .sleep
        .as_ref()
        .unwrap()
        .reason;
    assert!(reason.contains("device epaper is expected at"), "{reason}");
    let metrics = common::http::request(f.operator.metrics_port, "GET", "/metrics", None, None)
        .await
        .body;
    assert!(
        metrics.contains("mutantops_variant_wakes_total{cause=\"ahead\"} 1"),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("wakes"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// R42: a variant made by enrollment whose device is Gone for expireAfter is
/// removed with its device's record (Event VariantExpired); a spec variant whose device is
/// gone too is only idled. While more than half the namespace's devices went silent together
/// (siteSilentMin 2), nothing expires and condition SiteSilent says why, until the silence is
/// accepted with annotation mutantops.neiam.org/silence-accepted.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn gone_devices_expire_their_made_variants_unless_the_site_went_silent() {
    let f = Fixture::with_api("sleep-expire").await;
    let sleep = json!({"idleAfter": "1s", "warmup": "1s", "keepWarm": "1s", "expireAfter": "2s",
                       "maxWakePerHour": 3600, "siteSilentMin": 2});
    let key = create(
        &f,
        "m",
        json!({"enrollment": "Open", "lateAfter": "2s", "goneAfter": "4s", "persistEvery": "1s", "sleep": sleep}),
        json!({}),
    )
    .await;
    // Two devices, silent together from the start: the site is silent.
    enrolled(
        &f,
        "m",
        &key,
        json!({"id": "a", "variant": {"label": "made-a"}}),
    )
    .await;
    enrolled(&f, "m", &key, json!({"id": "b", "label": "admin-only"})).await;
    let silent = f
        .wait_status::<Mutation>("m", "SiteSilent", |s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "SiteSilent" && c.status == "True")
        })
        .await;
    let c = silent
        .conditions
        .iter()
        .find(|c| c.type_ == "SiteSilent")
        .unwrap();
    assert!(c.message.contains("2 of 2 devices"), "{c:?}");
    // Gone for longer than expireAfter (and the operator's own watch of it), still there.
    f.wait_status::<Mutation>("m", "both Gone", |s| {
        s.device_summary.as_ref().is_some_and(|d| d.gone == 2)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let m = f.mutations().get("m").await.unwrap();
    assert!(
        m.spec.variants.iter().any(|v| v.label == "made-a"),
        "expired while the site was silent"
    );
    // The silence is accepted: made-a expires, admin-only stays.
    let accept = json!({"metadata": {"annotations": {
        "mutantops.neiam.org/silence-accepted": k8s_openapi::jiff::Timestamp::now().to_string()
    }}});
    f.mutations()
        .patch("m", &PatchParams::default(), &Patch::Merge(&accept))
        .await
        .unwrap();
    f.wait_gone("m-made-a").await;
    let m = f.mutations().get("m").await.unwrap();
    let labels: Vec<&str> = m.spec.variants.iter().map(|v| v.label.as_str()).collect();
    assert_eq!(labels, ["admin-only"]);
    let status = f.mutations().get("m").await.unwrap().status.unwrap();
    assert!(
        status.conditions.iter().all(|c| c.type_ != "SiteSilent"),
        "{:?}",
        status.conditions
    );
    let events: Api<k8s_openapi::api::events::v1::Event> = f.ns.api();
    let expired = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("VariantExpired"))
        .count();
    assert_eq!(expired, 1);
    let secret: Api<k8s_openapi::api::core::v1::Secret> = f.ns.api();
    let registry = secret.get("m-devices").await.unwrap();
    let keys: Vec<String> = registry.data.unwrap_or_default().into_keys().collect();
    assert!(!keys.iter().any(|k| k == "device.a"), "{keys:?}");
}

/// The replicas of Deployment `name`, sampled every 200 ms for `span` from `start`, as
/// (milliseconds since `start`, replicas) at each change; `during` is run once at each of its
/// offsets (a restart, say).
async fn replicas_over_time(
    f: &mut Fixture,
    name: &str,
    start: Instant,
    span: Duration,
    restarts: &[Duration],
) -> Vec<(u128, Option<i32>)> {
    let mut seen: Vec<(u128, Option<i32>)> = Vec::new();
    let mut pending: Vec<Duration> = restarts.to_vec();
    while start.elapsed() < span {
        if pending.first().is_some_and(|at| start.elapsed() >= *at) {
            pending.remove(0);
            // A new leader: the old one dies without a word, the new process takes the Lease
            // once it expires (2 s here).
            f.operator.kill();
            f.operator.launch();
        }
        let d = f.deployments().get_opt(name).await.unwrap();
        let now = d.as_ref().and_then(replicas);
        if seen.last().is_none_or(|(_, r)| *r != now) {
            seen.push((start.elapsed().as_millis(), now));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    seen
}

/// R42, R30: a device polling every 20 s; the leader is killed and
/// replaced while its variant sleeps and again while it is up. The new leaders resume from
/// what is written: the variant goes down after keepWarm, comes up ahead of the next poll
/// (not early, not late) and goes down when that window ends, and each start costs at most two
/// Deployment writes and no read (counted in the audit log).
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_new_leader_neither_wakes_nor_idles_early() {
    let mut f = Fixture::with_env(
        "sleep-leader",
        &[
            ("MUTANT_API_TOKEN", ADMIN),
            ("MUTANT_LEASE_DURATION_SECONDS", "2"),
        ],
    )
    .await;
    wait_api(f.operator.api_port, &f.ns.name).await;
    let sleep =
        json!({"idleAfter": "60s", "warmup": "3s", "keepWarm": "2s", "maxWakePerHour": 3600});
    let token = one_device(&f, json!({"enrollment": "Open", "lateAfter": "120s", "goneAfter": "240s", "persistEvery": "60s", "sleep": sleep}), "epaper").await;
    f.wait_deployment("m-epaper", "up", |d| replicas(d) == Some(1))
        .await;
    ready(&f, "epaper").await;
    let audit = audit_log();
    let offset = log_size(&audit);
    // The poll's time as written is whole seconds: start the clock at the second it falls in.
    let before = k8s_openapi::jiff::Timestamp::now();
    let reply = poll(&f, "m", "epaper", &token, &[("Refresh-Rate", "20")]).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let start =
        Instant::now() - Duration::from_nanos(u64::from(before.subsec_nanosecond().unsigned_abs()));
    // Up until 2 s (keepWarm), down until 20 - 3 - 2 = 15 s, up until 20 + 2 + 2 = 24 s.
    let seen = replicas_over_time(
        &mut f,
        "m-epaper",
        start,
        Duration::from_secs(30),
        &[Duration::from_secs(6), Duration::from_secs(17)],
    )
    .await;
    let at = |r: i32| -> Vec<u128> {
        seen.iter()
            .filter(|(_, n)| *n == Some(r))
            .map(|(t, _)| *t)
            .collect()
    };
    let (downs, ups) = (at(0), at(1));
    assert_eq!(
        downs.len(),
        2,
        "down after keepWarm and after the window: {seen:?}"
    );
    assert_eq!(
        ups.len(),
        2,
        "up at the start, and once ahead of the next poll: {seen:?}"
    );
    assert!(
        downs[0] >= 1_500 && downs[0] < 6_000,
        "down at {} ms: {seen:?}",
        downs[0]
    );
    assert!(
        ups[1] >= 14_000 && ups[1] < 20_000,
        "up ahead at {} ms, due at 15 s: {seen:?}",
        ups[1]
    );
    assert!(
        downs[1] >= 23_000,
        "down at {} ms, the window ends at 24 s: {seen:?}",
        downs[1]
    );
    // The audit log: one start (ahead), and its two writes (up, down); the first stop is the
    // enrollment wake's. Beside them, at most the one hand-over of the Deployment the
    // enrollment created (a JSON patch of its field manager, once in its life). No Deployment
    // was read.
    let requests = operator_requests(&audit, offset, &f.ns.name);
    let deployment_writes: Vec<&String> = requests
        .iter()
        .filter(|r| r.contains("/deployments/m-epaper") || r.ends_with("/deployments"))
        .filter(|r| !r.starts_with("get ") && !r.starts_with("list "))
        .collect();
    let applies = deployment_writes
        .iter()
        .filter(|r| r.contains("force=true"))
        .count();
    assert_eq!(applies, 3, "down, up, down: {deployment_writes:#?}");
    assert!(deployment_writes.len() <= 4, "{deployment_writes:#?}");
    let reads = |verb: &str| -> Vec<&String> {
        requests
            .iter()
            .filter(|r| r.contains("/deployments") && r.starts_with(verb))
            .collect()
    };
    assert!(reads("get ").is_empty(), "{:#?}", reads("get "));
    // Lists: only each new process's first list of its two Deployment caches.
    assert_eq!(reads("list ").len(), 4, "{:#?}", reads("list "));
    let status = f.mutations().get("m").await.unwrap().status.unwrap();
    let sleep = variant(&status, "epaper").unwrap().sleep.clone().unwrap();
    assert_eq!(sleep.wakes.len(), 1, "one start ahead: {sleep:?}");
}

/// R42: inside quiet hours (here: the hour we are in, in a zone whose offset
/// is not a whole hour, Asia/Kathmandu) a variant is Idle and says until when; a poll is
/// answered not ready, told to come back when they end, and wakes nothing.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn quiet_hours_keep_variants_asleep_and_say_when_they_end() {
    use k8s_openapi::jiff::{ToSpan, tz::TimeZone};
    let f = Fixture::with_api("sleep-quiet").await;
    let zone = "Asia/Kathmandu";
    let tz = TimeZone::get(zone).unwrap();
    let now = k8s_openapi::jiff::Timestamp::now().to_zoned(tz);
    let from = now.checked_sub(1.minute()).unwrap();
    let to = now.checked_add(2.hours()).unwrap();
    let hhmm = |z: &k8s_openapi::jiff::Zoned| format!("{:02}:{:02}", z.hour(), z.minute());
    let sleep = json!({"warmup": "2s", "keepWarm": "60s", "maxWakePerHour": 60,
                       "quietHours": {"from": hhmm(&from), "to": hhmm(&to), "timeZone": zone}});
    let token = one_device(&f, json!({"enrollment": "Open", "sleep": sleep}), "night").await;
    let idle = f
        .wait_status::<Mutation>("m", "night Idle", |s| {
            state_of(s, "night") == Some(VariantState::Idle)
        })
        .await;
    let message = variant(&idle, "night").unwrap().message.clone().unwrap();
    assert_eq!(message, format!("quiet hours until {} {zone}", hhmm(&to)));
    let reply = poll(&f, "m", "night", &token, &[("Refresh-Rate", "60")]).await;
    let answer = reply.json();
    assert_eq!(answer["ready"], false, "{answer}");
    let refresh = answer["refreshSeconds"].as_i64().unwrap();
    assert!(
        (7000..=7200).contains(&refresh),
        "come back when they end, in about 2 h: {refresh}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let d = f.deployments().get("m-night").await.unwrap();
    assert_eq!(
        replicas(&d),
        Some(0),
        "a poll inside quiet hours wakes nothing"
    );
}
