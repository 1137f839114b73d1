//! R43: a base change reaching ten display variants in steps, against the real control
//! plane (kwok's nodes make a schedulable pod ready; a nodeSelector no node has keeps one
//! Pending): only the first step's Deployments are written, a pause step waits for its
//! resume, a step that misses its deadline fails and rolls back byte for byte, an edit
//! mid-rollout starts again, and a new leader resumes without writing a Deployment twice.

use k8s_openapi::api::apps::v1::ControllerRevision;
use mutantops::crd::{RolloutPhase, RolloutStatus};

use super::*;

const LABELS: [&str; 10] = [
    "lily-0", "lily-1", "lily-2", "lily-3", "lily-4", "radxa-0", "radxa-1", "radxa-2", "radxa-3",
    "radxa-4",
];

/// The MutantDeployment `snap` of ten variants, its base's image `image`, and `rollout`.
fn snap(image: &str, node_selector: Option<Value>, rollout: Value) -> Value {
    let mut b = base("snap");
    b["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image);
    if let Some(selector) = node_selector {
        b["spec"]["template"]["spec"]["nodeSelector"] = selector;
    }
    let variants: Vec<Value> = LABELS.iter().map(|l| json!({"label": l})).collect();
    let mut md = mutant_deployment("snap", b, json!(variants));
    md["spec"]["rollout"] = rollout;
    md
}

/// Each variant's Deployment: (its pod template as served, its generation).
async fn templates(f: &Fixture) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for label in LABELS {
        let d = f.deployments().get(&format!("snap-{label}")).await.unwrap();
        let template = serde_json::to_string(&d.spec.unwrap().template).unwrap();
        out.push((template, d.metadata.generation.unwrap()));
    }
    out
}

