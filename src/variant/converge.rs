//! Step 4 of a reconcile, one object at a time, as a pure step machine: what to do next with
//! a variant's Deployment or its Service (R36), given what the last request came to. The
//! controller only carries out each [`Next`] (a POST, a GET, a server-side apply, a dry run)
//! and feeds back its [`Outcome`]; every decision is here, and unit-tested without I/O. Both
//! kinds of object go through this one machine; what differs between them is a [`Subject`].
//!
//! - An object the cache does not know is created without asking first: in the common case
//!   the name is free and one request does it. When the server answers that the name is taken
//!   (409 `AlreadyExists`) the object is looked up, to tell someone else's (a Conflict, R9)
//!   from this owner's not cached yet; then it is resolved again with what the server holds
//!   (gone again meanwhile: server-side apply makes it).
//! - One that exists and differs is server-side applied; one that matches is left alone. One
//!   the operator created with a POST first has its field ownership handed over to
//!   server-side apply (guarded by its resourceVersion: changed meanwhile, the reconcile is
//!   retried), so that the apply removes a field no longer declared.
//! - A server-side apply answered with a 5xx naming nothing is dry-run as a create: the API
//!   server answers 500 to an apply with a field its schema does not declare, where the dry
//!   run names the field (400). A dry run that passes leaves the 5xx the server's failure.
//! - A write the server refuses as malformed raises, for a Deployment, the question whose
//!   fault it is: the same variant without its own env, placement and containers, at 0
//!   instances, is the base alone ([`bare_variant`]). When the server refuses that too, the
//!   base is at fault (R10) and nothing is applied or pruned; otherwise only this variant is
//!   `Invalid`. A Service is the variant's alone. A policy's refusal (a quota, an admission
//!   policy) is this variant's alone (R35).

use serde_json::Value;

use crate::crd::Variant;

use super::build::{Planned, resolve};
use super::observed::ObservedDeployment;
use super::owner::Owner;
use super::owner::left_alone;
use super::refusal::{Refusal, classify, server_message};
use super::service::{ObservedService, resolve_service};
use super::step::Step;

/// What the machine needs to know of the object it writes, as known now: from the cache
/// before any request, from the API server after a look-up or a write.
pub trait Subject {
    /// Its step as known ([`Step`]): from the cache (`from_server` false) or the server.
    fn step(&self, from_server: bool) -> Step;
    /// After a look-up: why it is not this owner's to write (R9: someone else's, left alone),
    /// as the variant's message; `None` when it is this owner's, or there is none.
    fn left_alone(&self) -> Option<String>;
    /// Whether a malformed refusal asks if the base alone is refused too (R10): a variant's
    /// Deployment carries the base, its Service does not.
    fn blames_base(&self) -> bool;
    /// Whether the object as known was created with a POST and its fields are still recorded
    /// under that `Update` entry ([`super::CreatedEntry`]): handed over before an apply.
    fn created_by_post(&self) -> bool;
}

/// A variant's Deployment as planned, and the one of its name as known.
pub struct DeploymentSubject<'a> {
    /// The variant, planned ([`super::plan`]).
    pub planned: &'a Planned,
    /// Its Deployment as known.
    pub current: Option<&'a ObservedDeployment>,
    /// Whose variant it is.
    pub owner: &'a Owner,
}

impl Subject for DeploymentSubject<'_> {
    fn step(&self, from_server: bool) -> Step {
        resolve(self.planned, self.current, self.owner, from_server)
    }

    fn left_alone(&self) -> Option<String> {
        let Planned::Apply { name, .. } = self.planned else {
            return None;
        };
        let meta = self
            .current
            .map(|d| &d.metadata as &dyn super::meta::MetaView);
        left_alone("Deployment", name, meta, self.owner)
    }

    fn blames_base(&self) -> bool {
        true
    }

    fn created_by_post(&self) -> bool {
        self.current.is_some_and(|d| d.created_entry.is_some())
    }
}

/// A variant's Service as built ([`super::build_service`]), and the one of its name as known.
pub struct ServiceSubject<'a> {
    /// The Service's name.
    pub name: &'a str,
    /// The Service as declared.
    pub desired: &'a Value,
    /// The one of that name as known.
    pub current: Option<&'a ObservedService>,
    /// Whose variant it is.
    pub owner: &'a Owner,
}

impl Subject for ServiceSubject<'_> {
    fn step(&self, from_server: bool) -> Step {
        resolve_service(self.desired, self.current, self.owner, from_server)
    }

    fn left_alone(&self) -> Option<String> {
        let meta = self
            .current
            .map(|s| &s.metadata as &dyn super::meta::MetaView);
        left_alone("Service", self.name, meta, self.owner)
    }

    fn blames_base(&self) -> bool {
        false
    }

    fn created_by_post(&self) -> bool {
        self.current.is_some_and(|s| s.created_entry().is_some())
    }
}

/// What the controller does next for one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// POST it: the cache knows none of that name.
    Create,
    /// GET it from the API server: the name may be someone else's.
    LookUp,
    /// Hand the POST's field ownership over to server-side apply ([`super::CreatedEntry`]),
    /// then apply.
    HandOver,
    /// Server-side apply it over what exists.
    Apply,
    /// Dry-run a create of the same object: the apply was answered with a 5xx naming nothing.
    DryRun,
    /// Dry-run the base alone ([`bare_variant`]), keeping the refusal of the variant.
    ProbeBase {
        /// The server's message for the variant's own write.
        message: String,
    },
    /// Nothing more to do for this object.
    Done(Done),
}

