//! A new Mutation, and a variant added to one that runs.

use super::super::super::context::RESYNC_AFTER;
use super::*;
use crate::crd::VariantState::{Progressing, Ready};

/// R4, R14, R26 (and the status left to the next reconcile): a new Mutation's first reconcile
/// creates its token Secret (immutable, 64 hex digits, owned by the Mutation), then one
/// Deployment per variant with a POST under strict field validation (its replicas and env),
/// and publishes one `VariantCreated` Event naming both; nothing else: no dry run, no
/// namespace read for a base that breaks no baseline rule (R33), and no status write in the
/// reconcile that created Deployments. It comes back at the resync.
#[tokio::test]
async fn a_new_mutation_gets_its_secret_its_deployments_and_one_event() {
    let m = mutation(json!({"variants": [
        {"label": "a", "instances": 2, "env": {"MODE": "x"}},
        {"label": "b", "instances": 1},
    ]}));
    let scene = Scene::new(vec![
        on("POST", SECRETS, Reply::Echo(201)),
        on("POST", DEPLOYMENTS, Reply::Echo(201)),
        on("POST", DEPLOYMENTS, Reply::Echo(201)),
    ]);
    let (action, asked) = scene.reconcile(&m).await;
    let secret = format!("POST {SECRETS}?&fieldManager={FIELD_MANAGER} {JSON}");
    assert_eq!(
        asked.lines(),
        [
            secret.as_str(),
            &created(DEPLOYMENTS),
            &created(DEPLOYMENTS)
        ]
    );
    let body = asked.body(&secret);
    assert_eq!(body["metadata"]["name"], "snap-secret");
    assert_eq!(body["immutable"], true);
    assert_eq!(body["metadata"]["ownerReferences"][0]["uid"], UID);
    let token = body["data"]["token"].as_str().unwrap_or_default();
    assert_eq!(token.len(), 88, "64 hex digits in base64: {token}");
    let deployments: Vec<(&Value, &Value, &Value)> = asked.writes[1..]
        .iter()
        .map(|a| {
            let spec = &a.body["spec"];
            let env = &spec["template"]["spec"]["containers"][0]["env"];
            (&a.body["metadata"]["name"], &spec["replicas"], env)
        })
        .collect();
    let mode = json!([{"name": "MODE", "value": "x"}]);
    assert_eq!(
        deployments,
        [
            (&json!("web-a"), &json!(2), &mode),
            (&json!("web-b"), &json!(1), &Value::Null)
        ]
    );
    assert_eq!(
        asked.events,
        [(
            "VariantCreated".to_owned(),
            "created 2 Deployments: web-a (variant a), web-b (variant b)".to_owned()
        )]
    );
    assert_eq!(action, Action::requeue(RESYNC_AFTER));
    assert!(scene.server.all_answered());
}

/// R6, R11, R12, R26: a variant added to a Mutation whose other variant's Deployment is cached
/// as applied: only the new Deployment is created (the other is neither read nor written), with
/// its `VariantCreated` Event and no status; the next reconcile, with the new Deployment in
/// the cache, writes the status alone (`1/2 variants ready`, the new one Progressing); the one
/// after that, with the status in the cache, asks nothing.
#[tokio::test]
async fn an_added_variant_alone_is_created_then_the_status_written() {
    let one = mutation(json!({"variants": [{"label": "a", "instances": 2}]}));
    let mut scene = Scene::of(
        &one,
        vec![on("PATCH", format!("{MUTATION}/status"), stored(&one))],
    );
    let [web_a] = &planned(&one)[..] else {
        panic!("one Deployment planned")
    };
    scene.cache(applied(web_a));
    // The Mutation as it ran before: its status, as its reconcile wrote it.
    let (_, asked) = scene.reconcile(&one).await;
    assert_eq!(asked.lines(), [status_applied()]);
    let before = written(&asked, &status_applied());
    assert_eq!(before.summary, "1/1 variants ready");

    let two = json!({"variants": [{"label": "a", "instances": 2}, {"label": "b", "instances": 1}]});
    let two = scene.moved_on(&mutation(two), before);
    scene.script(vec![on("POST", DEPLOYMENTS, Reply::Echo(201))]);
    let (action, asked) = scene.reconcile(&two).await;
    assert_eq!(asked.lines(), [created(DEPLOYMENTS)]);
    let made = &asked.writes[0].body;
    assert_eq!(made["metadata"]["name"], "web-b");
    assert_eq!(asked.reasons(), ["VariantCreated"]);
    assert_eq!(asked.events[0].1, "created Deployment web-b for variant b");
    assert_eq!(action, Action::requeue(RESYNC_AFTER));

    // Its watch delivers the new Deployment, as the POST made it; the owner is reconciled again.
    let mut web_b = made.clone();
    web_b["metadata"]["uid"] = json!("uid-of-web-b");
    web_b["metadata"]["managedFields"] = json!([{"manager": FIELD_MANAGER, "operation": "Update"}]);
    scene.cache(serde_json::from_value(web_b).unwrap_or_else(|e| panic!("{e}")));
    scene.script(vec![on(
        "PATCH",
        format!("{MUTATION}/status"),
        stored(&two),
    )]);
    let (action, asked) = scene.reconcile(&two).await;
    assert_eq!(asked.lines(), [status_applied()]);
    assert!(asked.events.is_empty(), "{asked:?}");
    let status = written(&asked, &status_applied());
    assert_eq!(status.summary, "1/2 variants ready");
    let states: Vec<_> = status
        .variants
        .iter()
        .map(|v| (&*v.label, v.state))
        .collect();
    assert_eq!(states, [("a", Ready), ("b", Progressing)]);
    assert_eq!(action, Action::requeue(RESYNC_AFTER));

    // With that status cached, nothing has changed: no request at all.
    scene.script(Vec::new());
    let steady = scene.moved_on(&two, status);
    let (action, asked) = scene.reconcile(&steady).await;
    assert!(
        asked.writes.is_empty() && asked.events.is_empty(),
        "{asked:?}"
    );
    assert_eq!(action, Action::requeue(RESYNC_AFTER));
    assert!(scene.server.all_answered());
}
