//! Tests of step 4's step machine (R5, R9, R10, R12, R35, R36): every transition, for a
//! Deployment and for a Service, without I/O, as the lease's decisions are tested.

use kube::core::Status;
use serde_json::{Value, json};

use super::service::{as_served, built, http, node_port_spec, snap_base};
use super::*;
use crate::variant::converge::{
    self as machine, DeploymentSubject, Done, Next, Outcome, ServiceSubject, answered,
};

/// The one variant of these tests, planned.
fn planned() -> Planned {
    plan(&base(), &owner(), &[variant("canary", &[("MODE", "x")], 2)])
        .pop()
        .unwrap_or_else(|| panic!("one variant planned"))
}

/// A cached Deployment: what `planned` declares, changed by `edit`.
fn cached(edit: impl FnOnce(&mut Value)) -> ObservedDeployment {
    let Planned::Apply { object, .. } = planned() else {
        panic!("the variant is valid")
    };
    let mut object = object;
    edit(&mut object);
    serde_json::from_value(object).unwrap_or_else(|e| panic!("{e}"))
}

/// The Deployment subject of `planned` and `current`.
fn deployment<'a>(
    planned: &'a Planned,
    current: Option<&'a ObservedDeployment>,
    owner: &'a Owner,
) -> DeploymentSubject<'a> {
    DeploymentSubject {
        planned,
        current,
        owner,
    }
}

/// Someone else's Deployment of the variant's name: no owner reference.
fn foreign(d: &mut Value) {
    d["metadata"]["ownerReferences"] = Value::Null;
}

/// Created by the operator's POST, not applied since: its `Update` entry.
fn posted(d: &mut Value) {
    d["metadata"]["managedFields"] = json!([{"manager": FIELD_MANAGER, "operation": "Update"}]);
}

fn probe(message: &str) -> Next {
    Next::ProbeBase {
        message: message.to_string(),
    }
}

fn refused(message: &str, denied: bool) -> Next {
    Next::Done(Done::Refused {
        message: message.to_string(),
        denied,
    })
}

// R5, R9, R12, R36: the first step follows what the cache holds.
#[test]
fn the_first_step_follows_the_cache() {
    let (p, o) = (planned(), owner());
    assert_eq!(machine::start(&deployment(&p, None, &o)), Next::Create);
    let same = cached(|_| {});
    assert_eq!(
        machine::start(&deployment(&p, Some(&same), &o)),
        Next::Done(Done::Reported),
        "as declared: nothing to write"
    );
    let changed = cached(|d| d["spec"]["replicas"] = 5.into());
    assert_eq!(
        machine::start(&deployment(&p, Some(&changed), &o)),
        Next::Apply
    );
    let created = cached(|d| {
        d["spec"]["replicas"] = 5.into();
        posted(d);
    });
    assert_eq!(
        machine::start(&deployment(&p, Some(&created), &o)),
        Next::HandOver,
        "a POST's fields are handed over before the first apply"
    );
    let other = cached(foreign);
    assert_eq!(
        machine::start(&deployment(&p, Some(&other), &o)),
        Next::LookUp,
        "someone else's, or ours cached before we took it: ask the server"
    );
    let invalid = p.into_invalid("no".into());
    assert_eq!(
        machine::start(&deployment(&invalid, None, &o)),
        Next::Done(Done::Reported)
    );
}

