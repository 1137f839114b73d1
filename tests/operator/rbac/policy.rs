//! R28: the ValidatingAdmissionPolicy of deploy/ (mutantops-services), as the
//! bundle installs it, holds the operator's ServiceAccount, acting with a token of its own, to
//! Services labelled as a variant's: it may create, change and delete those, and may not
//! create, change, label or delete any other Service, although its ClusterRole would let it.
//! The cluster admin's writes are not held to it.

use std::path::Path;

use k8s_openapi::api::core::v1::Service;
use kube::{
    Api, Client, Config,
    api::{DeleteParams, Patch, PatchParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};
use serde_json::json;

use super::*;

/// The policy's name, as deploy/operator.yml names it.
const POLICY: &str = "mutantops-services";

/// A client that authenticates as `kubeconfig` says (the ServiceAccount's token).
async fn client_from(kubeconfig: &Path) -> Client {
    let config = Kubeconfig::read_from(kubeconfig).unwrap();
    let config = Config::from_custom_kubeconfig(config, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

/// Service `name`, with the three labels the operator puts on a variant's when `labelled`.
fn service(name: &str, labelled: bool) -> Service {
    let labels = if labelled {
        json!({
            "mutantops.neiam.org/kind": "mutation",
            "mutantops.neiam.org/owner": "m",
            "mutantops.neiam.org/variant": "a",
        })
    } else {
        json!({ "app": "someone-elses" })
    };
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": name, "labels": labels },
        "spec": { "ports": [{ "port": 80 }] },
    }))
    .unwrap()
}

/// Whether `result` is the policy's refusal (403 naming it), not RBAC's or anything else.
fn refused_by_policy<T: std::fmt::Debug>(result: &kube::Result<T>) -> bool {
    match result {
        Err(kube::Error::Api(status)) => {
            status.code == 403
                && status
                    .message
                    .contains(&format!("ValidatingAdmissionPolicy '{POLICY}'"))
        }
        _ => false,
    }
}

/// Runs the checks in namespace `ns`, the ServiceAccount's credentials in `kubeconfig`. The
/// policy must have been applied (from the bundle) just before: the first check waits until
/// the API server enforces it.
pub(super) async fn only_labelled_services(ns: &str, kubeconfig: &Path) {
    let admin: Api<Service> = Api::namespaced(common::client().await, ns);
    let operator: Api<Service> = Api::namespaced(client_from(kubeconfig).await, ns);
    let post = PostParams::default();
    let merge =
        |labels: serde_json::Value| Patch::Merge(json!({ "metadata": { "labels": labels } }));
    let patch = PatchParams::default();

    // An unlabelled Service is not the operator's to create (once the policy is loaded).
    wait_for("the policy in force", Duration::from_secs(30), || async {
        let created = operator.create(&post, &service("stray", false)).await;
        if refused_by_policy(&created) {
            return Ok(());
        }
        let _ = admin.delete("stray", &DeleteParams::default()).await;
        Err(format!("{created:?}"))
    })
    .await;

    // One labelled as a variant's is: created, changed, and deleted.
    operator
        .create(&post, &service("ours", true))
        .await
        .unwrap();
    let touched = operator
        .patch("ours", &patch, &merge(json!({ "touched": "yes" })))
        .await;
    assert!(touched.is_ok(), "{touched:?}");
    let applied = operator
        .patch(
            "ours",
            &PatchParams::apply("mutantops-operator").force(),
            &Patch::Apply(service("ours", true)),
        )
        .await;
    assert!(applied.is_ok(), "{applied:?}");
    // Its labels cannot be taken off.
    let stripped = operator
        .patch(
            "ours",
            &patch,
            &merge(json!({ "mutantops.neiam.org/kind": null })),
        )
        .await;
    assert!(refused_by_policy(&stripped), "{stripped:?}");

    // Someone else's Service: not changed, not taken over by labelling it, not deleted.
    admin
        .create(&post, &service("theirs", false))
        .await
        .unwrap();
    let labels = service("ours", true).metadata.labels.unwrap();
    let results = [
        operator
            .patch("theirs", &patch, &merge(json!({ "touched": "yes" })))
            .await,
        operator
            .patch(
                "theirs",
                &patch,
                &merge(serde_json::to_value(&labels).unwrap()),
            )
            .await,
        operator
            .patch(
                "theirs",
                &PatchParams::apply("mutantops-operator").force(),
                &Patch::Apply(service("theirs", true)),
            )
            .await,
    ];
    for result in &results {
        assert!(refused_by_policy(result), "{result:?}");
    }
    let deleted = operator.delete("theirs", &DeleteParams::default()).await;
    assert!(refused_by_policy(&deleted), "{deleted:?}");
    let theirs = admin.get("theirs").await.unwrap();
    assert_eq!(theirs.metadata.labels.unwrap()["app"], "someone-elses");

    let deleted = operator.delete("ours", &DeleteParams::default()).await;
    assert!(deleted.is_ok(), "{deleted:?}");
    // The admin is not held to it.
    admin
        .patch("theirs", &patch, &merge(json!({ "touched": "yes" })))
        .await
        .unwrap();
    admin
        .delete("theirs", &DeleteParams::default())
        .await
        .unwrap();
}
