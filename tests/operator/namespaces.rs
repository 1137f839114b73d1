//! R33, R20: which namespaces the admin token reaches, and the operator's
//! own Secrets. An operator that watches every namespace and is given no list serves only the
//! namespaces labelled `mutantops.neiam.org/api=enabled`, never `kube-system` nor its own
//! namespace, and follows the label as it comes and goes. In the operator's namespace, a base
//! that references one of its Secrets (the admin token's, the TLS key's, what its own
//! Deployment references, what carries its label, its ServiceAccount's token Secret) is 400
//! through the API and Invalid when applied with kubectl; another Secret is fine.

use k8s_openapi::api::{
    coordination::v1::Lease,
    core::v1::{Namespace, Secret, ServiceAccount},
};
use kube::api::PostParams;
use serde_json::json;

use super::*;

/// The label that opts a namespace in to the API.
const OPT_IN: &str = "mutantops.neiam.org/api";

/// Sets (`Some`) or removes (`None`) the opt-in label of namespace `name`.
async fn label(ns: &TestNamespace, name: &str, value: Option<&str>) {
    let namespaces: Api<Namespace> = Api::all(ns.client.clone());
    let patch = json!({ "metadata": { "labels": { OPT_IN: value } } });
    namespaces
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// The admin's GET of namespace `ns`'s Mutations through the API on `port`.
async fn list(port: u16, ns: &str) -> common::http::Reply {
    let path = format!("/api/v1/namespaces/{ns}/mutations");
    common::http::request(port, "GET", &path, Some(ADMIN), None).await
}

/// Waits until the admin's list of namespace `ns` answers `status`.
async fn wait_list(port: u16, ns: &str, status: u16) {
    wait_for(&format!("{ns}: {status}"), CONVERGE, || async {
        let reply = list(port, ns).await;
        if reply.status == status {
            Ok(())
        } else {
            Err(format!("{reply:?}"))
        }
    })
    .await;
}

/// A Lease `mutantops-leader` in `ns` held for an hour by a replica that does not exist: an
/// operator whose Lease is there stays a follower, which serves the API and never reconciles
/// (so an operator watching every namespace cannot touch other tests' objects).
async fn held_lease(ns: &TestNamespace) {
    // Expiry is timed from when a replica first reads the record, never from renewTime.
    let lease: Lease = serde_json::from_value(json!({
        "metadata": { "name": "mutantops-leader" },
        "spec": { "holderIdentity": "another-replica", "leaseDurationSeconds": 3600 }
    }))
    .unwrap();
    ns.api::<Lease>()
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
}

/// R33: without MUTANT_WATCH_NAMESPACE and MUTANT_API_NAMESPACES, the admin token
/// reaches a namespace labelled for the API, and gets 404 saying how to opt in for one that
/// is not, for kube-system and for the operator's own namespace even when labelled (a
/// Mutation's token 401, as before). Labelling and unlabelling take effect while it runs.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn only_namespaces_labelled_for_the_api_are_served() {
    let own = TestNamespace::new("api-ns-own").await;
    common::install_crds(&own.client).await;
    let on = TestNamespace::new("api-ns-on").await;
    let off = TestNamespace::new("api-ns-off").await;
    label(&own, &on.name, Some("enabled")).await;
    label(&own, &own.name, Some("enabled")).await;
    held_lease(&own).await;
    let operator = Operator::start_with(
        &own.name,
        &[
            // Empty is unset: every namespace is watched.
            ("MUTANT_WATCH_NAMESPACE", ""),
            ("MUTANT_API_TOKEN", ADMIN),
            ("POD_NAMESPACE", own.name.as_str()),
            ("POD_NAME", "api-namespaces"),
        ],
    );
    let port = operator.api_port;
    wait_api(port, &on.name).await;

    let create = json!({ "name": "web", "deployment": base("web"), "variants": [] });
    let path = format!("/api/v1/namespaces/{}/mutations", on.name);
    let body = create.to_string();
    let reply = common::http::request(port, "POST", &path, Some(ADMIN), Some(&body)).await;
    assert_eq!(reply.status, 201, "{reply:?}");

    list(port, &off.name).await.assert_refused(
        404,
        &[&format!(
            "kubectl label namespace {} mutantops.neiam.org/api=enabled",
            off.name
        )],
    );
    for never in ["kube-system", own.name.as_str()] {
        list(port, never)
            .await
            .assert_refused(404, &["only when MUTANT_API_NAMESPACES names it"]);
    }
    // A token that is not the admin's learns nothing about what is served.
    let wrong = "0".repeat(64);
    let path = format!("/api/v1/namespaces/{}/mutations/web", off.name);
    let reply = common::http::request(port, "GET", &path, Some(&wrong), None).await;
    assert_eq!(reply.status, 401, "{reply:?}");

    // The label is followed: taken off, served no more; put on, served.
    label(&own, &on.name, None).await;
    wait_list(port, &on.name, 404).await;
    label(&own, &off.name, Some("enabled")).await;
    wait_list(port, &off.name, 200).await;
    // Only "enabled" opts in.
    label(&own, &off.name, Some("true")).await;
    wait_list(port, &off.name, 404).await;
    let log = operator.log_text();
    assert!(
        log.contains("following the leader") && !log.contains("acquired the lease"),
        "the all-namespaces operator must stay a follower:\n{log}"
    );
}

