//! R40, R41, R25, R17: the liveness of enrolled devices (heartbeats written once
//! per persistEvery, Late and Gone, restarts), their budgets and metrics, an Argo CD sync, and
//! where a device's env lands. Enrollment and tokens are in `devices.rs`.

use k8s_openapi::api::core::v1::Secret;
use serde_json::json;

use super::devices::{create, enroll, enrolled, refused};
use super::*;
use mutantops::crd::DeviceState;

/// R40: 1000 polls from 100 devices cost at most one status write per device per
/// `persistEvery` (counted from the audit log), and the budgets are per device: one board
/// spending its read budget does not make another's requests 429.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_thousand_polls_cost_a_write_per_device_per_persist_every() {
    let f = Fixture::with_api("devices-polls").await;
    let key = create(
        &f,
        "fleet",
        json!({"enrollment": "Open", "maxDevices": 100, "lateAfter": "10m",
               "goneAfter": "1h", "persistEvery": "5m"}),
        json!({}),
    )
    .await;
    let mut tokens = Vec::new();
    for i in 0..100 {
        let id = format!("board-{i}");
        let token = enrolled(&f, "fleet", &key, json!({"id": id, "label": "admin-only"})).await;
        tokens.push((id, token));
    }
    f.wait_status::<Mutation>("fleet", "100 devices listed", |s| s.devices.len() == 100)
        .await;

    let log = audit_log();
    let offset = log_size(&log);
    let started = std::time::Instant::now();
    let headers = [
        ("Refresh-Rate", "900"),
        ("Battery-Voltage", "3.91"),
        ("RSSI", "-61"),
    ];
    for round in 0..10 {
        // A hundred boards are machines of their own: they come from four addresses here,
        // each within its quarter of the connections (R44).
        let polls = tokens.iter().enumerate().map(|(i, (id, token))| {
            let path = format!(
                "/api/v1/namespaces/{}/mutations/fleet/devices/{id}/poll",
                f.ns.name
            );
            let port = f.operator.api_port;
            async move {
                let source = std::net::Ipv4Addr::new(127, 0, 0, 10 + (i % 4) as u8);
                common::http::Request::new("GET", &path, Some(token), None)
                    .headers(&headers)
                    .send_from(source, port)
                    .await
            }
        });
        for reply in futures::future::join_all(polls).await {
            assert_eq!(reply.status, 200, "round {round}: {reply:?}");
        }
    }
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_secs(300),
        "the polls outlasted persistEvery ({took:?}): the count below would not hold"
    );
    // The writes land in the audit log a moment after the answers.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let writes = audit_events(&log, offset)
        .into_iter()
        .filter(|e| {
            let uri = e["requestURI"].as_str().unwrap_or("");
            uri.contains(&format!("/namespaces/{}/mutations/fleet/status", f.ns.name))
                && uri.contains("fieldManager=mutantops-devices")
                && e["responseStatus"]["code"] == 200
        })
        .count();
    // Each device was last written at enrollment, with nothing reported yet: its first poll
    // reports for the first time (one write); then nothing is due within persistEvery.
    assert!(
        writes <= 100,
        "{writes} status writes for 1000 polls of 100 devices"
    );
    assert!(writes >= 1, "the reports were never written");
    let status = f
        .wait_status::<Mutation>("fleet", "reports written", |s| {
            s.devices
                .iter()
                .all(|d| d.reported.battery_millivolts == Some(3910))
        })
        .await;
    assert_eq!(status.devices[0].reported.rssi, Some(-61));

    // R25: the devices in /metrics, per state and per device (100 is under the default
    // cap of 200), in an exposition promtool accepts.
    let metrics_port = f.operator.metrics_port;
    let scraped = wait_for("the device series", CONVERGE, || async {
        let text = common::http::request(metrics_port, "GET", "/metrics", None, None)
            .await
            .body;
        let ns = &f.ns.name;
        let wanted = [
            format!("mutantops_devices{{namespace=\"{ns}\",mutation=\"fleet\",state=\"Online\"}} 100"),
            format!("mutantops_device_battery_volts{{namespace=\"{ns}\",mutation=\"fleet\",device=\"board-7\"}} 3.91"),
            format!("mutantops_device_rssi_dbm{{namespace=\"{ns}\",mutation=\"fleet\",device=\"board-7\"}} -61"),
        ];
        match wanted.iter().find(|w| !text.lines().any(|l| l == w.as_str())) {
            None => Ok(text),
            Some(missing) => Err(format!("missing {missing}")),
        }
    })
    .await;
    assert!(scraped.contains("mutantops_device_last_seen_timestamp_seconds{"));
    let promtool = std::env::var("PROMTOOL").unwrap_or_else(|_| "promtool".into());
    let checked = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -o pipefail; curl -s http://127.0.0.1:{metrics_port}/metrics | {promtool} check metrics"
        ))
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "promtool check metrics: {}",
        String::from_utf8_lossy(&checked.stderr)
    );

    // A malformed header is refused, naming it, and changes nothing.
    let (id, token) = &tokens[0];
    let path = format!(
        "/api/v1/namespaces/{}/mutations/fleet/devices/{id}/poll",
        f.ns.name
    );
    let bad = common::http::Request::new("GET", &path, Some(token), None)
        .headers(&[("Battery-Voltage", "lots")])
        .send(f.operator.api_port)
        .await;
    let (code, error) = refused(&bad);
    assert_eq!(code, 400, "{bad:?}");
    assert!(error.contains("Battery-Voltage"), "{error}");

    // Budgets per device: one board spending its validated reads leaves the others theirs.
    let greedy = &tokens[1].1;
    let device_path = |id: &str| {
        format!(
            "/api/v1/namespaces/{}/mutations/fleet/devices/{id}",
            f.ns.name
        )
    };
    let spend = (0..60).map(|_| {
        let path = device_path(&tokens[1].0);
        let port = f.operator.api_port;
        async move {
            common::http::Request::new("GET", &path, Some(greedy), None)
                .headers(&[("Cache-Control", "no-cache")])
                .send(port)
                .await
                .status
        }
    });
    let spent = futures::future::join_all(spend).await;
    assert!(
        spent.contains(&429),
        "the greedy board was never limited: {spent:?}"
    );
    let other =
        common::http::Request::new("GET", &device_path(&tokens[2].0), Some(&tokens[2].1), None)
            .headers(&[("Cache-Control", "no-cache")])
            .send(f.operator.api_port)
            .await;
    assert_eq!(
        other.status, 200,
        "another board pays for the greedy one: {other:?}"
    );
}

