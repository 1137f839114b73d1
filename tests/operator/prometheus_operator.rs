//! R25: deploy/prometheus/podmonitor.yaml (how prometheus-operator scrapes
//! `/metrics`) and prometheusrule.yaml are what prometheus-operator's own CRDs accept. The CRDs
//! come from prometheus-operator's Go module (`PROMETHEUS_OPERATOR`, from the Go module proxy
//! through `go mod download`); the manifests are applied with strict field validation, as
//! `kubectl apply` does, so a misspelt or misplaced field is refused here as it would be on a
//! user's cluster. A CRD the cluster already has (a real cluster with prometheus-operator) is
//! used as it is and left in place; one this test installs is removed again, even when the
//! test fails.

use std::path::PathBuf;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    api::{ApiResource, DynamicObject, GroupVersionKind, ValidationDirective},
    core::Status,
};

use super::*;

/// The prometheus-operator release whose CRDs the manifests are checked against.
const PROMETHEUS_OPERATOR: &str = "github.com/prometheus-operator/prometheus-operator@v0.94.0";

/// The CRDs the manifests need: (file under example/prometheus-operator-crd/, plural, kind).
const KINDS: [(&str, &str, &str); 2] = [
    (
        "monitoring.coreos.com_podmonitors.yaml",
        "podmonitors",
        "PodMonitor",
    ),
    (
        "monitoring.coreos.com_prometheusrules.yaml",
        "prometheusrules",
        "PrometheusRule",
    ),
];

/// The module's directory in the Go module cache, downloaded if it is not there yet.
fn module_dir() -> PathBuf {
    let out = std::process::Command::new("go")
        .args(["mod", "download", "-json", PROMETHEUS_OPERATOR])
        .current_dir(env!("CARGO_TARGET_TMPDIR"))
        .output()
        .unwrap_or_else(|e| {
            panic!("go (the Go toolchain) is needed to fetch {PROMETHEUS_OPERATOR}: {e}")
        });
    let info: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "go mod download {PROMETHEUS_OPERATOR}: {e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    match info["Dir"].as_str() {
        Some(dir) if out.status.success() => PathBuf::from(dir),
        _ => panic!("go mod download {PROMETHEUS_OPERATOR}: {info}"),
    }
}

fn read_yaml(path: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Applies `object` into `namespace` with strict field validation (kubectl's default).
async fn apply_strict(
    client: &kube::Client,
    namespace: &str,
    kind: &str,
    plural: &str,
    mut object: Value,
) -> Result<DynamicObject, Status> {
    let gvk = GroupVersionKind::gvk("monitoring.coreos.com", "v1", kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
    object["metadata"]["namespace"] = json!(namespace);
    let name = object["metadata"]["name"].as_str().unwrap().to_owned();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let params = PatchParams::apply("mutantops-tests").validation(ValidationDirective::Strict);
    match api.patch(&name, &params, &Patch::Apply(&object)).await {
        Ok(applied) => Ok(applied),
        Err(kube::Error::Api(status)) => Err(*status),
        Err(other) => panic!("applying {kind} {name}: {other}"),
    }
}

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn the_podmonitor_and_prometheusrule_fit_prometheus_operators_crds() {
    let ns = TestNamespace::new("prom-operator").await;
    let crds_dir = module_dir().join("example/prometheus-operator-crd");
    let crds: Api<CustomResourceDefinition> = Api::all(ns.client.clone());
    let mut installed = Vec::new();
    for (file, plural, _) in KINDS {
        let name = format!("{plural}.monitoring.coreos.com");
        if crds.get_opt(&name).await.unwrap().is_some() {
            continue; // the cluster's own: used, never removed
        }
        installed.push(common::RemoveOnDrop::<CustomResourceDefinition>::new(&name));
        let crd: CustomResourceDefinition = common::from_json(read_yaml(&crds_dir.join(file)));
        assert_eq!(crd.name_any(), name, "{file}");
        common::apply_crd(&ns.client, &crd).await;
    }

    let manifests = [
        ("podmonitor.yaml", KINDS[0]),
        ("prometheusrule.yaml", KINDS[1]),
    ];
    for (file, (_, plural, kind)) in manifests {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("deploy/prometheus")
            .join(file);
        let object = read_yaml(&path);
        assert_eq!(object["kind"], kind, "{file}");
        let applied = apply_strict(&ns.client, &ns.name, kind, plural, object.clone())
            .await
            .unwrap_or_else(|e| panic!("prometheus-operator's {kind} CRD refuses {file}: {e:?}"));
        // Nothing was pruned or defaulted away: the spec stored is the spec written.
        for (key, value) in object["spec"].as_object().unwrap() {
            assert_eq!(
                &applied.data["spec"][key], value,
                "{file}: spec.{key} as stored"
            );
        }

        // The check can fail: the same object with a misplaced field is refused.
        let mut misspelt = object;
        misspelt["metadata"]["name"] = json!("misspelt");
        misspelt["spec"]["podMetricsEndpoint"] = json!([{ "port": "metrics" }]);
        let refused = apply_strict(&ns.client, &ns.name, kind, plural, misspelt)
            .await
            .expect_err("an unknown field must be refused");
        assert!(
            refused.message.contains("podMetricsEndpoint"),
            "{file}: the refusal names the field: {refused:?}"
        );
    }
    drop(installed);
}
