//! One reconcile of one owner, in named steps (R4–R12):
//! secret (Mutations) → validate the base → plan the variants → apply what differs → prune
//! what is no longer declared → status (written only when it changed) and Events.
//!
//! Reads come from the controller's caches; the API server is asked only on a cache miss
//! (a Deployment or Secret that is not ours yet), so a steady state makes no request at all.

use std::{collections::BTreeSet, sync::Arc};

use k8s_openapi::{api::core::v1::ObjectReference, jiff::Timestamp};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, Preconditions},
    runtime::{
        controller::Action,
        events::{Event, EventType},
        reflector::ObjectRef,
    },
};
use serde_json::json;

use super::{
    Context, RESYNC_AFTER,
    secret::{self, SecretState},
};
use crate::{
    Error, Result,
    crd::{OwnerKind, OwnerResource, OwnerStatus, VariantState, VariantStatus},
    variant::{
        self, Base, FIELD_MANAGER, OWNER_LABEL, ObservedDeployment, Owner, Planned,
        READY_CONDITION, VARIANT_LABEL,
    },
};

/// Reconciles one owner. Errors are retried by the controller's error policy.
pub async fn reconcile<K: OwnerResource>(obj: Arc<K>, ctx: Arc<Context>) -> Result<Action> {
    if obj.meta().deletion_timestamp.is_some() {
        // Garbage collection removes the Deployments and the Secret through ownerReferences.
        return Ok(Action::await_change());
    }
    let owner = Owner::from_resource(K::KIND, obj.as_ref())
        .map_err(|message| Error::MissingField(message, "name, namespace or uid"))?;
    let previous = obj.owner_status().cloned().unwrap_or_default();

    let mut messages = Vec::new();
    let secret = match K::KIND {
        OwnerKind::Mutation => {
            let name = secret::secret_name(&owner.name);
            match secret::ensure(&ctx, &owner).await? {
                SecretState::Owned { .. } => Some(name),
                SecretState::Foreign => {
                    messages.push(format!(
                        "Secret {name:?} exists and is not owned by this Mutation: it is left \
                         alone and its token is not accepted; delete it to get a new one"
                    ));
                    None
                }
            }
        }
        OwnerKind::MutantDeployment => None,
    };

    let (variants, base_error) = match Base::parse(&obj.base().value()) {
        Err(problem) => (
            keep_running(&ctx, &owner, obj.as_ref(), &problem),
            Some(problem),
        ),
        Ok(base) => match converge(&ctx, &owner, obj.as_ref(), &base).await? {
            Ok(variants) => (variants, None),
            Err(rejected) => (
                keep_running(&ctx, &owner, obj.as_ref(), &rejected),
                Some(rejected),
            ),
        },
    };
    if let Some(problem) = &base_error {
        messages.insert(0, format!("invalid base deployment: {problem}"));
    }

    let generation = obj.meta().generation;
    let now = Timestamp::now().to_string();
    let previous_ready = previous
        .conditions
        .iter()
        .find(|c| c.type_ == READY_CONDITION);
    let condition = variant::ready_condition(
        &variants,
        base_error.as_deref(),
        generation,
        previous_ready,
        &now,
    );
    let status = OwnerStatus {
        observed_generation: generation,
        secret,
        summary: variant::summary(&variants),
        message: (!messages.is_empty()).then(|| messages.join("; ")),
        variants,
        conditions: vec![condition],
    };

    announce_problems(&ctx, &owner, obj.as_ref(), &previous, &status).await;
    if status != previous {
        write_status::<K>(&ctx, &owner, &status).await?;
    }
    Ok(Action::requeue(RESYNC_AFTER))
}

