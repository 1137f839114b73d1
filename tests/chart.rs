//! deploy/chart/mutantops/: the Helm chart renders deploy/operator.yml (default values: every
//! object but the Namespace, equal but for Helm's labels), carries deploy/crds/ unchanged,
//! renders its values where values.yaml says and installs on the real control plane; the k3s
//! example (deploy/chart/helmchart-k3s.yaml) names this chart and only values it has.
//! Helm comes from `scripts/helm` (built once from the Go module proxy), kubectl from
//! `$KUBECTL` or the PATH; tests that need them are ignored in a plain `cargo test`
//! (`scripts/test` runs them with `--include-ignored`) and fail without them.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a failed step must fail the test"
)]

mod common;
#[path = "common/files.rs"]
mod files;

use files::{read, repo};
#[path = "chart/render.rs"]
mod render;

use render::*;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    time::Duration,
};

use k8s_openapi::api::{
    admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding},
    apps::v1::Deployment,
    core::v1::Pod,
    rbac::v1::{ClusterRole, ClusterRoleBinding},
};
use kube::api::ListParams;
use serde_json::Value;

/// With default values, the chart renders every object of operator.yml but the Namespace, and
/// nothing else, each equal to operator.yml's but for Helm's labels: RBAC rules, the whole
/// Deployment (pod spec, containers, env, ports, probes, security contexts, resources,
/// annotations), the Service. A change to one that is not mirrored in the other fails here.
#[test]
#[ignore = "needs scripts/helm (helm from the Go module proxy)"]
fn default_values_render_operator_yml() {
    let mut expected = parse(&read("deploy/operator.yml"));
    find(&expected, "Namespace", "mutants");
    expected.retain(|d| d["kind"] != "Namespace");
    let rendered = render("mutantops", "mutants", &[]);
    let (expected, rendered) = (by_key(&expected), by_key(&rendered));
    let mut problems = Vec::new();
    for (kind, name) in expected.keys().filter(|k| !rendered.contains_key(*k)) {
        problems.push(format!("{kind} {name}: in operator.yml, not rendered"));
    }
    for (kind, name) in rendered.keys().filter(|k| !expected.contains_key(*k)) {
        problems.push(format!("{kind} {name}: rendered, not in operator.yml"));
    }
    for ((kind, name), theirs) in &expected {
        if let Some(ours) = rendered.get(&(kind.clone(), name.clone())) {
            let ours = without_helm_labels(ours, theirs);
            differences(&format!("{kind} {name}"), theirs, &ours, &mut problems);
        }
    }
    assert!(
        problems.is_empty(),
        "deploy/chart/mutantops (default values, release mutantops, namespace mutants) and \
         deploy/operator.yml differ; mirror the change in both:\n  {}",
        problems.join("\n  ")
    );
    // Helm's labels are there (they were taken off above).
    let helm = |o: &&Value| o["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm";
    assert!(rendered.values().all(helm));
}

/// The chart's crds/ holds deploy/crds/, byte for byte (Helm installs crds/ before the rest).
#[test]
fn chart_crds_are_deploy_crds() {
    let files = |dir: &str| -> BTreeMap<String, Vec<u8>> {
        std::fs::read_dir(repo().join(dir))
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .map(|entry| {
                let entry = entry.unwrap();
                let name = entry.file_name().to_string_lossy().into_owned();
                (name, std::fs::read(entry.path()).unwrap())
            })
            .collect()
    };
    let (deploy, chart) = (files("deploy/crds"), files(&format!("{CHART}/crds")));
    let fix = "regenerate both: UPDATE_CRDS=1 cargo test --test crds";
    assert!(!deploy.is_empty());
    for name in deploy.keys().chain(chart.keys()) {
        let differ =
            format!("{CHART}/crds/{name} and deploy/crds/{name} differ (or one is missing)");
        assert!(deploy.get(name) == chart.get(name), "{differ}; {fix}");
    }
}

/// Chart.yaml: version and appVersion are the crate's version (the image tag defaults to it);
/// the k3s example names that version and only values the chart has.
#[test]
fn chart_version_is_the_crate_version() {
    k3s_example_values();
    let chart: Value = serde_saphyr::from_str(&read(&format!("{CHART}/Chart.yaml"))).unwrap();
    assert_eq!(chart["apiVersion"], "v2");
    assert_eq!(chart["name"], "mutantops");
    for field in ["version", "appVersion"] {
        assert_eq!(
            chart[field],
            env!("CARGO_PKG_VERSION"),
            "{CHART}/Chart.yaml {field} is not Cargo.toml's version"
        );
    }
}

/// Keys of `example` that `values` (values.yaml) does not have; free-form maps are not
/// looked into.
fn unknown_keys(path: &str, example: &Value, values: &Value, out: &mut Vec<String>) {
    const FREE_FORM: [&str; 4] = ["resources", "podAnnotations", "nodeSelector", "affinity"];
    let (Some(example), Some(_)) = (example.as_object(), values.as_object()) else {
        return;
    };
    for (name, v) in example {
        let name = name.as_str();
        match values.get(name) {
            None => out.push(format!("{path}{name}")),
            Some(default) if !FREE_FORM.contains(&name) => {
                unknown_keys(&format!("{path}{name}."), v, default, out);
            }
            Some(_) => {}
        }
    }
}

/// The k3s HelmChart example installs this chart's version into namespace mutants, creating
/// it, with values the chart has. Returns its valuesContent.
fn k3s_example_values() -> Value {
    let example: Value = serde_saphyr::from_str(&read("deploy/chart/helmchart-k3s.yaml")).unwrap();
    assert_eq!(example["apiVersion"], "helm.cattle.io/v1");
    assert_eq!(example["kind"], "HelmChart");
    let spec = &example["spec"];
    assert_eq!(spec["targetNamespace"], "mutants");
    assert_eq!(spec["createNamespace"], true);
    let archive = format!("/mutantops-{}.tgz", env!("CARGO_PKG_VERSION"));
    assert!(
        spec["chart"].as_str().unwrap().ends_with(&archive),
        "the example names another chart version than {archive}: {:?}",
        spec["chart"]
    );
    let values: Value = serde_saphyr::from_str(spec["valuesContent"].as_str().unwrap()).unwrap();
    let defaults: Value = serde_saphyr::from_str(&read(&format!("{CHART}/values.yaml"))).unwrap();
    let mut unknown = Vec::new();
    unknown_keys("", &values, &defaults, &mut unknown);
    assert!(
        unknown.is_empty(),
        "helmchart-k3s.yaml sets values the chart does not have: {unknown:?}"
    );
    values
}

/// `helm lint --strict` passes, with default values and with TLS on.
#[test]
#[ignore = "needs scripts/helm (helm from the Go module proxy)"]
fn helm_lint_passes() {
    helm(&["lint", "--strict", CHART]);
    helm(&["lint", "--strict", CHART, "--set", "tls.enabled=true"]);
}

/// tls.enabled: the Secret volume, its read-only mount and the two variables, exactly as
/// deploy/devices/loadbalancer/ patches them in; the rest of the Deployment as without TLS.
#[test]
#[ignore = "needs scripts/helm (helm from the Go module proxy)"]
fn tls_values_render_the_volume_mount_and_variables() {
    let plain = render("mutantops", "mutants", &[]);
    let plain = find(&plain, "Deployment", "mutantops-operator");
    let docs = render("mutantops", "mutants", &set(&["tls.enabled=true"]));
    let deployment = find(&docs, "Deployment", "mutantops-operator");
    let patch = parse(&read("deploy/devices/loadbalancer/deployment-tls.yaml"));
    let patch = &patch[0];
    let (ours, theirs) = (container(deployment), container(patch));
    let env = seq(&ours["env"]);
    for entry in seq(&theirs["env"]) {
        assert!(env.iter().filter(|e| *e == entry).count() == 1, "{entry:?}");
    }
    assert_eq!(env.len(), seq(&container(plain)["env"]).len() + 2);
    assert_eq!(ours["volumeMounts"], theirs["volumeMounts"]);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["volumes"], patch["spec"]["template"]["spec"]["volumes"]);
    // Nothing else changed.
    let strip = |d: &Value| {
        let mut d = d.clone();
        let pod = &mut d["spec"]["template"]["spec"];
        for field in ["env", "volumeMounts"] {
            pod["containers"][0][field] = Value::Null;
        }
        pod["volumes"] = Value::Null;
        d
    };
    assert_eq!(strip(deployment), strip(plain));

    let docs = set(&["tls.enabled=true", "tls.secretName=lan-cert"]);
    let docs = render("mutantops", "mutants", &docs);
    let pod = &find(&docs, "Deployment", "mutantops-operator")["spec"]["template"]["spec"];
    assert_eq!(pod["volumes"][0]["secret"]["secretName"], "lan-cert");
}

