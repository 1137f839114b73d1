//! Tests of step 4's step machine (R5, R9, R10, R12, R35): every transition, without I/O, as
//! the lease's decisions are tested.

use serde_json::Value;

use super::*;
use crate::variant::converge::{self as machine, Done, Next, Outcome};

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

fn refused(message: &str) -> Next {
    Next::ProbeBase {
        message: message.to_string(),
    }
}

// R5, R9, R12: the first step follows what the cache holds.
#[test]
fn the_first_step_follows_the_cache() {
    let (p, o) = (planned(), owner());
    assert_eq!(machine::start(&p, None, &o), Next::Create);
    assert_eq!(
        machine::start(&p, Some(&cached(|_| {})), &o),
        Next::Done(Done::Reported),
        "as declared: nothing to write"
    );
    let changed = cached(|d| d["spec"]["replicas"] = 5.into());
    assert_eq!(machine::start(&p, Some(&changed), &o), Next::Apply);
    let foreign = cached(|d| d["metadata"]["ownerReferences"] = Value::Null);
    assert_eq!(
        machine::start(&p, Some(&foreign), &o),
        Next::LookUp,
        "someone else's, or ours cached before we took it: ask the server"
    );
    let invalid = p.into_invalid("no".into());
    assert_eq!(
        machine::start(&invalid, None, &o),
        Next::Done(Done::Reported)
    );
}

// R9: a create that finds the name taken looks the Deployment up, then resolves with what the
// server holds: ours (applied if it differs) or someone else's (a Conflict, left alone).
#[test]
fn a_taken_name_is_looked_up_and_resolved_with_the_servers_answer() {
    let (p, o) = (planned(), owner());
    assert_eq!(
        machine::next(&Next::Create, Outcome::Created, &p, None, &o),
        Next::Done(Done::Reported)
    );
    assert_eq!(
        machine::next(&Next::Create, Outcome::NameTaken, &p, None, &o),
        Next::LookUp
    );
    let ours = cached(|d| d["spec"]["replicas"] = 5.into());
    assert_eq!(
        machine::next(&Next::LookUp, Outcome::LookedUp, &p, Some(&ours), &o),
        Next::Apply
    );
    let foreign = cached(|d| d["metadata"]["ownerReferences"] = Value::Null);
    let checked = p.clone().check_existing(Some(&foreign.metadata), &o);
    assert!(matches!(checked, Planned::Conflict { .. }), "{checked:?}");
    assert_eq!(
        machine::next(
            &Next::LookUp,
            Outcome::LookedUp,
            &checked,
            Some(&foreign),
            &o
        ),
        Next::Done(Done::Reported),
        "someone else's Deployment is never written"
    );
    // Gone again by the time it was looked up: created by the apply.
    assert_eq!(
        machine::next(&Next::LookUp, Outcome::LookedUp, &p, None, &o),
        Next::Apply
    );
    assert_eq!(
        machine::next(&Next::Apply, Outcome::Applied, &p, None, &o),
        Next::Done(Done::Reported)
    );
}

// R10, R35: a malformed Deployment asks whether the base alone is refused too; a policy's
// refusal is the variant's alone.
#[test]
fn refusals_are_the_variants_or_the_bases() {
    let (p, o) = (planned(), owner());
    for last in [Next::Create, Next::Apply] {
        let malformed = Outcome::Refused(Refusal::Malformed, "bad field".into());
        assert_eq!(
            machine::next(&last, malformed, &p, None, &o),
            refused("bad field")
        );
        let denied = Outcome::Refused(Refusal::Denied, "quota".into());
        assert_eq!(
            machine::next(&last, denied, &p, None, &o),
            Next::Done(Done::Refused {
                message: "quota".into(),
                denied: true
            })
        );
    }
    let probe = refused("bad field");
    assert_eq!(
        machine::next(
            &probe,
            Outcome::BaseProbed(Some("base bad".into())),
            &p,
            None,
            &o
        ),
        Next::Done(Done::BaseRejected("base bad".into()))
    );
    assert_eq!(
        machine::next(&probe, Outcome::BaseProbed(None), &p, None, &o),
        Next::Done(Done::Refused {
            message: "bad field".into(),
            denied: false
        }),
        "the base alone passes: the variant's own fields are at fault"
    );
}

// A failure ends the variant's steps (the reconcile fails and is retried), and so does an
// outcome that does not answer the last step.
#[test]
fn failures_and_stray_outcomes_end_in_failure() {
    let (p, o) = (planned(), owner());
    for last in [Next::Create, Next::LookUp, Next::Apply, refused("m")] {
        assert_eq!(
            machine::next(&last, Outcome::Failed, &p, None, &o),
            Next::Done(Done::Failed)
        );
    }
    assert_eq!(
        machine::next(&Next::Apply, Outcome::Created, &p, None, &o),
        Next::Done(Done::Failed)
    );
    assert_eq!(
        machine::next(&Next::LookUp, Outcome::Applied, &p, None, &o),
        Next::Done(Done::Failed)
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
