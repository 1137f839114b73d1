//! R39 with R22 and R34: a fleet powered up at once. Sixty boards enroll into one
//! Mutation at the same moment, each with a variant of its own, with the enrollment key and
//! the default request deadline (4 s): every one is enrolled (201), none is answered 503.
//! Enrollments that arrive together are written together (`api::batch`): their variants in
//! one write of the Mutation, their tokens' hashes in one write of the devices Secret, their
//! entries in one write of the device list. When enrollments took turns at the devices Secret
//! (about 70 ms each, several times that on a busy API server), the tail of a fleet of twenty
//! or more ran past the deadline.

use std::time::Instant;

use serde_json::json;

use super::{devices::create, *};

const BOARDS: usize = 60;

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_fleet_that_enrolls_at_once_is_enrolled_within_the_deadline() {
    let f = Fixture::with_api("enroll-burst").await;
    let key = create(
        &f,
        "fleet",
        json!({"enrollment": "Open", "maxDevices": 100}),
        json!({"env": ["SNAP_RES"], "maxVariants": 100}),
    )
    .await;
    let began = Instant::now();
    let enrolls = (0..BOARDS).map(|i| {
        let body = json!({"id": format!("board-{i}"),
                          "variant": {"label": format!("b{i}"), "instances": 0}});
        let (f, key) = (&f, &key);
        async move {
            let began = Instant::now();
            let reply = f
                .call("POST", "/mutations/fleet/devices", Some(key), Some(&body))
                .await;
            (reply, began.elapsed())
        }
    });
    let replies = futures::future::join_all(enrolls).await;
    let mut codes = std::collections::BTreeMap::<u16, usize>::new();
    for (reply, _) in &replies {
        *codes.entry(reply.status).or_default() += 1;
    }
    let slowest = replies.iter().map(|(_, t)| *t).max().unwrap_or_default();
    eprintln!(
        "{BOARDS} enrollments at once: {codes:?} in {:?}, slowest {slowest:?}",
        began.elapsed()
    );
    let refused: Vec<_> = replies
        .iter()
        .filter(|(r, _)| r.status != 201)
        .map(|(r, _)| format!("{} {}", r.status, r.body))
        .collect();
    assert!(refused.is_empty(), "{codes:?}\n{}", refused.join("\n"));

    // Fewer writes of the devices Secret than enrollments: those waiting together were
    // written together.
    let log = f.operator.log_text();
    let writes = log
        .lines()
        .filter(|l| l.contains("device registry edits written") && l.contains("name=\"fleet\""))
        .count();
    eprintln!("{BOARDS} enrollments: {writes} writes of the devices Secret");
    assert!(
        writes > 0 && writes < BOARDS,
        "{writes} writes of the devices Secret for {BOARDS} enrollments"
    );
}