/// R40: a silent device turns Late, then Gone, each written once by the leader; a request makes
/// it Online again; a restart of the operator marks no device Gone before goneAfter has passed
/// since its written last-seen time.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn silent_devices_turn_late_then_gone_and_a_restart_is_not_early() {
    let mut f = Fixture::with_api("devices-liveness").await;
    let key = create(
        &f,
        "m",
        json!({"enrollment": "Open", "lateAfter": "3s", "goneAfter": "8s", "persistEvery": "1s"}),
        json!({}),
    )
    .await;
    let token = enrolled(&f, "m", &key, json!({"id": "d", "label": "admin-only"})).await;
    let path = "/mutations/m/devices/d/poll";
    let state_of = |s: &OwnerStatus| s.devices.first().map(|d| d.state);

    // Silent: Late after 3 s, Gone after 8 s.
    f.wait_status::<Mutation>("m", "Late", |s| state_of(s) == Some(DeviceState::Late))
        .await;
    let gone = f
        .wait_status::<Mutation>("m", "Gone", |s| state_of(s) == Some(DeviceState::Gone))
        .await;
    assert_eq!(gone.device_summary.map(|s| s.gone), Some(1));
    // A request: Online again at once.
    assert_eq!(f.call("GET", path, Some(&token), None).await.status, 200);
    let online = f
        .wait_status::<Mutation>("m", "Online", |s| state_of(s) == Some(DeviceState::Online))
        .await;
    let seen: k8s_openapi::jiff::Timestamp = online.devices[0].last_seen.parse().unwrap();

    // The operator restarts at once: the device is not Gone before 8 s after its last-seen
    // time, whatever the new process knows.
    f.operator.kill();
    f.operator.launch();
    wait_api(f.operator.api_port, &f.ns.name).await;
    let gone = f
        .wait_status::<Mutation>("m", "Gone after the restart", |s| {
            state_of(s) == Some(DeviceState::Gone)
        })
        .await;
    let now = k8s_openapi::jiff::Timestamp::now();
    assert!(
        now.as_second() - seen.as_second() >= 8,
        "Gone {}s after the last-seen time",
        now.as_second() - seen.as_second()
    );
    assert_eq!(gone.devices[0].last_seen, online.devices[0].last_seen);
}