// R9: a create that finds the name taken looks the Deployment up, then resolves with what the
// server holds: ours (applied if it differs) or someone else's (a Conflict, left alone).
#[test]
fn a_taken_name_is_looked_up_and_resolved_with_the_servers_answer() {
    let (p, o) = (planned(), owner());
    let none = deployment(&p, None, &o);
    assert_eq!(
        machine::next(&Next::Create, Outcome::Created, &none),
        Next::Done(Done::Reported)
    );
    assert_eq!(
        machine::next(&Next::Create, Outcome::NameTaken, &none),
        Next::LookUp
    );
    let ours = cached(|d| d["spec"]["replicas"] = 5.into());
    let found = deployment(&p, Some(&ours), &o);
    assert_eq!(
        machine::next(&Next::LookUp, Outcome::LookedUp, &found),
        Next::Apply
    );
    let posted_ours = cached(|d| {
        d["spec"]["replicas"] = 5.into();
        posted(d);
    });
    let found = deployment(&p, Some(&posted_ours), &o);
    assert_eq!(
        machine::next(&Next::LookUp, Outcome::LookedUp, &found),
        Next::HandOver
    );
    let same = cached(|_| {});
    assert_eq!(
        machine::next(
            &Next::LookUp,
            Outcome::LookedUp,
            &deployment(&p, Some(&same), &o)
        ),
        Next::Done(Done::Reported)
    );
    let other = cached(foreign);
    let Next::Done(Done::Conflict(message)) = machine::next(
        &Next::LookUp,
        Outcome::LookedUp,
        &deployment(&p, Some(&other), &o),
    ) else {
        panic!("someone else's Deployment is never written")
    };
    assert!(message.contains("Deployment"), "{message}");
    // Gone again by the time it was looked up: created by the apply.
    assert_eq!(
        machine::next(&Next::LookUp, Outcome::LookedUp, &none),
        Next::Apply
    );
    assert_eq!(
        machine::next(&Next::HandOver, Outcome::HandedOver, &found),
        Next::Apply
    );
    assert_eq!(
        machine::next(&Next::Apply, Outcome::Applied, &none),
        Next::Done(Done::Reported)
    );
}

// R10, R35: a malformed Deployment asks whether the base alone is refused too; a policy's
// refusal is the variant's alone, of a create, a hand-over or an apply.
#[test]
fn refusals_are_the_variants_or_the_bases() {
    let (p, o) = (planned(), owner());
    let subject = deployment(&p, None, &o);
    for last in [Next::Create, Next::Apply] {
        let malformed = Outcome::Refused(Refusal::Malformed, "bad field".into());
        assert_eq!(
            machine::next(&last, malformed, &subject),
            probe("bad field")
        );
    }
    for last in [Next::Create, Next::HandOver, Next::Apply] {
        let denied = Outcome::Refused(Refusal::Denied, "quota".into());
        assert_eq!(
            machine::next(&last, denied, &subject),
            refused("quota", true)
        );
    }
    let asked = probe("bad field");
    assert_eq!(
        machine::next(
            &asked,
            Outcome::BaseProbed(Some("base bad".into())),
            &subject
        ),
        Next::Done(Done::BaseRejected("base bad".into()))
    );
    assert_eq!(
        machine::next(&asked, Outcome::BaseProbed(None), &subject),
        refused("bad field", false),
        "the base alone passes: the variant's own fields are at fault"
    );
}

// R10: an apply answered 500 naming nothing is dry-run as a create, which names the field;
// a dry run that passes leaves the 500 the server's; a POST's 5xx is never dry-run.
#[test]
fn a_server_error_of_an_apply_is_dry_run() {
    let (p, o) = (planned(), owner());
    let subject = deployment(&p, None, &o);
    assert_eq!(
        machine::next(&Next::Apply, Outcome::ServerError, &subject),
        Next::DryRun
    );
    assert_eq!(
        machine::next(
            &Next::DryRun,
            Outcome::DryRun(Some("spec.x".into())),
            &subject
        ),
        probe("spec.x")
    );
    for (last, outcome) in [
        (Next::DryRun, Outcome::DryRun(None)),
        (Next::Create, Outcome::ServerError),
        (Next::HandOver, Outcome::ServerError),
        (Next::LookUp, Outcome::ServerError),
    ] {
        assert_eq!(
            machine::next(&last, outcome.clone(), &subject),
            Next::Done(Done::Failed),
            "{last:?} then {outcome:?}"
        );
    }
}

// A failure ends the variant's steps (the reconcile fails and is retried), and so does an
// outcome that does not answer the last step.
#[test]
fn failures_and_stray_outcomes_end_in_failure() {
    let (p, o) = (planned(), owner());
    let subject = deployment(&p, None, &o);
    let every = [
        Next::Create,
        Next::LookUp,
        Next::HandOver,
        Next::Apply,
        Next::DryRun,
        probe("m"),
    ];
    for last in &every {
        assert_eq!(
            machine::next(last, Outcome::Failed, &subject),
            Next::Done(Done::Failed)
        );
    }
    for (last, outcome) in [
        (Next::Apply, Outcome::Created),
        (Next::LookUp, Outcome::Applied),
        (Next::Create, Outcome::HandedOver),
        (Next::HandOver, Outcome::NameTaken),
        (Next::Apply, Outcome::BaseProbed(None)),
    ] {
        assert_eq!(
            machine::next(&last, outcome.clone(), &subject),
            Next::Done(Done::Failed),
            "{last:?} then {outcome:?}"
        );
    }
}

