//! The status of variants and of their owner (R3, R11, R12).

use super::observed::{ObservedDeployment, RolloutCounts};
use super::owner::READY_CONDITION;
use crate::crd::{Condition, OwnerStatus, VariantState, VariantStatus};

/// State of a valid variant from its Deployment (R11), with the replicas to report:
/// `(state, replicas, ready_replicas)`.
///
/// `Ready` when the Deployment exists, has observed its latest generation, asks for
/// `instances` replicas, and its status `replicas`, `updatedReplicas` and `readyReplicas`
/// (missing counts as 0) all equal `instances`; so 0 instances is Ready at 0 once observed.
/// Otherwise `Progressing`. `replicas` is `spec.replicas` (`instances` when absent), ready is
/// `status.readyReplicas` (0 when absent).
pub fn variant_state(instances: i32, dep: Option<&ObservedDeployment>) -> (VariantState, i32, i32) {
    let Some(dep) = dep else {
        return (VariantState::Progressing, instances, 0);
    };
    let replicas = dep.replicas.unwrap_or(instances);
    let status = dep.status.as_ref();
    let count = |f: fn(&RolloutCounts) -> Option<i32>| status.and_then(f).unwrap_or(0);
    let ready = count(|s| s.ready_replicas);
    let observed = match status.and_then(|s| s.observed_generation) {
        Some(seen) => seen >= dep.metadata.generation.unwrap_or(0),
        None => false,
    };
    let done = observed
        && replicas == instances
        && ready == instances
        && count(|s| s.updated_replicas) == instances
        && count(|s| s.replicas) == instances;
    let state = if done {
        VariantState::Ready
    } else {
        VariantState::Progressing
    };
    (state, replicas, ready)
}

/// `"N/M variants ready"` (R3, R11); M counts every declared variant, invalid and conflicting
/// ones too. An idle variant (R42) is as its owner wants it, so it counts as ready, and the
/// summary says how many are: `"5/5 variants ready (3 idle)"`.
pub fn summary(statuses: &[VariantStatus]) -> String {
    let count = |state| statuses.iter().filter(|s| s.state == state).count();
    let idle = count(VariantState::Idle);
    let ready = count(VariantState::Ready) + idle;
    let total = statuses.len();
    if idle == 0 {
        format!("{ready}/{total} variants ready")
    } else {
        format!("{ready}/{total} variants ready ({idle} idle)")
    }
}

/// The standard `Ready` condition (R11). True exactly when the summary is `N/N`: no base error
/// and every declared variant Ready (also with no variant), so `kubectl wait
/// --for=condition=Ready` and `READY` never disagree. Else False, with reason `InvalidBase`
/// (message: the base error), `VariantsNotApplied` when a variant is Invalid or in Conflict,
/// or `VariantsProgressing`; the message is the summary, with the number and the labels of the
/// invalid and conflicting variants if any (R35: which variant failed, e.g. one the API server
/// refused). `AllVariantsReady` when True.
/// `lastTransitionTime` is kept from `previous` when the status did not change, so an
/// unchanged condition serializes byte-identically and no status write is needed (R12).
pub fn ready_condition(
    statuses: &[VariantStatus],
    base_error: Option<&str>,
    generation: Option<i64>,
    previous: Option<&Condition>,
    now: &str,
) -> Condition {
    let (status, reason, message) = match base_error {
        Some(e) => ("False", "InvalidBase", e.to_owned()),
        None => {
            let count = |st| statuses.iter().filter(|s| s.state == st).count();
            let not_applied: Vec<String> = [
                (VariantState::Invalid, "invalid"),
                (VariantState::Conflict, "in conflict"),
            ]
            .into_iter()
            .filter_map(|(state, what)| named(statuses, state, what))
            .collect();
            let message = summary(statuses);
            if !not_applied.is_empty() {
                let message = format!("{message} ({})", not_applied.join("; "));
                ("False", "VariantsNotApplied", message)
            } else if count(VariantState::Progressing) > 0 {
                ("False", "VariantsProgressing", message)
            } else {
                ("True", "AllVariantsReady", message)
            }
        }
    };
    let last_transition_time = match previous {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => now.to_owned(),
    };
    Condition {
        type_: READY_CONDITION.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        last_transition_time,
        observed_generation: generation,
    }
}

/// How many labels of one kind of problem the Ready condition names; the count says how many
/// more there are.
const NAMED_LABELS: usize = 5;

/// `"2 invalid: b, c"`: how many variants are in `state`, and their labels (the first
/// [`NAMED_LABELS`], then `...`); `None` when there is none.
fn named(statuses: &[VariantStatus], state: VariantState, what: &str) -> Option<String> {
    let labels: Vec<&str> = statuses
        .iter()
        .filter(|s| s.state == state)
        .map(|s| s.label.as_str())
        .collect();
    if labels.is_empty() {
        return None;
    }
    let mut list = labels[..labels.len().min(NAMED_LABELS)].join(", ");
    if labels.len() > NAMED_LABELS {
        list.push_str(", ...");
    }
    Some(format!("{} {what}: {list}", labels.len()))
}

/// Whether `new` differs from `previous` only by progress still under way (R50):
/// some variants that were Progressing are Ready now, or have more ready replicas, while
/// another still is Progressing; nothing else changed (no variant went back, no new problem,
/// no other field) but the summary and the Ready condition's message that count them. Such a
/// status may wait a moment for the rest (the Deployment controller observes an owner's
/// Deployments one after another), where any other change is written at once (R12).
pub fn only_progress(previous: &OwnerStatus, new: &OwnerStatus) -> bool {
    let still_progressing = new
        .variants
        .iter()
        .any(|v| v.state == VariantState::Progressing);
    if !still_progressing || previous.variants.len() != new.variants.len() {
        return false;
    }
    let advanced = |p: &VariantStatus, n: &VariantStatus| {
        p == n
            || (p.state == VariantState::Progressing
                && matches!(n.state, VariantState::Progressing | VariantState::Ready)
                && n.ready_replicas >= p.ready_replicas
                && VariantStatus {
                    state: p.state,
                    ready_replicas: p.ready_replicas,
                    ..n.clone()
                } == *p)
    };
    let variants_advanced = previous
        .variants
        .iter()
        .zip(&new.variants)
        .all(|(p, n)| advanced(p, n));
    // The conditions keep their kinds, statuses and reasons; only their messages may count.
    let same_conditions = previous.conditions.len() == new.conditions.len()
        && previous
            .conditions
            .iter()
            .zip(&new.conditions)
            .all(|(p, n)| {
                Condition {
                    message: p.message.clone(),
                    ..n.clone()
                } == *p
            });
    // Every other field the same; named one by one (no clone of the device list), so that a
    // field added to the status is not left out of the comparison.
    let OwnerStatus {
        observed_generation,
        secret,
        summary: _,
        message,
        variant_labels,
        variant_services,
        variants: _,
        conditions: _,
        devices,
        device_summary,
        rollout,
    } = new;
    let rest_same = *observed_generation == previous.observed_generation
        && *secret == previous.secret
        && *message == previous.message
        && *variant_labels == previous.variant_labels
        && *variant_services == previous.variant_services
        && *devices == previous.devices
        && *device_summary == previous.device_summary
        && *rollout == previous.rollout;
    variants_advanced && same_conditions && rest_same
}