/// R17, R39: an Argo CD synced Mutation with runtime variants and `spec.devices`: a
/// sync (the manifest applied again, server-side, as Argo CD does) leaves the devices, their
/// status and the variants enrollment made alone, and the devices Secret carries none of Argo
/// CD's tracking marks, so Argo CD never prunes it.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn an_argo_cd_sync_keeps_the_devices() {
    let f = Fixture::with_api("devices-argo").await;
    let manifest = json!({
        "apiVersion": "neiam.org/v1", "kind": "Mutation",
        "metadata": {"name": "synced",
            "annotations": {"mutantops.neiam.org/runtime-variants": "true",
                            "argocd.argoproj.io/tracking-id": "edge:neiam.org/Mutation:x/synced"},
            "labels": {"app.kubernetes.io/instance": "edge"}},
        "spec": {"deployment": base("synced"), "devices": {"enrollment": "Open"}}
    });
    f.apply::<Mutation>(&manifest).await;
    let key = f.token("synced").await;
    enrolled(
        &f,
        "synced",
        &key,
        json!({"id": "board-1", "variant": {"label": "board-1", "instances": 0}}),
    )
    .await;
    f.wait_status::<Mutation>("synced", "the device listed", |s| s.devices.len() == 1)
        .await;
    // A sync: the same manifest, applied again by the same manager.
    f.apply::<Mutation>(&manifest).await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let m = f.mutations().get("synced").await.unwrap();
    assert_eq!(f.spec_labels("synced").await, ["board-1"]);
    let status = m.status.unwrap();
    assert_eq!(status.devices.len(), 1, "{status:?}");
    let secrets: Api<Secret> = f.ns.api();
    let secret = secrets.get("synced-devices").await.unwrap();
    let labels = secret.metadata.labels.unwrap_or_default();
    let annotations = secret.metadata.annotations.unwrap_or_default();
    assert!(
        !labels.contains_key("app.kubernetes.io/instance"),
        "{labels:?}"
    );
    assert!(
        !annotations.contains_key("argocd.argoproj.io/tracking-id"),
        "{annotations:?}"
    );
    // The health script sees a healthy Mutation, as before.
    let token = secret.data.unwrap_or_default();
    assert!(
        token
            .keys()
            .all(|k| k.starts_with("device.") || k == "made-variants"),
        "{token:?}"
    );
}

/// R41: with spec.devices, env is deny-by-default; a name the owner lists
/// as `<container>/NAME` reaches only that container of the variant's Deployment, a bare name
/// every container; a spelling of a valueFrom name is refused.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn device_env_reaches_only_the_containers_the_owner_names() {
    let f = Fixture::with_api("devices-env").await;
    let mut b = base("web");
    let pod = &mut b["spec"]["template"]["spec"];
    pod["containers"][0]["env"] = json!([{ "name": "DB_PASSWORD", "valueFrom": { "secretKeyRef":
        { "name": "db", "key": "password", "optional": true } } }]);
    pod["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "sidecar", "image": "registry.example/sidecar:1"}));
    let body = json!({
        "name": "web", "deployment": b, "variants": [],
        "deviceAccess": {"env": ["app/SNAP_RES", "SCREEN", "db-password"]},
        "devices": {"enrollment": "Open"},
    });
    let created = f.call("POST", "/mutations", Some(ADMIN), Some(&body)).await;
    assert_eq!(created.status, 201, "{created:?}");
    let key = f.token("web").await;
    let shadow = json!({"id": "x", "variant": {"label": "x", "instances": 0,
                         "env": {"db-password": "mine"}}});
    let (code, error) = refused(&enroll(&f, "web", &key, shadow).await);
    assert_eq!(code, 403);
    assert!(error.contains("valueFrom"), "{error}");
    enrolled(
        &f,
        "web",
        &key,
        json!({"id": "board-7", "variant": {"label": "board-7", "instances": 0,
               "env": {"SNAP_RES": "960x540", "SCREEN": "portrait"}}}),
    )
    .await;
    let d = f.wait_deployment("web-board-7", "created", |_| true).await;
    let containers = d.spec.unwrap().template.spec.unwrap().containers;
    let names = |i: usize| -> Vec<String> {
        containers[i]
            .env
            .iter()
            .flatten()
            .map(|e| e.name.clone())
            .collect()
    };
    assert_eq!(containers[0].name, "app");
    assert!(names(0).contains(&"SNAP_RES".to_owned()), "{:?}", names(0));
    assert!(!names(1).contains(&"SNAP_RES".to_owned()), "{:?}", names(1));
    assert!(names(0).contains(&"SCREEN".to_owned()) && names(1).contains(&"SCREEN".to_owned()));
}
