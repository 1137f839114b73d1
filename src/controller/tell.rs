//! The Events of a reconcile (R26): one for the Deployments it created, one per variant it
//! pruned, and one per problem when it appears (`announce.rs` remembers which were told).

use k8s_openapi::api::core::v1::ObjectReference;

use super::{context::Context, events::EventType};
use crate::{
    crd::{OwnerResource, OwnerStatus},
    variant::Owner,
};

/// A Deployment a reconcile created, for its Event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Created {
    /// The variant's label.
    pub label: String,
    /// The Deployment's name.
    pub deployment: String,
}

/// One `VariantCreated` Event for the Deployments this reconcile created (R26): one per
/// reconcile, not one per variant, so a new owner of many variants costs one Event. The
/// Deployment is its related object when there is one.
pub(super) async fn announce_created<K: OwnerResource>(
    ctx: &Context,
    owner: &Owner,
    obj: &K,
    created: &[Created],
) {
    let (note, related) = match created {
        [] => return,
        [one] => (
            format!(
                "created Deployment {} for variant {}",
                one.deployment, one.label
            ),
            Some(deployment_ref(&owner.namespace, &one.deployment)),
        ),
        many => {
            let list: Vec<String> = many
                .iter()
                .map(|c| format!("{} (variant {})", c.deployment, c.label))
                .collect();
            (
                format!("created {} Deployments: {}", many.len(), list.join(", ")),
                None,
            )
        }
    };
    publish(ctx, obj, EventType::Normal, "VariantCreated", note, related).await;
}

/// Events for variants that became Invalid or Conflict, and for an object-level problem
/// (invalid base, foreign Secret): once per change, not once per resync (R26).
pub(super) async fn announce_problems<K: OwnerResource>(
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

/// A reference to a variant's Deployment (which may not exist), the Event's related object,
/// so that `kubectl events` shows which variant an Event is about.
pub(super) fn deployment_ref(namespace: &str, name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("apps/v1".to_string()),
        kind: Some("Deployment".to_string()),
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        ..ObjectReference::default()
    }
}

/// Publishes an Event on the owner; a failure is logged, never fails the reconcile.
pub(super) async fn publish<K: OwnerResource>(
    ctx: &Context,
    obj: &K,
    type_: EventType,
    reason: &str,
    note: String,
    related: Option<ObjectReference>,
) {
    ctx.events
        .publish(obj.object_ref(&()), type_, reason, note, related)
        .await;
}
