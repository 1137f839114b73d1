//! R53: screens served by the API. The operator fetches each variant's picture from the
//! endpoints of the variant's own Service (here a stand-in renderer on this host, named by an
//! EndpointSlice the test makes), once per refresh for the whole operator, keeps it in a Secret
//! the Mutation owns, and the devices get it from the API: the poll names its etag, the screen
//! routes answer its bytes with an ETag and 304 when the device holds it, and the last good
//! screen while the renderer fails.

use std::time::Duration;

use k8s_openapi::api::{core::v1::Secret, discovery::v1::EndpointSlice};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::devices::enrolled;
use super::*;

pub(super) mod renderer;

use renderer::{Answer, Renderer};

/// How long a refresh (10 s) and its fetch may take to show.
const REFRESHED: Duration = Duration::from_secs(40);

/// EndpointSlice of Service `service` naming `r` as its one ready endpoint, on port `http`.
pub(super) async fn point(f: &Fixture, service: &str, r: &Renderer) {
    let slice: EndpointSlice = common::from_json(json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": format!("{service}-renderer"),
            "labels": {
                "kubernetes.io/service-name": service,
                "endpointslice.kubernetes.io/managed-by": "screens-test",
            },
        },
        "addressType": if r.ip.is_ipv4() { "IPv4" } else { "IPv6" },
        "endpoints": [{"addresses": [r.ip.to_string()], "conditions": {"ready": true}}],
        "ports": [{"name": "http", "port": r.port, "protocol": "TCP"}],
    }));
    let api: Api<EndpointSlice> = f.ns.api();
    api.create(&PostParams::default(), &slice).await.unwrap();
}

/// Mutation `web` with a Service port `http`, `spec.screen` on it (refreshed every
/// `refresh`), devices enrolling freely, and variants `a` (path /a.bmp) and `b` (its own
/// its own path /b.bmp), both open to enrollment.
fn fleet(refresh: &str) -> Value {
    let variants = json!([
        {"label": "a", "instances": 0, "enrollable": true},
        {"label": "b", "instances": 0, "enrollable": true},
    ]);
    let mut m = mutation("web", base("web"), variants);
    m["spec"]["service"] = json!({"ports": [{"name": "http", "port": 80, "targetPort": 8080}]});
    m["spec"]["screen"] = json!({"port": "http", "path": "/a.bmp", "refreshEvery": refresh,
                                 "paths": {"b": "/b.bmp"}});
    m["spec"]["devices"] = json!({"enrollment": "Open"});
    m
}

/// `GET path` with `token`, and `If-None-Match: etag` when given.
async fn get(f: &Fixture, path: &str, token: &str, etag: Option<&str>) -> common::http::Reply {
    let path = format!("/api/v1/namespaces/{}/mutations/web{path}", f.ns.name);
    let held = etag.map(|e| [("If-None-Match", e)]);
    let headers: &[(&str, &str)] = held.as_ref().map_or(&[], |h| &h[..]);
    common::http::Request::new("GET", &path, Some(token), None)
        .headers(headers)
        .send(f.operator.api_port)
        .await
}

/// The operator's answer to `GET path` (with `etag` as `If-None-Match`) with the admin token,
/// once `done` holds of it: the operator answers from its caches, which hear of each write a
/// moment after the API server shows it.
async fn served_when(
    f: &Fixture,
    path: &str,
    etag: Option<&str>,
    done: impl Fn(&common::http::Reply) -> bool,
) -> common::http::Reply {
    wait_for(
        &format!("the operator's answer to {path}"),
        REFRESHED,
        || async {
            let reply = get(f, path, ADMIN, etag).await;
            if done(&reply) {
                Ok(reply)
            } else {
                Err(format!("{reply:?}"))
            }
        },
    )
    .await
}

/// Header `name` of `reply`.
fn header<'r>(reply: &'r common::http::Reply, name: &str) -> Option<&'r str> {
    reply
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// What variant `label`'s status says of its screen, once it says `done`.
async fn screen_status(f: &Fixture, label: &str, done: impl Fn(&Value) -> bool) -> Value {
    wait_for(
        &format!("variant {label}'s screen status"),
        REFRESHED,
        || async {
            let m = f.mutations().get("web").await.map_err(|e| e.to_string())?;
            let status = serde_json::to_value(m.status.unwrap_or_default()).unwrap();
            let screen = status["variants"]
                .as_array()
                .and_then(|v| v.iter().find(|v| v["label"] == label))
                .map(|v| v["screen"].clone())
                .unwrap_or(Value::Null);
            if done(&screen) {
                Ok(screen)
            } else {
                Err(screen.to_string())
            }
        },
    )
    .await
}

