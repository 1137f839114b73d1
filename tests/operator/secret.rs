//! R14, R15: the Mutation's Secret.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

use super::*;

/// Applies Mutation `app` with the one variant `a` (1 instance), and waits until its status
/// says `what`, by `check`.
async fn apply_app(f: &Fixture, what: &str, check: impl Fn(&OwnerStatus) -> bool) -> OwnerStatus {
    let one = json!([{ "label": "a", "instances": 1 }]);
    f.apply::<Mutation>(&mutation("app", base("app"), one))
        .await;
    f.wait_status::<Mutation>("app", what, check).await
}

fn token(secret: &Secret) -> String {
    let bytes = &secret.data.as_ref().unwrap()["token"].0;
    String::from_utf8(bytes.clone()).unwrap()
}

/// R14: `<name>-secret` holds 64 lower-case hex characters, is owned by the Mutation, and is
/// unchanged after spec edits and operator restarts (SIGKILL); a deleted Secret is made anew;
/// it is deleted with the Mutation.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn the_token_is_made_once_and_kept() {
    let mut f = Fixture::new("ctl-secret").await;
    let status = apply_app(&f, "secret reported", |s| s.secret.is_some()).await;
    assert_eq!(status.secret.as_deref(), Some("app-secret"));
    let secrets: Api<Secret> = f.ns.api();
    let first = secrets.get("app-secret").await.unwrap();
    let value = token(&first);
    assert_eq!(value.len(), 64);
    assert!(
        value.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')),
        "{value}"
    );
    let owner = f.mutations().get("app").await.unwrap();
    assert_eq!(controller_of(&first), controlled_by(&owner));
    assert_eq!(first.immutable, Some(true));

    // A spec edit, then two hard restarts of the operator.
    let two = json!([{ "label": "a", "instances": 1 }, { "label": "b", "instances": 1 }]);
    f.apply::<Mutation>(&mutation("app", base("app"), two))
        .await;
    f.wait_deployment("app-b", "ready", |d| ready(d, 1)).await;
    for _ in 0..2 {
        f.operator.kill();
        f.operator = common::Operator::start(&f.ns.name);
        let three = json!([{ "label": "a", "instances": 1 }, { "label": "b", "instances": 2 }]);
        f.apply::<Mutation>(&mutation("app", base("app"), three))
            .await;
        f.wait_deployment("app-b", "2 ready", |d| ready(d, 2)).await;
        let again = secrets.get("app-secret").await.unwrap();
        assert_eq!(again.uid(), first.uid());
        assert_eq!(again.resource_version(), first.resource_version());
        assert_eq!(token(&again), value);
    }

    // Deleted by hand: a new one (with a new token) is made.
    secrets
        .delete("app-secret", &DeleteParams::background())
        .await
        .unwrap();
    let renewed = wait_for("a new Secret", CONVERGE, || async {
        match secrets
            .get_opt("app-secret")
            .await
            .map_err(|e| e.to_string())?
        {
            Some(s) if s.uid() != first.uid() => Ok(s),
            other => Err(format!("{:?}", other.map(|s| s.uid()))),
        }
    })
    .await;
    assert_ne!(token(&renewed), value);

    // R7: deleted with the Mutation.
    f.mutations()
        .delete("app", &DeleteParams::foreground())
        .await
        .unwrap();
    wait_for("the Secret to go with its Mutation", CONVERGE, || async {
        match secrets
            .get_opt("app-secret")
            .await
            .map_err(|e| e.to_string())?
        {
            None => Ok(()),
            Some(_) => Err("still there".to_string()),
        }
    })
    .await;
}

/// R15: a Secret of that name that the Mutation does not own is reported and left alone.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_foreign_secret_is_reported_and_untouched() {
    let f = Fixture::new("ctl-foreign").await;
    let secrets: Api<Secret> = f.ns.api();
    let foreign: Secret = common::from_json(json!({
        "metadata": { "name": "app-secret" },
        "stringData": { "token": "not-from-mutantops" }
    }));
    let created = secrets
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();

    let status = apply_app(&f, "foreign secret reported", |s| {
        s.message
            .as_deref()
            .is_some_and(|m| m.contains("app-secret"))
    })
    .await;
    assert_eq!(status.secret, None);
    // The variants still run.
    f.wait_deployment("app-a", "ready", |d| ready(d, 1)).await;
    let after = secrets.get("app-secret").await.unwrap();
    assert_eq!(after.resource_version(), created.resource_version());
    assert_eq!(controller_of(&after), None);
}
