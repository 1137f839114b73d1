//! Tests of building, planning, foreign Deployments and the apply decision (R4, R5, R8, R9,
//! R12, R21).

use serde_json::{Value, json};

use super::*;

// R4
#[test]
fn build_names_labels_and_owns_the_deployment() {
    let d = build(&base(), &owner(), &variant("canary", &[], 2));
    assert_eq!(at(&d, "/apiVersion"), "apps/v1");
    assert_eq!(at(&d, "/kind"), "Deployment");
    assert_eq!(at(&d, "/metadata/name"), "web-canary");
    assert_eq!(at(&d, "/metadata/namespace"), "team");
    let ours = json!({
        "app": "nginx",
        OWNER_LABEL: "snap",
        VARIANT_LABEL: "canary",
        KIND_LABEL: "mutation",
    });
    assert_eq!(at(&d, "/metadata/labels"), &ours);
    assert_eq!(at(&d, "/spec/selector/matchLabels"), &ours);
    let mut pod = ours.clone();
    pod["tier"] = json!("web");
    assert_eq!(at(&d, "/spec/template/metadata/labels"), &pod);
    assert_eq!(
        at(&d, "/spec/selector/matchExpressions"),
        &json!([{"key": "tier", "operator": "In", "values": ["web"]}])
    );
    assert_eq!(at(&d, "/spec/replicas"), 2);
    assert_eq!(
        at(&d, "/metadata/ownerReferences"),
        &json!([{"apiVersion": "neiam.org/v1", "kind": "Mutation", "name": "snap",
                 "uid": "uid-1", "controller": true, "blockOwnerDeletion": true}])
    );
}

// R4
#[test]
fn build_drops_server_fields_and_status() {
    let d = build(&base(), &owner(), &variant("canary", &[], 1));
    let keys: Vec<&String> = d
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    assert_eq!(keys, ["apiVersion", "kind", "metadata", "spec"]);
    let meta: Vec<&String> = at(&d, "/metadata")
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    assert_eq!(
        meta,
        [
            "annotations",
            "labels",
            "name",
            "namespace",
            "ownerReferences"
        ]
    );
    let annotations = &d["metadata"]["annotations"];
    let keys: Vec<&String> = annotations
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    // revision and last-applied belong to other writers
    assert_eq!(keys, [HASH_ANNOTATION, "team"]);
    assert_eq!(annotations["team"], "a");
    assert_eq!(
        annotations[HASH_ANNOTATION].as_str().map(str::len),
        Some(16)
    );
    assert_eq!(
        at(&d, "/spec/template/spec/futureField"),
        &json!({"kept": true})
    );
}

// R4
#[test]
fn build_extends_env_in_place_and_appends_sorted() {
    let v = variant("canary", &[("MODE", "variant"), ("Y", "y"), ("B", "b")], 1);
    let d = build(&base(), &owner(), &v);
    assert_eq!(
        at(&d, "/spec/template/spec/containers/0/env"),
        &json!([
            {"name": "A", "value": "1"},
            {"name": "MODE", "value": "variant"},
            {"name": "Z", "value": "26"},
            {"name": "B", "value": "b"},
            {"name": "Y", "value": "y"}
        ])
    );
    assert_eq!(
        at(&d, "/spec/template/spec/containers/1/env"),
        &json!([
            {"name": "B", "value": "b"},
            {"name": "MODE", "value": "variant"},
            {"name": "Y", "value": "y"}
        ])
    );
    assert_eq!(
        at(&d, "/spec/template/spec/initContainers"),
        at(&base_json(), "/spec/template/spec/initContainers")
    );
    let plain = build(&base(), &owner(), &variant("plain", &[], 1));
    assert!(
        at(&plain, "/spec/template/spec/containers/1")
            .get("env")
            .is_none()
    );
}

// R4, R12
#[test]
fn build_is_deterministic_and_hashes_the_desired_state() {
    let v = variant("canary", &[("X", "1")], 1);
    let a = build(&base(), &owner(), &v);
    assert_eq!(a.to_string(), build(&base(), &owner(), &v).to_string());
    let hash = |d: &Value| d["metadata"]["annotations"][HASH_ANNOTATION].clone();
    assert_ne!(
        hash(&a),
        hash(&build(
            &base(),
            &owner(),
            &variant("canary", &[("X", "2")], 1)
        ))
    );
    assert_ne!(
        hash(&a),
        hash(&build(
            &base(),
            &owner(),
            &variant("canary", &[("X", "1")], 2)
        ))
    );
}