/// R53: 50 devices of 2 variants polling and fetching within one refresh cost exactly one
/// fetch per variant at the renderer; an unchanged screen is 304 with no body, a changed one
/// a new etag; a renderer answering 500, text/html, 2 MiB, or gone from the Service's
/// endpoints leaves the last good screen served, with `Age` and `stale: true`, and the
/// condition and an Event say why; a restarted operator serves the same screen at once; a
/// device's token reaches only its own variant's screen; a variant removed takes its screen
/// Secret with it.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn screens_are_fetched_once_per_refresh_and_served_by_etag() {
    let mut f = Fixture::with_api("screens").await;
    let r = Renderer::start().await;
    let (first_a, first_b) = (b"BM-a-first-screen".to_vec(), b"BM-b-first-screen".to_vec());
    r.set("/a.bmp", Answer::bmp(&first_a));
    r.set("/b.bmp", Answer::bmp(&first_b));
    point(&f, "web-a", &r).await;
    point(&f, "web-b", &r).await;
    f.apply::<Mutation>(&fleet("1h")).await;
    let etag_a = screen_status(&f, "a", |s| s["etag"].is_string()).await["etag"]
        .as_str()
        .unwrap()
        .to_owned();
    let etag_b = screen_status(&f, "b", |s| s["etag"].is_string()).await["etag"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(etag_a, etag_b);

    // 50 devices, 25 per variant: each polls, fetches its screen, then asks again with the
    // etag it holds.
    let key = f.token("web").await;
    let mut devices = Vec::new();
    for i in 0..50 {
        let (id, label) = (format!("d-{i:02}"), if i % 2 == 0 { "a" } else { "b" });
        let token = enrolled(&f, "web", &key, json!({"id": id, "label": label})).await;
        devices.push((id, label, token));
    }
    for (id, label, token) in &devices {
        let (etag, body) = match *label {
            "a" => (&etag_a, &first_a),
            _ => (&etag_b, &first_b),
        };
        let polled = get(&f, &format!("/devices/{id}/poll"), token, None).await;
        assert_eq!(polled.status, 200, "{polled:?}");
        let screen = &polled.json()["screen"];
        assert_eq!(screen["etag"], etag.as_str(), "{id}: {screen}");
        assert_eq!(screen["type"], "image/bmp");
        assert_eq!(screen["bytes"], body.len());
        assert_eq!(screen["stale"], false);
        let fetched = get(&f, &format!("/devices/{id}/screen"), token, None).await;
        assert_eq!(fetched.status, 200, "{fetched:?}");
        assert_eq!(fetched.body.as_bytes(), &body[..]);
        assert_eq!(header(&fetched, "etag"), Some(etag.as_str()));
        assert_eq!(header(&fetched, "content-type"), Some("image/bmp"));
        assert_eq!(
            header(&fetched, "content-length"),
            Some(&*body.len().to_string())
        );
        assert!(header(&fetched, "cache-control").is_some());
        assert_eq!(header(&fetched, "age"), None);
        let held = get(&f, &format!("/devices/{id}/screen"), token, Some(etag)).await;
        assert_eq!(held.status, 304, "{held:?}");
        assert_eq!(held.body, "");
        assert_eq!(header(&held, "etag"), Some(etag.as_str()));
    }
    assert_eq!((r.hits("/a.bmp"), r.hits("/b.bmp")), (1, 1));

    // A device's token reaches only its own variant's screen.
    let (_, _, token_a) = &devices[0];
    let other = get(&f, "/variants/b/screen", token_a, None).await;
    assert!(matches!(other.status, 401 | 403), "{other:?}");
    let other = get(
        &f,
        &format!("/devices/{}/screen", devices[1].0),
        token_a,
        None,
    )
    .await;
    assert!(matches!(other.status, 401 | 403), "{other:?}");
    let own = get(&f, "/variants/a/screen", token_a, None).await;
    assert_eq!(own.status, 200, "{own:?}");

    // Refreshed every 10 s from now on: a changed screen gets a new etag.
    let patch = json!({"spec": {"screen": {"refreshEvery": "10s"}}});
    f.mutations()
        .patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let second_a = b"BM-a-second-screen".to_vec();
    r.set("/a.bmp", Answer::bmp(&second_a));
    let changed = screen_status(&f, "a", |s| s["etag"] != etag_a.as_str()).await;
    let etag_a2 = changed["etag"].as_str().unwrap().to_owned();
    let fetched = served_when(&f, "/variants/a/screen", Some(&etag_a), |r| {
        header(r, "etag") == Some(etag_a2.as_str())
    })
    .await;
    assert_eq!(fetched.status, 200, "{fetched:?}");
    assert_eq!(fetched.body.as_bytes(), &second_a[..]);
    assert_eq!(header(&fetched, "etag"), Some(etag_a2.as_str()));

    // Broken renderers: each keeps the last good screen, and says why.
    for (answer, reason) in [
        (
            Answer {
                status: 500,
                content_type: "image/bmp",
                body: b"oops".to_vec(),
            },
            "Status",
        ),
        (
            Answer {
                status: 200,
                content_type: "text/html",
                body: b"<html>".to_vec(),
            },
            "Type",
        ),
        (Answer::bmp(&vec![b'x'; 2 * 1024 * 1024]), "TooLarge"),
    ] {
        r.set("/a.bmp", answer);
        let stale = screen_status(&f, "a", |s| s["reason"] == reason).await;
        assert_eq!(stale["stale"], true, "{stale}");
        assert_eq!(stale["etag"], etag_a2.as_str(), "{stale}");
        let served = served_when(&f, "/variants/a/screen", None, |r| {
            header(r, "age").is_some()
        })
        .await;
        assert_eq!(served.status, 200, "{served:?}");
        assert_eq!(served.body.as_bytes(), &second_a[..]);
        let polled = get(&f, "/devices/d-00/poll", &devices[0].2, None).await;
        assert_eq!(polled.json()["screen"]["stale"], true, "{polled:?}");
        let m = f.mutations().get("web").await.unwrap();
        let condition = m
            .status
            .unwrap()
            .conditions
            .into_iter()
            .find(|c| c.type_ == "ScreenStale")
            .expect("condition ScreenStale");
        assert!(condition.message.contains("a: "), "{condition:?}");
    }
    let noted = events(&f, "ScreenStale", 1).await;
    assert!(
        noted.iter().any(|(_, note, _)| note.contains("\"a\"")),
        "{noted:?}"
    );

    // The renderer of b leaves its Service's endpoints: the last good screen is served.
    let slices: Api<EndpointSlice> = f.ns.api();
    slices
        .delete("web-b-renderer", &DeleteParams::default())
        .await
        .unwrap();
    screen_status(&f, "b", |s| s["reason"] == "NoEndpoint").await;
    let served = get(&f, "/variants/b/screen", ADMIN, Some("\"other\"")).await;
    assert_eq!(served.status, 200, "{served:?}");
    assert_eq!(served.body.as_bytes(), &first_b[..]);

    // The metrics count the fetches by result and show each screen's age.
    let text = common::http::request(f.operator.metrics_port, "GET", "/metrics", None, None)
        .await
        .body;
    let count = |result: &str| {
        let series = format!("mutantops_screen_fetches_total{{result=\"{result}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(series.as_str()))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {series} in the metrics"))
    };
    assert!(count("new") >= 3.0, "first a, first b, second a");
    for result in ["Status", "Type", "TooLarge", "NoEndpoint"] {
        assert!(count(result) >= 1.0, "{result}");
    }
    let age = format!(
        "mutantops_screen_age_seconds{{namespace=\"{}\",mutation=\"web\",variant=\"a\"}} ",
        f.ns.name
    );
    assert!(text.lines().any(|l| l.starts_with(&age)), "{age}");

    // A restarted operator serves the same screen at once, from the Secret.
    f.operator.kill();
    f.operator.launch();
    wait_api(f.operator.api_port, &f.ns.name).await;
    let served = get(&f, "/variants/a/screen", ADMIN, None).await;
    assert_eq!(served.status, 200, "{served:?}");
    assert_eq!(header(&served, "etag"), Some(etag_a2.as_str()));

    // A variant removed takes its screen Secret with it.
    let removed = f
        .call("DELETE", "/mutations/web/variants/b", Some(ADMIN), None)
        .await;
    assert_eq!(removed.status, 204, "{removed:?}");
    let secrets: Api<Secret> = f.ns.api();
    wait_for("web-screen-b deleted", REFRESHED, || async {
        match secrets.get_opt("web-screen-b").await {
            Ok(None) => Ok(()),
            other => Err(format!("{:?}", other.map(|s| s.is_some()))),
        }
    })
    .await;
    assert!(secrets.get_opt("web-screen-a").await.unwrap().is_some());
}

