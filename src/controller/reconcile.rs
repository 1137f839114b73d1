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
//!    then, when the owner asks for them, each applied variant's Service (`services`, R36);
//! 5. **report** (pure, [`variant::owner_status`]), then write the status when it changed
//!    (after a creation, in the reconcile the creation brings), and announce new problems as
//!    Events.
//!
//! Reads come from the controller's caches; a steady state makes no request at all.

use std::{collections::BTreeSet, sync::Arc};

use k8s_openapi::jiff::Timestamp;
use kube::{Api, runtime::controller::Action};

use super::{
    context::{Context, REFUSED_RETRY, RESYNC_AFTER},
    devices,
    events::EventType,
    rollout,
    secret::{self, SecretState},
    services, sleep,
    tell::{Created, announce_created, announce_problems, deployment_ref, publish},
    write::{self, WriteError},
};
use crate::{
    Result,
    crd::{OwnerKind, OwnerResource, VariantStatus},
    submit,
    variant::{
        self, Base, DeploymentWire, Findings, MetaView, ObservedDeployment, Owner, Planned,
        converge::{self, Done, Next, Outcome},
        devices::Policy,
    },
};

/// A device's change of state is looked at this long after it is due, so that the clock has
/// passed it.
const DEVICE_SLACK: std::time::Duration = std::time::Duration::from_millis(500);

