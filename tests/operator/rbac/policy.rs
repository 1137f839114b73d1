//! R28: the ValidatingAdmissionPolicy of deploy/ (mutantops-services), as the
//! bundle installs it, holds the operator's ServiceAccount, acting with a token of its own, to
//! Services labelled as a variant's: it may create, change and delete those, and may not
//! create, change, label or delete any other Service, although its ClusterRole would let it.
//! The cluster admin's writes are not held to it.

use std::path::Path;

use k8s_openapi::api::core::v1::{Secret, Service};
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
        "spec": { "ports": [{ "port": 80 }], "selector": labels },
    }))
    .unwrap()
}

/// Whether `result` is the policy's refusal (403 naming it), not RBAC's or anything else.
fn refused_by_policy<T: std::fmt::Debug>(result: &kube::Result<T>) -> bool {
    refused_by(POLICY, result)
}

/// Whether `result` is policy `name`'s refusal (403 naming it).
fn refused_by<T: std::fmt::Debug>(name: &str, result: &kube::Result<T>) -> bool {
    match result {
        Err(kube::Error::Api(status)) => {
            status.code == 403
                && status
                    .message
                    .contains(&format!("ValidatingAdmissionPolicy '{name}'"))
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
    // R28: a variant's Service reaches no external address and selects only that variant's
    // pods: externalIPs, and a selector wider or other than its own three labels, are refused.
    let mut external = service("ours", true);
    external.spec.as_mut().unwrap().external_ips = Some(vec!["203.0.113.7".into()]);
    let mut wide = service("ours", true);
    wide.spec.as_mut().unwrap().selector = Some([("app".to_owned(), "db".to_owned())].into());
    let mut partial = service("ours", true);
    if let Some(selector) = partial.spec.as_mut().unwrap().selector.as_mut() {
        selector.remove("mutantops.neiam.org/variant");
    }
    for bad in [external, wide, partial] {
        let applied = operator
            .patch(
                "ours",
                &PatchParams::apply("mutantops-operator").force(),
                &Patch::Apply(bad),
            )
            .await;
        assert!(refused_by_policy(&applied), "{applied:?}");
    }
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

/// A Secret `name` in the shape the operator writes them: labelled as Mutation `owner`'s and
/// controlled by `mutation` (its uid) when given.
fn secret(name: &str, owner: &str, controlled_by: Option<&str>) -> Secret {
    let references = controlled_by.map(|uid| {
        json!([{ "apiVersion": "neiam.org/v1", "kind": "Mutation", "name": owner,
                 "uid": uid, "controller": true }])
    });
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "labels": {"mutantops.neiam.org/kind": "mutation", "mutantops.neiam.org/owner": owner},
            "ownerReferences": references.unwrap_or(json!([])),
        },
        "data": {},
    }))
    .unwrap()
}