fn image_of(template: &str) -> String {
    let t: Value = serde_json::from_str(template).unwrap();
    t["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn rollout_where(
    f: &Fixture,
    what: &str,
    check: impl Fn(&RolloutStatus) -> bool,
) -> OwnerStatus {
    f.wait_status::<MutantDeployment>("snap", what, |s| s.rollout.as_deref().is_some_and(&check))
        .await
}

async fn complete(f: &Fixture) -> OwnerStatus {
    let status = rollout_where(f, "rollout Complete", |r| r.phase == RolloutPhase::Complete).await;
    f.wait_status::<MutantDeployment>("snap", "10/10 ready", |s| {
        s.summary == "10/10 variants ready"
    })
    .await;
    status
}

async fn revisions(f: &Fixture) -> Vec<String> {
    let api: Api<ControllerRevision> = f.ns.api();
    let list = api.list(&Default::default()).await.unwrap();
    let mut names: Vec<String> = list.items.iter().map(|c| c.name_any()).collect();
    names.sort();
    names
}

/// R43: the base's image changes; only the first step's Deployment is written,
/// and the rollout waits at the pause step, the other nine templates untouched; resumed, the
/// rest follow and it completes, the two revisions kept as ControllerRevisions.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_base_change_reaches_ten_variants_step_by_step() {
    let f = Fixture::new("rollout-steps").await;
    let steps = json!({"steps": [{"variants": ["lily-0"]}, {"pause": true}, {"variants": ["lily-*"]}],
                       "progressDeadlineSeconds": 60});
    f.apply::<MutantDeployment>(&snap("registry.example/app:1", None, steps.clone()))
        .await;
    let first = complete(&f).await;
    let rev1 = first.rollout.unwrap().revision;
    let before = templates(&f).await;

    f.apply::<MutantDeployment>(&snap("registry.example/app:2", None, steps.clone()))
        .await;
    let paused = rollout_where(&f, "at the pause step", |r| {
        r.phase == RolloutPhase::Paused && r.step == 1
    })
    .await;
    let r = paused.rollout.clone().unwrap();
    assert_ne!(r.revision, rev1);
    assert_eq!(r.previous_revision.as_deref(), Some(rev1.as_str()));
    assert_eq!(r.updated, 1, "{r:?}");
    let paused_condition = paused
        .conditions
        .iter()
        .find(|c| c.type_ == "RolloutPaused");
    assert!(
        paused_condition.is_some_and(|c| c.reason == "Paused"),
        "{paused:?}"
    );
    let during = templates(&f).await;
    assert_eq!(image_of(&during[0].0), "registry.example/app:2");
    assert_eq!(during[0].1, before[0].1 + 1, "lily-0 written once");
    assert_eq!(
        &during[1..],
        &before[1..],
        "the nine others untouched, byte for byte"
    );

    // Resumed: lily-1..4, then the radxas; Complete.
    let resume = format!("{}/1/now", r.revision);
    let annotate =
        json!({"metadata": {"annotations": {"mutantops.neiam.org/rollout-resume": resume}}});
    f.mutant_deployments()
        .patch("snap", &PatchParams::default(), &Patch::Merge(&annotate))
        .await
        .unwrap();
    let done = complete(&f).await.rollout.unwrap();
    assert_eq!(
        (done.revision.as_str(), done.updated),
        (r.revision.as_str(), 10)
    );
    let after = templates(&f).await;
    for (i, (template, generation)) in after.iter().enumerate() {
        assert_eq!(
            image_of(template),
            "registry.example/app:2",
            "{}",
            LABELS[i]
        );
        assert_eq!(*generation, before[i].1 + 1, "{} written once", LABELS[i]);
    }
    let d = f.deployments().get("snap-radxa-4").await.unwrap();
    assert_eq!(
        d.labels().get("mutantops.neiam.org/revision"),
        Some(&r.revision)
    );
    assert_eq!(
        revisions(&f).await,
        vec![format!("snap-{rev1}"), format!("snap-{}", r.revision)]
    );

    // R12: complete, a reconcile reads no revision and writes nothing.
    let audit = audit_log();
    let offset = quiet_offset(&f, &audit).await;
    let before = reconciles(&f.operator);
    let touch = json!({"metadata": {"labels": {"test.neiam.org/touched": "yes"}}});
    for label in ["lily-0", "radxa-4"] {
        f.deployments()
            .patch(
                &format!("snap-{label}"),
                &PatchParams::default(),
                &Patch::Merge(&touch),
            )
            .await
            .unwrap();
        // one reconcile each, not one for both
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_steady(&f, &audit, offset, before).await;
}

/// R43: a base whose pods cannot be scheduled misses the step's deadline:
/// the rollout is Degraded, the step's variants are back on the old template byte for byte,
/// the others never touched; the base edited again starts over from the first step and
/// completes.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_failed_step_rolls_back_byte_for_byte_and_an_edit_starts_over() {
    let f = Fixture::new("rollout-fail").await;
    let steps = json!({"steps": [{"variants": ["lily-0", "lily-1"]}],
                       "progressDeadlineSeconds": 4, "onFailure": "Rollback"});
    f.apply::<MutantDeployment>(&snap("registry.example/app:1", None, steps.clone()))
        .await;
    complete(&f).await;
    let before = templates(&f).await;

    let nowhere = Some(json!({"mutantops.test/no-such-node": "x"}));
    f.apply::<MutantDeployment>(&snap("registry.example/app:2", nowhere, steps.clone()))
        .await;
    let failed = rollout_where(&f, "Degraded", |r| r.phase == RolloutPhase::Degraded).await;
    let r = failed.rollout.clone().unwrap();
    assert_eq!(r.failed, ["lily-0", "lily-1"], "{r:?}");
    let message = r.message.unwrap();
    assert!(
        message.contains("step 0 failed: lily-0, lily-1"),
        "{message}"
    );
    let condition = failed
        .conditions
        .iter()
        .find(|c| c.type_ == "RolloutPaused");
    assert!(
        condition.is_some_and(|c| c.reason == "StepFailed"),
        "{failed:?}"
    );
    events(&f, "RolloutFailed", 1).await;
    // Rolled back: the old template, byte for byte; written twice (there and back).
    let back = wait_for(
        "lily-0 and lily-1 back on the old template",
        CONVERGE,
        || async {
            let now = templates(&f).await;
            if now[..2].iter().zip(&before[..2]).all(|(n, b)| n.0 == b.0) {
                Ok(now)
            } else {
                Err(format!(
                    "{:?}",
                    now[..2].iter().map(|t| image_of(&t.0)).collect::<Vec<_>>()
                ))
            }
        },
    )
    .await;
    assert_eq!(back[0].1, before[0].1 + 2);
    assert_eq!(&back[2..], &before[2..], "the other eight never touched");

    // Edited mid-rollout: starts over at step 0 with the new revision, from the last good one.
    f.apply::<MutantDeployment>(&snap("registry.example/app:3", None, steps.clone()))
        .await;
    let done = complete(&f).await.rollout.unwrap();
    assert_ne!(done.revision, r.revision);
    assert_eq!(done.previous_revision, r.previous_revision);
    let after = templates(&f).await;
    assert!(
        after
            .iter()
            .all(|(t, _)| image_of(t) == "registry.example/app:3")
    );
    // Only the current and the previous revision are kept once it completes.
    assert_eq!(revisions(&f).await.len(), 2);
}

