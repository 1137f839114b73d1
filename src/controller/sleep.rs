//! Sleep as the leader applies it (R42): for a Mutation with `spec.devices.sleep`,
//! which variants are up ([`variant::sleep::decide`], from the persisted device entries and
//! variant statuses alone), the variants as planned (an idle one at zero instances, its spec
//! untouched), their status (`Idle` and why), the site's silence, and the expiry of variants
//! made by enrollment whose devices are gone.
//!
//! Expiry deletes, so it is held back three ways: never while the site is silent, only after
//! this process itself has watched the variant be due for `min(expireAfter, 10m)` of its own
//! monotonic clock (a board without a real-time clock that jumps forward expires nothing, and
//! a new leader starts watching anew: never early), and at most [`EXPIRED_PER_HOUR`] in an
//! hour on this replica.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use k8s_openapi::jiff::Timestamp;

use super::{context::Context, events::EventType, feature::Feature, tell::publish};
use crate::{
    Result,
    crd::{
        Condition, DeviceStatus, OwnerResource, OwnerStatus, SleepState, Variant, VariantState,
        VariantStatus, WakeCause,
    },
    store::CONTROLLER_CALL_LIMIT,
    variant::{
        Owner,
        departure::{expiring, site_silent},
        devices::{Policy, Registry},
        parsed::Parsed,
        sleep::SleepPolicy,
        wake::{Decision, Moment, Rhythm, Sleeper, decide},
    },
};

/// Annotation on a Mutation: silences that began before this time (RFC 3339) are accepted as
/// departures, and no longer hold the site silent.
pub const SILENCE_ACCEPTED: &str = "mutantops.neiam.org/silence-accepted";

/// Label of a Mutation that puts it in a site group of its namespace (R42): the devices of
/// the Mutations with the same value are counted together for the site-silent guard.
pub const SITE_LABEL: &str = "mutantops.neiam.org/site";
/// Condition type while the site is silent.
pub const SITE_SILENT: &str = "SiteSilent";
/// Most variants this replica expires in an hour.
pub const EXPIRED_PER_HOUR: usize = 20;
/// The longest this process watches a variant be due before it expires it.
const WATCHED: Duration = Duration::from_secs(600);

/// What sleep decided for one Mutation.
#[derive(Debug, Default)]
pub struct Sleeping {
    /// Per label of a variant that sleeps.
    pub decisions: BTreeMap<String, Decision>,
    /// Why the site is silent, if it is.
    pub silent: Option<String>,
}

/// Sleep in a reconcile (R42): idle variants planned at zero instances and reported `Idle`,
/// the `SiteSilent` condition, and a look again when a decision may change by time alone.
impl Feature for Sleeping {
    fn next(&self) -> Option<Duration> {
        self.decisions.values().filter_map(|d| d.next).min()
    }

    fn declare(&self, variants: Vec<Variant>) -> Vec<Variant> {
        variants
            .into_iter()
            .map(|v| match self.decisions.get(&v.label) {
                Some(d) if d.sleep.state == SleepState::Idle => Variant { instances: 0, ..v },
                _ => v,
            })
            .collect()
    }

    /// Each variant's sleep in its status; an idle one whose Deployment is applied is `Idle`,
    /// with why.
    fn variants(&self, mut statuses: Vec<VariantStatus>) -> Vec<VariantStatus> {
        for s in &mut statuses {
            let Some(d) = self.decisions.get(&s.label) else {
                continue;
            };
            s.sleep = Some(Box::new(d.sleep.clone()));
            let applied = matches!(s.state, VariantState::Ready | VariantState::Progressing);
            if d.sleep.state == SleepState::Idle && applied {
                s.state = VariantState::Idle;
                s.message = Some(d.sleep.reason.clone());
            }
        }
        statuses
    }

    /// The `SiteSilent` condition, while the site is silent; its transition time kept.
    fn report(&self, status: &mut OwnerStatus, previous: &OwnerStatus, now: &str) {
        let Some(message) = self.silent.clone() else {
            return;
        };
        let since = previous
            .conditions
            .iter()
            .find(|c| c.type_ == SITE_SILENT)
            .map_or_else(|| now.to_owned(), |c| c.last_transition_time.clone());
        status.conditions.push(Condition {
            type_: SITE_SILENT.to_owned(),
            status: "True".to_owned(),
            reason: "DevicesSilentTogether".to_owned(),
            message,
            last_transition_time: since,
            observed_generation: None,
        });
    }
}

