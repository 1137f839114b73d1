//! Tests of what the operator refuses to make and why (R33): the review of an owner's
//! Deployments, the namespace's opt-in, the message, and how the variants and the status
//! report it.

use serde_json::{Value, json};

use super::*;
use crate::crd::{OwnerStatus, VariantState};

/// The fixture base with `pod` merged into its pod spec.
fn base_with(pod: Value) -> Base {
    let mut value = base_json();
    if let (Some(spec), Value::Object(pod)) = (
        value
            .pointer_mut("/spec/template/spec")
            .and_then(Value::as_object_mut),
        pod,
    ) {
        spec.extend(pod);
    }
    match Base::parse(&value) {
        Ok(b) => b,
        Err(e) => panic!("base should parse: {e}"),
    }
}

fn privileged_base() -> Base {
    base_with(json!({
        "hostPID": true,
        "volumes": [{ "name": "root", "hostPath": { "path": "/" } }]
    }))
}

fn own() -> ServiceAccountRef {
    ServiceAccountRef {
        namespace: "team".into(),
        name: "mutantops".into(),
    }
}

/// What the operator knows of itself in these tests: its ServiceAccount [`own`], and its
/// Secrets in namespace `team`.
fn known() -> PodSecurity {
    PodSecurity {
        own_account: Some(own()),
        own_secrets: Some(OwnSecrets::new("team", ["regcred".to_owned()])),
        server: None,
    }
}

/// A namespace read with `level` and `version` as its Pod Security labels.
fn read(level: Option<&str>, version: Option<&str>) -> NamespaceLabel {
    NamespaceLabel::Read {
        level: level.map(str::to_owned),
        version: version.map(str::to_owned),
    }
}

/// The review of the Deployments of `variants` of `base`, in the fixture owner's namespace.
fn review(base: &Base, variants: &[crate::crd::Variant]) -> Review {
    let planned = plan(base, &owner(), variants);
    let objects = planned.iter().filter_map(|p| match p {
        Planned::Apply { object, .. } => Some(object),
        _ => None,
    });
    Review::of(objects, "team", &known(), Policy::At(Version(34)))
}

#[test]
fn a_clean_base_needs_no_namespace_and_is_allowed() {
    let r = review(&base(), &[variant("a", &[], 1), variant("b", &[], 1)]);
    assert_eq!((r.baseline.len(), r.own_account.as_ref()), (0, None));
    assert!(!r.needs_namespace());
    assert_eq!(r.refusal("team", None), None);
}

#[test]
fn findings_shared_by_every_variant_are_listed_once() {
    let r = review(
        &privileged_base(),
        &[variant("a", &[], 1), variant("b", &[("X", "1")], 2)],
    );
    let fields: Vec<&str> = r.baseline.iter().map(|f| f.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "deployment.spec.template.spec.hostPID",
            "deployment.spec.template.spec.volumes[root].hostPath"
        ]
    );
    assert!(r.needs_namespace());
}

#[test]
fn baseline_findings_are_refused_unless_the_namespace_is_labelled_privileged() {
    let r = review(&privileged_base(), &[variant("a", &[], 1)]);
    let privileged = read(Some(PRIVILEGED), None);
    assert_eq!(r.refusal("team", Some(&privileged)), None);
    for (label, says) in [
        (
            read(None, None),
            "namespace \"team\" has no pod-security.kubernetes.io/enforce label",
        ),
        (
            read(Some("baseline"), None),
            "namespace \"team\" is labelled pod-security.kubernetes.io/enforce=\"baseline\"",
        ),
        (
            NamespaceLabel::Unreadable("the API server answered 403".into()),
            "could not read namespace \"team\" (the API server answered 403), so it counts as \
             not labelled",
        ),
    ] {
        let message = r.refusal("team", Some(&label)).unwrap_or_default();
        assert!(
            message.starts_with(
                "the pod template breaks Pod Security \"baseline:v1.34\": \
                 deployment.spec.template.spec.hostPID: true; baseline allows false or unset; \
                 deployment.spec.template.spec.volumes[root].hostPath: a hostPath volume"
            ),
            "{message}"
        );
        assert!(
            message.contains(
                "only in a namespace labelled pod-security.kubernetes.io/enforce=privileged"
            ),
            "{message}"
        );
        assert!(message.contains(says), "{message}");
    }
}

#[test]
fn a_long_list_of_findings_is_cut() {
    let volumes: Vec<Value> = (0..12)
        .map(|i| json!({ "name": format!("h{i}"), "hostPath": { "path": "/" } }))
        .collect();
    let r = review(
        &base_with(json!({ "volumes": volumes })),
        &[variant("a", &[], 1)],
    );
    assert_eq!(r.baseline.len(), 12);
    let message = r.refusal("team", None).unwrap_or_default();
    assert!(message.contains("volumes[h4]") && !message.contains("volumes[h5]"));
    assert!(message.contains("and 7 more"), "{message}");
}

#[test]
fn the_operators_own_account_is_refused_even_in_a_privileged_namespace() {
    let named = base_with(json!({ "serviceAccountName": "mutantops", "hostIPC": true }));
    let r = review(&named, &[variant("a", &[], 1)]);
    assert!(!r.needs_namespace(), "no label changes the answer");
    let privileged = read(Some(PRIVILEGED), None);
    let message = r.refusal("team", Some(&privileged)).unwrap_or_default();
    assert!(
        message.starts_with(
            "deployment.spec.template.spec.serviceAccountName: \"mutantops\" is the operator's \
             own ServiceAccount"
        ),
        "{message}"
    );
    assert!(message.ends_with("refused in every namespace"), "{message}");
    // Unknown (outside a cluster): not checked.
    let objects = [build(&named, &owner(), &variant("a", &[], 1))];
    let policy = Policy::At(Version(34));
    let unknown = PodSecurity::default();
    assert_eq!(
        Review::of(&objects, "team", &unknown, policy).own_account,
        None
    );
}

#[test]
fn held_back_variants_are_invalid_with_the_reason_and_others_keep_theirs() {
    let variants = [
        variant("a", &[], 1),
        variant("Bad", &[], 1),
        variant("a", &[], 1),
    ];
    let planned = plan(&privileged_base(), &owner(), &variants);
    let held = hold_back(planned, "the reason");
    let states: Vec<(VariantState, Option<String>)> = held
        .iter()
        .map(|p| {
            let s = p.status(None);
            (s.state, s.message)
        })
        .collect();
    assert_eq!(states[0].0, VariantState::Invalid);
    assert_eq!(states[0].1.as_deref(), Some("not applied: the reason"));
    assert!(
        states[1]
            .1
            .as_deref()
            .is_some_and(|m| m.starts_with("label \"Bad\""))
    );
    assert_eq!(states[2].0, VariantState::Conflict);
    assert_eq!(held[0].name(), "web-a");
}

#[test]
fn the_status_says_the_base_is_not_allowed_here() {
    let planned = hold_back(
        plan(&privileged_base(), &owner(), &[variant("a", &[], 1)]),
        "why",
    );
    let status = owner_status(Findings {
        not_allowed: Some("why"),
        ..findings(
            &OwnerStatus::default(),
            planned.iter().map(|p| p.status(None)).collect(),
        )
    });
    assert_eq!(
        status.message.as_deref(),
        Some("base deployment not allowed here: why")
    );
    let ready = &status.conditions[0];
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", BASE_NOT_ALLOWED)
    );
    assert!(ready.message.ends_with(": why"), "{ready:?}");
    assert_eq!(status.summary, "0/1 variants ready");
}
