//! Unit tests of the pure variant logic; each cites the rule of the behaviour contract it
//! checks. Shared fixtures live here, the tests of each submodule beside them in `tests/`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::{Value, json};

use super::*;
use crate::crd::{OwnerKind, fixtures::variant};

mod access;
mod baseline;
mod baseline_versions;
mod build;
mod converge;
mod devices;
mod env;
mod own_secrets;
mod placement;
mod placement_checks;
mod pod_security;
mod polls;
mod quiet;
mod refusal;
mod report;
mod rollout;
mod service;
mod sleep;
mod status;
mod validate;

fn owner() -> Owner {
    Owner {
        kind: OwnerKind::Mutation,
        name: "snap".into(),
        namespace: "team".into(),
        uid: "uid-1".into(),
    }
}

/// The readme's base, as read back from a cluster (server fields included) with a few extras.
fn base_json() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": "elsewhere",
            "uid": "base-uid",
            "resourceVersion": "42",
            "generation": 3,
            "creationTimestamp": "2024-01-01T00:00:00Z",
            "managedFields": [{"manager": "kubectl"}],
            "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "u"}],
            "finalizers": ["keep"],
            "labels": {"app": "nginx", OWNER_LABEL: "spoofed"},
            "annotations": {
                "team": "a",
                "deployment.kubernetes.io/revision": "7",
                "kubectl.kubernetes.io/last-applied-configuration": "{}"
            }
        },
        "spec": {
            "replicas": 3,
            "selector": {
                "matchLabels": {"app": "nginx"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["web"]}]
            },
            "template": {
                "metadata": {"labels": {"app": "nginx", "tier": "web"}},
                "spec": {
                    "futureField": {"kept": true},
                    "initContainers": [{
                        "name": "init",
                        "image": "busybox",
                        "env": [{"name": "MODE", "value": "base"}]
                    }],
                    "containers": [
                        {"name": "nginx", "image": "nginx:1.21", "env": [
                            {"name": "A", "value": "1"},
                            {"name": "MODE", "valueFrom": {
                                "configMapKeyRef": {"name": "cm", "key": "mode"}
                            }},
                            {"name": "Z", "value": "26"}
                        ]},
                        {"name": "sidecar", "image": "busybox"}
                    ]
                }
            }
        },
        "status": {"replicas": 3}
    })
}

/// The findings of a first reconcile at generation 1 with nothing wrong: tests change what
/// they are about with `..findings(..)`.
fn findings(
    previous: &crate::crd::OwnerStatus,
    variants: Vec<crate::crd::VariantStatus>,
) -> Findings<'_> {
    Findings {
        previous,
        generation: Some(1),
        secret: None,
        base_error: None,
        unservable: None,
        not_allowed: None,
        problems: Vec::new(),
        variants,
        now: "t1",
    }
}

fn base() -> Base {
    match Base::parse(&base_json()) {
        Ok(b) => b,
        Err(e) => panic!("base should parse: {e}"),
    }
}

fn parse_err(v: Value) -> String {
    match Base::parse(&v) {
        Ok(_) => panic!("base should be rejected: {v}"),
        Err(e) => e,
    }
}

fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
    v.pointer(path).unwrap_or(&Value::Null)
}