/// R33, R34: the watch of the namespaces labelled for the API is held to the same bound on
/// its silence as the caches' watches: with nothing changing for more than twice the bound,
/// the API server's bookmarks keep it open, and nothing is logged as a failure (it used to
/// fail, with a warning, every time a quiet cluster went the bound without an event).
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_quiet_watch_of_labelled_namespaces_is_not_a_failure() {
    const SILENCE: std::time::Duration = std::time::Duration::from_secs(6);
    let own = TestNamespace::new("api-ns-quiet").await;
    common::install_crds(&own.client).await;
    let on = TestNamespace::new("api-ns-quiet-on").await;
    label(&own, &on.name, Some("enabled")).await;
    held_lease(&own).await;
    let silence = SILENCE.as_secs().to_string();
    let operator = Operator::start_with(
        &own.name,
        &[
            ("MUTANT_WATCH_NAMESPACE", ""),
            ("MUTANT_API_TOKEN", ADMIN),
            ("MUTANT_WATCH_STALE_AFTER_SECONDS", &silence),
            ("POD_NAMESPACE", own.name.as_str()),
            ("POD_NAME", "api-namespaces-quiet"),
        ],
    );
    let port = operator.api_port;
    wait_api(port, &on.name).await;
    tokio::time::sleep(2 * SILENCE + std::time::Duration::from_secs(1)).await;
    assert_eq!(list(port, &on.name).await.status, 200);
    let log = operator.log_text();
    assert!(
        !log.contains("the watch of namespaces labelled"),
        "a quiet watch of namespaces was taken for a failure:\n{log}"
    );
}

/// `base(name)` whose pod mounts Secret `secret` as volume `creds`.
fn mounting(name: &str, secret: &str) -> Value {
    let mut b = base(name);
    b["spec"]["template"]["spec"]["volumes"] =
        json!([{ "name": "creds", "secret": { "secretName": secret } }]);
    b
}

/// Where `mounting` names the Secret.
const VOLUME_FIELD: &str = "spec.template.spec.volumes[creds].secret.secretName";

