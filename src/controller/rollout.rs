//! A base change reaching the variants in steps, as the leader applies it (R43): the
//! owner's `spec.rollout`, checked; each base revision kept in a ControllerRevision of the
//! owner (`<owner>-<revision>`, the base's text as written, so that a variant held on it, or
//! rolled back to it, is built byte for byte as before); what [`variant::rollout::decide`]
//! decides from the variants' Deployments; each variant planned from the base of the revision
//! it is to run, its Deployment labelled with that revision; and `status.rollout`.
//!
//! A revision's base is read from the API server once per process and kept in memory while a
//! variant or the rollout needs it: a rollout that is Complete reads nothing. Once one
//! completes, the ControllerRevisions other than the current and the previous one are
//! deleted.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use k8s_openapi::{
    api::apps::v1::ControllerRevision,
    apimachinery::pkg::{apis::meta::v1::ObjectMeta, runtime::RawExtension},
    jiff::Timestamp,
};
use kube::{
    Api,
    api::{DeleteParams, ListParams, PostParams},
};
use serde_json::{Value, json};

use super::{context::Context, events::EventType, feature::Feature, tell::publish};
use crate::{
    Result,
    crd::{Condition, OwnerResource, OwnerStatus, RolloutPhase, Variant, VariantState},
    variant::{
        self, Base, KIND_LABEL, MetaView, OWNER_LABEL, ObservedDeployment, Owner, Planned,
        is_controlled_by,
        rollout::{
            ABORT_ANNOTATION, Health, Outcome, RESUME_ANNOTATION, REVISION_LABEL, RolloutPolicy,
            Running, Word, decide, revision_of,
        },
    },
};

/// Condition type while a rollout is held (a pause, `spec.rollout.paused`, a failed step).
pub const ROLLOUT_PAUSED: &str = "RolloutPaused";

/// What the rollout decided for one owner; the default plans every variant from the base.
#[derive(Default)]
pub struct Rolling {
    outcome: Option<Outcome>,
    /// The base of each revision other than the current one that a variant runs.
    bases: BTreeMap<String, Base>,
}

impl Rolling {
    /// Plans every declared variant from the base of the revision it is to run, and labels
    /// its Deployment with that revision.
    pub fn plan(&self, current: &Base, owner: &Owner, declared: &[Variant]) -> Vec<Planned> {
        let Some(outcome) = &self.outcome else {
            return variant::plan(current, owner, declared);
        };
        let mut planned = variant::plan(current, owner, declared);
        for (revision, base) in &self.bases {
            if !outcome.targets.iter().any(|t| t == revision) {
                continue;
            }
            let held = variant::plan(base, owner, declared);
            for (slot, (old, target)) in planned
                .iter_mut()
                .zip(held.into_iter().zip(&outcome.targets))
            {
                if target == revision {
                    *slot = old;
                }
            }
        }
        for (p, target) in planned.iter_mut().zip(&outcome.targets) {
            if let Planned::Apply { object, .. } = p
                && let Some(labels) = object
                    .pointer_mut("/metadata/labels")
                    .and_then(Value::as_object_mut)
            {
                labels.insert(REVISION_LABEL.to_owned(), target.as_str().into());
            }
        }
        planned
    }
}

/// A rollout in a reconcile (R43): `status.rollout`, condition `RolloutPaused` while it is
/// held, and a look again at the current step's deadline.
impl Feature for Rolling {
    fn next(&self) -> Option<Duration> {
        self.outcome.as_ref().and_then(|o| o.next)
    }

    fn report(&self, status: &mut OwnerStatus, previous: &OwnerStatus, now: &str) {
        let Some(outcome) = &self.outcome else {
            return;
        };
        let st = &outcome.status;
        status.rollout = Some(Box::new(st.clone()));
        if matches!(st.phase, RolloutPhase::Paused | RolloutPhase::Degraded) {
            let since = previous
                .conditions
                .iter()
                .find(|c| c.type_ == ROLLOUT_PAUSED)
                .map_or_else(|| now.to_owned(), |c| c.last_transition_time.clone());
            status.conditions.push(Condition {
                type_: ROLLOUT_PAUSED.to_owned(),
                status: "True".to_owned(),
                reason: if st.phase == RolloutPhase::Paused {
                    "Paused".to_owned()
                } else {
                    "StepFailed".to_owned()
                },
                message: st.message.clone().unwrap_or_default(),
                last_transition_time: since,
                observed_generation: None,
            });
        }
    }
}

