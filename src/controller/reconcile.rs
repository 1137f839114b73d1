//! One reconcile of one owner (R4–R12), as named steps, and the owner's features
//! ([`Feature`]: sleep, rollout, the devices' states) folded over them:
//!
//! 1. **secret** (Mutations): make sure the token's Secret exists and is this Mutation's;
//! 2. **plan**: each feature prepared (its policy parsed once per generation, R50), the
//!    variants as the features declare them, the Deployment each should be (pure,
//!    [`variant::plan`], from the base revision a rollout gives it); then **pod security**
//!    ([`submit::pod_security::refusal`]): when their pod template breaks Pod Security
//!    "baseline" in a namespace not labelled privileged, or runs as the operator's own
//!    ServiceAccount, every variant is Invalid and nothing is applied for it (R33);
//! 3. **observe**: this owner's Deployments, from the cache;
//! 4. **converge** ([`deployments`]): create, apply and prune the Deployments; one Event for
//!    what was created; then, when the owner asks for them, each applied variant's Service
//!    (`services`, R36);
//! 5. **report** (pure, [`variant::owner_status`], and each feature's part), then write the
//!    status when it changed (after a creation, in the reconcile the creation brings), and
//!    announce new problems as Events; then what the features write once the status is (the
//!    devices' states, expiries);
//! 6. **requeue**: at the resync, sooner after a refusal by a policy of the cluster, and at
//!    the first time a feature wants.
//!
//! Reads come from the controller's caches; a steady state makes no request at all.

use std::{sync::Arc, time::Duration, time::Instant};

use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;

use super::{
    context::{Context, REFUSED_RETRY, RESYNC_AFTER},
    deployments::{self, Converged},
    devices,
    feature::{Feature, Later},
    rollout::{self, Rolling},
    screens::{self, Screens},
    secret::{self, SecretState},
    services,
    sleep::{self, Sleeping},
    tell::{Created, announce_created, announce_problems},
    write,
};
use crate::{
    Result,
    crd::{OwnerKind, OwnerResource, OwnerStatus, VariantStatus},
    submit,
    variant::{self, Base, Findings, ObservedDeployment, Owner, Planned, parsed::Parsed},
};

/// A device's change of state is looked at this long after it is due, so that the clock has
/// passed it.
const DEVICE_SLACK: Duration = Duration::from_millis(500);

/// Reconciles one owner. Errors are retried by the controller's error policy.
pub async fn reconcile<K: OwnerResource>(obj: Arc<K>, ctx: Arc<Context>) -> Result<Action> {
    if obj.meta().deletion_timestamp.is_some() {
        // Garbage collection removes the Deployments and the Secret through ownerReferences.
        return Ok(Action::await_change());
    }
    let (ctx, obj) = (ctx.as_ref(), obj.as_ref());
    let owner = Owner::from_resource(K::KIND, obj)?;
    let previous = ctx.previous(&owner.uid, obj);
    let parsed = ctx.caches.parsed(obj);
    let mut plan = prepare(ctx, &owner, obj, &parsed, &previous).await?;
    let applied = converge(ctx, &owner, obj, &mut plan).await?;
    announce_created(ctx, &owner, obj, &applied.created).await;
    let (created, denied) = (!applied.created.is_empty(), plan.denied || applied.denied);
    let status = report(&owner, obj, &mut plan, &previous, applied);
    announce_problems(ctx, &owner, obj, &previous, &status).await;
    let put_off = write_status(ctx, &owner, obj, &previous, &status, created).await?;
    // R40: the devices' states as time changes them; R42: variants made by enrollment whose
    // devices are gone.
    let device_change = match parsed.devices() {
        Some(policy) => devices::converge(ctx, &owner, policy, &previous).await?,
        None => None,
    };
    let (devices, policy) = (parsed.devices(), parsed.sleep());
    let expiry = sleep::expire_gone(ctx, &owner, obj, devices, policy, &plan.sleeping).await?;
    let settled = [Later(device_change), Later(expiry)];
    let features = plan
        .features()
        .chain(settled.iter().map(|l| l as &dyn Feature));
    Ok(requeue(denied, put_off, features))
}

