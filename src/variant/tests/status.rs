//! Tests of variant state, summary and the Ready condition (R3, R11, R12).

use super::*;
use crate::crd::{VariantState, VariantStatus};

fn dep(generation: i64, spec: i32, status: Option<(i64, i32, i32, i32)>) -> ObservedDeployment {
    let mut d = ObservedDeployment::default();
    d.metadata = Meta {
        generation: Some(generation),
        ..Meta::default()
    };
    d.replicas = Some(spec);
    d.status = status.map(|(observed, replicas, updated, ready)| RolloutCounts {
        observed_generation: Some(observed),
        replicas: Some(replicas).filter(|r| *r != 0),
        updated_replicas: Some(updated).filter(|r| *r != 0),
        ready_replicas: Some(ready).filter(|r| *r != 0),
        stalled: false,
    });
    d
}

// R11
#[test]
fn variant_state_is_ready_only_when_observed_and_all_replicas_match() {
    use VariantState::{Progressing, Ready};
    assert_eq!(variant_state(2, None), (Progressing, 2, 0));
    assert_eq!(
        variant_state(2, Some(&dep(2, 2, Some((2, 2, 2, 2))))),
        (Ready, 2, 2)
    );
    assert_eq!(
        variant_state(2, Some(&dep(3, 2, Some((2, 2, 2, 2))))),
        (Progressing, 2, 2)
    );
    assert_eq!(
        variant_state(2, Some(&dep(2, 2, None))),
        (Progressing, 2, 0)
    );
    assert_eq!(
        variant_state(2, Some(&dep(2, 2, Some((2, 2, 2, 1))))),
        (Progressing, 2, 1)
    );
    assert_eq!(
        variant_state(2, Some(&dep(2, 2, Some((2, 3, 2, 2))))),
        (Progressing, 2, 2)
    );
    assert_eq!(
        variant_state(2, Some(&dep(2, 2, Some((2, 2, 1, 2))))),
        (Progressing, 2, 2)
    );
    assert_eq!(
        variant_state(3, Some(&dep(2, 2, Some((2, 2, 2, 2))))),
        (Progressing, 2, 2)
    );
    // 0 instances: ready at 0 once observed, with the counts absent from status
    assert_eq!(
        variant_state(0, Some(&dep(4, 0, Some((4, 0, 0, 0))))),
        (Ready, 0, 0)
    );
    assert_eq!(
        variant_state(0, Some(&dep(4, 0, Some((3, 0, 0, 0))))),
        (Progressing, 0, 0)
    );
}

fn vs(label: &str, state: VariantState) -> VariantStatus {
    crate::crd::fixtures::variant_status(label, state, 1)
}

// R11
#[test]
fn planned_status_lines() {
    let p = plan(
        &base(),
        &owner(),
        &[variant("a", &[], 2), variant("a", &[], 1)],
    );
    let ready = dep(1, 2, Some((1, 2, 2, 2)));
    assert_eq!(
        p[0].status(Some(&ready)),
        VariantStatus {
            replicas: 2,
            ready_replicas: 2,
            ..vs("a", VariantState::Ready)
        }
    );
    let c = p[1].status(Some(&ready));
    assert_eq!(
        (c.state, c.replicas, c.ready_replicas),
        (VariantState::Conflict, 0, 0)
    );
    assert!(c.message.is_some_and(|m| m.contains("repeats")));
}

// R3, R11
#[test]
fn summary_counts_every_declared_variant() {
    use VariantState::*;
    assert_eq!(summary(&[]), "0/0 variants ready");
    let s = [
        vs("a", Ready),
        vs("b", Progressing),
        vs("c", Invalid),
        vs("d", Conflict),
    ];
    assert_eq!(summary(&s), "1/4 variants ready");
}

// R11
#[test]
fn ready_condition_reasons() {
    use VariantState::*;
    let all = ready_condition(&[vs("a", Ready), vs("b", Ready)], None, Some(7), None, "t1");
    assert_eq!(
        (all.type_.as_str(), all.status.as_str(), all.reason.as_str()),
        ("Ready", "True", "AllVariantsReady")
    );
    assert_eq!(all.message, "2/2 variants ready");
    assert_eq!(
        (all.last_transition_time.as_str(), all.observed_generation),
        ("t1", Some(7))
    );
    assert_eq!(ready_condition(&[], None, None, None, "t1").status, "True");
    // R11: the condition agrees with the summary; a variant that is not applied (Invalid,
    // or in Conflict, e.g. with the Deployment of a deleted owner of the same name still
    // there) is not Ready, so neither is the owner.
    let c = ready_condition(
        &[vs("a", Ready), vs("b", Invalid)],
        None,
        Some(7),
        None,
        "t1",
    );
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "VariantsNotApplied")
    );
    // R35: it names the variants that are not applied.
    assert_eq!(c.message, "1/2 variants ready (1 invalid: b)");
    let none = ready_condition(&[vs("a", Conflict)], None, None, None, "t1");
    assert_eq!(
        (none.status.as_str(), none.message.as_str()),
        ("False", "0/1 variants ready (1 in conflict: a)")
    );
    let labels = ["a", "b", "c", "d", "e", "f", "g"];
    let mut many: Vec<VariantStatus> = labels.iter().map(|l| vs(l, Invalid)).collect();
    many.push(vs("h", Conflict));
    many.push(vs("i", Ready));
    let many = ready_condition(&many, None, None, None, "t1");
    assert_eq!(
        many.message,
        "1/9 variants ready (7 invalid: a, b, c, d, e, ...; 1 in conflict: h)"
    );
    let p = ready_condition(
        &[vs("a", Ready), vs("b", Progressing)],
        None,
        None,
        None,
        "t1",
    );
    assert_eq!(
        (p.status.as_str(), p.reason.as_str()),
        ("False", "VariantsProgressing")
    );
    assert_eq!(p.message, "1/2 variants ready");
    let b = ready_condition(
        &[vs("a", Ready)],
        Some("deployment.spec: required"),
        None,
        None,
        "t1",
    );
    assert_eq!(
        (b.status.as_str(), b.reason.as_str(), b.message.as_str()),
        ("False", "InvalidBase", "deployment.spec: required")
    );
}

// R11, R12
#[test]
fn ready_condition_keeps_its_transition_time_while_unchanged() {
    use VariantState::*;
    let first = ready_condition(&[vs("a", Progressing)], None, Some(1), None, "t1");
    let again = ready_condition(&[vs("a", Progressing)], None, Some(1), Some(&first), "t2");
    assert_eq!(
        serde_json::to_string(&again).ok(),
        serde_json::to_string(&first).ok()
    );
    let ready = ready_condition(&[vs("a", Ready)], None, Some(1), Some(&again), "t3");
    assert_eq!(ready.last_transition_time, "t3");
    let invalid = ready_condition(&[vs("a", Ready)], Some("bad"), Some(2), Some(&first), "t4");
    assert_eq!(invalid.last_transition_time, "t1");
}
