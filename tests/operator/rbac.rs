//! R28, R27: deploy/ under real RBAC. The bundle passes a server-side dry run and applies; the
//! operator then runs with the credentials of the ServiceAccount from deploy/operator.yml
//! (a token from the TokenRequest API), not as cluster admin, and reconciles the examples
//! (their Services too, under the bundle's policy on Service writes: R28);
//! and the account cannot do what it does not need.

use k8s_openapi::api::{
    admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding},
    core::v1::Service,
};
use serde_json::json;

use super::*;

mod policy;

const SA: &str = "system:serviceaccount:mutants:mutantops";

fn ok(output: &std::process::Output, what: &str) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{what}: {text}");
    text
}

/// A kubeconfig for the cluster in KUBECONFIG that authenticates with `token` instead.
pub fn kubeconfig_with_token(token: &str, path: &std::path::Path) {
    let source = std::env::var("KUBECONFIG").expect("KUBECONFIG names the test cluster");
    let mut config: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(source).unwrap()).unwrap();
    let users = config["users"].as_array_mut().unwrap();
    for user in users.iter_mut() {
        user["user"] = serde_saphyr::from_str(&format!("token: {token}")).unwrap();
    }
    std::fs::write(path, serde_saphyr::to_string(&config).unwrap()).unwrap();
}

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn the_operator_runs_with_its_service_account() {
    let ns = TestNamespace::new("rbac").await;
    common::install_crds(&ns.client).await;
    let bundle = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/mutantops.yaml");

    // What the bundle adds outside the test's namespace is removed when the test ends, however
    // it ends, unless it was there before (a cluster that runs the operator already keeps it).
    // The CRDs stay: every test of the suite shares them.
    let existed = |kind: &str, name: &str| kubectl(&["get", kind, name]).status.success();
    let _namespace = (!existed("namespace", "mutants"))
        .then(|| common::RemoveOnDrop::<k8s_openapi::api::core::v1::Namespace>::new("mutants"));
    let _role = (!existed("clusterrole", "mutantops"))
        .then(|| common::RemoveOnDrop::<k8s_openapi::api::rbac::v1::ClusterRole>::new("mutantops"));
    let _binding = (!existed("clusterrolebinding", "mutantops")).then(|| {
        common::RemoveOnDrop::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::new("mutantops")
    });
    // R33: the roles aggregated into the built-in edit, admin and view.
    let _aggregated = ["mutantops-edit", "mutantops-view"].map(|name| {
        (!existed("clusterrole", name))
            .then(|| common::RemoveOnDrop::<k8s_openapi::api::rbac::v1::ClusterRole>::new(name))
    });
    // R28: the policy on the account's Service writes, and its binding.
    let _policy = (!existed("validatingadmissionpolicy", "mutantops-services"))
        .then(|| common::RemoveOnDrop::<ValidatingAdmissionPolicy>::new("mutantops-services"));
    let _policy_binding = (!existed("validatingadmissionpolicybinding", "mutantops-services"))
        .then(|| {
            common::RemoveOnDrop::<ValidatingAdmissionPolicyBinding>::new("mutantops-services")
        });
    // R28: the policy on the account's Secret writes, and its binding.
    let _secrets = (!existed("validatingadmissionpolicy", "mutantops-secrets"))
        .then(|| common::RemoveOnDrop::<ValidatingAdmissionPolicy>::new("mutantops-secrets"));
    let _secrets_binding = (!existed("validatingadmissionpolicybinding", "mutantops-secrets"))
        .then(|| {
            common::RemoveOnDrop::<ValidatingAdmissionPolicyBinding>::new("mutantops-secrets")
        });
    // The namespace first, so the dry run can place the namespaced objects in it.
    let _ = kubectl(&["create", "namespace", "mutants"]);
    ok(
        &kubectl(&["apply", "--dry-run=server", "-f", bundle]),
        "server-side dry run of the bundle",
    );
    ok(
        &kubectl(&[
            "apply",
            "--server-side",
            "--field-manager=mutantops-tests",
            "--force-conflicts",
            "-f",
            bundle,
        ]),
        "applying the bundle",
    );

    // What the account may and may not do.
    let can = |args: &[&str]| {
        let mut all = vec!["auth", "can-i"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--as", SA]);
        let out = kubectl(&all);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    for allowed in [
        &["watch", "mutations.neiam.org", "-A"][..],
        &[
            "patch",
            "mutations.neiam.org",
            "--subresource=status",
            "-n",
            "default",
        ],
        &["patch", "deployments.apps", "-n", "default"],
        &["delete", "deployments.apps", "-n", "default"],
        &["create", "secrets", "-n", "default"],
        &["list", "secrets", "-A"],
        // R39: a Mutation's devices Secret is updated on its resourceVersion (never patched).
        &["update", "secrets", "-n", "default"],
        // R53: a screen Secret of a variant that is gone (the policy holds it to those).
        &["delete", "secrets", "-n", "default"],
        // R53: where a variant's renderer answers, label-selected, once per fetch.
        &["list", "endpointslices.discovery.k8s.io", "-n", "default"],
        &["create", "events.events.k8s.io", "-n", "default"],
        // R36: the variants' Services, label-selected.
        &["watch", "services", "-A"],
        &["patch", "services", "-n", "default"],
        &["delete", "services", "-n", "default"],
        // R30: leader election, on the Lease in its own namespace.
        &["get", "leases.coordination.k8s.io", "-n", "mutants"],
        &["create", "leases.coordination.k8s.io", "-n", "mutants"],
        &["update", "leases.coordination.k8s.io", "-n", "mutants"],
        // R33: a namespace's pod-security.kubernetes.io/enforce label, read by name.
        &["get", "namespaces/default"],
        // R33: the namespaces labelled for the API, label-selected.
        &["list", "namespaces"],
        &["watch", "namespaces"],
    ] {
        assert_eq!(can(allowed), "yes", "the operator needs: {allowed:?}");
    }
    for denied in [
        &["delete", "namespaces"][..],
        &["get", "pods", "-n", "default"],
        &["create", "customresourcedefinitions.apiextensions.k8s.io"],
        &["patch", "secrets", "-n", "default"],
        &["watch", "endpointslices.discovery.k8s.io", "-A"],
        &["get", "endpointslices.discovery.k8s.io", "-n", "default"],
        &["update", "deployments.apps", "-n", "default"],
        &["update", "services", "-n", "default"],
        &["get", "endpoints", "-n", "default"],
        &["create", "clusterrolebindings.rbac.authorization.k8s.io"],
        &["get", "configmaps", "-n", "default"],
        &["update", "leases.coordination.k8s.io", "-n", "default"],
        &["delete", "leases.coordination.k8s.io", "-n", "mutants"],
        &["list", "leases.coordination.k8s.io", "-n", "mutants"],
        &["update", "namespaces/default"],
        &["patch", "namespaces/default"],
    ] {
        assert_eq!(
            can(denied),
            "no",
            "the operator must not be able to: {denied:?}"
        );
    }

    // The operator with a token of its own ServiceAccount.
    let token = ok(
        &kubectl(&[
            "-n",
            "mutants",
            "create",
            "token",
            "mutantops",
            "--duration=1h",
        ]),
        "TokenRequest",
    );
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("rbac-{}", common::random_suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    kubeconfig_with_token(token.trim(), &kubeconfig);
    // R28: with that token, only Services labelled as a variant's are written.
    policy::only_labelled_services(&ns.name, &kubeconfig).await;
    // R28: and only a Mutation's own Secrets.
    policy::only_its_secrets(&ns.name, &kubeconfig).await;
    let operator = Operator::start_with(
        &ns.name,
        &[
            ("KUBECONFIG", kubeconfig.to_str().unwrap()),
            ("MUTANT_API_TOKEN", ADMIN),
            // As in the cluster: the Lease in the operator's namespace, the only one its Role
            // covers. Short, so a Lease left by an earlier (killed) run expires quickly.
            ("POD_NAMESPACE", "mutants"),
            ("POD_SERVICE_ACCOUNT", "mutantops"),
            ("MUTANT_LEASE_DURATION_SECONDS", "4"),
        ],
    );
    let f = Fixture { operator, ns };

    f.apply::<MutantDeployment>(&example("nginx-mutant.yaml"))
        .await;
    f.apply::<Mutation>(&example("browser-snap.yaml")).await;
    f.wait_status::<MutantDeployment>("nginx-mutant", "2/2", |s| s.summary == "2/2 variants ready")
        .await;
    f.wait_status::<Mutation>("browser-snap", "2/2, its Secret and Services", |s| {
        s.summary == "2/2 variants ready"
            && s.secret.is_some()
            && s.variants.iter().all(|v| v.service.is_some())
    })
    .await;
    // The API works under the same account: add a variant with the Mutation's own token (the
    // owner lets the token's variants have Services: R36).
    super::api_device::set_device_access(&f, "browser-snap", json!({"service": true})).await;
    let snap = f.token("browser-snap").await;
    let reply = f
        .call(
            "POST",
            "/mutations/browser-snap/variants",
            Some(&snap),
            Some(&json!({"label": "tiny", "instances": 1})),
        )
        .await;
    assert_eq!(reply.status, 201, "{reply:?}");
    f.wait_deployment("browser-snap-tiny", "ready", |d| ready(d, 1))
        .await;
    let services: Api<Service> = f.ns.api();
    wait_for("Service browser-snap-tiny", CONVERGE, || async {
        services
            .get_opt("browser-snap-tiny")
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "not yet".to_string())
    })
    .await;
    // And pruning works too.
    let reply = f
        .call(
            "DELETE",
            "/mutations/browser-snap/variants/tiny",
            Some(&snap),
            None,
        )
        .await;
    assert_eq!(reply.status, 204);
    f.wait_gone("browser-snap-tiny").await;
    // Its Service is pruned too: a delete the policy allows (the Service carries the labels).
    wait_for("Service browser-snap-tiny pruned", CONVERGE, || async {
        match services.get_opt("browser-snap-tiny").await {
            Ok(None) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // R39, R28: devices under the Secrets policy: the first enrollment creates Secret
    // boards-devices, the second updates it, a removal updates it again.
    let key = super::devices::create(&f, "boards", json!({"enrollment": "Open"}), json!({})).await;
    for id in ["a", "b"] {
        let body = json!({"id": id, "variant": {"label": format!("board-{id}"), "instances": 0}});
        super::devices::enrolled(&f, "boards", &key, body).await;
    }
    let removed = f
        .call("DELETE", "/mutations/boards/devices/a", Some(ADMIN), None)
        .await;
    assert_eq!(removed.status, 204, "{removed:?}");
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = f.ns.api();
    let held = secrets.get("boards-devices").await.unwrap();
    let keys: Vec<&String> = held.data.iter().flat_map(|d| d.keys()).collect();
    assert!(
        keys.iter().any(|k| k.ends_with(".b")) && !keys.iter().any(|k| k.ends_with(".a")),
        "{keys:?}"
    );

    let log = f.operator.log_text();
    assert!(
        !log.contains("forbidden") && !log.contains("Forbidden"),
        "RBAC denied something:\n{log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
