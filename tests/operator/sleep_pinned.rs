//! R42, R25: a variant written with `sleep: false` is pinned: it never idles
//! while the others of its Mutation do, and pinning an idle variant starts it again, counted
//! as a wake by `admin`.

use kube::api::{Patch, PatchParams};
use mutantops::crd::{SleepState, VariantState};

use super::devices::create;
use super::*;

fn replicas(d: &Deployment) -> Option<i32> {
    d.spec.as_ref().and_then(|s| s.replicas)
}

fn state_of(s: &OwnerStatus, label: &str) -> Option<VariantState> {
    s.variants
        .iter()
        .find(|v| v.label == label)
        .map(|v| v.state)
}

/// The variants of the spec, `lobby` pinned or not; `kiosk` always pinned.
async fn variants(f: &Fixture, lobby_pinned: bool) {
    let lobby = if lobby_pinned {
        json!({"label": "lobby", "instances": 1, "sleep": false})
    } else {
        json!({"label": "lobby", "instances": 1})
    };
    let variants = json!([
        {"label": "admin-only", "instances": 0},
        lobby,
        {"label": "kiosk", "instances": 1, "sleep": false},
    ]);
    f.mutations()
        .patch(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"variants": variants}})),
        )
        .await
        .unwrap();
}

async fn admin_wakes(f: &Fixture) -> f64 {
    let metrics = common::http::request(f.operator.metrics_port, "GET", "/metrics", None, None)
        .await
        .body;
    metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("mutantops_variant_wakes_total{cause=\"admin\"}")?
                .trim()
                .parse()
                .ok()
        })
        .expect("the admin series is registered at 0")
}

/// R42, R25: with no device at all, `lobby` idles after idleAfter while the
/// pinned `kiosk` keeps its replica, Ready, with no sleep in its status; pinning `lobby` starts
/// it again at once (its spec instances), Ready, and the wake is counted as `admin`.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_pinned_variant_never_idles_and_pinning_wakes_one() {
    let f = Fixture::with_api("sleep-pinned").await;
    let sleep =
        json!({"idleAfter": "2s", "warmup": "2s", "keepWarm": "2s", "maxWakePerHour": 3600});
    create(
        &f,
        "m",
        json!({"enrollment": "Open", "sleep": sleep}),
        json!({}),
    )
    .await;
    variants(&f, false).await;

    let idle = f
        .wait_status::<Mutation>("m", "lobby Idle", |s| {
            state_of(s, "lobby") == Some(VariantState::Idle)
        })
        .await;
    f.wait_deployment("m-lobby", "lobby at zero", |d| replicas(d) == Some(0))
        .await;
    let kiosk = idle.variants.iter().find(|v| v.label == "kiosk").unwrap();
    assert_eq!(
        kiosk.sleep, None,
        "a pinned variant does not sleep: {kiosk:?}"
    );
    f.wait_deployment("m-kiosk", "kiosk at its instances", |d| {
        replicas(d) == Some(1)
    })
    .await;
    let kiosk_ready = f
        .wait_status::<Mutation>("m", "kiosk Ready", |s| {
            state_of(s, "kiosk") == Some(VariantState::Ready)
        })
        .await;
    let lobby = kiosk_ready
        .variants
        .iter()
        .find(|v| v.label == "lobby")
        .unwrap();
    assert_eq!(
        (lobby.state, lobby.sleep.as_ref().map(|s| s.state)),
        (VariantState::Idle, Some(SleepState::Idle)),
        "lobby is still idle while kiosk is up: {lobby:?}"
    );
    assert_eq!(admin_wakes(&f).await, 0.0);

    // The owner pins lobby: it starts again, with no sleep in its status.
    variants(&f, true).await;
    f.wait_deployment("m-lobby", "lobby started", |d| replicas(d) == Some(1))
        .await;
    let up = f
        .wait_status::<Mutation>("m", "lobby Ready, not sleeping", |s| {
            s.variants
                .iter()
                .any(|v| v.label == "lobby" && v.state == VariantState::Ready && v.sleep.is_none())
        })
        .await;
    assert_eq!(state_of(&up, "kiosk"), Some(VariantState::Ready));
    assert_eq!(admin_wakes(&f).await, 1.0, "one wake by the owner");
}