fn meta(labels: &[(&str, &str)], controller: Option<(&str, &str, &str)>) -> ObjectMeta {
    ObjectMeta {
        name: Some("web-a".into()),
        labels: Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        owner_references: controller.map(|(kind, name, uid)| {
            vec![
                OwnerReference {
                    api_version: "v1".into(),
                    kind: "Other".into(),
                    name: "other".into(),
                    uid: "not-controller".into(),
                    controller: None,
                    block_owner_deletion: None,
                },
                OwnerReference {
                    api_version: "neiam.org/v1".into(),
                    kind: kind.into(),
                    name: name.into(),
                    uid: uid.into(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                },
            ]
        }),
        ..ObjectMeta::default()
    }
}

/// What the API server and the cache give back for `desired`: defaults and server fields added.
fn observed(desired: &Value) -> ObservedDeployment {
    decode(desired.clone())
}

/// `desired` as the API server would return it once applied: defaults added, a status
/// written, decoded as the controllers cache it.
fn decode(desired: Value) -> ObservedDeployment {
    let mut v = desired;
    v["metadata"]["uid"] = json!("d-uid");
    v["metadata"]["resourceVersion"] = json!("9");
    v["metadata"]["generation"] = json!(1);
    v["metadata"]["labels"]["added-by-someone"] = json!("x");
    v["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = json!("IfNotPresent");
    v["spec"]["template"]["spec"]["restartPolicy"] = json!("Always");
    v["status"] = json!({"observedGeneration": 1, "replicas": 1});
    match serde_json::from_value(v) {
        Ok(d) => d,
        Err(e) => panic!("observed should decode: {e}"),
    }
}

// R4, R7
#[test]
fn owner_kind_and_reference() {
    assert_eq!(OwnerKind::MutantDeployment.kind(), "MutantDeployment");
    assert_eq!(OwnerKind::Mutation.kind(), "Mutation");
    assert_eq!(
        OwnerKind::MutantDeployment.label_value(),
        "mutantdeployment"
    );
    assert_eq!(OwnerKind::Mutation.label_value(), "mutation");
    assert_eq!(OwnerKind::Mutation.api_version(), "neiam.org/v1");
    let r = owner().owner_reference();
    assert_eq!(
        (
            r.api_version.as_str(),
            r.kind.as_str(),
            r.name.as_str(),
            r.uid.as_str()
        ),
        ("neiam.org/v1", "Mutation", "snap", "uid-1")
    );
    assert_eq!(
        (r.controller, r.block_owner_deletion),
        (Some(true), Some(true))
    );
}

// R4
#[test]
fn owner_from_resource_needs_namespace_and_uid() {
    let mut m = crate::crd::Mutation::new(
        "snap",
        crate::crd::MutationSpec {
            deployment: (&base_json()).into(),
            variants: vec![],
            device_access: None,
            service: None,
            devices: None,
            rollout: None,
            screen: None,
        },
    );
    let said = |m: &crate::crd::Mutation| {
        Owner::from_resource(OwnerKind::Mutation, m).map_err(|e| e.to_string())
    };
    assert_eq!(
        said(&m),
        Err(r#"Mutation "snap" has no metadata.namespace"#.to_string())
    );
    m.metadata.namespace = Some("team".into());
    assert_eq!(
        said(&m),
        Err(r#"Mutation "snap" has no metadata.uid"#.to_string())
    );
    m.metadata.uid = Some("uid-1".into());
    assert_eq!(said(&m), Ok(owner()));
}

// R6, R9
#[test]
fn ownership_is_the_controller_reference() {
    let m = meta(&[], Some(("Mutation", "snap", "uid-1")));
    assert_eq!(controller_uid(&m), Some("uid-1"));
    assert!(is_controlled_by(&m, "uid-1"));
    assert!(!is_controlled_by(&m, "not-controller"));
    assert_eq!(controller_uid(&meta(&[], None)), None);
}

// R6
#[test]
fn prune_needs_owner_label_kind_label_and_controller_uid() {
    let o = owner();
    let labels = [(OWNER_LABEL, "snap"), (KIND_LABEL, "mutation")];
    assert!(may_prune(
        &meta(&labels, Some(("Mutation", "snap", "uid-1"))),
        &o
    ));
    // merely carries the labels
    assert!(!may_prune(&meta(&labels, None), &o));
    // same-named owner of the other kind
    let md = [(OWNER_LABEL, "snap"), (KIND_LABEL, "mutantdeployment")];
    assert!(!may_prune(
        &meta(&md, Some(("MutantDeployment", "snap", "uid-2"))),
        &o
    ));
    assert!(!may_prune(
        &meta(&md, Some(("Mutation", "snap", "uid-1"))),
        &o
    ));
    // controlled by us but not labelled as ours
    assert!(!may_prune(
        &meta(
            &[(KIND_LABEL, "mutation")],
            Some(("Mutation", "snap", "uid-1"))
        ),
        &o
    ));
}

/// Expands `$(NAME)` as the kubelet does (`$$` is `$`; a name `lookup` does not know, or a
/// `$(` without its `)`, is left as written): the model the env tests judge against (R32,
/// R41).
pub(super) fn kubelet_expand<'a>(value: &str, lookup: impl Fn(&str) -> Option<&'a str>) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(open) = after.strip_prefix('(')
            && let Some(close) = open.find(')')
        {
            let name = &open[..close];
            match lookup(name) {
                Some(v) => out.push_str(v),
                None => out.push_str(&rest[at..at + close + 3]),
            }
            rest = &open[close + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}
