//! Generated Deployments follow their owner: hand edits and deletes are put back, and owners
//! of the two kinds with the same name never touch each other's Deployments.

use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;

use super::*;

/// R5: a hand edit of replicas or env, or a delete, of a generated Deployment is undone.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn hand_edits_and_deletes_are_undone() {
    let f = Fixture::new("ctl-edits").await;
    let variants = json!([{ "label": "a", "env": { "MODE": "variant" }, "instances": 2 }]);
    f.apply::<MutantDeployment>(&mutant_deployment("edits", base("web"), variants))
        .await;
    let first = f.wait_deployment("web-a", "2 ready", |d| ready(d, 2)).await;

    // Another field manager changes replicas and an env value, as `kubectl edit` would.
    let mut edited = serde_json::to_value(&first).unwrap();
    edited["spec"]["replicas"] = json!(5);
    edited["spec"]["template"]["spec"]["containers"][0]["env"][1]["value"] = json!("hacked");
    edited["metadata"]["managedFields"] = serde_json::Value::Null;
    f.deployments()
        .replace(
            "web-a",
            &kube::api::PostParams {
                field_manager: Some("kubectl-edit".into()),
                ..Default::default()
            },
            &serde_json::from_value(edited).unwrap(),
        )
        .await
        .unwrap();
    let restored = f
        .wait_deployment("web-a", "replicas and env put back", |d| {
            d.spec.as_ref().and_then(|s| s.replicas) == Some(2)
                && env_of(d).contains(&("MODE".into(), "variant".into()))
        })
        .await;
    assert_eq!(restored.uid(), first.uid());

    // Deleted by hand: made again.
    f.deployments()
        .delete("web-a", &DeleteParams::background())
        .await
        .unwrap();
    let again = f
        .wait_deployment("web-a", "re-created", |d| {
            d.uid() != first.uid() && d.metadata.deletion_timestamp.is_none()
        })
        .await;
    assert_eq!(again.spec.unwrap().replicas, Some(2));
}

/// R4, R5: a variable a variant no longer declares is removed from its Deployment. The
/// Deployment was created with a POST (its fields recorded under the operator's `Update`
/// entry); the first apply over it hands that entry to server-side apply, so the apply can
/// remove what it no longer sets. Afterwards the operator holds one `Apply` entry only.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn what_a_variant_no_longer_declares_is_removed() {
    let f = Fixture::new("ctl-drop").await;
    let two = json!([{ "label": "a", "env": { "MODE": "variant", "EXTRA": "1" }, "instances": 0 }]);
    f.apply::<Mutation>(&mutation("drop", base("web"), two))
        .await;
    let created = f
        .wait_deployment("web-a", "EXTRA set", |d| {
            env_of(d).contains(&("EXTRA".into(), "1".into()))
        })
        .await;
    let entries = |d: &Deployment| -> Vec<String> {
        d.metadata
            .managed_fields
            .iter()
            .flatten()
            .filter(|e| e.manager.as_deref() == Some("mutantops-operator"))
            .map(|e| format!("{:?}/{:?}", e.operation, e.subresource))
            .collect()
    };
    assert_eq!(
        entries(&created),
        ["Some(\"Update\")/None"],
        "created with a POST"
    );

    let one = json!([{ "label": "a", "env": { "MODE": "variant" }, "instances": 0 }]);
    f.apply::<Mutation>(&mutation("drop", base("web"), one))
        .await;
    let changed = f
        .wait_deployment("web-a", "EXTRA removed", |d| {
            !env_of(d).iter().any(|(name, _)| name == "EXTRA")
        })
        .await;
    assert!(env_of(&changed).contains(&("MODE".into(), "variant".into())));
    assert_eq!(changed.uid(), created.uid(), "changed in place");
    assert_eq!(entries(&changed), ["Some(\"Apply\")/None"]);
}

