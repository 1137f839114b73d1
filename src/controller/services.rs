//! Step 4b of a reconcile: a Service per variant (R36), when the owner asks for them.
//!
//! After the Deployments, each variant whose Deployment is applied gets its Service
//! ([`variant::build_service`]), written as the Deployments are: created with a POST when the
//! cache does not know it (looked up only when the name is taken), server-side applied over
//! one of this owner's when it differs, never written over someone else's (the variant is then
//! `Conflict`). A Service that cannot be made, or that the API server refuses, makes the
//! variant `Invalid` with the reason; its Deployment still runs. Services of variants no
//! longer declared, or all of them once `service` is removed from the spec, are pruned like
//! Deployments: only those carrying the owner's labels and controlled by its uid.

use std::{collections::BTreeSet, sync::Arc};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::Value;

use super::{context::Context, events::EventType, tell, write};
use crate::{
    Result,
    crd::{OwnerResource, VariantService, VariantState, VariantStatus},
    submit,
    variant::{self, Base, FIELD_MANAGER, ObservedService, Owner, Refusal, Step},
};

/// What became of one variant's Service.
enum Outcome {
    /// It is as declared: how to reach it.
    Served(VariantService),
    /// It is not: the variant's new state (`Invalid`, `Conflict`) and why.
    NotServed(VariantState, String),
    /// The API server refused it for a policy of the cluster (a quota, an admission policy),
    /// which may change without an event: the variant is `Invalid`, tried again soon (R35).
    Denied(String),
}

/// Writes the Service of every variant in `statuses` whose Deployment is applied, sets its
/// `service` (or its new state and message), and prunes the owner's Services that no declared
/// variant has. Returns whether a policy of the cluster refused a Service.
pub(super) async fn converge<K: OwnerResource>(
    ctx: &Context,
    owner: &Owner,
    obj: &K,
    base: &Base,
    statuses: &mut [VariantStatus],
) -> Result<bool> {
    let api: Api<ObservedService> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let cached = ctx
        .caches
        .services(owner.kind)
        .of_owner(&owner.namespace, &owner.name);
    let mut declared = BTreeSet::new();
    let mut denied = false;
    if let Some(spec) = obj.service() {
        // Issue 35, item 5: a variant may say it gets no Service (its Service, if any, is
        // pruned as undeclared).
        let unserved: BTreeSet<&str> = obj
            .variants()
            .iter()
            .filter(|v| v.service == Some(false))
            .map(|v| v.label.as_str())
            .collect();
        for status in statuses.iter_mut() {
            if unserved.contains(status.label.as_str()) {
                continue;
            }
            declared.insert(status.deployment.clone());
            if !variant::serves(status.state) {
                continue;
            }
            let outcome = match variant::build_service(base, owner, &status.label, spec) {
                Ok(desired) => {
                    serve(ctx, &api, owner, &status.deployment, &desired, &cached).await?
                }
                Err(message) => Outcome::NotServed(VariantState::Invalid, message),
            };
            match outcome {
                Outcome::Served(service) => status.service = Some(service),
                Outcome::NotServed(state, message) => {
                    status.state = state;
                    status.message = Some(message);
                }
                Outcome::Denied(message) => {
                    denied = true;
                    status.state = VariantState::Invalid;
                    status.message = Some(message);
                }
            }
        }
    }
    let stale = variant::stale(cached.iter().map(Arc::as_ref), owner, &declared);
    prune(ctx, obj, &api, stale).await?;
    Ok(denied)
}

/// Makes Service `name` as `desired`, from what the cache knows of it (`cached`: this owner's
/// by label), asking the API server only when the cache cannot say or a write is due.
async fn serve(
    ctx: &Context,
    api: &Api<ObservedService>,
    owner: &Owner,
    name: &str,
    desired: &Value,
    cached: &[Arc<ObservedService>],
) -> Result<Outcome> {
    let current = cached
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some(name));
    match variant::resolve_service(desired, current.map(Arc::as_ref), owner, false) {
        Step::Keep => match current {
            Some(service) => Ok(Outcome::Served(variant::service_status(service))),
            None => write_over(ctx, api, owner, name, desired).await,
        },
        Step::Create => match create(ctx, owner, desired).await? {
            Some(outcome) => Ok(outcome),
            // Taken: someone else's (R9), or this owner's that the cache has not seen yet.
            None => write_over(ctx, api, owner, name, desired).await,
        },
        Step::LookUp | Step::Write => write_over(ctx, api, owner, name, desired).await,
    }
}

