//! One reconcile of one owner (R4–R12), as named steps:
//!
//! 1. **secret** (Mutations): make sure the token's Secret exists and is this Mutation's;
//! 2. **plan** (pure, [`variant::plan`]): the Deployment each declared variant should be;
//!    then **pod security** ([`submit::pod_security::refusal`]): when their pod template breaks Pod
//!    Security "baseline" in a namespace not labelled privileged, or runs as the operator's
//!    own ServiceAccount, every variant is Invalid and nothing is applied for it (R33);
//! 3. **observe**: this owner's Deployments, from the cache;
//! 4. **resolve** (pure, [`variant::resolve`]) and **write**: create what the cache does not
//!    know (looked up only when the server says the name is taken), apply what differs, prune
//!    ([`variant::stale`]) what is no longer declared; one Event for what was created. A
//!    variant whose write the API server refuses ([`variant::classify`]) is Invalid with the
//!    server's message, and the others go on (R35), unless the base alone is refused (R10);
//! 5. **report** (pure, [`variant::owner_status`]), then write the status when it changed
//!    (after a creation, in the reconcile the creation brings), and announce new problems as
//!    Events.
//!
//! Reads come from the controller's caches; a steady state makes no request at all.

use std::{collections::BTreeSet, sync::Arc};

use k8s_openapi::{api::core::v1::ObjectReference, jiff::Timestamp};
use kube::{
    Api,
    api::{DeleteParams, Patch, PatchParams, Preconditions},
    runtime::controller::Action,
};
use serde_json::json;

use super::{
    Context, REFUSED_RETRY, RESYNC_AFTER,
    events::EventType,
    secret::{self, SecretState},
    write::{self, WriteError},
};
use crate::{
    Result,
    crd::{OwnerKind, OwnerResource, OwnerStatus, Variant, VariantStatus},
    submit,
    variant::{
        self, Base, FIELD_MANAGER, Findings, ObservedDeployment, Owner, Planned, Refusal, Step,
    },
};

/// Reconciles one owner. Errors are retried by the controller's error policy.
pub async fn reconcile<K: OwnerResource>(obj: Arc<K>, ctx: Arc<Context>) -> Result<Action> {
    if obj.meta().deletion_timestamp.is_some() {
        // Garbage collection removes the Deployments and the Secret through ownerReferences.
        return Ok(Action::await_change());
    }
    let owner = Owner::from_resource(K::KIND, obj.as_ref())?;
    let previous = obj.owner_status().cloned().unwrap_or_default();

    // A name too long to be a label value cannot be served: no Secret, no Deployment can carry
    // it. Reported, and left at that, rather than failing every reconcile.
    let unservable = variant::unservable_name(K::KIND.kind(), &owner.name);
    let (secret, problems) = match &unservable {
        Some(_) => (None, Vec::new()),
        None => ensure_secret(&ctx, &owner).await?,
    };
    let base = obj.base().value();
    let observed = observe(&ctx, &owner);
    let mut created = Vec::new();
    let mut denied = false;
    let mut not_allowed = None;
    let (variants, base_error) = match Base::parse(&base) {
        Ok(parsed) => {
            let planned = variant::plan(&parsed, &owner, obj.variants());
            let planned = match refused(&ctx, &owner, &planned).await? {
                None => planned,
                Some(problem) => {
                    // A namespace labelled privileged later is no event of this owner's.
                    denied = true;
                    let held = variant::hold_back(planned, &problem);
                    not_allowed = Some(problem);
                    held
                }
            };
            match converge(&ctx, &owner, obj.as_ref(), &parsed, planned, &observed).await? {
                Converged::Applied(variants, new, refused) => {
                    created = new;
                    denied |= refused;
                    (variants, None)
                }
                Converged::BaseRejected(reason) => (Vec::new(), Some(reason)),
            }
        }
        Err(problem) => (Vec::new(), Some(problem)),
    };
    announce_created(&ctx, &owner, obj.as_ref(), &created).await;
    let variants = match &base_error {
        None => variants,
        Some(problem) => {
            let base_name = base.pointer("/metadata/name").and_then(|n| n.as_str());
            let owned = observed.iter().map(Arc::as_ref);
            variant::held_statuses(obj.variants(), &owner, base_name, owned, problem)
        }
    };

    let now = Timestamp::now().to_string();
    let status = variant::owner_status(Findings {
        previous: &previous,
        generation: obj.meta().generation,
        secret,
        base_error: base_error.as_deref(),
        unservable: unservable.as_deref(),
        not_allowed: not_allowed.as_deref(),
        problems,
        variants,
        now: &now,
    });
    announce_problems(&ctx, &owner, obj.as_ref(), &previous, &status).await;
    // A reconcile that created Deployments leaves the status to the next one, which their
    // creation brings (their watch events re-queue this owner within the debounce): a status
    // written now would say only "Progressing" and be written over at once. Creation happens
    // once per Deployment, so this cannot put the status off for long.
    if status != previous && created.is_empty() {
        write_status::<K>(&ctx, &owner, &status).await?;
    }
    // A variant a quota or an admission policy refused is tried again sooner than the resync:
    // freeing the quota or changing the policy is no event of this owner's (R35), and neither
    // is labelling the namespace privileged (R33).
    Ok(Action::requeue(if denied {
        REFUSED_RETRY
    } else {
        RESYNC_AFTER
    }))
}