/// How one object ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Done {
    /// Its status follows from what was planned and what now exists (written, matching, or a
    /// variant that could not be applied).
    Reported,
    /// Someone else's object holds the name (R9): the variant is a `Conflict` with this
    /// message, and the object is left alone.
    Conflict(String),
    /// The server refused it: `Invalid` with the server's message; `denied` when a policy of
    /// the cluster refused it (retried later, R35).
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
    /// The POST made the object.
    Created,
    /// The POST found the name taken (409 `AlreadyExists`).
    NameTaken,
    /// The GET answered (found or not); the subject now holds what it found.
    LookedUp,
    /// The hand-over's JSON patch was taken.
    HandedOver,
    /// The server-side apply wrote the object.
    Applied,
    /// The server refused the write: whose refusal, and its message.
    Refused(Refusal, String),
    /// The server answered the write with a 5xx naming nothing.
    ServerError,
    /// The dry run of the same object: refused as malformed with the server's message, or
    /// (`None`) not.
    DryRun(Option<String>),
    /// The dry run of the base alone: refused with the server's message, or (`None`) not.
    BaseProbed(Option<String>),
    /// No answer that says anything about the object: the server's or the network's failure.
    Failed,
}

/// What an error answer of the API server to the request of `last` comes to, by its code and
/// details, never by its text ([`classify`]).
pub fn answered(last: &Next, status: &kube::core::Status) -> Outcome {
    if *last == Next::Create && crate::status_is(status, 409, Some("AlreadyExists")) {
        return Outcome::NameTaken;
    }
    // A hand-over's `test` of the resourceVersion or of the entry failed (422, naming no
    // field): the object changed since it was read, never the variant's fault; a retry reads
    // it again (CI saw one marked Invalid this way, under load, when the Deployment
    // controller wrote its status between the cache and the hand-over).
    if *last == Next::HandOver && crate::status_is(status, 422, None) {
        return Outcome::Failed;
    }
    match classify(status) {
        Some(refusal) => Outcome::Refused(refusal, server_message(&status.message)),
        None if status.code >= 500 => Outcome::ServerError,
        None => Outcome::Failed,
    }
}

/// The first step for `subject`, from what the cache holds of it.
pub fn start(subject: &impl Subject) -> Next {
    match subject.step(false) {
        Step::Create => Next::Create,
        Step::LookUp => Next::LookUp,
        Step::Write => write(subject),
        Step::Keep => Next::Done(Done::Reported),
    }
}

/// An apply, after the hand-over when the object was created with a POST.
fn write(subject: &impl Subject) -> Next {
    if subject.created_by_post() {
        Next::HandOver
    } else {
        Next::Apply
    }
}

/// The step after `last` came to `outcome`. `subject` is as it is now: after a look-up, with
/// what the API server answered.
pub fn next(last: &Next, outcome: Outcome, subject: &impl Subject) -> Next {
    match (last, outcome) {
        (_, Outcome::Failed) => Next::Done(Done::Failed),
        (Next::Create, Outcome::Created) | (Next::Apply, Outcome::Applied) => {
            Next::Done(Done::Reported)
        }
        (Next::Create, Outcome::NameTaken) => Next::LookUp,
        (Next::HandOver, Outcome::HandedOver) => Next::Apply,
        (Next::LookUp, Outcome::LookedUp) => match subject.left_alone() {
            Some(message) => Next::Done(Done::Conflict(message)),
            None => match subject.step(true) {
                Step::Write => write(subject),
                // From the server only Write or Keep; anything else would loop.
                Step::Keep | Step::Create | Step::LookUp => Next::Done(Done::Reported),
            },
        },
        (Next::Create | Next::Apply, Outcome::Refused(Refusal::Malformed, message))
        | (Next::DryRun, Outcome::DryRun(Some(message))) => malformed(subject, message),
        // A policy may refuse the hand-over (an admission policy on updates), as it would the
        // apply (R35).
        (
            Next::Create | Next::HandOver | Next::Apply,
            Outcome::Refused(Refusal::Denied, message),
        ) => Next::Done(Done::Refused {
            message,
            denied: true,
        }),
        // A POST validates strictly and names what it refuses: its 5xx is the server's.
        (Next::Apply, Outcome::ServerError) => Next::DryRun,
        (Next::ProbeBase { .. }, Outcome::BaseProbed(Some(reason))) => {
            Next::Done(Done::BaseRejected(reason))
        }
        (Next::ProbeBase { message }, Outcome::BaseProbed(None)) => Next::Done(Done::Refused {
            message: message.clone(),
            denied: false,
        }),
        // An outcome that does not answer the last step (a 5xx of a POST, a dry run that
        // passes): nothing is written on its account.
        _ => Next::Done(Done::Failed),
    }
}

/// The step after a refusal of the object itself (`message`): the base's blame probe for a
/// Deployment, the variant's `Invalid` for a Service.
fn malformed(subject: &impl Subject, message: String) -> Next {
    if subject.blames_base() {
        Next::ProbeBase { message }
    } else {
        Next::Done(Done::Refused {
            message,
            denied: false,
        })
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