/// Applies every valid variant whose Deployment differs from what is declared and prunes the
/// Deployments of variants no longer declared. Returns the variants' statuses, or (inner
/// `Err`) the API server's reason for rejecting the base, in which case nothing was applied
/// or pruned (R10).
async fn converge<K: OwnerResource>(
    ctx: &Context,
    owner: &Owner,
    obj: &K,
    base: &Base,
) -> Result<Result<Vec<VariantStatus>, String>> {
    let api: Api<ObservedDeployment> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let mut statuses = Vec::with_capacity(obj.variants().len());
    let mut applied_any = false;
    let mut declared = BTreeSet::new();

    for planned in variant::plan(base, owner, obj.variants()) {
        declared.insert(planned.name().to_string());
        let key = ObjectRef::new(planned.name()).within(&owner.namespace);
        let mut observed = ctx
            .deployments
            .get(&key)
            .map(|d| ObservedDeployment::clone(&d));
        let mut planned = planned;
        if matches!(planned, Planned::Apply { .. }) {
            let ours = observed
                .as_ref()
                .is_some_and(|d| variant::may_prune(&d.metadata, owner));
            if !ours {
                // Not in our cache: a foreign Deployment of that name, or ours just created and
                // not seen yet. Ask the server which (R9: never take over someone else's).
                observed = api.get_opt(planned.name()).await?;
                planned = planned.check_existing(observed.as_ref().map(|d| &d.metadata), owner);
            }
        }
        if let Planned::Apply {
            label,
            name,
            object,
            ..
        } = &planned
            && variant::needs_apply(object, observed.as_ref())
        {
            let params = PatchParams::apply(FIELD_MANAGER).force();
            match api.patch(name, &params, &Patch::Apply(object)).await {
                Ok(applied) => {
                    if observed.is_none() {
                        let note = format!("created Deployment {name} for variant {label}");
                        let related = Some(deployment_ref(&owner.namespace, name));
                        publish(ctx, obj, EventType::Normal, "VariantCreated", note, related).await;
                    }
                    observed = Some(applied);
                    applied_any = true;
                }
                Err(kube::Error::Api(status)) if rejected(&status) && !applied_any => {
                    // The server rejects what every variant is built from: the base.
                    return Ok(Err(status.message));
                }
                Err(kube::Error::Api(status)) if rejected(&status) => {
                    let message = format!("rejected by the API server: {}", status.message);
                    let invalid = Planned::Invalid {
                        label: label.clone(),
                        name: name.clone(),
                        message,
                    };
                    statuses.push(invalid.status(None));
                    continue;
                }
                Err(err) => return Err(err.into()),
            }
        }
        let own = observed
            .as_ref()
            .filter(|d| variant::may_prune(&d.metadata, owner));
        statuses.push(planned.status(own));
    }

    prune(ctx, owner, obj, &api, &declared).await?;
    Ok(Ok(statuses))
}

/// Deletes this owner's Deployments whose variant is no longer declared (R6): only those that
/// carry the owner's labels AND whose controller is this owner's uid, with a uid precondition
/// so a Deployment re-created under the same name meanwhile is not hit.
async fn prune<K: OwnerResource>(
    ctx: &Context,
    owner: &Owner,
    obj: &K,
    api: &Api<ObservedDeployment>,
    declared: &BTreeSet<String>,
) -> Result<()> {
    let stale: Vec<(String, Option<String>)> = ctx
        .deployments
        .state()
        .iter()
        .filter(|d| d.metadata.namespace.as_deref() == Some(owner.namespace.as_str()))
        .filter(|d| variant::may_prune(&d.metadata, owner))
        .filter(|d| !declared.contains(&d.name_any()))
        .map(|d| (d.name_any(), d.metadata.uid.clone()))
        .collect();
    for (name, uid) in stale {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid,
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        match api.delete(&name, &params).await {
            Ok(_) => {
                let note = format!("deleted Deployment {name}: its variant is no longer declared");
                let related = Some(deployment_ref(&owner.namespace, &name));
                publish(ctx, obj, EventType::Normal, "VariantPruned", note, related).await;
            }
            // Already gone, or replaced by another object of that name: nothing to prune.
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
            Err(err) => return Err(err.into()),
        }
    }
    Ok(())
}