// R21
#[test]
fn scaling_changes_only_replicas_and_the_hash() {
    let mut one = build(&base(), &owner(), &variant("canary", &[("X", "1")], 1));
    let mut four = build(&base(), &owner(), &variant("canary", &[("X", "1")], 4));
    assert_eq!(one["spec"]["template"], four["spec"]["template"]);
    for d in [&mut one, &mut four] {
        d["spec"]["replicas"] = Value::Null;
        d["metadata"]["annotations"][HASH_ANNOTATION] = Value::Null;
    }
    assert_eq!(one, four);
}

// R4, R6
#[test]
fn same_name_owners_of_both_kinds_select_different_pods() {
    let md = Owner {
        kind: OwnerKind::MutantDeployment,
        ..owner()
    };
    let a = build(&base(), &owner(), &variant("canary", &[], 1));
    let b = build(&base(), &md, &variant("canary", &[], 1));
    assert_ne!(a["spec"]["selector"], b["spec"]["selector"]);
}

// R8, R9
#[test]
fn plan_keeps_order_and_reports_invalid_and_repeated_labels() {
    let vs = [
        variant("a", &[], 1),
        variant("Bad", &[], 1),
        variant("a", &[], 2),
        variant("b", &[], -1),
        variant("c", &[], 0),
    ];
    let p = plan(&base(), &owner(), &vs);
    let names: Vec<&str> = p.iter().map(Planned::name).collect();
    assert_eq!(names, ["web-a", "web-Bad", "web-a", "web-b", "web-c"]);
    assert!(matches!(&p[0], Planned::Apply { instances: 1, .. }));
    assert!(
        matches!(&p[1], Planned::Invalid { message, .. } if message.starts_with("label \"Bad\""))
    );
    let repeated = "label \"a\" repeats variant 1 of the list, which keeps it";
    assert!(matches!(&p[2], Planned::Conflict { message, .. } if message == repeated));
    assert!(matches!(&p[3], Planned::Invalid { message, .. } if message.contains("instances -1")));
    assert!(matches!(&p[4], Planned::Apply { object, .. } if object["spec"]["replicas"] == 0));
    if let Planned::Apply { object, .. } = &p[0] {
        assert_eq!(object, &build(&base(), &owner(), &vs[0]));
    }
}

// R9
#[test]
fn the_first_declaration_keeps_a_label_even_when_invalid() {
    let p = plan(
        &base(),
        &owner(),
        &[variant("a", &[], -1), variant("a", &[], 1)],
    );
    assert!(matches!(p[0], Planned::Invalid { .. }));
    assert!(matches!(p[1], Planned::Conflict { .. }));
}

// R8
#[test]
fn an_owner_name_too_long_for_a_label_invalidates_every_variant() {
    let long = Owner {
        name: "o".repeat(64),
        ..owner()
    };
    let p = plan(&base(), &long, &[variant("a", &[], 1)]);
    assert!(matches!(&p[0], Planned::Invalid { message, .. } if message.contains("at most 63")));
}

// R9
#[test]
fn an_existing_deployment_we_do_not_control_is_a_conflict() {
    let o = owner();
    let check = |meta: Option<&ObjectMeta>| {
        left_alone("Deployment", "web-a", meta.map(|m| m as &dyn MetaView), &o)
    };
    assert_eq!(check(None), None);
    let ours = meta(&[], Some(("Mutation", "snap", "uid-1")));
    assert_eq!(check(Some(&ours)), None);
    let theirs = meta(&[], Some(("MutantDeployment", "snap", "uid-2")));
    let message = check(Some(&theirs)).unwrap_or_default();
    assert_eq!(
        message,
        "Deployment \"web-a\" already exists and is controlled by MutantDeployment \"snap\"; \
         it is left alone"
    );
    let apply = plan(&base(), &o, &[variant("a", &[], 1)]).remove(0);
    assert_eq!(
        apply.into_conflict(message.clone()),
        Planned::Conflict {
            label: "a".into(),
            name: "web-a".into(),
            message,
        }
    );
    // An earlier owner of the same kind and name (deleted, its Deployments not yet collected).
    let earlier = meta(&[], Some(("Mutation", "snap", "uid-0")));
    assert!(
        check(Some(&earlier))
            .is_some_and(|m| m.contains("an earlier Mutation \"snap\" (uid uid-0)"))
    );
    let orphan = meta(&[], None);
    assert!(check(Some(&orphan)).is_some_and(|m| m.contains("has no controller")));
}