/// What steps 1 to 3 found and planned.
struct Plan {
    /// The token's Secret, when the Mutation owns it.
    secret: Option<String>,
    /// Problems of the spec, for the status.
    problems: Vec<String>,
    /// Why the owner's name cannot be served, if it cannot.
    unservable: Option<String>,
    /// What sleep decided (R42).
    sleeping: Sleeping,
    /// What the rollout decided (R43).
    rolling: Rolling,
    /// Which screens are served, after the fetches that were due (R53).
    screens: Screens,
    /// The base, checked, or why it is refused (R10).
    base: Result<Base, String>,
    /// This owner's Deployments, cached.
    observed: Vec<Arc<ObservedDeployment>>,
    /// Each declared variant's Deployment, to converge.
    planned: Vec<Planned>,
    /// Whether a policy of the cluster refused the variants (R33).
    denied: bool,
    /// Why the operator does not make them, if it does not (R33).
    not_allowed: Option<String>,
}

impl Plan {
    /// The features, in the order they report.
    fn features(&self) -> impl Iterator<Item = &dyn Feature> {
        [&self.sleeping as &dyn Feature, &self.rolling, &self.screens].into_iter()
    }
}

/// Steps 1 to 3: the Secret, each feature prepared, the variants planned and checked against
/// the namespace's Pod Security (R33), the owner's Deployments observed.
async fn prepare<K: OwnerResource>(
    ctx: &Context,
    owner: &Owner,
    obj: &K,
    parsed: &Parsed,
    previous: &OwnerStatus,
) -> Result<Plan> {
    let mut plan = Plan {
        secret: None,
        problems: Vec::new(),
        // A name too long to be a label value cannot be served: no Secret, no Deployment can
        // carry it. Reported, and left at that, rather than failing every reconcile.
        unservable: variant::unservable_name(K::KIND.kind(), &owner.name),
        sleeping: Sleeping::default(),
        rolling: Rolling::default(),
        screens: Screens::default(),
        base: Base::parse(&obj.base().value()),
        observed: observe(ctx, owner),
        planned: Vec::new(),
        denied: false,
        not_allowed: None,
    };
    if plan.unservable.is_none() {
        (plan.secret, plan.problems) = ensure_secret(ctx, owner).await?;
    }
    // R39: spec.devices, checked; a policy that does not hold is reported and no device's
    // state is changed by it. R42: its sleep alike, and then no variant sleeps.
    if let Some(Err(problem)) = &parsed.devices {
        plan.problems.push(problem.clone());
    }
    plan.sleeping = sleep::prepare(ctx, obj, parsed, previous, &mut plan.problems);
    // R53: the screens that are due, fetched from the Services the last reconcile made.
    if plan.unservable.is_none() {
        plan.screens = screens::prepare(
            ctx,
            owner,
            obj,
            parsed,
            &plan.observed,
            previous,
            &mut plan.problems,
        )
        .await?;
    }
    let declared = plan
        .features()
        .fold(obj.variants().to_vec(), |v, f| f.declare(v));
    let Ok(base) = &plan.base else {
        return Ok(plan);
    };
    // R43: with spec.rollout, which base revision each variant runs.
    let (rollout, observed) = (parsed.rollout.as_ref(), &plan.observed);
    let problems = &mut plan.problems;
    plan.rolling = rollout::prepare(
        ctx, owner, obj, rollout, base, &declared, observed, previous, problems,
    )
    .await?;
    let planned = plan.rolling.plan(base, owner, &declared);
    // R41: a token's env never reaches a command line the base added later.
    let access = obj.device_access();
    let planned = variant::commands::hold_command_lines(planned, base, access, &declared);
    plan.planned = match refused(ctx, owner, &planned).await? {
        None => planned,
        Some(problem) => {
            // A namespace labelled privileged later is no event of this owner's.
            plan.denied = true;
            let held = variant::hold_back(planned, &problem);
            plan.not_allowed = Some(problem);
            held
        }
    };
    Ok(plan)
}

/// How step 4 ended: the variants' statuses, the Deployments created, whether a policy of the
/// cluster refused a variant (R35), and why the base is refused, if it is (R10).
#[derive(Default)]
struct Applied {
    variants: Vec<VariantStatus>,
    created: Vec<Created>,
    denied: bool,
    base_error: Option<String>,
}

