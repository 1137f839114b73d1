//! Tests of the reconcile's pure decisions: resolve (R5, R9), stale (R6), the statuses held
//! while the base is invalid (R10) and the owner's status (R3, R11, R12).

use std::collections::BTreeSet;

use serde_json::json;

use super::*;
use crate::crd::{OwnerStatus, VariantState};

/// A Deployment of this test's owner for variant `label`, as the cache holds it.
fn ours(label: &str, replicas: i32) -> ObservedDeployment {
    let desired = build(&base(), &owner(), &variant(label, &[], replicas));
    decode(desired)
}

// R5, R9
#[test]
fn resolve_writes_what_differs_and_creates_or_looks_up_what_the_cache_cannot_tell() {
    let o = owner();
    let planned = plan(&base(), &o, &[variant("a", &[], 1)]);
    let p = &planned[0];
    // not in the cache: create (a 409 then looks it up); the server has none: write
    assert_eq!(resolve(p, None, &o, false), Step::Create);
    assert_eq!(resolve(p, None, &o, true), Step::Write);
    // ours and as declared: nothing to do, from the cache or the server
    let same = ours("a", 1);
    assert_eq!(resolve(p, Some(&same), &o, false), Step::Keep);
    assert_eq!(resolve(p, Some(&same), &o, true), Step::Keep);
    // ours, scaled by hand: write it back
    let scaled = ours("a", 4);
    assert_eq!(resolve(p, Some(&scaled), &o, false), Step::Write);
    // in the cache but not controlled by this owner (same name, other uid): look it up
    let mut theirs = ours("a", 1);
    theirs.metadata.owner_references = None;
    assert_eq!(resolve(p, Some(&theirs), &o, false), Step::LookUp);
    // the server says it is someone else's: a Conflict, never written
    let conflict = p.clone().into_conflict("someone else's".into());
    assert_eq!(resolve(&conflict, Some(&theirs), &o, true), Step::Keep);
    // an invalid variant is never written
    let invalid = &plan(&base(), &o, &[variant("Bad", &[], 1)])[0];
    assert_eq!(resolve(invalid, None, &o, false), Step::Keep);
}

// R6
#[test]
fn stale_is_what_this_owner_controls_and_no_longer_declares() {
    let o = owner();
    let (a, b) = (ours("a", 1), ours("b", 1));
    let mut foreign = ours("c", 1);
    foreign.metadata.owner_references = None;
    let declared = BTreeSet::from(["web-a".to_string()]);
    assert_eq!(
        stale([&a, &b, &foreign], &o, &declared),
        vec![Stale {
            name: "web-b".to_string(),
            uid: Some("d-uid".to_string())
        }]
    );
    let all = BTreeSet::from(["web-a".to_string(), "web-b".to_string()]);
    assert!(stale([&a, &b], &o, &all).is_empty());
}

// R10
#[test]
fn while_the_base_is_invalid_variants_are_held_with_their_running_replicas() {
    let o = owner();
    let mut running = ours("a", 3);
    running.status = Some(RolloutCounts {
        observed_generation: Some(1),
        ready_replicas: Some(2),
        ..RolloutCounts::default()
    });
    let held = held_statuses(
        &[variant("a", &[], 3), variant("b", &[], 1)],
        &o,
        Some("web"),
        [&running],
        "deployment.kind: must be \"Deployment\"",
    );
    assert_eq!(held.len(), 2);
    assert!(held.iter().all(|s| s.state == VariantState::Invalid));
    assert_eq!(
        (
            held[0].deployment.as_str(),
            held[0].replicas,
            held[0].ready_replicas
        ),
        ("web-a", 3, 2)
    );
    assert_eq!(
        (
            held[1].deployment.as_str(),
            held[1].replicas,
            held[1].ready_replicas
        ),
        ("web-b", 0, 0)
    );
    assert!(
        held[1].message.as_deref().is_some_and(
            |m| m.starts_with("not applied while the base is invalid: deployment.kind")
        )
    );
    // no base name to derive from: the name is left empty
    let nameless = held_statuses(&[variant("b", &[], 1)], &o, None, [&running], "x");
    assert_eq!(nameless[0].deployment, "");
}

// R3, R11, R12
#[test]
fn the_owner_status_joins_problems_and_keeps_an_unchanged_condition() {
    let variants = vec![crate::crd::fixtures::variant_status(
        "a",
        VariantState::Ready,
        1,
    )];
    let first = owner_status(Findings {
        generation: Some(2),
        secret: Some("snap-secret".into()),
        ..findings(&OwnerStatus::default(), variants.clone())
    });
    assert_eq!(first.summary, "1/1 variants ready");
    assert_eq!(first.message, None);
    assert_eq!(first.variant_labels, "a");
    assert_eq!(first.observed_generation, Some(2));
    assert_eq!(first.conditions[0].last_transition_time, "t1");
    // the same findings later: an equal status, so nothing is written (R12)
    let again = owner_status(Findings {
        generation: Some(2),
        secret: Some("snap-secret".into()),
        now: "t2",
        ..findings(&first, variants)
    });
    assert_eq!(again, first);
    // the invalid base first, then the other problems
    let broken = owner_status(Findings {
        generation: Some(3),
        base_error: Some("no spec"),
        problems: vec!["Secret \"snap-secret\" exists".into()],
        now: "t3",
        ..findings(&first, Vec::new())
    });
    assert_eq!(
        broken.message.as_deref(),
        Some("invalid base deployment: no spec; Secret \"snap-secret\" exists")
    );
    assert_eq!(
        serde_json::to_value(&broken.conditions[0]).unwrap_or_default()["reason"],
        json!("InvalidBase")
    );
    assert_eq!(broken.conditions[0].last_transition_time, "t3");
    // no message and no variants: both fields are left out (kubectl shows <none>)
    let fields = serde_json::to_value(&broken).unwrap_or_default();
    assert!(fields.get("variantLabels").is_none(), "{fields}");
    assert!(fields.get("message").is_some(), "{fields}");
    let quiet = serde_json::to_value(&again).unwrap_or_default();
    assert!(quiet.get("message").is_none(), "{quiet}");
}

// R3: the VARIANTS column lists every declared variant, in spec order, invalid ones too
#[test]
fn the_owner_status_lists_the_declared_labels() {
    let variants = vec![
        crate::crd::fixtures::variant_status("b", VariantState::Ready, 1),
        crate::crd::fixtures::variant_status("Bad", VariantState::Invalid, 0),
        crate::crd::fixtures::variant_status("a", VariantState::Conflict, 0),
    ];
    let status = owner_status(findings(&OwnerStatus::default(), variants));
    assert_eq!(status.variant_labels, "b,Bad,a");
    assert_eq!(
        serde_json::to_value(&status).unwrap_or_default()["variantLabels"],
        json!("b,Bad,a")
    );
}

// R8: an owner whose name cannot be a label value is reported, with a False
// Ready condition even without variants, instead of failing to reconcile.
#[test]
fn an_unservable_name_is_reported_and_never_ready() {
    let name = "m".repeat(70);
    let problem = unservable_name("Mutation", &name).unwrap_or_default();
    assert!(
        problem.contains("70 characters") && problem.contains("at most 63"),
        "{problem}"
    );
    assert_eq!(unservable_name("Mutation", &"m".repeat(63)), None);
    let status = owner_status(Findings {
        unservable: Some(&problem),
        ..findings(&OwnerStatus::default(), Vec::new())
    });
    assert_eq!(status.message.as_deref(), Some(problem.as_str()));
    let condition = &status.conditions[0];
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", "InvalidName")
    );
}