/// Step 1, for a Mutation: its Secret, made if missing. Returns the Secret's name when the
/// Mutation owns it, and the problem to report when a foreign Secret has the name.
async fn ensure_secret(ctx: &Context, owner: &Owner) -> Result<(Option<String>, Vec<String>)> {
    if owner.kind != OwnerKind::Mutation {
        return Ok((None, Vec::new()));
    }
    let name = variant::secret_name(&owner.name);
    Ok(match secret::ensure(ctx, owner).await? {
        SecretState::Owned { .. } => (Some(name), Vec::new()),
        SecretState::Foreign => (
            None,
            vec![format!(
                "Secret {name:?} exists and is not owned by this Mutation: it is left alone and \
                 its token is not accepted; delete it to get a new one"
            )],
        ),
    })
}

/// Step 2, pod security (R33): why the operator does not make the Deployments of `planned`
/// in the owner's namespace, if it does not.
async fn refused(ctx: &Context, owner: &Owner, planned: &[Planned]) -> Result<Option<String>> {
    let objects = planned.iter().filter_map(|p| match p {
        Planned::Apply { object, .. } => Some(object),
        _ => None,
    });
    let own = ctx.own_account.as_ref();
    Ok(submit::pod_security::refusal(&ctx.client, own, &owner.namespace, objects).await?)
}

/// Step 3: the cached Deployments this owner controls, through the owner index.
fn observe(ctx: &Context, owner: &Owner) -> Vec<Arc<ObservedDeployment>> {
    ctx.caches
        .deployments(owner.kind)
        .of_owner(&owner.namespace, &owner.name)
        .into_iter()
        .filter(|d| variant::may_prune(&d.metadata, owner))
        .collect()
}

/// How step 4 ended.
enum Converged {
    /// Every valid variant is applied and the stale ones pruned: the variants' statuses, the
    /// Deployments created (label, name), and whether a policy of the cluster (a quota, an
    /// admission policy) refused a variant, which is then Invalid (R35).
    Applied(Vec<VariantStatus>, Vec<(String, String)>, bool),
    /// The API server refused the first write for a reason of the object itself: the base is
    /// at fault, and nothing was applied or pruned (R10).
    BaseRejected(String),
}