/// Step 4: the Deployments ([`deployments::converge`]), then the Services (R36).
async fn converge<K: OwnerResource>(
    ctx: &Context,
    owner: &Owner,
    obj: &K,
    plan: &mut Plan,
) -> Result<Applied> {
    let base = match &plan.base {
        Ok(base) => base,
        Err(problem) => return Ok(Applied::refused(problem)),
    };
    let planned = std::mem::take(&mut plan.planned);
    match deployments::converge(ctx, owner, obj, base, planned, &plan.observed).await? {
        Converged::Applied(mut variants, created, refused) => {
            let services_denied = services::converge(ctx, owner, obj, base, &mut variants).await?;
            Ok(Applied {
                variants,
                created,
                denied: refused || services_denied,
                base_error: None,
            })
        }
        Converged::BaseRejected(reason) => Ok(Applied::refused(&reason)),
    }
}

impl Applied {
    /// Nothing applied: the base is refused for `problem`.
    fn refused(problem: &str) -> Applied {
        Applied {
            base_error: Some(problem.to_owned()),
            ..Applied::default()
        }
    }
}

/// Step 5: the owner's status, from what step 4 applied and each feature's part.
fn report<K: OwnerResource>(
    owner: &Owner,
    obj: &K,
    plan: &mut Plan,
    previous: &OwnerStatus,
    applied: Applied,
) -> OwnerStatus {
    let variants = match &applied.base_error {
        None => plan.features().fold(applied.variants, |v, f| f.variants(v)),
        Some(problem) => {
            let base = obj.base().value();
            let base_name = base.pointer("/metadata/name").and_then(|n| n.as_str());
            let owned = plan.observed.iter().map(Arc::as_ref);
            variant::held_statuses(obj.variants(), owner, base_name, owned, problem)
        }
    };
    let now = Timestamp::now().to_string();
    let mut status = variant::owner_status(Findings {
        previous,
        generation: obj.meta().generation,
        secret: plan.secret.take(),
        base_error: applied.base_error.as_deref(),
        unservable: plan.unservable.as_deref(),
        not_allowed: plan.not_allowed.as_deref(),
        problems: std::mem::take(&mut plan.problems),
        variants,
        now: &now,
    });
    for feature in plan.features() {
        feature.report(&mut status, previous, &now);
    }
    // The device list is written apart (`devices`); it is the same status either way.
    status.devices.clone_from(&previous.devices);
    status.device_summary.clone_from(&previous.device_summary);
    status
}

/// Step 5's write: the status when it changed, unless Deployments were `created` (their
/// creation brings the next reconcile within the debounce, and a status written now would say
/// only "Progressing" and be written over at once; creation happens once per Deployment, so
/// this cannot put the status off for long) or it only shows partial progress, which waits a
/// moment for the rest (R50, `hold`): then how long that is.
async fn write_status<K: OwnerResource>(
    ctx: &Context,
    owner: &Owner,
    obj: &K,
    previous: &OwnerStatus,
    status: &OwnerStatus,
    created: bool,
) -> Result<Option<Duration>> {
    if status == previous || created {
        return Ok(None);
    }
    let put_off = ctx
        .progress
        .put_off(&owner.uid, previous, status, Instant::now());
    if put_off.is_none() {
        write::status::<K>(ctx, owner, status).await?;
        ctx.wrote(&owner.uid, obj, status);
        sleep::count(ctx, previous, status);
    }
    Ok(put_off)
}

/// Step 6: when to reconcile the owner again: at the resync, or sooner after a refusal by a
/// policy of the cluster (`denied`: freeing a quota, changing an admission policy or labelling
/// the namespace privileged is no event of this owner's, R33, R35); at the first change a
/// feature wants (a moment after it, so that the clock has passed it); and when a status put
/// off is due.
fn requeue<'f>(
    denied: bool,
    put_off: Option<Duration>,
    features: impl Iterator<Item = &'f dyn Feature>,
) -> Action {
    let after = if denied { REFUSED_RETRY } else { RESYNC_AFTER };
    let changes = features.filter_map(|f| f.next());
    let after = changes.fold(after, |after, change| after.min(change + DEVICE_SLACK));
    Action::requeue(put_off.map_or(after, |left| after.min(left)))
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

#[cfg(test)]
mod tests;
