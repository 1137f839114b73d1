//! R33: the operator does not make what Pod Security "baseline" forbids
//! unless the namespace opts in the Kubernetes way (label
//! `pod-security.kubernetes.io/enforce: privileged`), nor anything that runs as its own
//! ServiceAccount, whoever asks: kubectl users with `create` on the owners (status: every
//! variant Invalid, naming the field and the opt-in, nothing applied, prune and status still
//! done) and the HTTP API (400 naming the field, nothing stored).
//!
//! The test control plane runs the PodSecurity admission plugin with its default (privileged)
//! level, so the API server itself accepts these Deployments and their pods everywhere: what
//! is refused here is refused by the operator. The last test labels its namespace to enforce
//! baseline, where the server refuses such pods too, and checks the operator agrees with it
//! at the version the namespace pins (`baseline_server.rs` compares the two pod for pod).

use k8s_openapi::api::core::v1::Namespace;
use serde_json::json;

use super::*;

/// Where the privileged field of the bases below is.
const PRIVILEGED_FIELD: &str = "spec.template.spec.containers[app].securityContext.privileged";
/// Where their hostPath volume is.
const HOST_PATH_FIELD: &str = "spec.template.spec.volumes[root].hostPath";
/// How the refusal says to opt in.
const OPT_IN: &str = "pod-security.kubernetes.io/enforce=privileged";

/// `base(name)` with a privileged container and a hostPath volume: two baseline findings.
fn privileged(name: &str) -> Value {
    let mut b = base(name);
    let pod = &mut b["spec"]["template"]["spec"];
    pod["containers"][0]["securityContext"] = json!({ "privileged": true });
    pod["volumes"] = json!([{ "name": "root", "hostPath": { "path": "/" } }]);
    b
}

/// `base(name)` running as ServiceAccount `account`.
fn running_as(name: &str, account: &str) -> Value {
    let mut b = base(name);
    b["spec"]["template"]["spec"]["serviceAccountName"] = json!(account);
    b
}