/// `obj`'s `spec.rollout` as parsed (`policy`; a problem is pushed to `problems`, and then
/// every variant takes the base at once), and what it decides now for `declared` (the variants as planned,
/// an idle one at zero instances) from their Deployments (`observed`) and the last status.
#[allow(
    clippy::too_many_arguments,
    reason = "one reconcile's parts, each its own"
)]
pub async fn prepare<K: OwnerResource>(
    ctx: &Context,
    owner: &Owner,
    obj: &K,
    policy: Option<&Result<RolloutPolicy, String>>,
    current_base: &Base,
    declared: &[Variant],
    observed: &[Arc<ObservedDeployment>],
    previous: &OwnerStatus,
    problems: &mut Vec<String>,
) -> Result<Rolling> {
    let policy = match policy {
        None => return Ok(Rolling::default()),
        Some(Ok(policy)) => policy,
        Some(Err(problem)) => {
            problems.push(problem.clone());
            return Ok(Rolling::default());
        }
    };
    let text = obj.base().text();
    let current = revision_of(text);
    let before = previous.rollout.as_deref();
    if before.is_none_or(|b| b.revision != current) {
        keep_revision(ctx, owner, &current, text).await?;
    }
    let find = |label: &str| {
        let name = variant::deployment_name(current_base.name(), label);
        observed
            .iter()
            .find(|d| d.metadata.name() == Some(name.as_str()))
    };
    let running: Vec<Running> = declared
        .iter()
        .map(|v| {
            let dep = find(&v.label);
            let (state, _, _) = variant::variant_state(v.instances, dep.map(Arc::as_ref));
            let stalled = dep
                .and_then(|d| d.status.as_ref())
                .is_some_and(|s| s.stalled);
            Running {
                label: &v.label,
                revision: dep.and_then(|d| d.metadata.labels.as_ref()?.get(REVISION_LABEL)),
                idle: v.instances == 0,
                health: match state {
                    VariantState::Ready => Health::Available,
                    _ if stalled => Health::Stalled,
                    _ => Health::Progressing,
                },
            }
        })
        .collect();
    let annotation = |key: &str| {
        obj.meta()
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
    };
    let word = Word {
        resumed: annotation(RESUME_ANNOTATION),
        aborted: annotation(ABORT_ANNOTATION),
    };
    // The bases at hand: every revision a variant runs, and, unless the rollout is complete
    // and stays so, the last one and the one it falls back to; each only with the current
    // base's name (another name is other Deployments: nothing to hold on to). A complete
    // rollout whose variants run the current base reads none.
    let mut wanted: Vec<&str> = running.iter().filter_map(|r| r.revision).collect();
    if let Some(b) = before {
        let settled = b.revision == current
            && b.phase == RolloutPhase::Complete
            && word.aborted != Some(current.as_str());
        if !settled {
            wanted.extend(b.previous_revision.as_deref());
            wanted.push(&b.revision);
        }
    }
    wanted.sort_unstable();
    wanted.dedup();
    let mut bases = BTreeMap::new();
    for revision in wanted.into_iter().filter(|r| *r != current) {
        if let Some(base) = load_revision(ctx, owner, revision).await?
            && base.name() == current_base.name()
        {
            bases.insert(revision.to_owned(), base);
        }
    }
    let mut kept: Vec<&str> = bases.keys().map(String::as_str).collect();
    kept.push(&current);
    let outcome = decide(
        policy,
        &current,
        &kept,
        before,
        &running,
        word,
        Timestamp::now(),
    );
    let (was, now) = (before.map(|b| b.phase), outcome.status.phase);
    if before.is_none_or(|b| b.revision != current || b.phase != now) {
        tell(ctx, obj, &outcome, was).await;
    }
    if now == RolloutPhase::Complete && was.is_some_and(|w| w != RolloutPhase::Complete) {
        let keep = [
            Some(current.as_str()),
            outcome.status.previous_revision.as_deref(),
        ];
        prune_revisions(ctx, owner, &keep).await?;
    }
    // The current base is the owner's own: only the others are remembered, and the previous
    // one only while the rollout is not complete.
    let mut held: Vec<&str> = outcome.targets.iter().map(String::as_str).collect();
    if now != RolloutPhase::Complete {
        held.extend(outcome.status.previous_revision.as_deref());
    }
    held.retain(|r| *r != current);
    ctx.revisions.keep(&owner.uid, &held);
    Ok(Rolling {
        outcome: Some(outcome),
        bases,
    })
}

