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
//! - **placement**: `placement` merges a variant's nodeSelector, tolerations, images and
//!   resources over the base, checks them, and bounds what a token may set of them (R37);
//! - **pod security**: [`baseline_findings`] lists how a pod template breaks Pod Security
//!   "baseline", and a [`Review`] of an owner's Deployments says whether the operator may make
//!   them in their namespace, and why not (R33);
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
//! `baseline` and the decision on them in `pod_security`, all re-exported below.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::crd::OwnerKind;

pub mod access;
mod baseline;
mod build;
pub mod converge;
mod meta;
mod observed;
pub(crate) mod placement;
mod pod_security;
mod refusal;
mod report;
mod secret;
mod service;
mod status;
mod step;
mod validate;

#[cfg(test)]
mod tests;

pub use baseline::{
    ALLOWED_CAPABILITIES, Finding, SAFE_SYSCTLS, SELINUX_TYPES, ServiceAccountRef,
    baseline_findings, own_account_finding,
};
pub use build::{Foreign, Planned, build, foreign, needs_apply, plan, resolve};
pub use meta::{ControllerRef, HasMeta, Meta, MetaView, OwnerRef};
pub use observed::{CreatedEntry, DeploymentWire, ObservedDeployment, RolloutCounts};
pub use pod_security::{
    BASE_NOT_ALLOWED, ENFORCE_LABEL, NamespaceLabel, PRIVILEGED, Review, hold_back,
};
pub use refusal::{MAX_SERVER_MESSAGE, Refusal, classify, server_message};
pub use report::{Findings, Stale, held_statuses, owner_status, stale};
pub use secret::CachedSecret;
pub use service::{
    ObservedService, PortView, ServiceView, build_service, resolve_service, serves,
    service_needs_apply, service_ports, service_status, services_column, validate_service,
};
pub use status::{ready_condition, summary, variant_state};
pub use step::Step;
pub use validate::{
    Base, MAX_BASE_DEPTH, MAX_OWNER_NAME, TOKEN_KEY, check_variant_count, deployment_name,
    secret_name, unservable_name, validate_env_name, validate_label, validate_mutation_name,
    validate_name, validate_variant, validate_variants,
};

/// Label on every generated Deployment, its selector and its pods: the owner's name.
pub const OWNER_LABEL: &str = "mutantops.neiam.org/owner";

/// Label on every generated Deployment, its selector and its pods: the variant's label.
pub const VARIANT_LABEL: &str = "mutantops.neiam.org/variant";

/// Label on every generated Deployment, its selector and its pods: the owner's kind,
/// `mutantdeployment` or `mutation`, so that a MutantDeployment and a Mutation of the same name
/// never select (or prune) each other's objects.
pub const KIND_LABEL: &str = "mutantops.neiam.org/kind";

/// Annotation on every generated Deployment: a hash of the desired object, so that any change
/// of the desired state (including a removed field) is visible by comparing with what is
/// observed. See [`needs_apply`].
pub const HASH_ANNOTATION: &str = "mutantops.neiam.org/desired-hash";

/// The server-side apply field manager of every write the operator makes (R5).
pub const FIELD_MANAGER: &str = "mutantops-operator";

/// Type of the condition reported by [`ready_condition`].
pub const READY_CONDITION: &str = "Ready";

/// Longest Deployment name a variant may get (R8): a DNS-1123 label.
pub const MAX_DEPLOYMENT_NAME: usize = 63;

/// The object that owns generated Deployments: enough of it to label, reference and recognise
/// them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// MutantDeployment or Mutation.
    pub kind: OwnerKind,
    /// metadata.name.
    pub name: String,
    /// metadata.namespace; generated Deployments live here.
    pub namespace: String,
    /// metadata.uid; the controller ownerReference points at it.
    pub uid: String,
}

impl Owner {
    /// Takes name, namespace and uid from an object read from the API server. Fails, naming
    /// what is missing, for an object that was never stored (no uid) or is not namespaced.
    pub fn from_resource<K: kube::Resource>(kind: OwnerKind, obj: &K) -> crate::Result<Owner> {
        let meta = obj.meta();
        let name = meta.name.clone().ok_or(crate::Error::MissingField {
            object: kind.kind().to_string(),
            field: "name",
        })?;
        let missing = |field| crate::Error::MissingField {
            object: format!("{} {name:?}", kind.kind()),
            field,
        };
        let namespace = meta.namespace.clone().ok_or_else(|| missing("namespace"))?;
        let uid = meta.uid.clone().ok_or_else(|| missing("uid"))?;
        Ok(Owner {
            kind,
            name,
            namespace,
            uid,
        })
    }

    /// [`Owner::owner_reference`] as the JSON list a generated object's metadata holds.
    pub fn owner_references_json(&self) -> serde_json::Value {
        let r = self.owner_reference();
        serde_json::json!([{
            "apiVersion": r.api_version,
            "kind": r.kind,
            "name": r.name,
            "uid": r.uid,
            "controller": true,
            "blockOwnerDeletion": true,
        }])
    }

    /// The controller ownerReference every generated Deployment carries, so that deleting the
    /// owner deletes it through garbage collection (R4, R7).
    pub fn owner_reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: self.kind.api_version().to_owned(),
            kind: self.kind.kind().to_owned(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    /// The three mutantops labels of one variant's Deployment, selector and pods.
    fn labels<'a>(&'a self, label: &'a str) -> [(&'static str, &'a str); 3] {
        [
            (OWNER_LABEL, self.name.as_str()),
            (VARIANT_LABEL, label),
            (KIND_LABEL, self.kind.label_value()),
        ]
    }
}

/// The uid of the controller ownerReference (`controller: true`) of an object, if any.
pub fn controller_uid(meta: &(impl MetaView + ?Sized)) -> Option<&str> {
    meta.controller().map(|r| r.uid)
}

/// Whether the object's controller ownerReference points at `owner_uid` (R9).
pub fn is_controlled_by(meta: &(impl MetaView + ?Sized), owner_uid: &str) -> bool {
    controller_uid(meta) == Some(owner_uid)
}

/// Whether a Deployment may be deleted by prune on behalf of `owner` (R6): it carries this
/// owner's name and kind labels AND its controller ownerReference has this owner's uid. A
/// Deployment that merely carries the labels, or belongs to a same-named owner of the other
/// kind, is never touched. (The caller still skips names of declared variants.)
pub fn may_prune(meta: &(impl MetaView + ?Sized), owner: &Owner) -> bool {
    meta.label(OWNER_LABEL) == Some(owner.name.as_str())
        && meta.label(KIND_LABEL) == Some(owner.kind.label_value())
        && is_controlled_by(meta, &owner.uid)
}