/// Labels the fixture's namespace `pod-security.kubernetes.io/enforce: privileged`.
async fn opt_in(f: &Fixture) {
    let namespaces: Api<Namespace> = Api::all(f.ns.client.clone());
    let label =
        json!({ "metadata": { "labels": { "pod-security.kubernetes.io/enforce": "privileged" } } });
    namespaces
        .patch(&f.ns.name, &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
}

/// Whether every variant of `status` is Invalid for the refusal, with `field` named.
fn all_refused(status: &OwnerStatus, count: usize, field: &str) -> bool {
    status.variants.len() == count
        && status.variants.iter().all(|v| {
            let message = v.message.as_deref().unwrap_or_default();
            v.state == VariantState::Invalid && message.contains(field)
        })
}

/// R33, R26: a MutantDeployment and a Mutation whose base has a privileged container and a
/// hostPath volume, in a namespace without the opt-in label: every variant is Invalid naming
/// both fields and the label to opt in, the Ready condition is False with reason
/// BaseNotAllowed, a BaseNotAllowed Event says why, and no Deployment is made. A Mutation
/// whose base becomes privileged keeps its running (unprivileged) Deployment, still has a
/// removed variant pruned and its status written. Through the HTTP API, creating such a
/// Mutation or adding a variant to one is 400 naming the field, and nothing is stored. Once
/// the namespace is labelled privileged, all of it is made, without any change to the owners
/// (the refusal is tried again within a minute), and the API creates such a Mutation.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_base_breaking_baseline_is_refused_until_the_namespace_opts_in() {
    let f = Fixture::with_api("pss-baseline").await;

    // A Mutation that runs, whose base then turns privileged and loses a variant.
    let two = json!([{ "label": "a", "instances": 1 }, { "label": "old", "instances": 1 }]);
    f.apply::<Mutation>(&mutation("m", base("web"), two)).await;
    f.wait_deployment("web-a", "ready", |d| ready(d, 1)).await;
    f.wait_deployment("web-old", "ready", |d| ready(d, 1)).await;
    let only_a = json!([{ "label": "a", "instances": 1 }]);
    f.apply::<Mutation>(&mutation("m", privileged("web"), only_a.clone()))
        .await;
    let status = f
        .wait_status::<Mutation>("m", "a refused", |s| all_refused(s, 1, PRIVILEGED_FIELD))
        .await;
    f.wait_gone("web-old").await;
    let message = status.variants[0].message.clone().unwrap_or_default();
    assert!(message.contains(HOST_PATH_FIELD), "{message}");
    assert!(message.contains(OPT_IN), "{message}");
    let ready_condition = &status.conditions[0];
    assert_eq!(
        (
            ready_condition.status.as_str(),
            ready_condition.reason.as_str()
        ),
        ("False", "BaseNotAllowed"),
        "{status:?}"
    );
    assert!(
        status
            .message
            .as_deref()
            .is_some_and(|m| m.contains(PRIVILEGED_FIELD)),
        "{status:?}"
    );
    // Nothing was applied: web-a still runs the unprivileged base.
    let a = f.deployments().get("web-a").await.unwrap();
    let pod = a.spec.unwrap().template.spec.unwrap();
    assert!(pod.volumes.is_none(), "{pod:?}");
    assert!(pod.containers[0].security_context.is_none(), "{pod:?}");

    // A MutantDeployment of such a base: nothing is made at all.
    let variants = json!([{ "label": "x", "instances": 1 }, { "label": "y", "instances": 0 }]);
    f.apply::<MutantDeployment>(&mutant_deployment("md", privileged("priv"), variants))
        .await;
    f.wait_status::<MutantDeployment>("md", "x and y refused", |s| {
        all_refused(s, 2, PRIVILEGED_FIELD)
    })
    .await;
    for name in ["priv-x", "priv-y"] {
        assert!(f.deployments().get_opt(name).await.unwrap().is_none());
    }
    let found = events(&f, "BaseNotAllowed", 2).await;
    assert!(
        found
            .iter()
            .all(|(_, note, _)| note.contains(PRIVILEGED_FIELD)),
        "{found:?}"
    );

    // The HTTP API: 400 naming the field, nothing stored.
    let create = json!({ "name": "n", "deployment": privileged("other"),
                         "variants": [{ "label": "z", "instances": 1 }] });
    let reply = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    reply.assert_refused(400, &[PRIVILEGED_FIELD, OPT_IN]);
    assert!(f.mutations().get_opt("n").await.unwrap().is_none());
    // No variants: the base alone is refused too.
    let bare = json!({ "name": "n", "deployment": privileged("other"), "variants": [] });
    let reply = f.call("POST", "/mutations", Some(ADMIN), Some(&bare)).await;
    assert_eq!(reply.status, 400, "{reply:?}");
    for token in [ADMIN.to_string(), f.token("m").await] {
        let add = json!({ "label": "b", "instances": 1 });
        let reply = f.add_variant("m", &token, &add).await;
        reply.assert_refused(400, &[HOST_PATH_FIELD]);
    }
    let m = f.mutations().get("m").await.unwrap();
    assert_eq!(m.spec.variants.len(), 1);

    // The namespace opts in: both owners are made, without a change of theirs.
    opt_in(&f).await;
    let applied = |d: &k8s_openapi::api::apps::v1::Deployment| {
        let pod = d.spec.as_ref().and_then(|s| s.template.spec.as_ref());
        pod.and_then(|p| p.containers[0].security_context.as_ref())
            .and_then(|c| c.privileged)
            == Some(true)
    };
    for name in ["web-a", "priv-x", "priv-y"] {
        wait_for(
            &format!("{name} applied once the namespace opts in"),
            Duration::from_secs(100),
            || async {
                match f.deployments().get_opt(name).await {
                    Ok(Some(d)) if applied(&d) => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    }
    f.wait_status::<MutantDeployment>("md", "2/2", |s| s.summary == "2/2 variants ready")
        .await;
    let status = f
        .wait_status::<Mutation>("m", "1/1", |s| s.summary == "1/1 variants ready")
        .await;
    assert_eq!(status.message, None, "{status:?}");
    let reply = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    assert_eq!(reply.status, 201, "{reply:?}");
}

/// R33: a base that runs as the operator's own ServiceAccount (POD_NAMESPACE and
/// POD_SERVICE_ACCOUNT, as deploy/ sets them from the downward API) in the operator's own
/// namespace is refused, even though the namespace is labelled privileged: Invalid in status
/// naming serviceAccountName (and the deprecated serviceAccount), nothing made, and 400 from
/// the API. Another account in the same namespace is made.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn the_operators_own_service_account_is_refused_even_when_privileged() {
    let ns = TestNamespace::new("pss-own").await;
    common::install_crds(&ns.client).await;
    let operator = Operator::start_with(
        &ns.name,
        &[
            ("MUTANT_API_TOKEN", ADMIN),
            ("POD_NAMESPACE", ns.name.as_str()),
            ("POD_SERVICE_ACCOUNT", "the-operator"),
        ],
    );
    let f = Fixture { operator, ns };
    opt_in(&f).await;

    let one = json!([{ "label": "a", "instances": 1 }]);
    f.apply::<Mutation>(&mutation(
        "m",
        running_as("web", "the-operator"),
        one.clone(),
    ))
    .await;
    let mut deprecated = base("old");
    deprecated["spec"]["template"]["spec"]["serviceAccount"] = json!("the-operator");
    f.apply::<MutantDeployment>(&mutant_deployment("md", deprecated, one.clone()))
        .await;
    f.apply::<Mutation>(&mutation(
        "fine",
        running_as("other", "default"),
        one.clone(),
    ))
    .await;
    let status = f
        .wait_status::<Mutation>("m", "a refused", |s| {
            all_refused(s, 1, "spec.template.spec.serviceAccountName")
        })
        .await;
    let message = status.variants[0].message.clone().unwrap_or_default();
    assert!(
        message.contains("\"the-operator\" is the operator's own ServiceAccount"),
        "{message}"
    );
    f.wait_status::<MutantDeployment>("md", "a refused", |s| {
        all_refused(s, 1, "spec.template.spec.serviceAccount:")
    })
    .await;
    f.wait_deployment("other-a", "ready", |d| ready(d, 1)).await;
    for name in ["web-a", "old-a"] {
        assert!(f.deployments().get_opt(name).await.unwrap().is_none());
    }

    // The HTTP API waits for the caches, then refuses the same base.
    wait_api(f.operator.api_port, &f.ns.name).await;
    let create = json!({ "name": "n", "deployment": running_as("web2", "the-operator"),
                         "variants": [] });
    let reply = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    reply.assert_refused(400, &["spec.template.spec.serviceAccountName"]);
    assert!(f.mutations().get_opt("n").await.unwrap().is_none());
}

/// Labels the fixture's namespace `pod-security.kubernetes.io/enforce: baseline`, at `version`.
async fn enforce_baseline(f: &Fixture, version: &str) {
    let namespaces: Api<Namespace> = Api::all(f.ns.client.clone());
    let labels = json!({ "metadata": { "labels": {
        "pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/enforce-version": version } } });
    namespaces
        .patch(&f.ns.name, &PatchParams::default(), &Patch::Merge(&labels))
        .await
        .unwrap();
}

/// `base(name)` whose container's readiness probe connects to another host.
fn probing_another_host(name: &str) -> Value {
    let mut b = base(name);
    b["spec"]["template"]["spec"]["containers"][0]["readinessProbe"] =
        json!({ "httpGet": { "host": "10.0.0.1", "port": 8080 } });
    b
}

/// Where the probe host of `probing_another_host` is.
const PROBE_HOST_FIELD: &str = "spec.template.spec.containers[app].readinessProbe.httpGet.host";

/// R33: the operator holds a base to the baseline its namespace enforces, at
/// the version the namespace pins or else the API server's (1.34 here), as the API server
/// does for the pods. In a namespace enforcing baseline at `latest`, a Mutation whose base
/// sets sysctls net.ipv4.tcp_rmem and tcp_wmem (safe since 1.32) is created through the API
/// and its Deployment's pods run; a MutantDeployment whose base's readiness probe names a
/// host (refused from 1.34) has every variant Invalid naming the field and nothing made, and
/// such a Mutation is 400 through the API. Once the namespace pins v1.33, where probe hosts
/// are allowed, the same Mutation is created and its pods run.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn baseline_follows_the_version_the_namespace_enforces() {
    let f = Fixture::with_api("pss-version").await;
    enforce_baseline(&f, "latest").await;
    wait_api(f.operator.api_port, &f.ns.name).await;

    let mut tuned = base("tuned");
    tuned["spec"]["template"]["spec"]["securityContext"] = json!({ "sysctls": [
        { "name": "net.ipv4.tcp_rmem", "value": "4096 87380 6291456" },
        { "name": "net.ipv4.tcp_wmem", "value": "4096 16384 4194304" }] });
    let create = json!({ "name": "tuned", "deployment": tuned,
                         "variants": [{ "label": "a", "instances": 1 }] });
    let reply = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    assert_eq!(reply.status, 201, "{reply:?}");
    f.wait_deployment("tuned-a", "ready", |d| ready(d, 1)).await;

    let one = json!([{ "label": "x", "instances": 1 }]);
    f.apply::<MutantDeployment>(&mutant_deployment(
        "md",
        probing_another_host("probed"),
        one,
    ))
    .await;
    let status = f
        .wait_status::<MutantDeployment>("md", "x refused", |s| all_refused(s, 1, PROBE_HOST_FIELD))
        .await;
    let message = status.variants[0].message.clone().unwrap_or_default();
    assert!(message.contains("\"baseline:v1.34\""), "{message}");
    assert!(f.deployments().get_opt("probed-x").await.unwrap().is_none());
    let create = json!({ "name": "probed", "deployment": probing_another_host("web"),
                         "variants": [{ "label": "b", "instances": 1 }] });
    let reply = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    reply.assert_refused(400, &[PROBE_HOST_FIELD, "(from v1.34)"]);
    assert!(f.mutations().get_opt("probed").await.unwrap().is_none());

    // Pinned to v1.33, a probe's host is baseline: the operator makes it and the server
    // admits its pods.
    enforce_baseline(&f, "v1.33").await;
    let reply = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    assert_eq!(reply.status, 201, "{reply:?}");
    f.wait_deployment("web-b", "ready", |d| ready(d, 1)).await;
}