/// R53: without spec.screen the screen routes answer 404 naming it; a screen not fetched
/// yet is 503 with Retry-After.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn no_screen_is_404_and_none_yet_is_503() {
    let f = Fixture::with_api("screens-none").await;
    f.apply::<Mutation>(&mutation(
        "plain",
        base("plain"),
        json!([{"label": "a", "instances": 0}]),
    ))
    .await;
    let token = f.token("plain").await;
    let path = format!(
        "/api/v1/namespaces/{}/mutations/plain/variants/a/screen",
        f.ns.name
    );
    let none = common::http::request(f.operator.api_port, "GET", &path, Some(&token), None).await;
    assert_eq!(none.status, 404, "{none:?}");
    assert!(none.body.contains("spec.screen"), "{none:?}");

    // The renderer has no endpoint yet: nothing to serve.
    let mut m = fleet("1h");
    m["spec"]["devices"] = Value::Null;
    f.apply::<Mutation>(&m).await;
    screen_status(&f, "a", |s| s["reason"] == "NoEndpoint").await;
    let token = f.token("web").await;
    let path = format!(
        "/api/v1/namespaces/{}/mutations/web/variants/a/screen",
        f.ns.name
    );
    let none_yet =
        common::http::request(f.operator.api_port, "GET", &path, Some(&token), None).await;
    assert_eq!(none_yet.status, 503, "{none_yet:?}");
    assert!(header(&none_yet, "retry-after").is_some(), "{none_yet:?}");
}