/// Every other value lands where values.yaml says.
#[test]
#[ignore = "needs scripts/helm (helm from the Go module proxy)"]
fn values_render_where_documented() {
    let mut args = set(&[
        "replicas=1",
        "image.repository=registry.lan/mutantops",
        "image.tag=9.9.9",
        "image.pullPolicy=Always",
        "logLevel=info\\,mutantops=debug",
        "watchNamespace=displays",
        "apiToken.existingSecret=admin",
        "apiToken.key=secret",
        "apiToken.optional=false",
        "service.type=LoadBalancer",
        "service.port=8443",
        "nodeSelector.kubernetes\\.io/arch=arm64",
        "podAnnotations.team=displays",
    ]);
    for json in [
        r#"env=[{"name":"MUTANT_LOG_FORMAT","value":"json"}]"#,
        r#"tolerations=[{"key":"board","operator":"Exists"}]"#,
        r#"affinity={"nodeAffinity":{}}"#,
        r#"imagePullSecrets=[{"name":"regcred"}]"#,
        r#"resources={"requests":{"cpu":"20m"}}"#,
    ] {
        args.extend(["--set-json", json]);
    }
    let docs = render("mutantops", "mutants", &args);
    let deployment = find(&docs, "Deployment", "mutantops-operator");
    let pod = &deployment["spec"]["template"];
    let c = container(deployment);
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert_eq!(c["image"], "registry.lan/mutantops:9.9.9");
    assert_eq!(c["imagePullPolicy"], "Always");
    let env = |name: &str| {
        seq(&c["env"])
            .iter()
            .find(|e| e["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no {name}: {c:?}"))
    };
    assert_eq!(env("RUST_LOG")["value"], "info,mutantops=debug");
    assert_eq!(env("MUTANT_WATCH_NAMESPACE")["value"], "displays");
    // R33: one namespace watched, the operator's rights are a Role there: operator.yml's
    // ClusterRole rules, with only `get` of namespaces (its own, by name); no ClusterRole.
    let role = find(&docs, "Role", "mutantops");
    assert_eq!(role["metadata"]["namespace"], "displays");
    let mut rules = parse(&read("deploy/operator.yml"))
        .into_iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "mutantops")
        .unwrap()["rules"]
        .clone();
    for rule in rules.as_array_mut().unwrap() {
        if rule["resources"][0] == "namespaces" {
            rule["verbs"] = serde_json::json!(["get"]);
        }
    }
    assert_eq!(role["rules"], rules);
    let binding = find(&docs, "RoleBinding", "mutantops");
    assert_eq!(binding["metadata"]["namespace"], "displays");
    assert_eq!(binding["roleRef"]["kind"], "Role");
    assert_eq!(binding["subjects"][0]["namespace"], "mutants");
    assert!(
        !docs.iter().any(
            |d| (d["kind"] == "ClusterRole" || d["kind"] == "ClusterRoleBinding")
                && d["metadata"]["name"] == "mutantops"
        ),
        "a ClusterRole or binding with watchNamespace"
    );
    assert_eq!(env("MUTANT_LOG_FORMAT")["value"], "json");
    let token = &env("MUTANT_API_TOKEN")["valueFrom"]["secretKeyRef"];
    assert_eq!(token["name"], "admin");
    assert_eq!(token["key"], "secret");
    assert_eq!(token["optional"], false);
    assert_eq!(pod["spec"]["nodeSelector"]["kubernetes.io/arch"], "arm64");
    assert_eq!(pod["spec"]["tolerations"][0]["key"], "board");
    assert!(pod["spec"]["affinity"]["nodeAffinity"].is_object());
    assert_eq!(pod["spec"]["imagePullSecrets"][0]["name"], "regcred");
    assert_eq!(c["resources"]["requests"]["cpu"], "20m");
    let annotations = &pod["metadata"]["annotations"];
    assert_eq!(annotations["team"], "displays");
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    let service = &find(&docs, "Service", "mutantops-api")["spec"];
    assert_eq!(service["type"], "LoadBalancer");
    assert_eq!(service["ports"][0]["port"], 8443);

    // No admin token Secret, no prometheus annotations.
    let docs = set(&["apiToken.existingSecret=", "podAnnotations=null"]);
    let docs = render("mutantops", "mutants", &docs);
    let deployment = find(&docs, "Deployment", "mutantops-operator");
    assert!(!has_env(deployment, "MUTANT_API_TOKEN"));
    let pod = &deployment["spec"]["template"]["metadata"];
    assert!(pod.get("annotations").is_none(), "{pod:?}");

    // The k3s example's valuesContent.
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join("chart-k3s-values.yaml");
    std::fs::write(
        &file,
        serde_saphyr::to_string(&k3s_example_values()).unwrap(),
    )
    .unwrap();
    let docs = render("mutantops", "mutants", &["-f", file.to_str().unwrap()]);
    let deployment = find(&docs, "Deployment", "mutantops-operator");
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert!(has_env(deployment, "MUTANT_API_TLS_CERT_FILE"));
    let service = &find(&docs, "Service", "mutantops-api")["spec"];
    assert_eq!(service["type"], "LoadBalancer");
}