/// R28: the policy mutantops-secrets, as the bundle installs it, holds the operator's
/// ServiceAccount to a Mutation's token, devices and screen Secrets: it creates those, labelled
/// and controlled by the Mutation, updates only the devices and screen Secrets, deletes only a
/// screen Secret, and may not create, change or delete any other Secret (someone else's, one without the Mutation's ownerReference, one taken over
/// by labelling it), although its ClusterRole would let it. The cluster admin is not held.
pub(super) async fn only_its_secrets(ns: &str, kubeconfig: &Path) {
    const SECRETS: &str = "mutantops-secrets";
    let client = common::client().await;
    let admin: Api<Secret> = Api::namespaced(client.clone(), ns);
    let operator: Api<Secret> = Api::namespaced(client_from(kubeconfig).await, ns);
    let post = PostParams::default();
    // A Mutation for the Secrets to belong to (no operator runs yet: nothing else is made).
    let mutations: Api<Mutation> = Api::namespaced(client, ns);
    let web: Mutation = serde_json::from_value(json!({
        "apiVersion": "neiam.org/v1", "kind": "Mutation",
        "metadata": {"name": "web"},
        "spec": {"deployment": base("web"), "variants": []},
    }))
    .unwrap();
    let uid = mutations
        .create(&post, &web)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();

    // Not the operator's to create: unlabelled, without the ownerReference, another name.
    wait_for(
        "the Secrets policy in force",
        Duration::from_secs(30),
        || async {
            let stray: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "stray"}}))
            .unwrap();
            let created = operator.create(&post, &stray).await;
            if refused_by(SECRETS, &created) {
                return Ok(());
            }
            let _ = admin.delete("stray", &DeleteParams::default()).await;
            Err(format!("{created:?}"))
        },
    )
    .await;
    for bad in [
        secret("web-secret", "web", None),
        secret("web-other", "web", Some(&uid)),
    ] {
        let created = operator.create(&post, &bad).await;
        assert!(refused_by(SECRETS, &created), "{created:?}");
    }
    // Its own: created; the devices Secret updated, the token Secret not.
    operator
        .create(&post, &secret("web-secret", "web", Some(&uid)))
        .await
        .unwrap();
    let devices = operator
        .create(&post, &secret("web-devices", "web", Some(&uid)))
        .await
        .unwrap();
    let mut changed = devices.clone();
    changed.string_data = Some([("device.a".to_owned(), "x".to_owned())].into());
    let updated = operator.replace("web-devices", &post, &changed).await;
    assert!(updated.is_ok(), "{updated:?}");
    let token = admin.get("web-secret").await.unwrap();
    let mut rewritten = token.clone();
    rewritten.string_data = Some([("token".to_owned(), "0".repeat(64))].into());
    let replaced = operator.replace("web-secret", &post, &rewritten).await;
    assert!(refused_by(SECRETS, &replaced), "{replaced:?}");
    // The devices Secret cannot be freed of its Mutation.
    let mut freed = operator.get("web-devices").await.unwrap();
    freed.metadata.owner_references = Some(Vec::new());
    let released = operator.replace("web-devices", &post, &freed).await;
    assert!(refused_by(SECRETS, &released), "{released:?}");
    // Someone else's Secret is not taken over by labelling it as the Mutation's.
    let theirs = admin
        .create(
            &post,
            &serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "web-devices-2"}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let mut taken = theirs.clone();
    taken.metadata.labels = secret("x", "web", None).metadata.labels;
    taken.metadata.owner_references = secret("x", "web", Some(&uid)).metadata.owner_references;
    let took = operator.replace("web-devices-2", &post, &taken).await;
    assert!(refused_by(SECRETS, &took), "{took:?}");
    // R53: a screen Secret, labelled with its variant, is created, replaced and deleted; a
    // screen name without that label is not created, and no other Secret is deleted.
    let screen = |name: &str, variant: Option<&str>| {
        let mut s = secret(name, "web", Some(&uid));
        if let (Some(labels), Some(v)) = (s.metadata.labels.as_mut(), variant) {
            labels.insert("mutantops.neiam.org/variant".to_owned(), v.to_owned());
        }
        s
    };
    let unlabelled = operator.create(&post, &screen("web-screen-a", None)).await;
    assert!(refused_by(SECRETS, &unlabelled), "{unlabelled:?}");
    let misnamed = operator
        .create(&post, &screen("web-screen-a", Some("b")))
        .await;
    assert!(refused_by(SECRETS, &misnamed), "{misnamed:?}");
    let mut shown = operator
        .create(&post, &screen("web-screen-a", Some("a")))
        .await
        .unwrap();
    shown.string_data = Some([("screen".to_owned(), "BM".to_owned())].into());
    let replaced = operator.replace("web-screen-a", &post, &shown).await;
    assert!(replaced.is_ok(), "{replaced:?}");
    for other in ["web-devices", "web-secret", "web-devices-2"] {
        let deleted = operator.delete(other, &DeleteParams::default()).await;
        assert!(refused_by(SECRETS, &deleted), "{other}: {deleted:?}");
    }
    let deleted = operator
        .delete("web-screen-a", &DeleteParams::default())
        .await;
    assert!(deleted.is_ok(), "{deleted:?}");
    // The admin is not held to it.
    admin
        .replace("web-secret", &post, &rewritten)
        .await
        .unwrap();
    mutations
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
}
