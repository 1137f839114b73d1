//! Tests of how the API server's refusals are told apart (R10, R35), on answers as the API
//! server sends them.

use kube::core::Status;
use serde_json::{Value, json};

use super::*;

fn status(answer: Value) -> Status {
    match serde_json::from_value(answer) {
        Ok(status) => status,
        Err(e) => panic!("a Status: {e}"),
    }
}

fn failure(code: u16, reason: &str, causes: Value) -> Status {
    status(json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "message text is never read", "reason": reason, "code": code,
        "details": {"name": "web-b", "group": "apps", "kind": "deployments", "causes": causes},
    }))
}

// R35: a quota's and an admission policy's refusals are the variant's, not to be retried.
#[test]
fn quota_and_admission_refusals_are_denials() {
    let quota = status(json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "deployments.apps \"web-c\" is forbidden: exceeded quota: q, requested: \
                    count/deployments.apps=1, used: count/deployments.apps=2, limited: \
                    count/deployments.apps=2",
        "reason": "Forbidden",
        "details": {"name": "web-c", "group": "apps", "kind": "deployments"},
        "code": 403,
    }));
    assert_eq!(classify(&quota), Some(Refusal::Denied));
    // A ValidatingAdmissionPolicy's denial: 422 by default, its cause naming no field.
    let policy = "ValidatingAdmissionPolicy 'p' with binding 'p' denied request: no";
    let vap = failure(422, "Invalid", json!([{ "message": policy }]));
    assert_eq!(classify(&vap), Some(Refusal::Denied));
    // ... or 403 when the policy's validation says `reason: Forbidden`.
    let vap = failure(403, "Forbidden", json!([{ "message": policy }]));
    assert_eq!(classify(&vap), Some(Refusal::Denied));
    // A 422 with no details at all names no field either.
    let bare = status(json!({"status": "Failure", "reason": "Invalid", "code": 422}));
    assert_eq!(classify(&bare), Some(Refusal::Denied));
}

// R10: what the Deployment's own validation refuses may be the base's fault.
#[test]
fn validation_errors_are_malformed() {
    let invalid = failure(
        422,
        "Invalid",
        json!([{
            "reason": "FieldValueRequired", "message": "Required value",
            "field": "spec.template.spec.containers[0].image",
        }]),
    );
    assert_eq!(classify(&invalid), Some(Refusal::Malformed));
    // Strict field validation: an undeclared field.
    let strict = failure(400, "BadRequest", json!([]));
    assert_eq!(classify(&strict), Some(Refusal::Malformed));
    let large = failure(413, "RequestEntityTooLarge", json!([]));
    assert_eq!(classify(&large), Some(Refusal::Malformed));
}

// R13: what may pass is retried, as before.
#[test]
fn passing_failures_are_retried() {
    for (code, reason) in [
        (500, "InternalError"),
        (503, "ServiceUnavailable"),
        (504, "Timeout"),
        (429, "TooManyRequests"),
        (409, "Conflict"),
        (404, "NotFound"),
        (401, "Unauthorized"),
        (410, "Expired"),
    ] {
        assert_eq!(classify(&failure(code, reason, json!([]))), None, "{code}");
    }
    // A namespace being deleted refuses every create: expected, not the variant's fault.
    let terminating = failure(
        403,
        "Forbidden",
        json!([{ "reason": "NamespaceTerminating", "message": "ns is being terminated" }]),
    );
    assert_eq!(classify(&terminating), None);
}

// R35: the server's message, bounded and on one line.
#[test]
fn server_messages_are_trimmed() {
    assert_eq!(server_message("  exceeded quota: q\n"), "exceeded quota: q");
    assert_eq!(server_message("a\nb\tc"), "a b c");
    let long = "é".repeat(MAX_SERVER_MESSAGE);
    let cut = server_message(&long);
    assert!(cut.len() <= MAX_SERVER_MESSAGE, "{}", cut.len());
    assert!(cut.ends_with("...") && cut.starts_with("éé"), "{cut}");
    let exact = "x".repeat(MAX_SERVER_MESSAGE);
    assert_eq!(server_message(&exact), exact);
}
