//! The decisions of a reconcile that are not about building: which of an owner's Deployments
//! to prune (R6), what to report while the base is invalid (R10), and the owner's whole status
//! (R3, R11, R12). Pure, like the rest of `variant`: the controller observes and writes, these
//! functions decide.

use std::collections::BTreeSet;

use super::meta::{HasMeta, MetaView};
use super::names::deployment_name;
use super::observed::ObservedDeployment;
use super::owner::{OWNER_LABEL, Owner, READY_CONDITION, VARIANT_LABEL, may_prune};
use super::pod_security::BASE_NOT_ALLOWED;
use super::service::services_column;
use super::status::{ready_condition, summary, variant_state};
use crate::crd::{OwnerStatus, Variant, VariantState, VariantStatus};

/// A Deployment (or a variant's Service, R36) to prune: its name, and its uid for a delete with
/// a uid precondition (so one re-created meanwhile under that name is not deleted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stale {
    /// The object's name.
    pub name: String,
    /// Its uid, as cached.
    pub uid: Option<String>,
}

/// What prune deletes (R6): of the Deployments (or Services, R36) this owner controls
/// (`owned`, each checked with [`may_prune`] again), those whose name no declared variant has.
pub fn stale<'a, K: HasMeta + 'a>(
    owned: impl IntoIterator<Item = &'a K>,
    owner: &Owner,
    declared: &BTreeSet<String>,
) -> Vec<Stale> {
    owned
        .into_iter()
        .map(HasMeta::meta_view)
        .filter(|meta| may_prune(*meta, owner))
        .filter_map(|meta| {
            let name = meta.name()?.to_owned();
            (!declared.contains(&name)).then(|| Stale {
                name,
                uid: meta.uid().map(str::to_owned),
            })
        })
        .collect()
}

/// The variants' statuses while the base is invalid (R10): nothing is applied or pruned, so
/// each variant is Invalid with `problem`, and reports the replicas of the Deployment it still
/// has running (found among `owned` by its labels), if any.
pub fn held_statuses<'a>(
    variants: &[Variant],
    owner: &Owner,
    base_name: Option<&str>,
    owned: impl IntoIterator<Item = &'a ObservedDeployment> + Clone,
    problem: &str,
) -> Vec<VariantStatus> {
    variants
        .iter()
        .map(|v| {
            let existing = owned.clone().into_iter().find(|d| {
                let label = |k: &str| d.metadata.label(k);
                may_prune(&d.metadata, owner)
                    && label(VARIANT_LABEL) == Some(v.label.as_str())
                    && label(OWNER_LABEL) == Some(owner.name.as_str())
            });
            let deployment = existing
                .and_then(|d| d.metadata.name().map(str::to_owned))
                .or_else(|| base_name.map(|b| deployment_name(b, &v.label)))
                .unwrap_or_default();
            let (replicas, ready) = existing.map_or((0, 0), |d| {
                let (_, replicas, ready) = variant_state(v.instances, Some(d));
                (replicas, ready)
            });
            VariantStatus {
                label: v.label.clone(),
                state: VariantState::Invalid,
                message: Some(format!("not applied while the base is invalid: {problem}")),
                deployment,
                replicas,
                ready_replicas: ready,
                service: None,
                sleep: None,
                screen: None,
            }
        })
        .collect()
}

/// What one reconcile found, for [`owner_status`].
#[derive(Debug)]
pub struct Findings<'a> {
    /// The status the owner had.
    pub previous: &'a OwnerStatus,
    /// The owner's `metadata.generation`.
    pub generation: Option<i64>,
    /// The name of the Mutation's Secret when it owns one.
    pub secret: Option<String>,
    /// Why the base is invalid, or was rejected by the API server.
    pub base_error: Option<&'a str>,
    /// Why the operator cannot serve the owner at all (its name is too long to label what it
    /// would make), if so: nothing is made for it.
    pub unservable: Option<&'a str>,
    /// Why the operator does not make the owner's Deployments in its namespace (R33: Pod
    /// Security "baseline", its own ServiceAccount), if so: the variants are Invalid.
    pub not_allowed: Option<&'a str>,
    /// Other problems of the owner as a whole (a foreign Secret).
    pub problems: Vec<String>,
    /// One status per declared variant, in spec order.
    pub variants: Vec<VariantStatus>,
    /// The time of this reconcile (RFC 3339), for a condition that changes.
    pub now: &'a str,
}

/// The owner's status (R3, R11): the summary, the Ready condition (its transition time kept
/// while it does not change, so an unchanged status is equal and not written again: R12), and
/// one message joining every object-level problem, an unservable name first, then the invalid
/// or not allowed base. An unservable owner's condition is False with reason `InvalidName`; one
/// whose base the operator does not make in its namespace, with reason [`BASE_NOT_ALLOWED`]
/// (R33: the base is valid, so not `InvalidBase`; and every variant is held back for the same
/// reason, not each for its own, as `VariantsNotApplied` would say).
pub fn owner_status(found: Findings<'_>) -> OwnerStatus {
    let previous_ready = found
        .previous
        .conditions
        .iter()
        .find(|c| c.type_ == READY_CONDITION);
    let mut condition = ready_condition(
        &found.variants,
        found.unservable.or(found.base_error),
        found.generation,
        previous_ready,
        found.now,
    );
    if found.unservable.is_some() {
        condition.reason = "InvalidName".to_owned();
    } else if let Some(problem) = found.not_allowed
        && found.base_error.is_none()
        && condition.status == "False"
    {
        condition.reason = BASE_NOT_ALLOWED.to_owned();
        condition.message = format!("{}: {problem}", condition.message);
    }
    let mut messages = found.problems;
    if let Some(problem) = found.not_allowed {
        messages.insert(0, format!("base deployment not allowed here: {problem}"));
    }
    if let Some(problem) = found.base_error {
        messages.insert(0, format!("invalid base deployment: {problem}"));
    }
    if let Some(problem) = found.unservable {
        messages.insert(0, problem.to_owned());
    }
    OwnerStatus {
        observed_generation: found.generation,
        secret: found.secret,
        summary: summary(&found.variants),
        message: (!messages.is_empty()).then(|| messages.join("; ")),
        variant_labels: found
            .variants
            .iter()
            .map(|v| v.label.as_str())
            .collect::<Vec<_>>()
            .join(","),
        variant_services: services_column(&found.variants),
        variants: found.variants,
        conditions: vec![condition],
        // The devices are written apart from the rest (`submit::devices`), by whoever heard
        // from them: the controller's status never carries them.
        devices: Vec::new(),
        device_summary: None,
        // Where a rollout stands is the controller's to add (`controller::rollout`).
        rollout: None,
    }
}