fn status(code: u16, reason: &str, causes: Value) -> Status {
    serde_json::from_value(json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "said\nby the server", "reason": reason, "code": code,
        "details": {"name": "web-canary", "causes": causes},
    }))
    .unwrap_or_else(|e| panic!("a Status: {e}"))
}

// R9, R10, R35: an error answer comes to an outcome by its code and details, as the request
// it answers: only a create's 409 AlreadyExists is a taken name, a hand-over's 422 (its
// resourceVersion test failed) is a retry, never the variant's Invalid.
#[test]
fn error_answers_come_to_outcomes_by_request() {
    let exists = status(409, "AlreadyExists", json!([]));
    assert_eq!(answered(&Next::Create, &exists), Outcome::NameTaken);
    assert_eq!(answered(&Next::Apply, &exists), Outcome::Failed);
    let conflict = status(409, "Conflict", json!([]));
    assert_eq!(answered(&Next::Create, &conflict), Outcome::Failed);
    let field = status(
        422,
        "Invalid",
        json!([{"field": "spec.replicas", "message": "m"}]),
    );
    assert_eq!(
        answered(&Next::Apply, &field),
        Outcome::Refused(Refusal::Malformed, "said by the server".into())
    );
    assert_eq!(answered(&Next::HandOver, &field), Outcome::Failed);
    let policy = status(403, "Forbidden", json!([]));
    assert_eq!(
        answered(&Next::HandOver, &policy),
        Outcome::Refused(Refusal::Denied, "said by the server".into())
    );
    let internal = status(500, "InternalError", json!([]));
    assert_eq!(answered(&Next::Apply, &internal), Outcome::ServerError);
    let throttled = status(429, "TooManyRequests", json!([]));
    assert_eq!(answered(&Next::Apply, &throttled), Outcome::Failed);
}

// R36: a Service goes through the same machine: created, handed over, applied, left alone
// when someone else's; its refusal is its own, with no question of the base.
#[test]
fn a_service_takes_the_same_steps_without_the_bases_probe() {
    let (base, o) = (snap_base("web", http()), owner());
    let spec = node_port_spec();
    let desired = built(&base, "a", &spec);
    let service = |current| ServiceSubject {
        name: "web-a",
        desired: &desired,
        current,
        owner: &o,
    };
    assert_eq!(machine::start(&service(None)), Next::Create);
    let served = as_served(&desired);
    assert_eq!(
        machine::start(&service(Some(&served))),
        Next::Done(Done::Reported)
    );
    let mut v = desired.clone();
    v["spec"]["type"] = json!("LoadBalancer");
    posted(&mut v);
    let created = as_served(&v);
    assert_eq!(machine::start(&service(Some(&created))), Next::HandOver);
    let mut lookalike = served.clone();
    lookalike.metadata.owner_references = None;
    let subject = service(Some(&lookalike));
    assert_eq!(machine::start(&subject), Next::LookUp);
    let Next::Done(Done::Conflict(message)) =
        machine::next(&Next::LookUp, Outcome::LookedUp, &subject)
    else {
        panic!("someone else's Service is never written")
    };
    assert!(message.contains("Service \"web-a\""), "{message}");
    for last in [Next::Create, Next::Apply] {
        let malformed = Outcome::Refused(Refusal::Malformed, "bad port".into());
        assert_eq!(
            machine::next(&last, malformed, &service(None)),
            refused("bad port", false)
        );
    }
    assert_eq!(
        machine::next(
            &Next::DryRun,
            Outcome::DryRun(Some("spec.x".into())),
            &service(None)
        ),
        refused("spec.x", false)
    );
}

// R10: the blame probe's variant is the base alone: the label, nothing of its own.
#[test]
fn the_bare_variant_is_the_base_alone() {
    let bare = machine::bare_variant("canary");
    assert_eq!(bare, variant("canary", &[], 0));
    let built = build(&base(), &owner(), &bare);
    let with_env = build(&base(), &owner(), &variant("canary", &[("MODE", "x")], 2));
    assert_eq!(built["spec"]["replicas"], 0);
    assert_eq!(built["metadata"]["name"], with_env["metadata"]["name"]);
    assert_ne!(
        built["spec"]["template"]["spec"]["containers"],
        with_env["spec"]["template"]["spec"]["containers"]
    );
}
