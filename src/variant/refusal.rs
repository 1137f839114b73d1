//! What the API server's error answer to a write of a variant's Deployment means (R10, R35):
//! a refusal of the object, not worth retrying, or a failure to retry. Told by the answer's
//! code and the structure of its details, never by its text.
//!
//! - **Malformed** (400; 413; 422 whose causes name fields, as the Deployment's own validation
//!   does): the object is not a valid Deployment, or is too large. The variant or the base is
//!   at fault, which the controller tells apart with a dry run of the base alone (R10).
//! - **Denied** (403 from a ResourceQuota, an admission policy or webhook, or RBAC; a 422 whose
//!   causes name no field, as a ValidatingAdmissionPolicy's denial does): a policy of the
//!   cluster refuses the object. Only that variant is `Invalid`, the others are applied and
//!   pruned as usual (R35); it is tried again when the owner changes or at the resync.
//! - anything else (5xx, 429, 409, 404, 401, a namespace being deleted): the server's or the
//!   network's failure, or the object changed meanwhile: the reconcile fails and is retried.

use kube::core::Status;

/// The longest server message a status or an API answer carries, in bytes: quota and admission
/// messages are a line or two, and a status is cached by every replica.
pub const MAX_SERVER_MESSAGE: usize = 512;

/// A refusal of the object itself, from [`classify`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The object is not a valid Deployment (400, 413, or 422 naming fields).
    Malformed,
    /// A policy of the cluster refuses it (403, or 422 naming no field).
    Denied,
}

/// Whether the API server's error answer `status` refuses the object for good, and how;
/// `None` when it may be a passing failure, to retry.
pub fn classify(status: &Status) -> Option<Refusal> {
    let names_a_field = || {
        status
            .details
            .as_ref()
            .is_some_and(|d| d.causes.iter().any(|c| !c.field.is_empty()))
    };
    match status.code {
        400 | 413 => Some(Refusal::Malformed),
        422 if names_a_field() => Some(Refusal::Malformed),
        422 => Some(Refusal::Denied),
        // A namespace being deleted refuses every create: expected, and not the variant's.
        403 if namespace_terminating(status) => None,
        403 => Some(Refusal::Denied),
        _ => None,
    }
}

/// A 403 whose cause is `NamespaceTerminating`.
fn namespace_terminating(status: &Status) -> bool {
    status
        .details
        .as_ref()
        .is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating"))
}

/// The server's `message`, cut to at most [`MAX_SERVER_MESSAGE`] bytes at a character
/// boundary (ending in `...` when cut), on one line.
pub fn server_message(message: &str) -> String {
    let line: String = message
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if line.len() <= MAX_SERVER_MESSAGE {
        return line;
    }
    let mut cut = MAX_SERVER_MESSAGE - 3;
    while !line.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &line[..cut])
}
