//! R34, R26: a board that loops adding and removing its variant cannot
//! spend the API server's writes. A Mutation's token has a budget of changes (2 a second, 20
//! at once; a device's token its own), answered 429 with `Retry-After` beyond it; and the
//! Events of a change made again and again are one Event with a series, whose count says how
//! many times, instead of one Event per change.

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_token_looping_changes_gets_429_and_its_events_are_a_series() {
    let f = Fixture::with_api("writes").await;
    let create = json!({"name": "web", "deployment": base("web"), "variants": [],
                        "deviceAccess": {"maxVariants": 200}});
    let created = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    let token = f.token("web").await;
    let board = json!({"label": "board", "env": {"SCREEN": "kiosk"}, "instances": 0});

    // Five times: add the variant, wait for its Deployment, remove it, wait until it is gone.
    // Ten changes, within the token's burst.
    const LOOPS: i32 = 5;
    for _ in 0..LOOPS {
        let added = f.add_variant("web", &token, &board).await;
        assert_eq!(added.status, 201, "{added:?}");
        f.wait_deployment("web-board", "created", |_| true).await;
        let removed = f
            .call(
                "DELETE",
                "/mutations/web/variants/board",
                Some(&token),
                None,
            )
            .await;
        assert_eq!(removed.status, 204, "{removed:?}");
        f.wait_gone("web-board").await;
    }
    // One Event per kind of change, counting every time it happened (written within
    // SERIES_EVERY, 10 s, of the last one).
    let api: Api<Event> = f.ns.api();
    for reason in ["VariantCreated", "VariantPruned"] {
        let found = wait_for(
            &format!("one {reason} Event with a series of {LOOPS}"),
            Duration::from_secs(30),
            || async {
                let list = api
                    .list(&Default::default())
                    .await
                    .map_err(|e| e.to_string())?;
                let mine: Vec<_> = list
                    .items
                    .iter()
                    .filter(|e| e.reason.as_deref() == Some(reason))
                    .map(|e| e.series.as_ref().map_or(1, |s| s.count))
                    .collect();
                (mine == [LOOPS])
                    .then_some(mine.clone())
                    .ok_or(format!("{mine:?}"))
            },
        )
        .await;
        println!("{reason}: {found:?}");
    }

    // As fast as it can: after its burst of 60 changes (10 spent above, a few refilled since),
    // 429 naming the token's Mutation, with Retry-After; nothing more is written.
    let mut statuses = Vec::new();
    let mut refusal = None;
    let started = std::time::Instant::now();
    for i in 0..80 {
        let variant = json!({"label": format!("loop-{i}"), "instances": 0});
        let reply = f.add_variant("web", &token, &variant).await;
        if reply.status == 429 && refusal.is_none() {
            refusal = Some(reply.clone());
        }
        statuses.push(reply.status);
    }
    let ok = statuses.iter().filter(|s| **s == 201).count();
    // At most the burst and what refilled (2 a second) while they were sent.
    let refilled = (2.0 * started.elapsed().as_secs_f64()).ceil() as usize;
    let refusal = refusal.unwrap_or_else(|| panic!("no 429 in {statuses:?}"));
    assert!(
        (50..=60 + refilled).contains(&ok),
        "{ok} of 80 adds at full speed were made ({refilled} refilled): {statuses:?}"
    );
    refusal.assert_refused(429, &["Mutation \"web\"", "too many changes"]);
    assert_eq!(refusal.header("retry-after"), Some("1"));
    assert_eq!(f.spec_labels("web").await.len(), ok);
    // The admin (the owner) is not held to it.
    let admin = json!({"label": "admin", "instances": 0});
    assert_eq!(f.add_variant("web", ADMIN, &admin).await.status, 201);
}
