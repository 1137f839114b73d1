//! R12: with everything converged, a reconcile of an unchanged object makes no request to the
//! API server at all: no write, and no read beyond the open watches. Measured from the API
//! server's own audit log (scripts/cluster enables it), by the operator's user agent.

use k8s_openapi::api::core::v1::Secret;
use serde_json::json;

use super::*;

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_steady_state_reconcile_makes_no_request() {
    let audit = audit_log();
    let f = Fixture::new("ctl-steady").await;
    let two = json!([{ "label": "a", "env": { "MODE": "a" }, "instances": 1 },
                     { "label": "b", "instances": 2 }]);
    f.apply::<Mutation>(&mutation("m", base("mu"), two.clone()))
        .await;
    f.apply::<MutantDeployment>(&mutant_deployment("d", base("md"), two))
        .await;
    f.wait_status::<Mutation>("m", "2/2", |s| s.summary == "2/2 variants ready")
        .await;
    f.wait_status::<MutantDeployment>("d", "2/2", |s| s.summary == "2/2 variants ready")
        .await;

    // Converged: wait for a quiet moment with no request from the operator in this namespace.
    let offset = quiet_offset(&f, &audit).await;

    // Touch every generated object: each watch event makes its owner reconcile again. A label
    // (unlike an annotation) does not bump a Deployment's generation, so nothing really changes.
    let before = reconciles(&f.operator);
    let touch = json!({ "metadata": { "labels": { "test.neiam.org/touched": "yes" } } });
    for name in ["mu-a", "mu-b", "md-a", "md-b"] {
        f.deployments()
            .patch(name, &PatchParams::default(), &Patch::Merge(&touch))
            .await
            .unwrap();
    }
    let secrets: Api<Secret> = f.ns.api();
    secrets
        .patch("m-secret", &PatchParams::default(), &Patch::Merge(&touch))
        .await
        .unwrap();
    assert_steady(&f, &audit, offset, before).await;
    let status = f.mutations().get("m").await.unwrap().status.unwrap();
    assert_eq!(status.summary, "2/2 variants ready");
}
