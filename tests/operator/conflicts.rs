//! R9: the operator never takes over, edits or deletes a Deployment it does not control.

use kube::api::PostParams;
use serde_json::json;

use super::*;

/// R9: a Deployment of the variant's name owned by nobody, or by another Mutation, is reported
/// Conflict and left byte-for-byte untouched; a repeated label is Conflict; the other variants
/// still run.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn foreign_deployments_and_repeated_labels_are_conflicts() {
    let audit = audit_log();
    let f = Fixture::new("ctl-conflict").await;
    // web-b belongs to another Mutation.
    f.apply::<Mutation>(&mutation(
        "other",
        base("web"),
        json!([{ "label": "b", "instances": 1 }]),
    ))
    .await;
    let theirs = f.wait_deployment("web-b", "ready", |d| ready(d, 1)).await;
    // web-a belongs to nobody.
    let mut plain = base("web-a");
    plain["spec"]["replicas"] = json!(1);
    let nobodys = f
        .deployments()
        .create(
            &PostParams::default(),
            &serde_json::from_value(plain).unwrap(),
        )
        .await
        .unwrap();

    // From here on, the operator must not write to either (web-b's own Mutation is converged).
    f.wait_status::<Mutation>("other", "1/1", |s| s.summary == "1/1 variants ready")
        .await;
    let start = log_size(&audit);
    let variants = json!([
        { "label": "a", "instances": 2 },
        { "label": "b", "instances": 2 },
        { "label": "c", "instances": 1 },
        { "label": "c", "instances": 3 }
    ]);
    f.apply::<Mutation>(&mutation("mine", base("web"), variants))
        .await;
    let status = f
        .wait_status::<Mutation>("mine", "conflicts reported and c ready", |s| {
            s.variants.len() == 4 && s.variants[2].state == VariantState::Ready
        })
        .await;
    assert_eq!(
        states(&status),
        [
            ("a".to_string(), VariantState::Conflict),
            ("b".to_string(), VariantState::Conflict),
            ("c".to_string(), VariantState::Ready),
            ("c".to_string(), VariantState::Conflict),
        ]
    );
    let message = |i: usize| status.variants[i].message.clone().unwrap_or_default();
    assert!(message(0).contains("web-a"), "{}", message(0));
    assert!(
        message(1).contains("Mutation") && message(1).contains("other"),
        "{}",
        message(1)
    );
    assert!(message(3).contains("repeat"), "{}", message(3));
    assert_eq!(status.summary, "1/4 variants ready");
    // R26: one VariantConflict Event per conflicting variant.
    let found = events(&f, "VariantConflict", 3).await;
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(found.iter().all(|(_, _, times)| *times == 1), "{found:?}");

    // Untouched: the API server's audit log has no write of the operator to either (only the
    // Deployment controller keeps updating their status), and their spec is as it was.
    let writes: Vec<String> = operator_requests(&audit, start, &f.ns.name)
        .into_iter()
        .filter(|r| !r.starts_with("get ") && (r.contains("/web-a") || r.contains("/web-b")))
        .collect();
    assert_eq!(
        writes,
        Vec::<String>::new(),
        "the operator wrote to a foreign Deployment"
    );
    let a = f.deployments().get("web-a").await.unwrap();
    let b = f.deployments().get("web-b").await.unwrap();
    assert_eq!(a.metadata.generation, nobodys.metadata.generation);
    assert_eq!(a.spec, nobodys.spec);
    assert_eq!(a.metadata.labels, nobodys.metadata.labels);
    assert_eq!(controller_of(&a), None);
    assert_eq!(controller_of(&b), controller_of(&theirs));
    assert_eq!(b.metadata.generation, theirs.metadata.generation);
    assert_eq!(b.spec.unwrap().replicas, Some(1));
    assert_eq!(
        f.deployments()
            .get("web-c")
            .await
            .unwrap()
            .spec
            .unwrap()
            .replicas,
        Some(1)
    );

    // Deleting "mine" leaves both foreign Deployments alone (R6, R7).
    f.mutations()
        .delete("mine", &Default::default())
        .await
        .unwrap();
    f.wait_gone("web-c").await;
    assert_eq!(
        f.deployments().get("web-a").await.unwrap().spec,
        nobodys.spec
    );
    assert!(f.deployments().get_opt("web-b").await.unwrap().is_some());
}

/// R6: a Deployment that merely carries the owner's labels, with no controller reference to
/// the owner, is never pruned.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn labels_alone_do_not_make_a_deployment_prunable() {
    let audit = audit_log();
    let start = log_size(&audit);
    let f = Fixture::new("ctl-labels").await;
    f.apply::<Mutation>(&mutation(
        "m",
        base("web"),
        json!([{ "label": "a", "instances": 1 }]),
    ))
    .await;
    f.wait_deployment("web-a", "ready", |d| ready(d, 1)).await;

    let mut lookalike = base("web-z");
    lookalike["metadata"]["labels"] = json!({
        "mutantops.neiam.org/owner": "m",
        "mutantops.neiam.org/kind": "mutation",
        "mutantops.neiam.org/variant": "z"
    });
    let created = f
        .deployments()
        .create(
            &PostParams::default(),
            &serde_json::from_value(lookalike).unwrap(),
        )
        .await
        .unwrap();
    // A spec change makes the owner reconcile (and prune) again.
    let two = json!([{ "label": "a", "instances": 1 }, { "label": "b", "instances": 1 }]);
    f.apply::<Mutation>(&mutation("m", base("web"), two)).await;
    f.wait_deployment("web-b", "ready", |d| ready(d, 1)).await;
    f.wait_status::<Mutation>("m", "2/2", |s| s.summary == "2/2 variants ready")
        .await;
    let still = f.deployments().get("web-z").await.unwrap();
    assert_eq!(still.metadata.generation, created.metadata.generation);
    let writes: Vec<String> = operator_requests(&audit, start, &f.ns.name)
        .into_iter()
        .filter(|r| !r.starts_with("get ") && r.contains("/web-z"))
        .collect();
    assert_eq!(
        writes,
        Vec::<String>::new(),
        "the operator wrote to a Deployment it does not control"
    );
}
