//! Step 4 of a reconcile, one variant at a time, as a pure step machine: what to do next with
//! a variant's Deployment, given what the last request came to. The controller only carries
//! out each [`Next`] (a POST, a GET, a server-side apply, a dry run) and feeds back its
//! [`Outcome`]; every decision is here, and unit-tested without I/O.
//!
//! - A variant whose Deployment the cache does not know is created without asking first: in
//!   the common case the name is free and one request does it. When the server answers that
//!   the name is taken (409 `AlreadyExists`) the Deployment is looked up, to tell someone
//!   else's (a Conflict, R9) from this owner's not cached yet; then it is resolved again with
//!   what the server holds.
//! - One that exists and differs is server-side applied; one that matches is left alone.
//! - A write the server refuses as malformed raises the question whose fault it is: the same
//!   variant without its own env, placement and containers, at 0 instances, is the base alone ([`bare_variant`]). When
//!   the server refuses that too, the base is at fault (R10) and nothing is applied or pruned;
//!   otherwise only this variant is `Invalid`. A policy's refusal (a quota, an admission
//!   policy) is this variant's alone (R35).

use crate::crd::Variant;

use super::build::{Planned, resolve};
use super::observed::ObservedDeployment;
use super::owner::Owner;
use super::refusal::Refusal;
use super::step::Step;

/// What the controller does next for one variant's Deployment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// POST it: the cache knows no Deployment of that name.
    Create,
    /// GET it from the API server: the name may be someone else's.
    LookUp,
    /// Server-side apply it over what exists.
    Apply,
    /// Dry-run the base alone ([`bare_variant`]), keeping the refusal of the variant.
    ProbeBase {
        /// The server's message for the variant's own write.
        message: String,
    },
    /// Nothing more to do for this variant.
    Done(Done),
}

/// How one variant ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Done {
    /// Its status follows from what was planned and what now exists (written, matching, or a
    /// variant that could not be applied).
    Reported,
    /// The server refused its Deployment: `Invalid` with the server's message; `denied` when a
    /// policy of the cluster refused it (retried later, R35).
    Refused {
        /// The server's message.
        message: String,
        /// A quota's or an admission policy's refusal, not a malformed object.
        denied: bool,
    },
    /// The base itself is refused (R10): nothing is applied or pruned.
    BaseRejected(String),
    /// A failure of the server or the network: the reconcile fails, to be retried.
    Failed,
}

/// What a request of [`Next`] came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The POST made the Deployment.
    Created,
    /// The POST found the name taken (409 `AlreadyExists`).
    NameTaken,
    /// The GET answered; the caller has checked what it found ([`Planned::check_existing`]).
    LookedUp,
    /// The server-side apply wrote the Deployment.
    Applied,
    /// The server refused the write: whose refusal, and its message.
    Refused(Refusal, String),
    /// The dry run of the base alone: refused with the server's message, or (`None`) not.
    BaseProbed(Option<String>),
    /// No answer that says anything about the object: the server's or the network's failure.
    Failed,
}

/// The first step for `planned`, from what the cache holds of its Deployment.
pub fn start(planned: &Planned, cached: Option<&ObservedDeployment>, owner: &Owner) -> Next {
    from_step(resolve(planned, cached, owner, false))
}

/// The step after `last` came to `outcome`. `planned` and `current` are as they are now: after
/// a look-up, what the API server answered (checked with [`Planned::check_existing`]).
pub fn next(
    last: &Next,
    outcome: Outcome,
    planned: &Planned,
    current: Option<&ObservedDeployment>,
    owner: &Owner,
) -> Next {
    match (last, outcome) {
        (_, Outcome::Failed) => Next::Done(Done::Failed),
        (Next::Create, Outcome::Created) | (Next::Apply, Outcome::Applied) => {
            Next::Done(Done::Reported)
        }
        (Next::Create, Outcome::NameTaken) => Next::LookUp,
        (Next::LookUp, Outcome::LookedUp) => match resolve(planned, current, owner, true) {
            Step::Write => Next::Apply,
            // From the server only Write or Keep; anything else would loop.
            Step::Keep | Step::Create | Step::LookUp => Next::Done(Done::Reported),
        },
        (Next::Create | Next::Apply, Outcome::Refused(Refusal::Malformed, message)) => {
            Next::ProbeBase { message }
        }
        (Next::Create | Next::Apply, Outcome::Refused(Refusal::Denied, message)) => {
            Next::Done(Done::Refused {
                message,
                denied: true,
            })
        }
        (Next::ProbeBase { .. }, Outcome::BaseProbed(Some(reason))) => {
            Next::Done(Done::BaseRejected(reason))
        }
        (Next::ProbeBase { message }, Outcome::BaseProbed(None)) => Next::Done(Done::Refused {
            message: message.clone(),
            denied: false,
        }),
        // An outcome that does not answer the last step: nothing is written on its account.
        _ => Next::Done(Done::Failed),
    }
}

fn from_step(step: Step) -> Next {
    match step {
        Step::Create => Next::Create,
        Step::LookUp => Next::LookUp,
        Step::Write => Next::Apply,
        Step::Keep => Next::Done(Done::Reported),
    }
}

/// The variant `label` without anything of its own (no env, placement or containers, 0
/// instances): built, it is the base alone, which the blame probe dry-runs (R10).
pub fn bare_variant(label: &str) -> Variant {
    Variant {
        label: label.to_string(),
        instances: 0,
        ..Variant::default()
    }
}