/// Step 4: writes every planned variant whose Deployment is missing or differs from what is
/// declared, then prunes the Deployments of variants no longer declared.
///
/// A variant whose Deployment the cache does not know is created with a POST, without asking
/// first: in the common case (a new variant) the name is free, and one request does it. Only
/// when the server answers that the name is taken (409) is the Deployment looked up, to tell
/// someone else's (a Conflict, R9) from this owner's not cached yet. One that exists is
/// server-side applied ([`apply`]).
async fn converge<K: OwnerResource>(
    ctx: &Context,
    owner: &Owner,
    obj: &K,
    base: &Base,
    planned: Vec<Planned>,
    observed: &[Arc<ObservedDeployment>],
) -> Result<Converged> {
    let api: Api<ObservedDeployment> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let mut statuses = Vec::with_capacity(planned.len());
    let mut created = Vec::new();
    let mut declared = BTreeSet::new();
    let mut denied = false;

    for mut planned in planned {
        declared.insert(planned.name().to_string());
        // What observe found of this name; anything else of that name is looked up (R9).
        let mut current = observed
            .iter()
            .find(|d| d.metadata.name.as_deref() == Some(planned.name()))
            .cloned();
        let mut step = variant::resolve(&planned, current.as_deref(), owner, false);
        let mut written = Ok(None);
        if let (Step::Create, Planned::Apply { object, .. }) = (step, &planned) {
            written = write::create(ctx, &owner.namespace, object).await.map(Some);
            if let Err(WriteError::Refused(status)) = &written
                && crate::status_is(status, 409, Some("AlreadyExists"))
            {
                // The name is taken: someone else's Deployment (R9), or this owner's that the
                // cache has not seen yet.
                (step, written) = (Step::LookUp, Ok(None));
            }
        }
        if step == Step::LookUp {
            current = api.get_opt(planned.name()).await?.map(Arc::new);
            planned = planned.check_existing(current.as_ref().map(|d| &d.metadata), owner);
            step = variant::resolve(&planned, current.as_deref(), owner, true);
        }
        if let (Step::Write, Planned::Apply { name, object, .. }) = (step, &planned) {
            written = write::apply(ctx, &api, name, object, current.as_deref())
                .await
                .map(Some);
        }
        match written {
            Ok(None) => {}
            Ok(Some(deployment)) => {
                if step == Step::Create
                    && let Planned::Apply { label, name, .. } = &planned
                {
                    created.push((label.clone(), name.clone()));
                }
                current = Some(Arc::new(deployment));
            }
            Err(WriteError::Refused(status)) => {
                let Planned::Apply { label, object, .. } = &planned else {
                    return Err(kube::Error::Api(status).into());
                };
                let (refusal, message) =
                    write::rejection(ctx, &owner.namespace, object, status).await?;
                // A malformed Deployment: whose fault? The same variant without its own env,
                // placement and containers, at 0 instances, is the base alone. When the server
                // refuses that too, the base is at fault (R10): nothing is applied or pruned. A
                // policy's refusal (a quota, an admission policy) is this variant's alone (R35):
                // the others are applied and pruned, and the status says why this one is not.
                if refusal == Refusal::Malformed {
                    let alone = Variant {
                        label: label.clone(),
                        instances: 0,
                        ..Variant::default()
                    };
                    let bare = variant::build(base, owner, &alone);
                    if let Some(reason) =
                        submit::refusal(&ctx.client, &owner.namespace, &bare).await
                    {
                        return Ok(Converged::BaseRejected(reason));
                    }
                }
                denied |= refusal == Refusal::Denied;
                let message = format!("rejected by the API server: {message}");
                statuses.push(planned.into_invalid(message).status(None));
                continue;
            }
            Err(WriteError::Failed(err)) => return Err(err),
        }
        let own = current
            .as_deref()
            .filter(|d| variant::may_prune(&d.metadata, owner));
        statuses.push(planned.status(own));
    }

    let stale = variant::stale(observed.iter().map(Arc::as_ref), owner, &declared);
    prune(ctx, owner, obj, &api, stale).await?;
    Ok(Converged::Applied(statuses, created, denied))
}

/// Deletes `stale` Deployments (R6), each with a uid precondition so a Deployment re-created
/// under the same name meanwhile is not hit.
async fn prune<K: OwnerResource>(
    ctx: &Context,
    owner: &Owner,
    obj: &K,
    api: &Api<ObservedDeployment>,
    stale: Vec<(String, Option<String>)>,
) -> Result<()> {
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

/// One `VariantCreated` Event for the Deployments this reconcile created (R26): one per
/// reconcile, not one per variant, so a new owner of many variants costs one Event. The
/// Deployment is its related object when there is one.
async fn announce_created<K: OwnerResource>(
    ctx: &Context,
    owner: &Owner,
    obj: &K,
    created: &[(String, String)],
) {
    let (note, related) = match created {
        [] => return,
        [(label, name)] => (
            format!("created Deployment {name} for variant {label}"),
            Some(deployment_ref(&owner.namespace, name)),
        ),
        many => {
            let list: Vec<String> = many
                .iter()
                .map(|(label, name)| format!("{name} (variant {label})"))
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

/// A reference to a variant's Deployment (which may not exist), the Event's related object,
/// so that `kubectl events` shows which variant an Event is about.
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
    ctx.events
        .publish(obj.object_ref(&()), type_, reason, note, related)
        .await;
}