// R5, R12
#[test]
fn a_matching_deployment_needs_no_apply() {
    let mut b = base_json();
    // zero values the API server omits and a quantity it turns into a string
    b["spec"]["paused"] = json!(false);
    b["spec"]["template"]["spec"]["futureField"] = Value::Null;
    b["spec"]["template"]["spec"]["containers"][1]["args"] = json!([]);
    b["spec"]["template"]["spec"]["containers"][1]["resources"] = json!({"limits": {"cpu": 1}});
    let base = Base::parse(&b).unwrap_or_else(|e| panic!("{e}"));
    let desired = build(&base, &owner(), &variant("canary", &[("X", "1")], 1));
    let mut served = desired.clone();
    if let Some(spec) = served["spec"].as_object_mut() {
        spec.remove("paused");
    }
    let pod = &mut served["spec"]["template"]["spec"];
    if let Some(pod) = pod.as_object_mut() {
        pod.remove("futureField");
    }
    if let Some(c) = pod["containers"][1].as_object_mut() {
        c.remove("args");
    }
    pod["containers"][1]["resources"]["limits"]["cpu"] = json!("1");
    let obs = decode(served);
    assert_eq!(
        at(
            &obs.comparable(),
            "/spec/template/spec/containers/1/resources/limits/cpu"
        ),
        "1"
    );
    assert!(!needs_apply(&desired, Some(&obs)));
}

// R5, R12
#[test]
fn deletes_hand_edits_and_desired_changes_need_an_apply() {
    let desired = build(&base(), &owner(), &variant("canary", &[("X", "1")], 1));
    assert!(needs_apply(&desired, None));
    let mut scaled = desired.clone();
    scaled["spec"]["replicas"] = json!(5);
    assert!(needs_apply(&desired, Some(&decode(scaled))));
    let mut unlabelled = desired.clone();
    if let Some(labels) = unlabelled["metadata"]["labels"].as_object_mut() {
        labels.remove(VARIANT_LABEL);
    }
    assert!(needs_apply(&desired, Some(&decode(unlabelled))));
    let mut unannotated = desired.clone();
    if let Some(annotations) = unannotated["metadata"]["annotations"].as_object_mut() {
        annotations.remove(HASH_ANNOTATION);
    }
    assert!(needs_apply(&desired, Some(&decode(unannotated))));
    let mut env_added = desired.clone();
    if let Some(env) = env_added["spec"]["template"]["spec"]["containers"][0]["env"].as_array_mut()
    {
        env.push(json!({"name": "HAND", "value": "1"}));
    }
    assert!(needs_apply(&desired, Some(&observed(&env_added))));
    let mut image = desired.clone();
    image["spec"]["template"]["spec"]["containers"][1]["image"] = json!("elsewhere:1");
    assert!(needs_apply(&desired, Some(&decode(image))));
    // a desired state that only removes a field still differs, through the hash
    let mut b = base_json();
    b["metadata"]["annotations"] = json!({});
    let fewer = build(
        &Base::parse(&b).unwrap_or_else(|e| panic!("{e}")),
        &owner(),
        &variant("canary", &[("X", "1")], 1),
    );
    assert!(needs_apply(&fewer, Some(&observed(&desired))));
}