/// R33: in the operator's namespace, a base may not reference the
/// operator's Secrets: the admin token's (`mutantops-api`: as a volume, 400 through the API,
/// every variant Invalid when applied), the TLS key's (through env), one that the operator's
/// own Deployment references, one labelled as the operator is, and its ServiceAccount's token
/// Secret. A base that mounts another Secret of the namespace is made.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_base_may_not_reference_the_operators_secrets() {
    let ns = TestNamespace::new("own-secrets").await;
    common::install_crds(&ns.client).await;
    // The operator's own Deployment (no pods), its ServiceAccount and that account's token
    // Secret, and a Secret labelled as the operator is: what it finds when it starts.
    ns.api::<ServiceAccount>()
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({ "metadata": { "name": "the-operator" } })).unwrap(),
        )
        .await
        .unwrap();
    let mut itself = mounting("the-operator", "custom-admin-token");
    itself["spec"]["replicas"] = json!(0);
    itself["spec"]["template"]["spec"]["serviceAccountName"] = json!("the-operator");
    itself["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] = json!("ops");
    ns.api::<Deployment>()
        .create(
            &PostParams::default(),
            &serde_json::from_value(itself).unwrap(),
        )
        .await
        .unwrap();
    for secret in [
        json!({ "metadata": { "name": "ops-extra", "labels": { "app.kubernetes.io/name": "ops" } },
                "stringData": { "k": "v" } }),
        json!({ "metadata": { "name": "the-operator-token",
                              "annotations": { "kubernetes.io/service-account.name": "the-operator" } },
                "type": "kubernetes.io/service-account-token" }),
    ] {
        let secret: Secret = serde_json::from_value(secret).unwrap();
        ns.api::<Secret>()
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }
    let operator = Operator::start_with(
        &ns.name,
        &[
            ("MUTANT_API_TOKEN", ADMIN),
            ("POD_NAMESPACE", ns.name.as_str()),
            ("POD_SERVICE_ACCOUNT", "the-operator"),
        ],
    );
    let f = Fixture { operator, ns };
    wait_api(f.operator.api_port, &f.ns.name).await;

    let create = |name: &str, base: Value| json!({ "name": name, "deployment": base, "variants": [{ "label": "a", "instances": 1 }] });
    for secret in [
        "mutantops-api",
        "custom-admin-token",
        "ops-extra",
        "the-operator-token",
    ] {
        let reply = f
            .call(
                "POST",
                "/mutations",
                Some(ADMIN),
                Some(&create("m", mounting("web", secret))),
            )
            .await;
        reply.assert_refused(
            400,
            &[
                VOLUME_FIELD,
                &format!("Secret \"{secret}\" holds the operator's own credentials"),
            ],
        );
    }
    let mut tls = base("web");
    tls["spec"]["template"]["spec"]["containers"][0]["env"] = json!([{ "name": "KEY",
        "valueFrom": { "secretKeyRef": { "name": "mutantops-api-tls", "key": "tls.key" } } }]);
    let reply = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create("m", tls)))
        .await;
    reply.assert_refused(
        400,
        &["spec.template.spec.containers[app].env[KEY].valueFrom.secretKeyRef.name"],
    );
    assert!(f.mutations().get_opt("m").await.unwrap().is_none());

    // Another Secret of the namespace is the base's to mount.
    let reply = f
        .call(
            "POST",
            "/mutations",
            Some(ADMIN),
            Some(&create("fine", mounting("fine", "web-certs"))),
        )
        .await;
    assert_eq!(reply.status, 201, "{reply:?}");

    // Applied with kubectl: every variant Invalid naming the field, nothing made.
    let one = json!([{ "label": "a", "instances": 1 }]);
    f.apply::<Mutation>(&mutation(
        "applied",
        mounting("applied", "mutantops-api"),
        one,
    ))
    .await;
    f.wait_status::<Mutation>("applied", "a refused", |s| {
        s.variants.len() == 1
            && s.variants.iter().all(|v| {
                v.state == VariantState::Invalid
                    && v.message
                        .as_deref()
                        .unwrap_or_default()
                        .contains(VOLUME_FIELD)
            })
    })
    .await;
    f.wait_deployment("fine-a", "made", |_| true).await;
    assert!(
        f.deployments()
            .get_opt("applied-a")
            .await
            .unwrap()
            .is_none()
    );
}