/// POSTs a new Service. `None`: the name is taken.
async fn create(ctx: &Context, owner: &Owner, desired: &Value) -> Result<Option<Outcome>> {
    let created = submit::post_to::<ObservedService, ObservedService>(
        &ctx.client,
        &owner.namespace,
        desired,
        false,
    )
    .await;
    match created {
        Ok(service) => Ok(Some(Outcome::Served(variant::service_status(&service)))),
        Err(err) if crate::already_exists(&err) => Ok(None),
        Err(err) => refused(err).map(Some),
    }
}

/// Reads Service `name` from the API server and, when it is this owner's and differs from
/// `desired`, hands a POST's field ownership over to server-side apply (as for Deployments) and
/// applies `desired` over it. Someone else's is left alone: `Conflict` (R36, as R9).
async fn write_over(
    ctx: &Context,
    api: &Api<ObservedService>,
    owner: &Owner,
    name: &str,
    desired: &Value,
) -> Result<Outcome> {
    let Some(fresh) = api.get_opt(name).await? else {
        // Deleted since: made anew (a second "taken" fails the reconcile, to be retried).
        return match create(ctx, owner, desired).await? {
            Some(outcome) => Ok(outcome),
            None => {
                let message = format!("Service {name:?} was deleted and made again meanwhile");
                let mut status = kube::core::Status::failure(&message, "Conflict");
                status.code = 409;
                Err(kube::Error::Api(Box::new(status)).into())
            }
        };
    };
    if let Some(foreign) = variant::foreign(&fresh.metadata, owner) {
        return Ok(Outcome::NotServed(
            VariantState::Conflict,
            format!(
                "Service {name:?} already exists and {}; it is left alone",
                foreign.by
            ),
        ));
    }
    if !variant::service_needs_apply(desired, Some(&fresh)) {
        return Ok(Outcome::Served(variant::service_status(&fresh)));
    }
    if let Some(entry) = fresh.created_entry() {
        let resource_version = fresh.metadata.resource_version.as_deref().unwrap_or("");
        let patch = entry.handover_patch(resource_version);
        match write::hand_over::<ObservedService>(ctx, &fresh.metadata, patch).await {
            Ok(()) => {}
            // Changed since it was read: the reconcile fails, and is tried again.
            Err(kube::Error::Api(status)) if write::moved_on(&status) => {
                return Err(kube::Error::Api(status).into());
            }
            Err(err) => return refused(err),
        }
    }
    let params = PatchParams::apply(FIELD_MANAGER).force();
    match api.patch(name, &params, &Patch::Apply(desired)).await {
        Ok(service) => Ok(Outcome::Served(variant::service_status(&service))),
        Err(err) => refused(err),
    }
}

/// A write that failed: the variant's `Invalid` when the API server refused the Service itself
/// or a policy refused it ([`variant::classify`]); otherwise the reconcile fails, to be
/// retried.
fn refused(err: kube::Error) -> Result<Outcome> {
    match err {
        kube::Error::Api(status) => {
            let message = format!(
                "Service rejected by the API server: {}",
                variant::server_message(&status.message)
            );
            match variant::classify(&status) {
                Some(Refusal::Malformed) => Ok(Outcome::NotServed(VariantState::Invalid, message)),
                Some(Refusal::Denied) => Ok(Outcome::Denied(message)),
                None => Err(kube::Error::Api(status).into()),
            }
        }
        err => Err(err.into()),
    }
}

/// Deletes `stale` Services (R36, as R6), each with a uid precondition so a Service made again
/// under the same name meanwhile is not hit; one `ServicePruned` Event each.
async fn prune<K: OwnerResource>(
    ctx: &Context,
    obj: &K,
    api: &Api<ObservedService>,
    stale: Vec<variant::Stale>,
) -> Result<()> {
    for stale in stale {
        if write::delete_stale(api, &stale).await? {
            let name = &stale.name;
            let related = ObjectReference {
                api_version: Some("v1".to_string()),
                kind: Some("Service".to_string()),
                name: Some(name.clone()),
                namespace: obj.meta().namespace.clone(),
                ..ObjectReference::default()
            };
            let note = format!("deleted Service {name}: no declared variant has it");
            tell::publish(
                ctx,
                obj,
                EventType::Normal,
                "ServicePruned",
                note,
                Some(related),
            )
            .await;
        }
    }
    Ok(())
}