/// Reconciles one owner. Errors are retried by the controller's error policy.
pub async fn reconcile<K: OwnerResource>(obj: Arc<K>, ctx: Arc<Context>) -> Result<Action> {
    if obj.meta().deletion_timestamp.is_some() {
        // Garbage collection removes the Deployments and the Secret through ownerReferences.
        return Ok(Action::await_change());
    }
    let owner = Owner::from_resource(K::KIND, obj.as_ref())?;
    let previous = ctx.previous(&owner.uid, obj.as_ref());

    // A name too long to be a label value cannot be served: no Secret, no Deployment can carry
    // it. Reported, and left at that, rather than failing every reconcile.
    let unservable = variant::unservable_name(K::KIND.kind(), &owner.name);
    let (secret, mut problems) = match &unservable {
        Some(_) => (None, Vec::new()),
        None => ensure_secret(&ctx, &owner).await?,
    };
    // R39: spec.devices, checked; a policy that does not hold is reported and no device's
    // state is changed by it.
    let device_policy = match obj.devices().map(Policy::of) {
        Some(Err(problem)) => {
            problems.push(problem);
            None
        }
        Some(Ok(policy)) => Some(policy),
        None => None,
    };
    // R42: spec.devices.sleep, checked like the rest of spec.devices; one that does not hold
    // is reported and no variant sleeps.
    let (sleep_policy, sleeping) = sleep::prepare(
        &ctx,
        &owner,
        obj.as_ref(),
        device_policy.as_ref(),
        &previous,
        &mut problems,
    );
    let declared = sleeping.effective(obj.variants());
    let base = obj.base().value();
    let observed = observe(&ctx, &owner);
    let mut created = Vec::new();
    let mut denied = false;
    let mut not_allowed = None;
    let mut rolling = rollout::Rolling::default();
    let (variants, base_error) = match Base::parse(&base) {
        Ok(parsed) => {
            // Issue 37: with spec.rollout, which base revision each variant runs.
            rolling = rollout::prepare(
                &ctx,
                &owner,
                obj.as_ref(),
                &parsed,
                &declared,
                &observed,
                &previous,
                &mut problems,
            )
            .await?;
            let planned = rolling.plan(&parsed, &owner, &declared);
            // Issue 35, item 1: a token's env never reaches a command line the base added later.
            let planned = variant::commands::hold_command_lines(
                planned,
                &parsed,
                obj.device_access(),
                &declared,
            );
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
                Converged::Applied(mut variants, new, refused) => {
                    created = new;
                    // R36: the variants' Services, once their Deployments are applied.
                    let services_denied =
                        services::converge(&ctx, &owner, obj.as_ref(), &parsed, &mut variants)
                            .await?;
                    denied |= refused || services_denied;
                    (variants, None)
                }
                Converged::BaseRejected(reason) => (Vec::new(), Some(reason)),
            }
        }
        Err(problem) => (Vec::new(), Some(problem)),
    };
    announce_created(&ctx, &owner, obj.as_ref(), &created).await;
    let variants = match &base_error {
        None => sleeping.report(variants),
        Some(problem) => {
            let base_name = base.pointer("/metadata/name").and_then(|n| n.as_str());
            let owned = observed.iter().map(Arc::as_ref);
            variant::held_statuses(obj.variants(), &owner, base_name, owned, problem)
        }
    };

    let now = Timestamp::now().to_string();
    let mut status = variant::owner_status(Findings {
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
    let silent = sleeping.condition(&previous, &now);
    status.conditions.extend(silent);
    rolling.report(&mut status, &previous, &now);
    // The device list is written apart (`devices`); it is the same status either way.
    status.devices.clone_from(&previous.devices);
    status.device_summary.clone_from(&previous.device_summary);
    announce_problems(&ctx, &owner, obj.as_ref(), &previous, &status).await;
    // A reconcile that created Deployments leaves the status to the next one, which their
    // creation brings (their watch events re-queue this owner within the debounce): a status
    // written now would say only "Progressing" and be written over at once. Creation happens
    // once per Deployment, so this cannot put the status off for long.
    if status != previous && created.is_empty() {
        write::status::<K>(&ctx, &owner, &status).await?;
        ctx.wrote(&owner.uid, obj.as_ref(), &status);
        sleep::count(&ctx, &previous, &status);
    }
    // R40: the devices' states as time changes them, requeued for the next change.
    let device_change = match &device_policy {
        Some(policy) => devices::converge(&ctx, &owner, policy, &previous).await?,
        None => None,
    };
    // R42: variants made by enrollment whose devices are gone.
    let (devices, policy) = (device_policy.as_ref(), sleep_policy.as_ref());
    let expiry = sleep::expire_gone(&ctx, &owner, obj.as_ref(), devices, policy, &sleeping).await?;
    // A variant a quota or an admission policy refused is tried again sooner than the resync:
    // freeing the quota or changing the policy is no event of this owner's (R35), and neither
    // is labelling the namespace privileged (R33).
    let after = if denied { REFUSED_RETRY } else { RESYNC_AFTER };
    let changes = [device_change, sleeping.next(), expiry, rolling.next()]
        .into_iter()
        .flatten();
    let after = changes.fold(after, |after, change| after.min(change + DEVICE_SLACK));
    Ok(Action::requeue(after))
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
    let known = &ctx.pod_security;
    Ok(submit::pod_security::refusal(&ctx.client, known, &owner.namespace, objects).await?)
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
    /// Deployments created, and whether a policy of the cluster (a quota, an
    /// admission policy) refused a variant, which is then Invalid (R35).
    Applied(Vec<VariantStatus>, Vec<Created>, bool),
    /// The API server refused the first write for a reason of the object itself: the base is
    /// at fault, and nothing was applied or pruned (R10).
    BaseRejected(String),
}

/// Step 4: writes every planned variant whose Deployment is missing or differs from what is
/// declared ([`write_variant`]), then prunes the Deployments of variants no longer declared.
async fn converge<K: OwnerResource>(
    ctx: &Context,
    owner: &Owner,
    obj: &K,
    base: &Base,
    planned: Vec<Planned>,
    observed: &[Arc<ObservedDeployment>],
) -> Result<Converged> {
    let api: Api<DeploymentWire> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let mut statuses = Vec::with_capacity(planned.len());
    let mut created = Vec::new();
    let mut declared = BTreeSet::new();
    let mut denied = false;

    for planned in planned {
        declared.insert(planned.name().to_string());
        // What observe found of this name; anything else of that name is looked up (R9).
        let cached = observed
            .iter()
            .find(|d| d.metadata.name() == Some(planned.name()))
            .cloned();
        match write_variant(ctx, &api, owner, base, planned, cached).await? {
            Written::Reported {
                status,
                created: new,
            } => {
                created.extend(new);
                statuses.push(status);
            }
            Written::Refused {
                status,
                denied: by_policy,
            } => {
                denied |= by_policy;
                statuses.push(status);
            }
            Written::BaseRejected(reason) => return Ok(Converged::BaseRejected(reason)),
        }
    }

    let stale = variant::stale(observed.iter().map(Arc::as_ref), owner, &declared);
    prune(ctx, owner, obj, &api, stale).await?;
    Ok(Converged::Applied(statuses, created, denied))
}

/// How one variant's writes ended ([`write_variant`]).
enum Written {
    /// Its status, and the Deployment it created, if any.
    Reported {
        status: VariantStatus,
        created: Option<Created>,
    },
    /// Refused by the API server: `Invalid`; `denied` by a policy of the cluster (R35).
    Refused { status: VariantStatus, denied: bool },
    /// The base is at fault (R10).
    BaseRejected(String),
}

/// Carries out step 4's step machine ([`converge::next`]) for one variant: each request it
/// asks for, and what that came to, fed back; the decisions are all in `variant::converge`.
async fn write_variant(
    ctx: &Context,
    api: &Api<DeploymentWire>,
    owner: &Owner,
    base: &Base,
    mut planned: Planned,
    mut current: Option<Arc<ObservedDeployment>>,
) -> Result<Written> {
    let mut next = converge::start(&planned, current.as_deref(), owner);
    let mut created = false;
    let mut failure = None;
    let done = loop {
        let outcome = match (&next, &planned) {
            (Next::Done(done), _) => break done.clone(),
            (Next::Create, Planned::Apply { object, .. }) => {
                match write::create(ctx, &owner.namespace, object).await {
                    Ok(made) => {
                        (current, created) = (Some(Arc::new(made)), true);
                        Outcome::Created
                    }
                    Err(WriteError::Refused(status))
                        if crate::status_is(&status, 409, Some("AlreadyExists")) =>
                    {
                        // Someone else's Deployment (R9), or this owner's not cached yet.
                        Outcome::NameTaken
                    }
                    Err(err) => write_refused(ctx, owner, object, err, &mut failure).await,
                }
            }
            (Next::LookUp, _) => {
                current = (api.get_opt(planned.name()).await?).map(|d| Arc::new(d.into_observed()));
                let meta = current.as_ref().map(|d| &d.metadata as &dyn MetaView);
                planned = planned.check_existing(meta, owner);
                Outcome::LookedUp
            }
            (Next::Apply, Planned::Apply { name, object, .. }) => {
                match write::apply(ctx, api, name, object, current.as_deref()).await {
                    Ok(written) => {
                        current = Some(Arc::new(written));
                        Outcome::Applied
                    }
                    Err(err) => write_refused(ctx, owner, object, err, &mut failure).await,
                }
            }
            (Next::ProbeBase { .. }, _) => {
                let bare = variant::build(base, owner, &converge::bare_variant(planned.label()));
                Outcome::BaseProbed(submit::refusal(&ctx.client, &owner.namespace, &bare).await)
            }
            // Only a variant that can be applied is written.
            (Next::Create | Next::Apply, _) => Outcome::Failed,
        };
        next = converge::next(&next, outcome, &planned, current.as_deref(), owner);
    };
    Ok(match done {
        Done::Reported => {
            let own = current
                .as_deref()
                .filter(|d| variant::may_prune(&d.metadata, owner));
            Written::Reported {
                status: planned.status(own),
                created: created.then(|| Created {
                    label: planned.label().to_string(),
                    deployment: planned.name().to_string(),
                }),
            }
        }
        Done::Refused { message, denied } => Written::Refused {
            status: planned
                .into_invalid(format!("rejected by the API server: {message}"))
                .status(None),
            denied,
        },
        Done::BaseRejected(reason) => Written::BaseRejected(reason),
        Done::Failed => {
            return Err(failure.unwrap_or_else(|| {
                crate::Error::Internal(format!(
                    "variant {:?}: its writes ended in failure with no error to report",
                    planned.label()
                ))
            }));
        }
    })
}

/// What a failed write of `object` came to: the server's refusal of the object, told by
/// [`write::rejection`], or a failure to retry (kept in `failure` for the reconcile to return).
async fn write_refused(
    ctx: &Context,
    owner: &Owner,
    object: &serde_json::Value,
    err: WriteError,
    failure: &mut Option<crate::Error>,
) -> Outcome {
    let outcome = match err {
        WriteError::Refused(status) => write::rejection(ctx, &owner.namespace, object, status)
            .await
            .map(|(refusal, message)| Outcome::Refused(refusal, message)),
        WriteError::Failed(err) => Err(err),
    };
    outcome.unwrap_or_else(|err| {
        *failure = Some(err);
        Outcome::Failed
    })
}

/// Deletes `stale` Deployments (R6), each with a uid precondition so a Deployment re-created
/// under the same name meanwhile is not hit.
async fn prune<K: OwnerResource>(
    ctx: &Context,
    owner: &Owner,
    obj: &K,
    api: &Api<DeploymentWire>,
    stale: Vec<variant::Stale>,
) -> Result<()> {
    for stale in stale {
        if write::delete_stale(api, &stale).await? {
            let name = &stale.name;
            let note = format!("deleted Deployment {name}: its variant is no longer declared");
            let related = Some(deployment_ref(&owner.namespace, name));
            publish(ctx, obj, EventType::Normal, "VariantPruned", note, related).await;
        }
    }
    Ok(())
}
