//! A variant that sleeps with its device: idled, then woken by a poll.

use std::time::Duration;

use super::super::super::context::RESYNC_AFTER;
use super::*;
use crate::crd::{SleepState, VariantState, WakeCause};

/// The series of the wakes by a poll.
const WAKES_BY_POLL: &str = "mutantops_variant_wakes_total{cause=\"poll\"}";

/// Variant `lobby` of two instances, asleep with its device `board-1`.
fn sleeping() -> Mutation {
    let sleep = json!({"idleAfter": "10m", "warmup": "30s", "keepWarm": "90s"});
    let devices =
        json!({"lateAfter": "30m", "goneAfter": "24h", "persistEvery": "10m", "sleep": sleep});
    mutation(json!({"variants": [{"label": "lobby", "instances": 2}], "devices": devices}))
}

/// R42, R12, R25: a variant whose one device has not been heard for two hours (Late, its last
/// poll as old) is idled: its Deployment applied at zero replicas, the Mutation's own spec
/// left alone (no request to it but its status), and the status says `Idle`, why, and that
/// an idle variant counts as ready. Its device then polls (written five seconds ago): the next
/// reconcile applies it at its two instances again, writes it `Awake`, started by the poll, and
/// counts the wake; it comes back when the poll stops keeping it up (`keepWarm` after the
/// poll). Neither step writes the device list: it is as time makes it.
#[tokio::test]
async fn an_unused_variant_is_idled_and_a_poll_wakes_it() {
    let m = sleeping();
    let mut scene = Scene::of(&m, Vec::new());
    scene.registry(&registry(&[("board-1", "lobby")], &[]));
    // It ran awake, its device polling.
    let polled = |seconds| json!({"last": rfc3339(ago(seconds)), "intervalSeconds": 3600});
    let online = device("board-1", "lobby", 5, DeviceState::Online, Some(polled(5)));
    let m = scene.heard(&m, vec![online]);
    let m = scene.settle(&m).await;
    let awake = m.status.as_ref().map(|s| s.variants[0].clone());
    let awake = awake.unwrap_or_else(|| panic!("settled with a status"));
    assert_eq!(awake.sleep.map(|s| s.state), Some(SleepState::Awake));

    // Two hours later it has not been heard since: Late.
    let late = device(
        "board-1",
        "lobby",
        7200,
        DeviceState::Late,
        Some(polled(7200)),
    );
    let m = scene.heard(&m, vec![late]);
    scene.script(vec![
        on(
            "PATCH",
            format!("{DEPLOYMENTS}/web-lobby"),
            Reply::Echo(200),
        ),
        on("PATCH", format!("{MUTATION}/status"), stored(&m)),
    ]);
    let (action, asked) = scene.reconcile(&m).await;
    assert_eq!(asked.lines(), [apply("web-lobby"), status_applied()]);
    let idled = asked.body(&apply("web-lobby")).clone();
    assert_eq!(idled["spec"]["replicas"], 0);
    let status = written(&asked, &status_applied());
    let lobby = &status.variants[0];
    assert_eq!(lobby.state, VariantState::Idle);
    assert_eq!(lobby.message.as_deref(), Some("no device online"));
    assert_eq!(
        lobby.sleep.as_ref().map(|s| s.state),
        Some(SleepState::Idle)
    );
    assert_eq!(status.summary, "1/1 variants ready (1 idle)");
    assert!(asked.events.is_empty(), "{asked:?}");
    assert_eq!(action, Action::requeue(RESYNC_AFTER));
    assert!(scene.server.all_answered());

    // Its Deployment at zero as applied; the device polls.
    scene.cache(applied(&idled));
    let m = scene.moved_on(&m, status);
    let poll = rfc3339(ago(5));
    let stats = json!({"last": poll, "intervalSeconds": 3600});
    let back = device("board-1", "lobby", 5, DeviceState::Online, Some(stats));
    let m = scene.heard(&m, vec![back]);
    scene.script(vec![
        on(
            "PATCH",
            format!("{DEPLOYMENTS}/web-lobby"),
            Reply::Echo(200),
        ),
        on("PATCH", format!("{MUTATION}/status"), stored(&m)),
    ]);
    let wakes = scene.counted(WAKES_BY_POLL);
    let (action, asked) = scene.reconcile(&m).await;
    assert_eq!(asked.lines(), [apply("web-lobby"), status_applied()]);
    assert_eq!(asked.body(&apply("web-lobby"))["spec"]["replicas"], 2);
    let status = written(&asked, &status_applied());
    let lobby = &status.variants[0];
    assert_eq!(lobby.state, VariantState::Progressing);
    let sleep = lobby
        .sleep
        .as_deref()
        .unwrap_or_else(|| panic!("{lobby:?}"));
    assert_eq!(
        (sleep.state, sleep.cause),
        (SleepState::Awake, Some(WakeCause::Poll))
    );
    assert_eq!(sleep.wakes, std::slice::from_ref(&sleep.since));
    assert!(asked.events.is_empty(), "{asked:?}");
    let woken = scene.counted(WAKES_BY_POLL);
    assert_eq!(woken, wakes + 1, "one wake, by a poll");
    // Up until keepWarm after the poll, counted from the wake.
    let second = |t: &str| t.parse::<Timestamp>().map_or(0, |t| t.as_second());
    let up = second(&poll) + 90 - second(&sleep.since);
    let up = Duration::from_secs(u64::try_from(up).unwrap_or(0));
    assert_eq!(action, Action::requeue(up + Duration::from_millis(500)));
    assert!(scene.server.all_answered());
}
