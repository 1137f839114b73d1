//! The pure core of mutantops: everything about variants that needs no client.
//!
//! Given an owner (a `MutantDeployment` or a `Mutation`), its base Deployment and its variants,
//! this module decides what the cluster should hold and how to report it:
//!
//! - **validate**: [`Base::parse`] checks the base (R10), [`validate_variant`] one variant (R8);
//!   the HTTP API uses the same functions to answer 400;
//! - **build**: [`build`] turns one variant into the Deployment to server-side-apply (R4), and
//!   [`plan`] does it for a whole spec, marking repeated labels as conflicts (R9);
//! - **compare**: [`needs_apply`] tells whether an observed Deployment already matches, so a
//!   steady-state reconcile writes nothing (R5, R12);
//! - **own**: [`may_prune`], [`foreign`] and [`Planned::check_existing`] decide which
//!   Deployments are ours to delete or overwrite (R6, R9);
//! - **device tokens**: [`access`] says what a Mutation's own token may ask (R32);
//! - **quiet hours**: [`quiet::Quiet`] checks `spec.devices.sleep.quietHours` and says when
//!   they end and next start, in the spec's time zone, from the zone data in the binary (R42);
//! - **placement**: `placement` merges a variant's nodeSelector, tolerations, images and
//!   resources over the base, checks them, and bounds what a token may set of them (R37);
//! - **pod security**: [`baseline_findings`] lists how a pod template breaks Pod Security
//!   "baseline" as of a [`Policy`] (the version a namespace is held to), and a [`Review`] of an
//!   owner's Deployments says whether the operator may make them in their namespace, and why
//!   not, the operator's own ServiceAccount and Secrets ([`own_secret_findings`]) refused in
//!   every namespace (R33);
//! - **report**: [`variant_state`], [`summary`] and [`ready_condition`] compute status (R11);
//! - **refusals**: [`classify`] tells the API server's refusal of a Deployment (the object's
//!   fault, or a policy's) from a failure worth retrying (R10, R35);
//! - **observe**: [`ObservedDeployment`] is what the controllers cache of a generated
//!   Deployment: the metadata, the counters, whether it was created rather than applied
//!   ([`CreatedEntry`]), and the rest as compact text for `needs_apply`.
//!
//! Nothing here does I/O, awaits or reads a clock, so the controller's reconcile is a thin
//! shell of API calls around these functions and every decision is unit-tested by feeding
//! objects in. Building works on the base's raw JSON rather than on the typed k8s-openapi
//! struct, so fields newer than the Kubernetes version compiled against are passed through.
//!
//! The owner, the labels and the ownership checks are here; validation is in `validate`,
//! building and the apply decision in `build`, status in `status`, the baseline controls in
//! `baseline` (what changed between versions in `policy`) and the decision on them in
//! `pod_security`, all re-exported below.

pub(crate) mod access;
mod base_env;
mod baseline;
mod build;
pub(crate) mod clock;
pub(crate) mod commands;
pub(crate) mod converge;
pub(crate) mod departure;
pub(crate) mod devices;
mod families;
mod meta;
mod names;
mod observed;
mod own_secrets;
mod owner;
pub(crate) mod parsed;
pub(crate) mod placement;
mod pod_security;
mod policy;
pub(crate) mod quiet;
mod refusal;
mod registry;
mod report;
pub(crate) mod rights;
pub(crate) mod rollout;
pub mod screen;
mod secret;
mod service;
pub(crate) mod sleep;
mod status;
mod step;
pub(crate) mod totals;
mod validate;
pub(crate) mod wake;

#[cfg(test)]
mod tests;

pub use baseline::{
    ALLOWED_CAPABILITIES, Finding, ServiceAccountRef, baseline_findings, own_account_finding,
};
pub use build::{Planned, build, needs_apply, plan, resolve};
pub use meta::{ControllerRef, HasMeta, Meta, MetaView, OwnerRef};
pub use names::{
    MAX_OWNER_NAME, TOKEN_KEY, deployment_name, secret_name, unservable_name, validate_env_name,
    validate_label, validate_mutation_name, validate_name,
};
pub use observed::{CreatedEntry, DeploymentWire, ObservedDeployment, RolloutCounts};
pub use own_secrets::{
    API_TLS_SECRET, API_TOKEN_SECRET, OwnSecrets, own_secret_findings, secret_references,
};
pub use owner::{
    FIELD_MANAGER, Foreign, HASH_ANNOTATION, KIND_LABEL, MAX_DEPLOYMENT_NAME, OWNER_LABEL, Owner,
    READY_CONDITION, VARIANT_LABEL, controller_uid, foreign, is_controlled_by, left_alone,
    may_prune,
};
pub use pod_security::{
    BASE_NOT_ALLOWED, ENFORCE_LABEL, NamespaceLabel, PRIVILEGED, PodSecurity, Review, hold_back,
};
pub use policy::{ENFORCE_VERSION_LABEL, Policy, SAFE_SYSCTLS, SELINUX_TYPES, Version};
pub use refusal::{MAX_SERVER_MESSAGE, Refusal, classify, server_message};
pub use report::{Findings, Stale, held_statuses, owner_status, stale};
pub use secret::CachedSecret;
pub use service::{
    ObservedService, PortView, ServiceView, build_service, resolve_service, serves,
    service_needs_apply, service_ports, service_status, services_column, validate_service,
};
pub use status::{only_progress, ready_condition, summary, variant_state};
pub use step::Step;
pub use validate::{
    Base, MAX_BASE_DEPTH, check_variant_count, validate_variant, validate_variants,
};
