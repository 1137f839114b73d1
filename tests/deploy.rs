//! deploy/: the single-file bundle k3s can auto-deploy is exactly the generated CRDs plus
//! operator.yml (R28), and the kustomization names every file; the policy on the operator's
//! Service writes names its ServiceAccount, and docs/security.md lists every right
//! that account holds (R28, R33).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a failed step must fail the test"
)]

use std::path::Path;

use serde_json::Value;

fn deploy(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// How many documents the YAML stream `text` holds, empty and `null` ones included:
/// `serde_saphyr::from_multiple` leaves those out.
fn document_count(text: &str) -> usize {
    use serde_saphyr::granit_parser::{Event, Parser};
    Parser::new_from_str(text)
        .map(|event| event.unwrap())
        .filter(|(event, _)| matches!(event, Event::DocumentStart(..)))
        .count()
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
    // Every document parses, and none is empty (serde_saphyr skips those: counted apart).
    let docs: Vec<Value> = serde_saphyr::from_multiple(&actual).unwrap();
    assert_eq!(docs.len(), document_count(&actual), "an empty document");
    for value in docs {
        assert!(value.get("kind").is_some(), "{value:?}");
    }
}

/// R28: what operator.yml promises, checked on the parsed objects.
#[test]
fn operator_manifest_hardening() {
    let docs: Vec<Value> = serde_saphyr::from_multiple(&deploy("operator.yml")).unwrap();
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
    assert_eq!(requests["memory"], "20Mi");
    let env = |name: &str| {
        let all = container["env"].as_array().unwrap();
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
    let ports = service["spec"]["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 1);
    assert_eq!(
        (ports[0]["port"].as_u64(), ports[0]["targetPort"].as_str()),
        (Some(80), Some("api"))
    );
    assert_eq!(
        find("Namespace")["metadata"]["name"].as_str(),
        Some("mutants")
    );
    // R28: the policies on Service and Secret writes hold this manifest's ServiceAccount,
    // for every write of a Service and every create and update of a Secret, and their
    // bindings deny.
    let account = &find("ServiceAccount")["metadata"];
    let user = format!(
        "request.userInfo.username == 'system:serviceaccount:{}:{}'",
        account["namespace"].as_str().unwrap(),
        account["name"].as_str().unwrap()
    );
    for (name, resource, ops) in [
        (
            "mutantops-services",
            "services",
            &["CREATE", "UPDATE", "DELETE"][..],
        ),
        (
            "mutantops-secrets",
            "secrets",
            &["CREATE", "UPDATE", "DELETE"][..],
        ),
    ] {
        let named = |kind: &str| {
            docs.iter()
                .find(|d| d["kind"].as_str() == Some(kind) && d["metadata"]["name"] == name)
                .unwrap_or_else(|| panic!("no {kind} {name}"))
        };
        let spec = &named("ValidatingAdmissionPolicy")["spec"];
        assert_eq!(
            spec["matchConditions"][0]["expression"].as_str(),
            Some(user.as_str())
        );
        assert_eq!(spec["failurePolicy"], "Fail");
        let rule = &spec["matchConstraints"]["resourceRules"][0];
        assert_eq!(rule["resources"][0], resource);
        let operations: Vec<&str> = rule["operations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o.as_str().unwrap())
            .collect();
        assert_eq!(operations, ops);
        let binding = &named("ValidatingAdmissionPolicyBinding")["spec"];
        assert_eq!(binding["policyName"], name);
        assert_eq!(binding["validationActions"][0], "Deny");
    }
}

#[test]
fn the_kustomization_names_every_manifest() {
    let kustomization: Value = serde_saphyr::from_str(&deploy("kustomization.yaml")).unwrap();
    let resources: Vec<&str> = kustomization["resources"]
        .as_array()
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

/// R33: docs/security.md lists every rule deploy/ grants the operator's
/// ServiceAccount (ClusterRole mutantops, Role mutantops-leader-election), resources and
/// verbs, and nothing it does not grant.
#[test]
fn the_security_model_lists_every_right_of_the_service_account() {
    use std::collections::BTreeSet;
    type Rule = (BTreeSet<String>, BTreeSet<String>);
    let words = |v: &Value| -> BTreeSet<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap().to_owned())
            .collect()
    };
    let mut granted: Vec<Rule> = serde_saphyr::from_multiple::<Value>(&deploy("operator.yml"))
        .unwrap()
        .into_iter()
        .filter(|d| {
            let name = d["metadata"]["name"].as_str();
            (d["kind"] == "ClusterRole" && name == Some("mutantops"))
                || (d["kind"] == "Role" && name == Some("mutantops-leader-election"))
        })
        .flat_map(|d| d["rules"].as_array().unwrap().clone())
        .map(|rule| (words(&rule["resources"]), words(&rule["verbs"])))
        .collect();
    assert_eq!(granted.len(), 10, "{granted:?}");

    let security =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/security.md")).unwrap();
    let section = &security[security.find("## The operator's ServiceAccount").unwrap()..];
    let mut listed: Vec<Rule> = Vec::new();
    let rows = section
        .lines()
        .skip_while(|l| !l.starts_with("| where"))
        .skip(2)
        .take_while(|l| l.starts_with('|'));
    for row in rows {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        // The resources are the cell's `quoted` words outside parentheses (the API group).
        let mut resources = BTreeSet::new();
        let mut depth = 0;
        for (i, part) in cells[2].split('`').enumerate() {
            depth += part.matches('(').count();
            depth -= part.matches(')').count();
            if i % 2 == 1 && depth == 0 {
                resources.insert(part.to_owned());
            }
        }
        if resources.iter().any(|r| r == "/status") {
            let previous = &listed.last().unwrap().0;
            resources = previous.iter().map(|r| format!("{r}/status")).collect();
        }
        let verbs = cells[3].split(", ").map(str::to_owned).collect();
        listed.push((resources, verbs));
    }
    granted.sort();
    listed.sort();
    assert_eq!(
        listed, granted,
        "docs/security.md's \"The operator's ServiceAccount\" table and deploy/operator.yml's rules differ"
    );
}