/// Objects are named after the release, so two releases never share a cluster-scoped object;
/// every reference (binding, subject, ServiceAccount) follows the names.
#[test]
#[ignore = "needs scripts/helm (helm from the Go module proxy)"]
fn releases_get_names_of_their_own() {
    let mut cluster_scoped = BTreeSet::new();
    for (release, namespace, fullname) in [
        ("mutantops", "mutants", "mutantops"),
        ("edge", "boards", "edge-mutantops"),
        ("mutantops-lab", "lab", "mutantops-lab"),
    ] {
        let docs = render(release, namespace, &[]);
        let aggregated = [
            fullname.to_string(),
            format!("{fullname}-edit"),
            format!("{fullname}-view"),
        ];
        for doc in &docs {
            let (kind, name) = key(doc);
            match doc["metadata"]["namespace"].as_str() {
                Some(ns) => assert_eq!(ns, namespace, "{kind} {name}"),
                None => {
                    // The operator's ClusterRole and binding, the roles aggregated into the
                    // built-in edit, admin and view (R33), and the policy on its Service
                    // writes and its binding (R28).
                    let policy = [
                        format!("{fullname}-services"),
                        format!("{fullname}-secrets"),
                    ];
                    let allowed = match kind.as_str() {
                        "ClusterRole" => &aggregated[..],
                        "ValidatingAdmissionPolicy" | "ValidatingAdmissionPolicyBinding" => {
                            &policy[..]
                        }
                        _ => &aggregated[..1],
                    };
                    assert!(allowed.contains(&name), "{kind} {name}");
                    assert!(cluster_scoped.insert((kind, name)), "{release}: collides");
                }
            }
        }
        for (suffix, label) in [
            ("edit", "rbac.authorization.k8s.io/aggregate-to-edit"),
            ("edit", "rbac.authorization.k8s.io/aggregate-to-admin"),
            ("view", "rbac.authorization.k8s.io/aggregate-to-view"),
        ] {
            let role = find(&docs, "ClusterRole", &format!("{fullname}-{suffix}"));
            assert_eq!(
                role["metadata"]["labels"][label], "true",
                "{suffix}: {label}"
            );
        }
        let binding = find(&docs, "ClusterRoleBinding", fullname);
        assert_eq!(binding["roleRef"]["name"], fullname);
        let role = format!("{fullname}-leader-election");
        let role_binding = find(&docs, "RoleBinding", &role);
        assert_eq!(role_binding["roleRef"]["name"], role.as_str());
        find(&docs, "Role", &role);
        for b in [binding, role_binding] {
            assert_eq!(b["subjects"][0]["name"], fullname);
            assert_eq!(b["subjects"][0]["namespace"], namespace);
        }
        find(&docs, "ServiceAccount", fullname);
        // The policies hold this release's ServiceAccount, and their bindings name them.
        for policy in [
            format!("{fullname}-services"),
            format!("{fullname}-secrets"),
        ] {
            let user = format!("'system:serviceaccount:{namespace}:{fullname}'");
            let condition = &find(&docs, "ValidatingAdmissionPolicy", &policy)["spec"]["matchConditions"]
                [0]["expression"];
            assert!(
                condition.as_str().unwrap().ends_with(&user),
                "{condition:?}"
            );
            let binding = find(&docs, "ValidatingAdmissionPolicyBinding", &policy);
            assert_eq!(binding["spec"]["policyName"], policy.as_str());
        }
        find(&docs, "Service", &format!("{fullname}-api"));
        let deployment = find(&docs, "Deployment", &format!("{fullname}-operator"));
        let pod = &deployment["spec"]["template"]["spec"];
        assert_eq!(pod["serviceAccountName"], fullname);
    }
}