/// R43, R30: the leader is replaced while the rollout waits at a pause step; the new
/// one resumes from the status and the kept revision, writes no Deployment again, and an
/// abort returns every variant to the previous template.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_new_leader_resumes_and_an_abort_returns_everything() {
    let mut f =
        Fixture::with_env("rollout-leader", &[("MUTANT_LEASE_DURATION_SECONDS", "2")]).await;
    let steps = json!({"steps": [{"percent": 20}, {"pause": true}]});
    f.apply::<MutantDeployment>(&snap("registry.example/app:1", None, steps.clone()))
        .await;
    complete(&f).await;
    let before = templates(&f).await;
    f.apply::<MutantDeployment>(&snap("registry.example/app:2", None, steps.clone()))
        .await;
    let paused = rollout_where(&f, "paused", |r| r.phase == RolloutPhase::Paused).await;
    let rev = paused.rollout.unwrap().revision;
    let during = templates(&f).await;
    let moved: Vec<usize> = (0..10).filter(|i| during[*i].1 != before[*i].1).collect();
    assert_eq!(moved, [0, 1], "20% of ten, in spec order");

    f.operator.kill();
    f.operator.launch();
    // The new leader reconciles (its status write would say so) and writes nothing.
    tokio::time::sleep(Duration::from_secs(6)).await;
    rollout_where(&f, "still paused", |r| r.phase == RolloutPhase::Paused).await;
    assert_eq!(templates(&f).await, during, "no Deployment written again");

    let abort = json!({"metadata": {"annotations": {"mutantops.neiam.org/rollout-abort": rev}}});
    f.mutant_deployments()
        .patch("snap", &PatchParams::default(), &Patch::Merge(&abort))
        .await
        .unwrap();
    rollout_where(&f, "aborted", |r| {
        r.phase == RolloutPhase::Degraded
            && r.message
                .as_deref()
                .is_some_and(|m| m.starts_with("aborted"))
    })
    .await;
    let back = wait_for("every variant on the old template", CONVERGE, || async {
        let now = templates(&f).await;
        if now.iter().zip(&before).all(|(n, b)| n.0 == b.0) {
            Ok(now)
        } else {
            Err("not yet".to_owned())
        }
    })
    .await;
    assert_eq!(
        &back[2..],
        &before[2..],
        "the eight never moved are never written"
    );
}