/// The devices counted together for the site-silent guard (R42), and the latest accepted
/// silence among their Mutations: `obj`'s own (`previous`), or, when it carries [`SITE_LABEL`],
/// every device of the Mutations of its namespace with the same value. Counted per Mutation
/// by default, so that one Mutation's devices (fake ones, say) say nothing of another's.
fn site_devices<K: OwnerResource>(
    ctx: &Context,
    obj: &K,
    previous: &OwnerStatus,
) -> (Vec<DeviceStatus>, Option<Timestamp>) {
    let accepted_of = |annotations: Option<&BTreeMap<String, String>>| {
        annotations
            .and_then(|a| a.get(SILENCE_ACCEPTED))
            .and_then(|t| t.parse::<Timestamp>().ok())
    };
    let meta = obj.meta();
    let group = meta.labels.as_ref().and_then(|l| l.get(SITE_LABEL));
    let Some(group) = group else {
        return (
            previous.devices.clone(),
            accepted_of(meta.annotations.as_ref()),
        );
    };
    let mut devices = Vec::new();
    let mut accepted: Option<Timestamp> = None;
    for m in ctx.caches.mutations.state() {
        let same = m.metadata.namespace == meta.namespace
            && m.spec.devices.is_some()
            && m.metadata.labels.as_ref().and_then(|l| l.get(SITE_LABEL)) == Some(group);
        if !same {
            continue;
        }
        if let Some(status) = &m.status {
            devices.extend(status.devices.iter().cloned());
        }
        accepted = accepted.max(accepted_of(m.metadata.annotations.as_ref()));
    }
    (devices, accepted)
}

/// `obj`'s `spec.devices.sleep` as `parsed` holds it (a problem is pushed to `problems`, and
/// then no variant sleeps; none sleeps either when `spec.devices` does not hold), and what it
/// decides now.
pub fn prepare<K: OwnerResource>(
    ctx: &Context,
    obj: &K,
    parsed: &Parsed,
    previous: &OwnerStatus,
    problems: &mut Vec<String>,
) -> Sleeping {
    let (Some(devices), Some(sleep)) = (parsed.devices(), parsed.sleep.as_ref()) else {
        return Sleeping::default();
    };
    match sleep {
        Ok(policy) => {
            let site = site_devices(ctx, obj, previous);
            let uid = obj.meta().uid.as_deref().unwrap_or_default();
            let rhythms = super::screens::rhythms(ctx, uid, obj, parsed, previous);
            plan(obj.variants(), previous, devices, policy, site, &rhythms)
        }
        Err(problem) => {
            problems.push(problem.clone());
            Sleeping::default()
        }
    }
}

/// Decides, for every variant of `variants` that sleeps, whether it is up now.
pub fn plan(
    variants: &[Variant],
    previous: &OwnerStatus,
    devices: &Policy,
    sleep: &SleepPolicy,
    (site, accepted): (Vec<DeviceStatus>, Option<Timestamp>),
    rhythms: &BTreeMap<String, Rhythm>,
) -> Sleeping {
    let now = Timestamp::now();
    let quiet_until = sleep.quiet_until(now);
    let site: Vec<&DeviceStatus> = site.iter().collect();
    // Devices told to sleep through quiet hours went quiet together, and no power cut did.
    let silent = if sleep.explains_silence(now, devices.late_after) {
        None
    } else {
        site_silent(&site, devices.late_after, sleep.site_silent_min, accepted)
    };
    let moment = Moment {
        now,
        quiet_until,
        site_silent: silent.is_some(),
    };
    let mut decisions = BTreeMap::new();
    for v in variants.iter().filter(|v| v.sleep != Some(false)) {
        let mine: Vec<&DeviceStatus> = previous
            .devices
            .iter()
            .filter(|d| d.variant == v.label)
            .collect();
        let before = previous
            .variants
            .iter()
            .find(|s| s.label == v.label)
            .and_then(|s| s.sleep.as_deref());
        let sleeper = Sleeper {
            devices: &mine,
            previous: before,
            late_after: devices.late_after,
            screen: rhythms.get(&v.label).copied(),
        };
        decisions.insert(v.label.clone(), decide(sleep, &sleeper, &moment));
    }
    Sleeping { decisions, silent }
}

/// Expires what [`expire`] finds due, and tells of it (Event `VariantExpired`, a log line,
/// `mutantops_variants_expired_total`). Returns how long until the next may be due.
pub async fn expire_gone<K: OwnerResource>(
    ctx: &Context,
    owner: &Owner,
    obj: &K,
    devices: Option<&Policy>,
    sleep: Option<&SleepPolicy>,
    sleeping: &Sleeping,
) -> Result<Option<Duration>> {
    let (Some(devices), Some(sleep)) = (devices, sleep) else {
        return Ok(None);
    };
    let registry = super::devices::registry(ctx, owner);
    let silent = sleeping.silent.is_some();
    let (expired, next) = expire(ctx, owner, obj, &registry, devices, sleep, silent).await?;
    if !expired.is_empty() {
        ctx.metrics.variants_expired(expired.len());
        let note = format!(
            "removed variant(s) {} made by enrollment: every device of theirs was Gone for \
             spec.devices.sleep.expireAfter; their devices' records went with them",
            expired.join(", ")
        );
        publish(ctx, obj, EventType::Normal, "VariantExpired", note, None).await;
        tracing::info!(namespace = %owner.namespace, name = %owner.name, variants = ?expired, "expired variants of devices gone");
    }
    Ok(next)
}

