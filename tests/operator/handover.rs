//! R5, R35: the first apply over a Deployment the operator created hands its field entry over
//! to server-side apply with a JSON patch guarded by the resourceVersion the cache holds. When
//! the Deployment controller has written the Deployment's status since (it does, several times,
//! as a new Deployment's pods start), the server refuses the patch (422): the object moved on,
//! which is a retry, never the variant's fault. Seen in CI as a variant reported Invalid
//! ("the server rejected our request due to an error in our request").
//!
//! The operator here reaches the API server through the lagging proxy of `replicas` (its
//! watches 300 ms behind); ten variants are changed and their Deployments touched before the
//! operator's cache sees either, so the handovers run on a resourceVersion already gone.

use std::time::Instant;

use mutantops::crd::VariantStatus;

use super::replicas::lagging_kubeconfig;
use super::*;

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_handover_on_a_deployment_that_moved_on_is_retried_not_invalid() {
    let ns = TestNamespace::new("handover").await;
    common::install_crds(&ns.client).await;
    let (_dir, kubeconfig) = lagging_kubeconfig("handover").await;
    let path = kubeconfig.display().to_string();
    let operator = Operator::start_with(&ns.name, &[("KUBECONFIG", path.as_str())]);
    let f = Fixture { operator, ns };

    let labels: Vec<String> = (0..10).map(|i| format!("v{i}")).collect();
    let variants = |value: &str| -> Value {
        json!(
            labels
                .iter()
                .map(|l| json!({"label": l, "env": {"X": value}}))
                .collect::<Vec<_>>()
        )
    };
    f.apply::<MutantDeployment>(&mutant_deployment("web", base("web"), variants("1")))
        .await;
    f.wait_status::<MutantDeployment>("web", "ready", |s| s.summary == "10/10 variants ready")
        .await;
    // The change, then, before the operator's cache can see it (300 ms behind), a touch of
    // every Deployment: the reconcile the change brings hands each over on a resourceVersion
    // the server has already moved past.
    f.apply::<MutantDeployment>(&mutant_deployment("web", base("web"), variants("2")))
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let touch = json!({"metadata": {"labels": {"test.neiam.org/touched": "yes"}}});
    for label in &labels {
        f.deployments()
            .patch(
                &format!("web-{label}"),
                &PatchParams::default(),
                &Patch::Merge(&touch),
            )
            .await
            .unwrap();
    }
    let api = f.mutant_deployments();
    let deadline = Instant::now() + CONVERGE;
    loop {
        let status = api.get("web").await.unwrap().status.unwrap_or_default();
        let invalid: Vec<&VariantStatus> = status
            .variants
            .iter()
            .filter(|v| v.state == VariantState::Invalid)
            .collect();
        assert!(
            invalid.is_empty(),
            "a variant reported Invalid: {invalid:#?}"
        );
        let applied = f.deployments().list(&Default::default()).await.unwrap();
        let changed = applied
            .items
            .iter()
            .filter(|d| env_of(d).contains(&("X".to_owned(), "2".to_owned())))
            .count();
        if changed == labels.len() && status.summary == "10/10 variants ready" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not converged: {changed} changed, {}",
            status.summary
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