/// R53: the screens of all Mutations stay within MUTANT_SCREEN_CACHE_MIB, which every replica
/// holds in its cache: with 1 MiB, of two variants answering 600 KiB each one screen is kept
/// and the other is refused with reason CacheFull, naming the setting.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn screens_past_the_cache_bound_are_not_kept() {
    let env = [
        ("MUTANT_API_TOKEN", ADMIN),
        ("MUTANT_SCREEN_CACHE_MIB", "1"),
    ];
    let f = Fixture::with_env("screens-full", &env).await;
    wait_api(f.operator.api_port, &f.ns.name).await;
    let r = Renderer::start().await;
    r.set("/a.bmp", Answer::bmp(&vec![b'a'; 600 * 1024]));
    r.set("/b.bmp", Answer::bmp(&vec![b'b'; 600 * 1024]));
    point(&f, "web-a", &r).await;
    point(&f, "web-b", &r).await;
    let mut m = fleet("1h");
    m["spec"]["screen"]["maxBytes"] = json!(700_000);
    f.apply::<Mutation>(&m).await;
    let a = screen_status(&f, "a", |s| !s["triedAt"].is_null()).await;
    let b = screen_status(&f, "b", |s| !s["triedAt"].is_null()).await;
    let (kept, refused) = if a["etag"].is_string() {
        (a, b)
    } else {
        (b, a)
    };
    assert!(kept["etag"].is_string(), "{kept}");
    assert_eq!(refused["reason"], "CacheFull", "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("MUTANT_SCREEN_CACHE_MIB")),
        "{refused}"
    );
}