/// R43, through the HTTP API: the admin resumes a Mutation's rollout at
/// its pause step and aborts it (202, the annotation written); the Mutation's own token is
/// refused (401), and so is a resume with nothing to resume (409, saying why). A token's
/// PATCH of instances mid-rollout scales its variant on the template it runs.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn the_admin_resumes_and_aborts_a_mutations_rollout() {
    let f = Fixture::with_api("rollout-api").await;
    let manifest = |image: &str| {
        let mut b = base("snap");
        b["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image);
        // lily is handed to the Mutation's token, which scales it below (R32).
        let variants = json!([{"label": "radxa"}, {"label": "lily", "byToken": true}]);
        let mut m = mutation("m", b, variants);
        m["spec"]["rollout"] = json!({"steps": [{"variants": ["radxa"]}, {"pause": true}]});
        m
    };
    f.apply::<Mutation>(&manifest("registry.example/app:1"))
        .await;
    let token = f.token("m").await;
    let done = |s: &OwnerStatus| {
        s.summary == "2/2 variants ready"
            && s.rollout
                .as_deref()
                .is_some_and(|r| r.phase == RolloutPhase::Complete)
    };
    f.wait_status::<Mutation>("m", "complete", done).await;
    let resume = |token: &'static str| {
        let f = &f;
        async move {
            f.call("POST", "/mutations/m/rollout/resume", Some(token), None)
                .await
        }
    };
    let refused = resume(ADMIN).await;
    refused.assert_refused(
        409,
        &["rollout of revision", "is Complete: nothing to resume"],
    );
    let lily_before = f.deployments().get("snap-lily").await.unwrap();

    f.apply::<Mutation>(&manifest("registry.example/app:2"))
        .await;
    let paused = |s: &OwnerStatus| {
        s.rollout
            .as_deref()
            .is_some_and(|r| r.phase == RolloutPhase::Paused)
    };
    let held = f.wait_status::<Mutation>("m", "paused", paused).await;
    let r = held.rollout.unwrap();
    // R43, R23: the variant answer says which revision each runs.
    for (label, want) in [
        ("radxa", Some(&r.revision)),
        ("lily", r.previous_revision.as_ref()),
    ] {
        let path = format!("/mutations/m/variants/{label}");
        let got = f.call("GET", &path, Some(&token), None).await;
        assert_eq!(
            got.json()["revision"].as_str(),
            want.map(String::as_str),
            "{label}: {got:?}"
        );
    }
    // Mid-rollout, the Mutation's token scales lily, which stays on its template.
    let scale = json!({"instances": 2});
    let scaled = f
        .call(
            "PATCH",
            "/mutations/m/variants/lily",
            Some(&token),
            Some(&scale),
        )
        .await;
    assert_eq!(scaled.status, 200, "{scaled:?}");
    let lily = f
        .wait_deployment("snap-lily", "two replicas", |d| {
            d.spec.as_ref().and_then(|s| s.replicas) == Some(2)
        })
        .await;
    assert_eq!(
        serde_json::to_value(&lily.spec.unwrap().template).unwrap(),
        serde_json::to_value(&lily_before.spec.unwrap().template).unwrap(),
        "scaled on the old template"
    );
    let by_token = f
        .call("POST", "/mutations/m/rollout/resume", Some(&token), None)
        .await;
    assert_eq!(by_token.status, 401, "{by_token:?}");

    let resumed = resume(ADMIN).await;
    assert_eq!(resumed.status, 202, "{resumed:?}");
    let said = resumed.json();
    assert_eq!(said["annotation"], "mutantops.neiam.org/rollout-resume");
    assert_eq!(
        (said["step"].as_i64(), said["phase"].as_str()),
        (Some(1), Some("Paused"))
    );
    f.wait_status::<Mutation>("m", "complete again", done).await;
    f.wait_deployment("snap-lily", "the new image", |d| {
        let t = serde_json::to_string(&d.spec.as_ref().unwrap().template).unwrap();
        image_of(&t) == "registry.example/app:2"
    })
    .await;

    let aborted = f
        .call("POST", "/mutations/m/rollout/abort", Some(ADMIN), None)
        .await;
    assert_eq!(aborted.status, 202, "{aborted:?}");
    f.wait_status::<Mutation>("m", "aborted", |s| {
        s.rollout
            .as_deref()
            .is_some_and(|r| r.phase == RolloutPhase::Degraded)
    })
    .await;
    for label in ["radxa", "lily"] {
        f.wait_deployment(&format!("snap-{label}"), "the old image", |d| {
            let t = serde_json::to_string(&d.spec.as_ref().unwrap().template).unwrap();
            image_of(&t) == "registry.example/app:1"
        })
        .await;
    }
}