/// Statuses while the base is invalid (R10): nothing is applied or pruned, so each variant is
/// reported Invalid, with the replicas of the Deployment that keeps running, if any.
fn keep_running<K: OwnerResource>(
    ctx: &Context,
    owner: &Owner,
    obj: &K,
    problem: &str,
) -> Vec<VariantStatus> {
    let running = ctx.deployments.state();
    let base = obj.base().value();
    let base_name = base.pointer("/metadata/name").and_then(|n| n.as_str());
    obj.variants()
        .iter()
        .map(|v| {
            let existing = running.iter().find(|d| {
                variant::may_prune(&d.metadata, owner)
                    && d.labels().get(VARIANT_LABEL) == Some(&v.label)
                    && d.labels().get(OWNER_LABEL) == Some(&owner.name)
            });
            let deployment = existing
                .map(|d| d.name_any())
                .or_else(|| base_name.map(|b| variant::deployment_name(b, &v.label)))
                .unwrap_or_default();
            let (replicas, ready) = existing
                .map(|d| {
                    let (_, replicas, ready) = variant::variant_state(v.instances, Some(d));
                    (replicas, ready)
                })
                .unwrap_or((0, 0));
            VariantStatus {
                label: v.label.clone(),
                state: VariantState::Invalid,
                message: Some(format!("not applied while the base is invalid: {problem}")),
                deployment,
                replicas,
                ready_replicas: ready,
            }
        })
        .collect()
}

/// Server-side applies the status under the operator's field manager, so fields it no longer
/// reports are removed.
async fn write_status<K: OwnerResource>(
    ctx: &Context,
    owner: &Owner,
    status: &OwnerStatus,
) -> Result<()> {
    let patch = json!({
        "apiVersion": owner.kind.api_version(),
        "kind": owner.kind.kind(),
        "status": status,
    });
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch_status(&owner.name, &params, &Patch::Apply(&patch))
        .await?;
    Ok(())
}

/// Events for variants that became Invalid or Conflict, and for an object-level problem
/// (invalid base, foreign Secret): once per change, not once per resync (R26).
async fn announce_problems<K: OwnerResource>(
    ctx: &Context,
    owner: &Owner,
    obj: &K,
    previous: &OwnerStatus,
    status: &OwnerStatus,
) {
    for problem in ctx.announced.fresh(&owner.uid, previous, status) {
        let related = problem
            .deployment
            .as_deref()
            .map(|d| deployment_ref(&owner.namespace, d));
        publish(
            ctx,
            obj,
            EventType::Warning,
            problem.reason,
            problem.note,
            related,
        )
        .await;
    }
}

/// A reference to a variant's Deployment (which may not exist), the Event's related object:
/// it also keeps Events about different variants apart, as the recorder merges Events with the
/// same reason, owner and related object into one series.
fn deployment_ref(namespace: &str, name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("apps/v1".to_string()),
        kind: Some("Deployment".to_string()),
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        ..ObjectReference::default()
    }
}

/// Publishes an Event on the owner; a failure is logged, never fails the reconcile.
async fn publish<K: OwnerResource>(
    ctx: &Context,
    obj: &K,
    type_: EventType,
    reason: &str,
    note: String,
    related: Option<ObjectReference>,
) {
    let event = Event {
        type_,
        reason: reason.to_string(),
        note: Some(truncate(note, 1000)),
        action: "Reconcile".to_string(),
        secondary: related,
    };
    if let Err(err) = ctx.recorder.publish(&event, &obj.object_ref(&())).await {
        tracing::warn!(reason, error = %err, "could not publish an Event");
    }
}

fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut cut = max;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

/// Whether the API server refused the object itself, so that retrying cannot help: 422
/// (invalid), or the 500 that server-side apply answers for a field the Deployment schema does
/// not declare ("failed to create typed patch object (...): ...: field not declared in
/// schema"), whatever the field validation asked for.
fn rejected(status: &kube::core::Status) -> bool {
    status.code == 422
        || (status.code == 500
            && status
                .message
                .starts_with("failed to create typed patch object"))
}