/// R53, R42: with spec.screen and sleep, the screen's refresh wakes the variant, not its
/// devices' polls: a device polling every second for 25 s never wakes it (no wake by poll, no
/// `retryAfterSeconds`), it is Idle between refreshes, and it is started ahead of each
/// refresh, whose fetch reaches the renderer.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn with_sleep_the_refresh_wakes_the_renderer_not_the_polls() {
    let f = Fixture::with_api("screens-sleep").await;
    let r = Renderer::start().await;
    r.set("/a.bmp", Answer::bmp(b"BM-sleepy"));
    point(&f, "web-a", &r).await;
    let mut m = fleet("10s");
    // No pod of the variant's own in the Service's endpoints (kwok's addresses answer nothing):
    // the renderer stand-in is its one endpoint.
    m["spec"]["variants"] = json!([{"label": "a", "instances": 0, "enrollable": true}]);
    m["spec"]["devices"] = json!({"enrollment": "Open", "lateAfter": "30s", "goneAfter": "60s",
        "persistEvery": "10s", "sleep": {"idleAfter": "60s", "warmup": "2s", "keepWarm": "2s",
        "maxWakePerHour": 3600}});
    f.apply::<Mutation>(&m).await;
    screen_status(&f, "a", |s| s["etag"].is_string()).await;
    let key = f.token("web").await;
    let token = enrolled(&f, "web", &key, json!({"id": "d-1", "label": "a"})).await;
    let (mut idle_seen, started) = (0, std::time::Instant::now());
    while started.elapsed() < Duration::from_secs(25) {
        let polled = get(&f, "/devices/d-1/poll", &token, None).await;
        assert_eq!(polled.status, 200, "{polled:?}");
        let answer = polled.json();
        assert!(answer["retryAfterSeconds"].is_null(), "{answer}");
        assert!(answer["screen"]["etag"].is_string(), "{answer}");
        let m = f.mutations().get("web").await.unwrap();
        let status = serde_json::to_value(m.status.unwrap_or_default()).unwrap();
        if status["variants"][0]["sleep"]["state"] == "Idle" {
            idle_seen += 1;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(idle_seen >= 5, "Idle in {idle_seen} of the samples");
    let text = common::http::request(f.operator.metrics_port, "GET", "/metrics", None, None)
        .await
        .body;
    let wakes = |cause: &str| {
        let series = format!("mutantops_variant_wakes_total{{cause=\"{cause}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(series.as_str()))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {series}"))
    };
    assert_eq!(wakes("poll"), 0.0, "a poll woke the renderer");
    assert!(wakes("ahead") >= 1.0, "never started ahead of a refresh");
    assert!(r.hits("/a.bmp") >= 3, "{} fetches", r.hits("/a.bmp"));
}

/// R53: deploy/examples/screens/browser-snap-screens.yaml, applied as written: its Service is
/// ClusterIP (nothing on the LAN reaches the renderer), and the screen its renderer answers
/// is served to an enrolled display by the API.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn the_screens_example_serves_a_screen_over_a_cluster_ip_service() {
    let f = Fixture::with_api("screens-example").await;
    let r = Renderer::start().await;
    r.set("/screen.bmp", Answer::bmp(b"BM-example"));
    point(&f, "browser-snap-screens-lilygo47", &r).await;
    let mut manifest = example("screens/browser-snap-screens.yaml");
    // The stand-in is the Service's one endpoint: no pod of kwok's (whose addresses answer
    // nothing) beside it.
    manifest["spec"]["variants"][0]["instances"] = json!(0);
    f.apply::<Mutation>(&manifest).await;
    let m = f
        .wait_status::<Mutation>("browser-snap-screens", "a screen", |s| {
            s.variants.iter().any(|v| {
                v.screen.as_ref().is_some_and(|s| s.etag.is_some())
                    && v.service.as_ref().is_some_and(|s| s.type_ == "ClusterIP")
            })
        })
        .await;
    let etag = m.variants[0].screen.as_ref().unwrap().etag.clone().unwrap();
    let key = f.token("browser-snap-screens").await;
    let body = json!({"id": "lilygo-1", "label": "lilygo47"});
    let token = enrolled(&f, "browser-snap-screens", &key, body).await;
    let path = format!(
        "/api/v1/namespaces/{}/mutations/browser-snap-screens/devices/lilygo-1/screen",
        f.ns.name
    );
    let reply = common::http::request(f.operator.api_port, "GET", &path, Some(&token), None).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.body, "BM-example");
    assert_eq!(header(&reply, "etag"), Some(etag.as_str()));
}