/// The rendered chart, applied to the real control plane in a namespace of the test's own
/// under a release name of its own: the API server accepts every object, the Deployment's pods
/// are made (with the chart's ServiceAccount) and become Ready on the kwok node, and the
/// ServiceAccount may do what the ClusterRole and the Role grant, and not more, its Service
/// writes held by the release's policy to Services labelled as a variant's. What it made
/// outside the namespace is deleted when it ends, however it ends.
#[tokio::test]
#[ignore = "needs a cluster and scripts/helm: scripts/test runs it"]
async fn the_rendered_chart_installs_on_the_control_plane() {
    let ns = common::TestNamespace::new("chart").await;
    common::install_crds(&ns.client).await;
    let release = format!("chart-{}", common::random_suffix());
    let fullname = format!("{release}-mutantops");
    let docs = render(&release, &ns.name, &[]);
    let mut cluster_scoped: Vec<String> = docs
        .iter()
        .filter(|d| d["metadata"]["namespace"].is_null())
        .map(|d| format!("{}/{}", key(d).0, key(d).1))
        .collect();
    cluster_scoped.sort();
    let expected = [
        format!("ClusterRole/{fullname}"),
        format!("ClusterRole/{fullname}-edit"),
        format!("ClusterRole/{fullname}-view"),
        format!("ClusterRoleBinding/{fullname}"),
        format!("ValidatingAdmissionPolicy/{fullname}-secrets"),
        format!("ValidatingAdmissionPolicy/{fullname}-services"),
        format!("ValidatingAdmissionPolicyBinding/{fullname}-secrets"),
        format!("ValidatingAdmissionPolicyBinding/{fullname}-services"),
    ];
    assert_eq!(cluster_scoped, expected);
    let absent = |object: &str| {
        let found = kubectl(&format!("get {object} --ignore-not-found -o name"), "");
        assert!(found.status.success(), "{}", text(&found));
        found.stdout.is_empty()
    };
    for object in &cluster_scoped {
        assert!(absent(object), "{object} exists already");
    }
    let role = common::RemoveOnDrop::<ClusterRole>::new(&fullname);
    let binding = common::RemoveOnDrop::<ClusterRoleBinding>::new(&fullname);
    let aggregated = ["edit", "view"]
        .map(|suffix| common::RemoveOnDrop::<ClusterRole>::new(&format!("{fullname}-{suffix}")));
    let policy = format!("{fullname}-services");
    let policies = [policy.clone(), format!("{fullname}-secrets")].map(|name| {
        (
            common::RemoveOnDrop::<ValidatingAdmissionPolicy>::new(&name),
            common::RemoveOnDrop::<ValidatingAdmissionPolicyBinding>::new(&name),
        )
    });

    let input: String = docs
        .iter()
        .map(|d| format!("---\n{}", serde_saphyr::to_string(d).unwrap()))
        .collect();
    let applied = kubectl(
        "apply --server-side --field-manager=mutantops-tests -f -",
        &input,
    );
    assert!(
        applied.status.success(),
        "kubectl apply: {}",
        text(&applied)
    );
    let applied = String::from_utf8_lossy(&applied.stdout).into_owned();
    assert_eq!(applied.lines().count(), docs.len(), "{applied}");
    for (kind, name) in docs.iter().map(key) {
        let got = kubectl(&format!("get -n {} {kind}/{name} -o name", ns.name), "");
        assert!(got.status.success(), "{kind} {name}: {}", text(&got));
    }

    // The pods exist, run as the chart's ServiceAccount, and are Ready (kwok plays kubelet).
    let deployments = ns.api::<Deployment>();
    let ready = || async {
        let d = deployments.get(&format!("{fullname}-operator")).await;
        let status = d.map_err(|e| e.to_string())?.status.unwrap_or_default();
        match status.ready_replicas {
            Some(2) => Ok(()),
            _ => Err(format!("{status:?}")),
        }
    };
    common::wait_for("Ready pods", Duration::from_secs(90), ready).await;
    let selector = format!("app.kubernetes.io/instance={release}");
    let params = ListParams::default().labels(&selector);
    let pods = ns.api::<Pod>().list(&params).await.unwrap().items;
    assert_eq!(pods.len(), 2, "{selector}");
    for pod in &pods {
        let account = pod.spec.as_ref().unwrap().service_account_name.as_deref();
        assert_eq!(account, Some(fullname.as_str()));
    }

    // What the ServiceAccount may do, and may not.
    let account = format!("system:serviceaccount:{}:{fullname}", ns.name);
    let can = |what: &str| {
        let out = kubectl(&format!("auth can-i {what} --as {account}"), "");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    for allowed in [
        "list mutations.neiam.org -A".to_string(),
        "patch mutantdeployments.neiam.org --subresource=status -n default".to_string(),
        "patch deployments.apps -n default".to_string(),
        "create secrets -n default".to_string(),
        "update secrets -n default".to_string(),
        // R53: a screen Secret of a variant that is gone (the policy holds it to those), and
        // the EndpointSlices of a variant's Service.
        "delete secrets -n default".to_string(),
        "list endpointslices.discovery.k8s.io -n default".to_string(),
        "create events.events.k8s.io -n default".to_string(),
        format!("update leases.coordination.k8s.io -n {}", ns.name),
        // R33: a namespace's opt-in label, by name.
        "get namespaces/default".to_string(),
        // R33: the namespaces labelled for the API, label-selected.
        "list namespaces".to_string(),
        "watch namespaces".to_string(),
    ] {
        assert_eq!(can(&allowed), "yes", "{account} needs: {allowed}");
    }
    for denied in [
        "watch endpointslices.discovery.k8s.io -n default",
        "patch secrets -n default",
        "get pods -n default",
        "update leases.coordination.k8s.io -n default",
        "patch namespaces/default",
        "delete namespaces/default",
    ] {
        assert_eq!(can(denied), "no", "{account} must not: {denied}");
    }

    // R28: the release's policy holds its ServiceAccount to the Services it
    // labels; the cluster admin running the test is not held to it.
    let as_account = format!("-n {} --as {account}", ns.name);
    let refused = |out: &std::process::Output| {
        !out.status.success()
            && text(out).contains(&format!("ValidatingAdmissionPolicy '{policy}'"))
    };
    common::wait_for("the policy in force", Duration::from_secs(30), || async {
        let out = kubectl(
            &format!("create service clusterip plain --tcp=80 {as_account}"),
            "",
        );
        if refused(&out) {
            Ok(())
        } else {
            Err(text(&out))
        }
    })
    .await;
    let labelled = "apiVersion: v1\nkind: Service\nmetadata:\n  name: ours\n  labels:\n    \
         mutantops.neiam.org/kind: mutation\n    mutantops.neiam.org/owner: m\n    \
         mutantops.neiam.org/variant: a\nspec:\n  ports: [{port: 80}]\n  selector:\n    \
         mutantops.neiam.org/kind: mutation\n    mutantops.neiam.org/owner: m\n    \
         mutantops.neiam.org/variant: a\n";
    let out = kubectl(&format!("create -f - {as_account}"), labelled);
    assert!(out.status.success(), "a labelled Service: {}", text(&out));
    let out = kubectl(
        &format!("create service clusterip plain --tcp=80 -n {}", ns.name),
        "",
    );
    assert!(out.status.success(), "as the admin: {}", text(&out));
    let out = kubectl(&format!("delete service plain {as_account}"), "");
    assert!(refused(&out), "{}", text(&out));
    // R28: and the release's Secrets policy to the Mutations' own Secrets.
    let secrets = format!("{fullname}-secrets");
    common::wait_for(
        "the Secrets policy in force",
        Duration::from_secs(30),
        || async {
            let out = kubectl(
                &format!("create secret generic stray --from-literal=a=b {as_account}"),
                "",
            );
            if !out.status.success()
                && text(&out).contains(&format!("ValidatingAdmissionPolicy '{secrets}'"))
            {
                Ok(())
            } else {
                Err(text(&out))
            }
        },
    )
    .await;

    // Gone again: the cluster-scoped objects now, the namespace (and all in it) after.
    drop((binding, role, aggregated, policies));
    for object in &cluster_scoped {
        assert!(absent(object), "{object} is still there");
    }
}
