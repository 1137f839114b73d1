//! A base change in steps: the first step, the pause after it, and its resume.

use std::time::Duration;

use super::super::super::context::RESYNC_AFTER;
use super::*;
use crate::{
    crd::{OwnerResource, RolloutPhase},
    variant::rollout::{RESUME_ANNOTATION, REVISION_LABEL, revision_of},
};

/// Variants `a` and `b`, one instance each, rolled out in steps: `a`, then a pause, then the
/// rest; a step has two minutes.
fn in_steps() -> Mutation {
    let rollout = json!({
        "steps": [{"variants": ["a"]}, {"pause": true}],
        "progressDeadlineSeconds": 120,
    });
    let variants = json!([{"label": "a", "instances": 1}, {"label": "b", "instances": 1}]);
    mutation(json!({"variants": variants, "rollout": rollout}))
}

/// The ControllerRevision of `m`'s base as the API server holds it (the operator made it).
fn kept(m: &Mutation) -> Value {
    let revision = revision_of(m.base().text());
    json!({
        "apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {
            "name": format!("{NAME}-{revision}"), "namespace": NAMESPACE,
            "uid": "uid-of-revision", "resourceVersion": "3",
            "ownerReferences": owner().owner_references_json(),
        },
        "data": {"base": m.base().text()},
        "revision": 1,
    })
}

/// The image and the revision label of the Deployment `body` applies.
fn runs(body: &Value) -> (&Value, &Value) {
    let image = &body["spec"]["template"]["spec"]["containers"][0]["image"];
    (image, &body["metadata"]["labels"][REVISION_LABEL])
}

/// R43, R26, R12: a new base reaches the variants in the steps of `spec.rollout`. The first
/// reconcile keeps the new revision in a ControllerRevision, reads the old one's (to hold the
/// others on it byte for byte), applies the first step's variant alone with the new base and
/// its revision label, writes `status.rollout` (Progressing at step 0), tells
/// `RolloutStarted`, and comes back at the step's deadline. Once that variant is available
/// the rollout stops at the pause step: only the status (Paused, condition `RolloutPaused`)
/// and a `RolloutPaused` Event saying how to resume, the old base remembered (not read
/// again). The resume annotation for that step lets it pass: the rest is applied with the new
/// base, `RolloutStarted` at step 2, and the deadline again.
#[tokio::test]
async fn a_base_change_goes_in_steps_pauses_and_resumes() {
    let m = in_steps();
    let mut scene = Scene::of(&m, Vec::new());
    let old = scene.settle(&m).await;
    let (r1, before) = (revision_of(old.base().text()), old.clone());
    let m = scene.edited(&old, |m| {
        m.spec.deployment = (&base("web:2")).into();
        m.metadata.generation = Some(2);
    });
    let r2 = revision_of(m.base().text());
    let step_deadline = Duration::from_secs(120) + Duration::from_millis(500);

    // Step 0: variant a.
    let old_revision = format!("{REVISIONS}/{NAME}-{r1}");
    scene.script(vec![
        on("POST", REVISIONS, Reply::Echo(201)),
        on("GET", &old_revision, Reply::Json(200, kept(&before))),
        on("PATCH", format!("{DEPLOYMENTS}/web-a"), Reply::Echo(200)),
        on("PATCH", format!("{MUTATION}/status"), stored(&m)),
    ]);
    let (action, asked) = scene.reconcile(&m).await;
    let keep = format!("POST {REVISIONS}?&fieldManager={FIELD_MANAGER} {JSON}");
    let read = format!("GET {old_revision} []");
    assert_eq!(
        asked.lines(),
        [&*keep, &read, &apply("web-a"), &status_applied()]
    );
    assert_eq!(asked.body(&keep)["data"]["base"], m.base().text());
    let web_a = asked.body(&apply("web-a")).clone();
    assert_eq!(runs(&web_a), (&json!("web:2"), &json!(r2)));
    let status = written(&asked, &status_applied());
    let rollout = status.rollout.clone().unwrap_or_default();
    assert_eq!(
        (&*rollout.revision, rollout.previous_revision.as_deref()),
        (&*r2, Some(&*r1))
    );
    assert_eq!(
        (rollout.step, rollout.phase),
        (0, RolloutPhase::Progressing)
    );
    assert_eq!(
        asked.events,
        [("RolloutStarted".into(), format!("revision {r2} at step 0"))]
    );
    assert_eq!(action, Action::requeue(step_deadline));
    assert!(scene.server.all_answered());

    // Variant a is available with the new base: the pause step holds the rest.
    scene.cache(applied(&web_a));
    let m = scene.moved_on(&m, status);
    scene.script(vec![on("PATCH", format!("{MUTATION}/status"), stored(&m))]);
    let (action, asked) = scene.reconcile(&m).await;
    assert_eq!(asked.lines(), [status_applied()]);
    let status = written(&asked, &status_applied());
    let rollout = status.rollout.clone().unwrap_or_default();
    assert_eq!((rollout.step, rollout.phase), (1, RolloutPhase::Paused));
    let paused = status
        .conditions
        .iter()
        .find(|c| c.type_ == "RolloutPaused");
    assert_eq!(
        paused.map(|c| (&*c.status, &*c.reason)),
        Some(("True", "Paused"))
    );
    assert_eq!(asked.reasons(), ["RolloutPaused"]);
    let resume = format!("{RESUME_ANNOTATION}={r2}/1/");
    assert!(asked.events[0].1.contains(&resume), "{asked:?}");
    assert_eq!(action, Action::requeue(RESYNC_AFTER));
    assert!(scene.server.all_answered());

    // Resumed: the rest (variant b) takes the new base.
    let m = scene.moved_on(&m, status);
    let m = scene.edited(&m, |m| {
        let word = (RESUME_ANNOTATION.to_owned(), format!("{r2}/1/go"));
        m.metadata.annotations = Some([word].into());
    });
    scene.script(vec![
        on("PATCH", format!("{DEPLOYMENTS}/web-b"), Reply::Echo(200)),
        on("PATCH", format!("{MUTATION}/status"), stored(&m)),
    ]);
    let (action, asked) = scene.reconcile(&m).await;
    assert_eq!(asked.lines(), [apply("web-b"), status_applied()]);
    assert_eq!(
        runs(asked.body(&apply("web-b"))),
        (&json!("web:2"), &json!(r2))
    );
    let rollout = written(&asked, &status_applied())
        .rollout
        .unwrap_or_default();
    assert_eq!(
        (rollout.step, rollout.phase),
        (2, RolloutPhase::Progressing)
    );
    assert_eq!(rollout.resumed.as_deref(), Some(&*format!("{r2}/1/go")));
    assert_eq!(
        asked.events,
        [("RolloutStarted".into(), format!("revision {r2} at step 2"))]
    );
    assert_eq!(action, Action::requeue(step_deadline));
    assert!(scene.server.all_answered());
}