/// R11: a Mutation deleted and at once created again under the same name, while the old
/// one's Deployments still await garbage collection, is never Ready through them: each status
/// seen with `Ready=True` reads "2/2 variants ready", and both Deployments are then controlled
/// by the new Mutation's uid.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_recreated_owner_is_ready_only_through_its_own_deployments() {
    let f = Fixture::new("ctl-again").await;
    let two = json!([{ "label": "a", "instances": 0 }, { "label": "b", "instances": 0 }]);
    f.apply::<Mutation>(&mutation("again", base("web"), two.clone()))
        .await;
    f.wait_status::<Mutation>("again", "2/2", |s| s.summary == "2/2 variants ready")
        .await;
    // A finalizer of the test's keeps the old web-a after the garbage collector deletes it,
    // so the new Mutation surely meets it.
    let hold =
        |finalizers: Value| Patch::Merge(json!({ "metadata": { "finalizers": finalizers } }));
    f.deployments()
        .patch(
            "web-a",
            &PatchParams::default(),
            &hold(json!([common::TEST_HOLD])),
        )
        .await
        .unwrap();
    f.mutations()
        .delete("again", &DeleteParams::background())
        .await
        .unwrap();
    wait_for("the old Mutation to be gone", CONVERGE, || async {
        match f.mutations().get_opt("again").await {
            Ok(None) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    f.apply::<Mutation>(&mutation("again", base("web"), two))
        .await;
    let uid = f.mutations().get("again").await.unwrap().uid().unwrap();
    let held = f
        .wait_status::<Mutation>("again", "a in conflict", |s| {
            s.variants.first().map(|v| v.state) == Some(VariantState::Conflict)
        })
        .await;
    // web-b may be collected already (then b is Ready) or not yet (then in Conflict too):
    // either way the owner is not Ready, and the condition says so with the summary.
    assert!(
        held.summary != "2/2 variants ready"
            && held.conditions[0].status == "False"
            && held.conditions[0].reason == "VariantsNotApplied",
        "{held:?}"
    );
    f.deployments()
        .patch("web-a", &PatchParams::default(), &hold(Value::Null))
        .await
        .unwrap();

    let deadline = std::time::Instant::now() + CONVERGE;
    let mut seen = Vec::new();
    loop {
        let m = f.mutations().get("again").await.unwrap();
        if let Some(status) = m.status.as_ref()
            && status.observed_generation == m.metadata.generation
        {
            let ready = status
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            seen.push(format!("{} ready={ready}", status.summary));
            if ready {
                assert_eq!(status.summary, "2/2 variants ready", "{seen:?}");
                for name in ["web-a", "web-b"] {
                    let d = f.deployments().get(name).await.unwrap();
                    let controller = d
                        .metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .find(|r| r.controller == Some(true))
                        .map(|r| r.uid.clone());
                    assert_eq!(
                        controller.as_deref(),
                        Some(uid.as_str()),
                        "{name}: {seen:?}"
                    );
                }
                break;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never Ready: {seen:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// R6: a MutantDeployment and a Mutation with the same name in one namespace never prune each
/// other's Deployments.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn same_named_owners_of_both_kinds_do_not_prune_each_other() {
    let f = Fixture::new("ctl-twins").await;
    let two = json!([{ "label": "x", "instances": 1 }, { "label": "y", "instances": 1 }]);
    f.apply::<MutantDeployment>(&mutant_deployment("twin", base("md"), two.clone()))
        .await;
    f.apply::<Mutation>(&mutation("twin", base("mu"), two))
        .await;
    let mut uids = Vec::new();
    for name in ["md-x", "md-y", "mu-x", "mu-y"] {
        uids.push(
            f.wait_deployment(name, "ready", |d| ready(d, 1))
                .await
                .uid(),
        );
    }

    // Each drops variant y: each prunes its own, and only its own.
    let one = json!([{ "label": "x", "instances": 1 }]);
    f.apply::<MutantDeployment>(&mutant_deployment("twin", base("md"), one.clone()))
        .await;
    f.wait_gone("md-y").await;
    f.wait_status::<MutantDeployment>("twin", "1 variant", |s| s.variants.len() == 1)
        .await;
    assert_eq!(
        f.deployments().get("mu-y").await.unwrap().uid(),
        uids[3],
        "mu-y untouched"
    );
    assert_eq!(f.deployments().get("mu-x").await.unwrap().uid(), uids[2]);

    f.apply::<Mutation>(&mutation("twin", base("mu"), one))
        .await;
    f.wait_gone("mu-y").await;
    assert_eq!(
        f.deployments().get("md-x").await.unwrap().uid(),
        uids[0],
        "md-x untouched"
    );

    // Deleting one owner leaves the other's Deployments alone.
    f.mutations()
        .delete("twin", &DeleteParams::foreground())
        .await
        .unwrap();
    f.wait_gone("mu-x").await;
    assert_eq!(f.deployments().get("md-x").await.unwrap().uid(), uids[0]);
}

/// R4, R6: renaming the base moves every variant to the new name and prunes the old ones;
/// adding a variant starts it.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn adding_variants_and_renaming_the_base() {
    let f = Fixture::new("ctl-rename").await;
    f.apply::<Mutation>(&mutation(
        "m",
        base("old"),
        json!([{ "label": "a", "instances": 1 }]),
    ))
    .await;
    f.wait_deployment("old-a", "ready", |d| ready(d, 1)).await;

    let both = json!([{ "label": "a", "instances": 1 }, { "label": "b", "instances": 0 }]);
    f.apply::<Mutation>(&mutation("m", base("new"), both)).await;
    f.wait_deployment("new-a", "ready", |d| ready(d, 1)).await;
    f.wait_deployment("new-b", "0 replicas", |d| ready(d, 0))
        .await;
    f.wait_gone("old-a").await;
    // R11: 0 instances is Ready at 0.
    let status = f
        .wait_status::<Mutation>("m", "2/2", |s| s.summary == "2/2 variants ready")
        .await;
    assert_eq!(status.variants[1].replicas, 0);
}

/// R13: SIGTERM stops the operator cleanly (exit status 0) and promptly; what it made stays.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn sigterm_stops_the_operator_cleanly() {
    let mut f = Fixture::new("ctl-sigterm").await;
    f.apply::<Mutation>(&mutation(
        "m",
        base("web"),
        json!([{ "label": "a", "instances": 1 }]),
    ))
    .await;
    let before = f.wait_deployment("web-a", "ready", |d| ready(d, 1)).await;
    let status = f.operator.terminate(Duration::from_secs(10));
    assert!(
        status.is_some_and(|s| s.success()),
        "exit status {status:?}\n{}",
        f.operator.log_text()
    );
    assert!(f.operator.log_text().contains("SIGTERM"));
    assert_eq!(
        f.deployments().get("web-a").await.unwrap().uid(),
        before.uid()
    );
}
