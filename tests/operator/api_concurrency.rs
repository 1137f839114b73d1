//! R22: concurrent variant edits are serialised on the Mutation's resourceVersion: none is
//! lost, and a label added twice at once is created exactly once. This replica's edits of one
//! Mutation that wait at the same time are written together: fifty devices adding their
//! variants at once used to make fifty writes in a row, and on CI's busy API server the last
//! ones ran past the default request deadline of 4 s (503).

use serde_json::json;

use super::*;

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn concurrent_edits_all_land_and_a_label_is_taken_once() {
    let f = Fixture::with_api("api-race").await;
    // R32: a Mutation's token may add 20 variants unless its owner says more.
    let create = json!({"name": "web", "deployment": base("web"), "variants": [],
                        "deviceAccess": {"maxVariants": 64}});
    assert_eq!(
        f.call("POST", "/mutations", Some(ADMIN), Some(&create))
            .await
            .status,
        201
    );
    let token = f.token("web").await;
    let generation = |m: &Mutation| m.metadata.generation.unwrap_or_default();
    let before = generation(&f.mutations().get("web").await.unwrap());

    // 50 distinct labels at once, with the default deadline: all 201, all present afterwards.
    let adds = (0..50).map(|i| {
        let body = json!({"label": format!("v{i}"), "instances": 0});
        let (f, token) = (&f, &token);
        async move {
            f.call("POST", "/mutations/web/variants", Some(token), Some(&body))
                .await
        }
    });
    let replies = futures::future::join_all(adds).await;
    let codes: Vec<u16> = replies.iter().map(|r| r.status).collect();
    assert!(
        codes.iter().all(|c| *c == 201),
        "{codes:?}\n{:?}",
        replies.iter().find(|r| r.status != 201)
    );
    let mutation = f.mutations().get("web").await.unwrap();
    let mut labels: Vec<String> = mutation
        .spec
        .variants
        .iter()
        .map(|v| v.label.clone())
        .collect();
    labels.sort();
    let mut expected: Vec<String> = (0..50).map(|i| format!("v{i}")).collect();
    expected.sort();
    assert_eq!(labels, expected, "no edit may be lost");
    // Each write of the variants is one generation; one per edit means none were combined.
    let writes = generation(&mutation) - before;
    eprintln!("50 variant edits at once: {writes} writes");
    assert!(writes < 50, "{writes} writes for 50 edits waiting together");

    // The same label 10 times at once: exactly one 201, nine 409.
    let same = (0..10).map(|_| {
        let body = json!({"label": "dup", "instances": 0});
        let (f, token) = (&f, &token);
        async move {
            f.call("POST", "/mutations/web/variants", Some(token), Some(&body))
                .await
                .status
        }
    });
    let mut codes = futures::future::join_all(same).await;
    codes.sort();
    assert_eq!(codes, [201, 409, 409, 409, 409, 409, 409, 409, 409, 409]);
    let mutation = f.mutations().get("web").await.unwrap();
    assert_eq!(
        mutation
            .spec
            .variants
            .iter()
            .filter(|v| v.label == "dup")
            .count(),
        1
    );
    assert_eq!(mutation.spec.variants.len(), 51);
}
