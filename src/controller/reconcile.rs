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

use std::{collections::BTreeSet, sync::Arc, time::Instant};

use k8s_openapi::jiff::Timestamp;
use kube::{Api, runtime::controller::Action};

use super::{
    context::{Context, REFUSED_RETRY, RESYNC_AFTER},
    devices, rollout,
    secret::{self, SecretState},
    services, sleep,
    tell::{Created, announce_created, announce_problems},
    write,
};
use crate::{
    Result,
    crd::{OwnerKind, OwnerResource, VariantStatus},
    submit,
    variant::{
        self, Base, DeploymentWire, Findings, MetaView, ObservedDeployment, Owner, Planned,
        converge::{self, DeploymentSubject, Done, Subject},
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
    // R39: spec.devices, checked (parsed once per generation, R50); a policy that does not
    // hold is reported and no device's state is changed by it.
    let parsed = ctx.caches.parsed(obj.as_ref());
    if let Some(Err(problem)) = &parsed.devices {
        problems.push(problem.clone());
    }
    let device_policy = parsed.devices();
    // R42: spec.devices.sleep, checked like the rest of spec.devices; one that does not hold
    // is reported and no variant sleeps.
    let (sleep_policy, sleeping) = sleep::prepare(
        &ctx,
        &owner,
        obj.as_ref(),
        &parsed,
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
        Ok(base_parsed) => {
            // R43: with spec.rollout, which base revision each variant runs.
            rolling = rollout::prepare(
                &ctx,
                &owner,
                obj.as_ref(),
                parsed.rollout.as_ref(),
                &base_parsed,
                &declared,
                &observed,
                &previous,
                &mut problems,
            )
            .await?;
            let planned = rolling.plan(&base_parsed, &owner, &declared);
            // R41: a token's env never reaches a command line the base added later.
            let planned = variant::commands::hold_command_lines(
                planned,
                &base_parsed,
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
            match converge(&ctx, &owner, obj.as_ref(), &base_parsed, planned, &observed).await? {
                Converged::Applied(mut variants, new, refused) => {
                    created = new;
                    // R36: the variants' Services, once their Deployments are applied.
                    let services_denied =
                        services::converge(&ctx, &owner, obj.as_ref(), &base_parsed, &mut variants)
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
    // R50: partial progress waits a moment for the rest (`hold`).
    let mut put_off = None;
    if status != previous && created.is_empty() {
        put_off = ctx
            .progress
            .put_off(&owner.uid, &previous, &status, Instant::now());
        if put_off.is_none() {
            write::status::<K>(&ctx, &owner, &status).await?;
            ctx.wrote(&owner.uid, obj.as_ref(), &status);
            sleep::count(&ctx, &previous, &status);
        }
    }
    // R40: the devices' states as time changes them, requeued for the next change.
    let device_change = match device_policy {
        Some(policy) => devices::converge(&ctx, &owner, policy, &previous).await?,
        None => None,
    };
    // R42: variants made by enrollment whose devices are gone.
    let (devices, policy) = (device_policy, sleep_policy);
    let expiry = sleep::expire_gone(&ctx, &owner, obj.as_ref(), devices, policy, &sleeping).await?;
    // A variant a quota or an admission policy refused is tried again sooner than the resync:
    // freeing the quota or changing the policy is no event of this owner's (R35), and neither
    // is labelling the namespace privileged (R33).
    let after = if denied { REFUSED_RETRY } else { RESYNC_AFTER };
    let changes = [device_change, sleeping.next(), expiry, rolling.next()]
        .into_iter()
        .flatten();
    let after = changes.fold(after, |after, change| after.min(change + DEVICE_SLACK));
    Ok(Action::requeue(
        put_off.map_or(after, |left| after.min(left)),
    ))
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
    write::prune(ctx, obj, &api, stale, &PRUNED).await?;
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

/// The requests of step 4's step machine for one variant's Deployment ([`write::drive`]).
pub(super) struct DeploymentWrites<'a> {
    pub(super) api: &'a Api<DeploymentWire>,
    pub(super) owner: &'a Owner,
    pub(super) base: &'a Base,
    pub(super) planned: &'a Planned,
}

impl DeploymentWrites<'_> {
    /// The Deployment to write: only a variant that can be applied is ever written.
    fn object(&self) -> Result<&serde_json::Value, kube::Error> {
        match self.planned {
            Planned::Apply { object, .. } => Ok(object),
            _ => Err(kube::Error::Service(
                format!("variant {:?} cannot be applied", self.planned.label()).into(),
            )),
        }
    }
}

impl write::Writes for DeploymentWrites<'_> {
    type Observed = ObservedDeployment;

    fn subject<'a>(&'a self, current: Option<&'a ObservedDeployment>) -> impl Subject + 'a {
        DeploymentSubject {
            planned: self.planned,
            current,
            owner: self.owner,
        }
    }

    fn meta(current: &ObservedDeployment) -> &dyn MetaView {
        &current.metadata
    }

    fn handover_patch(current: &ObservedDeployment) -> Option<serde_json::Value> {
        let version = current.metadata.resource_version().unwrap_or_default();
        Some(current.created_entry?.handover_patch(version))
    }

    async fn create(&self, client: &kube::Client) -> Result<ObservedDeployment, kube::Error> {
        submit::post(client, &self.owner.namespace, self.object()?, false).await
    }

    async fn get(&self, _: &kube::Client) -> Result<Option<ObservedDeployment>, kube::Error> {
        let found = self.api.get_opt(self.planned.name()).await?;
        Ok(found.map(DeploymentWire::into_observed))
    }

    async fn apply(&self, _: &kube::Client) -> Result<ObservedDeployment, kube::Error> {
        let applied = write::apply(self.api, self.planned.name(), self.object()?).await?;
        Ok(DeploymentWire::into_observed(applied))
    }

    async fn hand_over(
        &self,
        client: &kube::Client,
        meta: &dyn MetaView,
        patch: serde_json::Value,
    ) -> Result<(), kube::Error> {
        write::hand_over::<DeploymentWire>(client, meta, patch).await
    }

    async fn dry_run(&self, client: &kube::Client) -> Option<String> {
        submit::refusal(client, &self.owner.namespace, self.object().ok()?).await
    }

    async fn probe_base(&self, client: &kube::Client) -> Option<String> {
        let bare = variant::build(
            self.base,
            self.owner,
            &converge::bare_variant(self.planned.label()),
        );
        submit::refusal(client, &self.owner.namespace, &bare).await
    }
}

/// Step 4 for one variant: its Deployment through the step machine ([`write::drive`]), and
/// what that came to for its status.
async fn write_variant(
    ctx: &Context,
    api: &Api<DeploymentWire>,
    owner: &Owner,
    base: &Base,
    planned: Planned,
    cached: Option<Arc<ObservedDeployment>>,
) -> Result<Written> {
    let writes = DeploymentWrites {
        api,
        owner,
        base,
        planned: &planned,
    };
    let driven = write::drive(&ctx.client, &writes, cached).await?;
    Ok(match driven.done {
        Done::Reported => {
            let own = driven
                .current
                .as_deref()
                .filter(|d| variant::may_prune(&d.metadata, owner));
            Written::Reported {
                status: planned.status(own),
                created: driven.created.then(|| Created {
                    label: planned.label().to_string(),
                    deployment: planned.name().to_string(),
                }),
            }
        }
        Done::Conflict(message) => Written::Reported {
            status: planned.into_conflict(message).status(None),
            created: None,
        },
        Done::Refused { message, denied } => Written::Refused {
            status: planned
                .into_invalid(format!("rejected by the API server: {message}"))
                .status(None),
            denied,
        },
        Done::BaseRejected(reason) => Written::BaseRejected(reason),
        Done::Failed => {
            return Err(crate::Error::Internal(write::FAILED_WITHOUT_ERROR));
        }
    })
}

/// Step 4's prune of Deployments ([`write::prune`], R6): one `VariantPruned` Event each.
const PRUNED: write::Pruned = write::Pruned {
    api_version: "apps/v1",
    kind: "Deployment",
    reason: "VariantPruned",
    why: "its variant is no longer declared",
};

#[cfg(test)]
mod tests;
