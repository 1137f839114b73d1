//! deploy/: the single-file bundle k3s can auto-deploy is exactly the generated CRDs plus
//! operator.yml (R28), and the kustomization names every file.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a failed step must fail the test"
)]

use std::path::Path;

fn deploy(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The bundle as it must be: a header, the CRDs, then operator.yml.
fn expected_bundle() -> String {
    let mut out = String::from(
        "# mutantops: CRDs and operator in one file, for `kubectl apply -f` or the k3s manifests\n\
         # folder (/var/lib/rancher/k3s/server/manifests/). Generated from deploy/crds/ and\n\
         # deploy/operator.yml by `UPDATE_DEPLOY=1 cargo test --test deploy`; do not edit.\n",
    );
    for (_, yaml) in mutantops::crd::crd_files().unwrap() {
        out.push_str(&yaml);
    }
    out.push_str("---\n");
    out.push_str(&deploy("operator.yml"));
    out
}

/// R28: a change to the CRDs or operator.yml that is not regenerated into the bundle fails.
#[test]
fn the_bundle_is_the_crds_and_the_operator() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/mutantops.yaml");
    let expected = expected_bundle();
    if std::env::var_os("UPDATE_DEPLOY").is_some() {
        std::fs::write(&path, &expected).unwrap();
    }
    let actual = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        actual == expected,
        "deploy/mutantops.yaml drifted: run `UPDATE_DEPLOY=1 cargo test --test deploy`"
    );
    // Every document parses.
    for doc in serde_yaml::Deserializer::from_str(&actual) {
        let value = serde_yaml::Value::deserialize(doc).unwrap();
        assert!(value.get("kind").is_some(), "{value:?}");
    }
}

/// R28: what operator.yml promises, checked on the parsed objects.
#[test]
fn operator_manifest_hardening() {
    let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&deploy("operator.yml"))
        .map(|d| serde_yaml::Value::deserialize(d).unwrap())
        .collect();
    let find = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"].as_str() == Some(kind))
            .unwrap_or_else(|| panic!("no {kind}"))
    };
    let deployment = find("Deployment");
    let pod = &deployment["spec"]["template"];
    let annotations = &pod["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/port"], "9568");
    let pod_sc = &pod["spec"]["securityContext"];
    assert_eq!(pod_sc["runAsNonRoot"], true);
    assert_eq!(pod_sc["seccompProfile"]["type"], "RuntimeDefault");
    let container = &pod["spec"]["containers"][0];
    let sc = &container["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"][0], "ALL");
    let requests = &container["resources"]["requests"];
    assert_eq!(requests["cpu"], "10m");
    assert_eq!(requests["memory"], "16Mi");
    let env = |name: &str| {
        let all = container["env"].as_sequence().unwrap();
        all.iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("no env {name}"))
    };
    let key = &env("MUTANT_API_TOKEN")["valueFrom"]["secretKeyRef"];
    assert_eq!(
        (
            key["name"].as_str(),
            key["key"].as_str(),
            key["optional"].as_bool()
        ),
        (Some("mutantops-api"), Some("token"), Some(true))
    );
    // R33: the operator knows its own ServiceAccount, from the downward API.
    let account = &env("POD_SERVICE_ACCOUNT")["valueFrom"]["fieldRef"];
    assert_eq!(account["fieldPath"], "spec.serviceAccountName");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    // The Service names the API port only.
    let service = find("Service");
    assert_eq!(service["metadata"]["name"].as_str(), Some("mutantops-api"));
    let ports = service["spec"]["ports"].as_sequence().unwrap();
    assert_eq!(ports.len(), 1);
    assert_eq!(
        (ports[0]["port"].as_u64(), ports[0]["targetPort"].as_str()),
        (Some(80), Some("api"))
    );
    assert_eq!(
        find("Namespace")["metadata"]["name"].as_str(),
        Some("mutants")
    );
}

#[test]
fn the_kustomization_names_every_manifest() {
    let kustomization: serde_yaml::Value =
        serde_yaml::from_str(&deploy("kustomization.yaml")).unwrap();
    let resources: Vec<&str> = kustomization["resources"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    let mut expected: Vec<String> = mutantops::crd::crd_files()
        .unwrap()
        .into_iter()
        .map(|(name, _)| format!("crds/{name}"))
        .collect();
    expected.push("operator.yml".into());
    assert_eq!(resources, expected);
}

use serde::Deserialize as _;