/// An Event for the rollout's new phase.
async fn tell<K: OwnerResource>(
    ctx: &Context,
    obj: &K,
    outcome: &Outcome,
    was: Option<RolloutPhase>,
) {
    let st = &outcome.status;
    let (kind, reason, note) = match st.phase {
        RolloutPhase::Degraded => (
            EventType::Warning,
            "RolloutFailed",
            st.message.clone().unwrap_or_default(),
        ),
        RolloutPhase::Paused => (
            EventType::Normal,
            "RolloutPaused",
            st.message.clone().unwrap_or_default(),
        ),
        RolloutPhase::Progressing => (
            EventType::Normal,
            "RolloutStarted",
            format!("revision {} at step {}", st.revision, st.step),
        ),
        RolloutPhase::Complete if was.is_some() => (
            EventType::Normal,
            "RolloutComplete",
            format!("every variant runs revision {}", st.revision),
        ),
        RolloutPhase::Complete => return,
    };
    publish(ctx, obj, kind, reason, note, None).await;
}

fn revision_name(owner: &Owner, revision: &str) -> String {
    format!("{}-{revision}", owner.name)
}

/// Keeps `text`, the base of `revision`, in a ControllerRevision of the owner: made once, when
/// the revision first appears (one made already answers 409, which is as good).
async fn keep_revision(ctx: &Context, owner: &Owner, revision: &str, text: &str) -> Result<()> {
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let object = ControllerRevision {
        metadata: ObjectMeta {
            name: Some(revision_name(owner, revision)),
            namespace: Some(owner.namespace.clone()),
            labels: Some(BTreeMap::from([
                (OWNER_LABEL.to_owned(), owner.name.clone()),
                (KIND_LABEL.to_owned(), owner.kind.label_value().to_owned()),
                (REVISION_LABEL.to_owned(), revision.to_owned()),
            ])),
            owner_references: Some(vec![owner.owner_reference()]),
            ..ObjectMeta::default()
        },
        data: Some(RawExtension(json!({ "base": text }))),
        revision: Timestamp::now().as_second(),
    };
    let params = PostParams {
        field_manager: Some(variant::FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    match api.create(&params, &object).await {
        Ok(_) => {}
        Err(err) if crate::conflict(&err) => {}
        Err(err) => return Err(err.into()),
    }
    Ok(())
}

/// The base of `revision`, from memory or its ControllerRevision; `None` when there is none
/// of this owner's whose text is that revision.
async fn load_revision(ctx: &Context, owner: &Owner, revision: &str) -> Result<Option<Base>> {
    let text = match ctx.revisions.get(&owner.uid, revision) {
        Some(text) => text,
        None => {
            let api: Api<ControllerRevision> =
                Api::namespaced(ctx.client.clone(), &owner.namespace);
            let Some(cr) = api.get_opt(&revision_name(owner, revision)).await? else {
                return Ok(None);
            };
            let text = cr
                .data
                .as_ref()
                .and_then(|d| d.0.get("base"))
                .and_then(Value::as_str);
            match text {
                Some(text)
                    if is_controlled_by(&cr.metadata, &owner.uid)
                        && revision_of(text) == revision =>
                {
                    ctx.revisions.put(&owner.uid, revision, text);
                    Arc::from(text)
                }
                _ => return Ok(None),
            }
        }
    };
    let value: Option<Value> = serde_json::from_str(&text).ok();
    Ok(value.and_then(|v| Base::parse(&v).ok()))
}

/// Deletes the owner's ControllerRevisions other than those of `keep`.
async fn prune_revisions(ctx: &Context, owner: &Owner, keep: &[Option<&str>]) -> Result<()> {
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let selector = format!(
        "{OWNER_LABEL}={},{KIND_LABEL}={}",
        owner.name,
        owner.kind.label_value()
    );
    for cr in api.list(&ListParams::default().labels(&selector)).await? {
        let revision = cr
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(REVISION_LABEL));
        let name = cr.metadata.name.clone().unwrap_or_default();
        if !is_controlled_by(&cr.metadata, &owner.uid)
            || keep.contains(&revision.map(String::as_str))
        {
            continue;
        }
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(err) if crate::not_found(&err) => {}
            Err(err) => return Err(err.into()),
        }
    }
    Ok(())
}