/// Expires the variants made by enrollment whose devices have all been Gone for
/// `expireAfter` (R42): each is removed from the spec, then its devices'
/// records and its label from the devices Secret (in that order, so a crash between leaves
/// a made label that the next reconcile finishes). Returns the labels expired and how long
/// until the next may be due.
pub async fn expire<K: OwnerResource>(
    ctx: &Context,
    owner: &Owner,
    obj: &K,
    registry: &Registry,
    devices: &Policy,
    sleep: &SleepPolicy,
    silent: bool,
) -> Result<(Vec<String>, Option<Duration>)> {
    let listed = obj.owner_status().map_or(&[][..], |s| &s.devices[..]);
    let (due, next) = expiring(
        &registry.made,
        listed,
        devices.gone_after,
        sleep.expire_after,
        Timestamp::now(),
    );
    let watched = WATCHED.min(sleep.expire_after);
    let (ns, name) = (&owner.namespace, &owner.name);
    let (ready, wait) = ctx.expiry.watched(ns, name, &due, watched, Instant::now());
    let mut wait = [wait, next].into_iter().flatten().min();
    if silent || ready.is_empty() {
        return Ok((Vec::new(), wait));
    }
    let mut expired = Vec::new();
    for label in ready {
        if !ctx.expiry.take(EXPIRED_PER_HOUR, Instant::now()) {
            tracing::warn!(namespace = %owner.namespace, name = %owner.name, variant = %label, "expiry held back: {EXPIRED_PER_HOUR} variants expired within the hour");
            wait = [wait, Some(Duration::from_secs(60))]
                .into_iter()
                .flatten()
                .min();
            break;
        }
        remove_variant(ctx, owner, &label).await?;
        forget_devices(ctx, owner, &label).await?;
        unlist_devices(ctx, owner, &label).await?;
        expired.push(label);
    }
    Ok((expired, wait))
}

/// Removes variant `label` from the Mutation's spec, through the store (a Mutation gone
/// meanwhile has nothing to remove).
async fn remove_variant(ctx: &Context, owner: &Owner, label: &str) -> Result<()> {
    let label = label.to_owned();
    ctx.edit_variants(owner, move |m| {
        let variants = m.spec.variants.iter().filter(|v| v.label != label);
        Ok(variants.cloned().collect())
    })
    .await?;
    Ok(())
}

/// Drops the status entries of the devices of variant `label`, through the store.
async fn unlist_devices(ctx: &Context, owner: &Owner, label: &str) -> Result<()> {
    let label = label.to_owned();
    ctx.edit_devices(owner, move |m| {
        let listed = m.status.as_ref().map_or(&[][..], |s| &s.devices[..]);
        let kept = listed.iter().filter(|d| d.variant != label);
        Ok(kept.cloned().collect())
    })
    .await?;
    Ok(())
}

/// Drops the records of variant `label`'s devices, and the label from the made ones, from
/// the devices Secret, through the store. A Secret the owner does not control is left alone.
/// The edit only removes devices, which the store's bound on their number never refuses.
async fn forget_devices(ctx: &Context, owner: &Owner, label: &str) -> Result<()> {
    let label = label.to_owned();
    let forgotten =
        ctx.store
            .edit_registry(owner, usize::MAX, CONTROLLER_CALL_LIMIT, move |registry| {
                if registry.made.contains(&label) {
                    registry.devices.retain(|_, d| d.variant != label);
                    registry.made.remove(&label);
                }
                Ok(())
            });
    match forgotten.await {
        Ok(_) => Ok(()),
        // Not the owner's (409): nothing of it is the operator's to change.
        Err(err) if err.0 == hyper::StatusCode::CONFLICT => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// Counts what the status just written says happened (R42, R25): each variant
/// that started, by cause, and for one that became Ready since it started, how long that
/// took.
pub fn count(ctx: &Context, previous: &OwnerStatus, status: &OwnerStatus) {
    let now = Timestamp::now();
    for v in &status.variants {
        let before = previous.variants.iter().find(|p| p.label == v.label);
        let was_idle = before
            .and_then(|p| p.sleep.as_ref())
            .is_some_and(|s| s.state == SleepState::Idle);
        let Some(sleep) = &v.sleep else {
            // Idle before and no longer sleeping: the owner pinned it or turned sleep off.
            if was_idle {
                ctx.metrics.variant_woke(WakeCause::Admin);
            }
            continue;
        };
        if sleep.state != SleepState::Awake {
            continue;
        }
        if was_idle && let Some(cause) = sleep.cause {
            ctx.metrics.variant_woke(cause);
        }
        let became_ready = v.state == VariantState::Ready
            && before.is_some_and(|p| p.state != VariantState::Ready);
        let started = sleep.wakes.last() == Some(&sleep.since);
        if became_ready
            && started
            && let Ok(since) = sleep.since.parse::<Timestamp>()
        {
            let seconds = now.as_second().saturating_sub(since.as_second());
            ctx.metrics.variant_ready_after(seconds.max(0) as f64);
        }
    }
}