// R5, R11: what the cache keeps of a Deployment from the API server
#[test]
fn an_observed_deployment_keeps_what_reconcile_reads() {
    let desired = build(&base(), &owner(), &variant("canary", &[("X", "1")], 3));
    let mut served = desired.clone();
    served["metadata"]["managedFields"] =
        json!([{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]);
    served["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] =
        json!("{...}");
    let obs = decode(served);
    // annotations live in the compared text
    let kept = obs.metadata.to_json();
    assert!(!kept.contains_key("managedFields") && !kept.contains_key("annotations"));
    assert_eq!(obs.replicas, Some(3));
    assert_eq!(
        obs.status,
        Some(RolloutCounts {
            observed_generation: Some(1),
            replicas: Some(1),
            ..RolloutCounts::default()
        })
    );
    let comparable = obs.comparable();
    assert_eq!(
        at(&comparable, "/metadata/annotations"),
        at(&desired, "/metadata/annotations"),
        "last-applied dropped, the rest kept"
    );
    // the whole spec, with what the server added
    assert_eq!(
        at(&comparable, "/spec/template/spec/containers"),
        at(
            &observed(&desired).comparable(),
            "/spec/template/spec/containers"
        )
    );
    assert_eq!(
        at(&comparable, "/spec/template/spec/restartPolicy"),
        "Always"
    );
    assert_eq!(at(&comparable, "/spec/replicas"), 3);
    assert_eq!(at(&comparable, "/metadata/uid"), "d-uid");
    assert!(!needs_apply(&desired, Some(&obs)));
    // a Deployment without spec or status decodes, and is applied over
    let bare: ObservedDeployment =
        serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap_or_default();
    assert_eq!((bare.replicas, bare.status.clone()), (None, None));
    assert!(needs_apply(&desired, Some(&bare)));
}

/// The operator's `Update` entry of a Deployment it created with a POST is noted, and only
/// that entry: status entries, other managers and its own `Apply` entry are not it.
#[test]
fn created_entry_is_the_operators_update_entry() {
    let entry = |manager: &str, operation: &str, subresource: Option<&str>| {
        let mut e = json!({
            "manager": manager, "operation": operation, "apiVersion": "apps/v1",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}},
        });
        if let Some(s) = subresource {
            e["subresource"] = json!(s);
        }
        e
    };
    let decode_with = |entries: Vec<Value>| -> Option<CreatedEntry> {
        let d: ObservedDeployment =
            serde_json::from_value(json!({"metadata": {"name": "x", "managedFields": entries}}))
                .unwrap_or_default();
        d.created_entry
    };
    let status = entry(FIELD_MANAGER, "Update", Some("status"));
    let created = entry(FIELD_MANAGER, "Update", None);
    let applied = entry(FIELD_MANAGER, "Apply", None);
    let kcm = entry("kube-controller-manager", "Update", Some("status"));
    let kubectl = entry("kubectl-edit", "Update", None);

    assert_eq!(decode_with(vec![]), None);
    assert_eq!(decode_with(vec![applied.clone(), kcm.clone()]), None);
    assert_eq!(decode_with(vec![kubectl.clone(), status]), None);
    assert_eq!(
        decode_with(vec![kcm.clone(), created.clone()]),
        Some(CreatedEntry {
            index: 1,
            applied_too: false
        })
    );
    assert_eq!(
        decode_with(vec![created, kubectl, applied]),
        Some(CreatedEntry {
            index: 0,
            applied_too: true
        })
    );
    let null: ObservedDeployment =
        serde_json::from_value(json!({"metadata": {"name": "x", "managedFields": null}}))
            .unwrap_or_default();
    assert_eq!(null.metadata.name(), Some("x"));
}

/// The hand-over patch is guarded by the resourceVersion and the entry, and turns the entry
/// into the `Apply` one, or drops it when an `Apply` entry exists already.
#[test]
fn handover_patch_is_guarded() {
    let only = CreatedEntry {
        index: 2,
        applied_too: false,
    };
    assert_eq!(
        only.handover_patch("41"),
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "41"},
            {"op": "test", "path": "/metadata/managedFields/2/manager", "value": FIELD_MANAGER},
            {"op": "test", "path": "/metadata/managedFields/2/operation", "value": "Update"},
            {"op": "replace", "path": "/metadata/managedFields/2/operation", "value": "Apply"},
        ])
    );
    let both = CreatedEntry {
        index: 0,
        applied_too: true,
    };
    assert_eq!(
        both.handover_patch("7")[3],
        json!({"op": "remove", "path": "/metadata/managedFields/0"})
    );
}

// R43: of a Deployment's conditions only whether its rollout passed its progress
// deadline is kept
#[test]
fn an_observed_deployment_says_whether_its_rollout_stalled() {
    let desired = build(&base(), &owner(), &variant("canary", &[], 1));
    let with = |conditions: serde_json::Value| {
        let mut served = desired.clone();
        served["status"] = json!({"observedGeneration": 2, "conditions": conditions});
        let observed: Result<ObservedDeployment, _> = serde_json::from_value(served);
        let status = observed.map_err(|e| e.to_string())?.status;
        status
            .map(|s| s.stalled)
            .ok_or_else(|| "no status".to_owned())
    };
    let progressing = |status: &str, reason: &str| {
        json!([
            {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"},
            {"type": "Progressing", "status": status, "reason": reason, "message": "..."},
        ])
    };
    assert_eq!(
        with(progressing("False", "ProgressDeadlineExceeded")),
        Ok(true)
    );
    assert_eq!(with(progressing("True", "ReplicaSetUpdated")), Ok(false));
    assert_eq!(with(json!([])), Ok(false));
    assert_eq!(with(json!(null)), Ok(false));
}
