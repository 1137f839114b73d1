//! R42: the site-silent guard counts the devices of one Mutation, or of the Mutations its
//! owner puts in one site group (label `mutantops.neiam.org/site`): the silent devices of
//! another Mutation of the namespace (a board's fake ones, say) say nothing of this one's.

use std::time::{Duration, Instant};

use kube::api::{Patch, PatchParams};

use super::devices::{create, enrolled};
use super::sleep::poll;
use super::*;

/// Whether Mutation `name` has condition SiteSilent True.
async fn silent(f: &Fixture, name: &str) -> bool {
    let m = f.mutations().get(name).await.unwrap();
    m.status.is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "SiteSilent" && c.status == "True")
    })
}

/// R42: Mutation `fake` has two devices that never speak again, `real` one that polls. The
/// fakes make `fake` SiteSilent, never `real` (before, the namespace's three devices were
/// counted together: two of three silent). Put in one site group, they are counted together.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn one_mutations_silent_devices_say_nothing_of_another() {
    let f = Fixture::with_api("sleep-site").await;
    let sleep = json!({"idleAfter": "1s", "warmup": "1s", "keepWarm": "1s",
                       "expireAfter": "60s", "maxWakePerHour": 3600, "siteSilentMin": 2});
    let devices = json!({"enrollment": "Open", "lateAfter": "2s", "goneAfter": "4s",
                         "persistEvery": "1s", "sleep": sleep});
    let fake = create(&f, "fake", devices.clone(), json!({})).await;
    let real = create(&f, "real", devices, json!({})).await;
    for id in ["a", "b"] {
        let body = json!({"id": id, "variant": {"label": format!("made-{id}")}});
        enrolled(&f, "fake", &fake, body).await;
    }
    let body = json!({"id": "r", "variant": {"label": "made-r"}});
    let token = enrolled(&f, "real", &real, body).await;

    let keep_polling = async |for_how_long: Duration, until_fake: bool| {
        let start = Instant::now();
        while start.elapsed() < for_how_long {
            let reply = poll(&f, "real", "r", &token, &[]).await;
            assert_eq!(reply.status, 200, "{reply:?}");
            assert!(
                !silent(&f, "real").await,
                "real taken for silent by fake's devices"
            );
            if until_fake && silent(&f, "fake").await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        false
    };
    assert!(
        keep_polling(Duration::from_secs(60), true).await,
        "fake never turned SiteSilent"
    );
    // Some seconds more with fake silent: real stays as it is.
    keep_polling(Duration::from_secs(6), false).await;

    // One site group: three devices, two silent together; real is SiteSilent too.
    let group = json!({"metadata": {"labels": {"mutantops.neiam.org/site": "hall"}}});
    for name in ["fake", "real"] {
        f.mutations()
            .patch(name, &PatchParams::default(), &Patch::Merge(&group))
            .await
            .unwrap();
    }
    f.wait_status::<Mutation>("real", "SiteSilent in the group", |s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "SiteSilent" && c.status == "True" && c.message.contains("2 of 3"))
    })
    .await;
}
