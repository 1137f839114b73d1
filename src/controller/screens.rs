//! Screens (R53), the controller's part: in a reconcile of a Mutation with `spec.screen`, each
//! variant whose screen is due is fetched from its renderer ([`fetch`]), once for the whole
//! operator (only the leader reconciles), and kept in a Secret the Mutation owns, written only
//! when the picture changed; a fetch that fails keeps the last good screen. The variants'
//! statuses say which screen is served and why the last fetch failed, the `ScreenStale`
//! condition and a Warning Event say so for the Mutation, and the owner is looked at again when
//! the next screen is due. The screen Secret of a variant that is gone is deleted.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use futures::{StreamExt, stream};
use k8s_openapi::jiff::Timestamp;

use super::{context::Context, events::EventType, feature::Feature, tell};
use crate::{
    Result,
    crd::{Condition, OwnerResource, OwnerStatus, Variant, VariantScreen, VariantStatus},
    metrics::screens::{NEW, UNCHANGED},
    variant::{
        CachedSecret, MetaView, OWNER_LABEL, ObservedDeployment, Owner, VARIANT_LABEL,
        deployment_name, is_controlled_by,
        parsed::Parsed,
        screen::{Failure, Screen, ScreenPolicy, etag_of, rhythm, screen_secret_name},
        wake::Rhythm,
    },
};

mod fetch;
mod wire;

/// The condition a Mutation carries while a variant's screen is stale.
pub const SCREEN_STALE: &str = "ScreenStale";
/// The most fetches of one reconcile in flight at once.
const AT_ONCE: usize = 4;

/// What the screens decided in one reconcile: each variant's screen status, and when the next
/// is due.
#[derive(Default)]
pub struct Screens {
    statuses: BTreeMap<String, VariantScreen>,
    next: Option<Duration>,
}

impl Feature for Screens {
    fn variants(&self, mut statuses: Vec<VariantStatus>) -> Vec<VariantStatus> {
        for s in &mut statuses {
            s.screen = self.statuses.get(&s.label).cloned().map(Box::new);
        }
        statuses
    }

    /// `ScreenStale` while a variant's screen is, naming each and why; its transition time
    /// kept.
    fn report(&self, status: &mut OwnerStatus, previous: &OwnerStatus, now: &str) {
        let stale: Vec<String> = self
            .statuses
            .iter()
            .filter(|(_, s)| s.stale)
            .map(|(label, s)| {
                format!(
                    "{label}: {}",
                    s.message.as_deref().unwrap_or("its screen is stale")
                )
            })
            .collect();
        if stale.is_empty() {
            return;
        }
        let since = previous
            .conditions
            .iter()
            .find(|c| c.type_ == SCREEN_STALE)
            .map_or_else(|| now.to_owned(), |c| c.last_transition_time.clone());
        let reason = self
            .statuses
            .values()
            .find(|s| s.stale)
            .and_then(|s| s.reason.clone())
            .unwrap_or_default();
        status.conditions.push(Condition {
            type_: SCREEN_STALE.to_owned(),
            status: "True".to_owned(),
            reason,
            message: format!("the last good screen is served; {}", stale.join("; ")),
            last_transition_time: since,
            observed_generation: None,
        });
    }

    fn next(&self) -> Option<Duration> {
        self.next
    }
}

/// Fetches the screens of `obj`'s variants that are due and keeps those that changed; reports
/// a `spec.screen` that does not hold in `problems`. `parsed` is `obj`'s policies as the cache
/// parsed them (R50); `observed`, its Deployments: a renderer that is starting or asleep is
/// not asked (its readiness brings the owner back; the rhythm wakes it when a device needs it).
pub async fn prepare<K: OwnerResource>(
    ctx: &Context,
    owner: &Owner,
    obj: &K,
    parsed: &Parsed,
    observed: &[Arc<ObservedDeployment>],
    previous: &OwnerStatus,
    problems: &mut Vec<String>,
) -> Result<Screens> {
    let policy = match &parsed.screen {
        None => return Ok(Screens::default()),
        Some(Ok(policy)) => policy,
        Some(Err(problem)) => {
            problems.push(problem.clone());
            return Ok(Screens::default());
        }
    };
    forget_gone(ctx, owner, obj.variants()).await?;
    let port = policy.port_name(obj.service());
    let now = Timestamp::now();
    let base = obj.base().value();
    let base_name = base
        .pointer("/metadata/name")
        .and_then(|n| n.as_str())
        .unwrap_or_default()
        .to_owned();
    let mut screens = Screens::default();
    let mut due = Vec::new();
    let remembered = ctx.screens.get(&owner.uid);
    for v in obj.variants() {
        let before = latest(remembered.get(&v.label), previous, &v.label);
        let renderer = renderer(observed, &deployment_name(&base_name, &v.label), v);
        if matches!(renderer, Renderer::Starting | Renderer::Asleep) {
            screens.statuses.insert(v.label.clone(), before);
            continue;
        }
        let ready = renderer == Renderer::Ready;
        let since = since(before.tried_at.as_deref(), now);
        let wait = since.map_or(Duration::ZERO, |s| policy.due_in(s, &before, ready));
        if wait.is_zero() {
            due.push((v.clone(), before));
        } else {
            screens.next = Some(screens.next.map_or(wait, |n| n.min(wait)));
            screens.statuses.insert(v.label.clone(), before);
        }
    }
    let (port, base_name) = (&port, &base_name);
    let fetched: Vec<(String, VariantScreen)> = stream::iter(due)
        .map(|(v, before)| refresh(ctx, owner, policy, port, base_name, v, before, now))
        .buffer_unordered(AT_ONCE)
        .collect()
        .await;
    for (label, status) in fetched {
        let wait = policy.due_in(Duration::ZERO, &status, true);
        screens.next = Some(screens.next.map_or(wait, |n| n.min(wait)));
        if status.stale {
            let note = format!(
                "variant {label:?}: {} (the last good screen is served)",
                status.message.as_deref().unwrap_or_default()
            );
            tell::publish(ctx, obj, EventType::Warning, SCREEN_STALE, note, None).await;
        }
        screens.statuses.insert(label, status);
    }
    ctx.screens.put(&owner.uid, screens.statuses.clone());
    Ok(screens)
}

/// Where a variant's renderer is, from its Deployment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Renderer {
    /// No Deployment yet, or one that wants replicas and has none ready.
    Starting,
    /// At zero replicas while its variant declares some: put to sleep (R42).
    Asleep,
    /// At zero replicas as its variant declares: there is nothing to ask.
    Down,
    /// A replica ready.
    Ready,
}

/// Where `v`'s renderer (Deployment `name` among `observed`) is.
fn renderer(observed: &[Arc<ObservedDeployment>], name: &str, v: &Variant) -> Renderer {
    let Some(d) = observed.iter().find(|d| d.metadata.name() == Some(name)) else {
        return Renderer::Starting;
    };
    let ready = d
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    match (d.replicas.unwrap_or(1), ready) {
        (_, 1..) => Renderer::Ready,
        (0, _) if v.instances > 0 => Renderer::Asleep,
        (0, _) => Renderer::Down,
        _ => Renderer::Starting,
    }
}

/// When `s` was last tried, if it says.
fn at(s: &VariantScreen) -> Option<Timestamp> {
    s.tried_at.as_deref()?.parse().ok()
}

/// The rhythm of each variant's screen of `obj` (R53), for its sleep: from what this replica
/// fetched last, or what the status says of a later fetch. Empty without `spec.screen`.
pub fn rhythms<K: OwnerResource>(
    ctx: &Context,
    uid: &str,
    obj: &K,
    parsed: &Parsed,
    previous: &OwnerStatus,
) -> BTreeMap<String, Rhythm> {
    let Some(policy) = parsed.screen() else {
        return BTreeMap::new();
    };
    let now = Timestamp::now();
    let remembered = ctx.screens.get(uid);
    obj.variants()
        .iter()
        .map(|v| {
            let before = latest(remembered.get(&v.label), previous, &v.label);
            (v.label.clone(), rhythm(policy, &before, now))
        })
        .collect()
}

/// What this replica fetched last of variant `label`'s screen (`remembered`), unless the
/// status says of a later fetch (another leader's).
fn latest(
    remembered: Option<&VariantScreen>,
    previous: &OwnerStatus,
    label: &str,
) -> VariantScreen {
    let written = previous
        .variants
        .iter()
        .find(|s| s.label == label)
        .and_then(|s| s.screen.as_deref());
    match (remembered, written) {
        (Some(m), Some(w)) if at(w) > at(m) => w.clone(),
        (Some(m), _) => m.clone(),
        (None, w) => w.cloned().unwrap_or_default(),
    }
}

/// How long ago `tried` was, when it was (and reads).
fn since(tried: Option<&str>, now: Timestamp) -> Option<Duration> {
    let tried: Timestamp = tried?.parse().ok()?;
    let span = now.duration_since(tried);
    Some(Duration::try_from(span).unwrap_or(Duration::ZERO))
}

/// One variant's fetch, and what its status says after it.
#[allow(clippy::too_many_arguments)]
async fn refresh(
    ctx: &Context,
    owner: &Owner,
    policy: &ScreenPolicy,
    port: &std::result::Result<String, String>,
    base_name: &str,
    v: Variant,
    before: VariantScreen,
    now: Timestamp,
) -> (String, VariantScreen) {
    let status = refreshed(ctx, owner, policy, port, base_name, &v, before, now).await;
    (v.label, status)
}

/// [`refresh`]'s work.
#[allow(clippy::too_many_arguments)]
async fn refreshed(
    ctx: &Context,
    owner: &Owner,
    policy: &ScreenPolicy,
    port: &std::result::Result<String, String>,
    base_name: &str,
    v: &Variant,
    before: VariantScreen,
    now: Timestamp,
) -> VariantScreen {
    let tried_at = Some(now.to_string());
    let failed = |(failure, message): (Failure, String)| {
        ctx.metrics.screen_fetched(failure.reason());
        VariantScreen {
            tried_at: tried_at.clone(),
            stale: true,
            reason: Some(failure.reason().to_owned()),
            message: Some(message),
            ..before.clone()
        }
    };
    let port = match port {
        Ok(port) => port,
        Err(problem) => return failed((Failure::NoPort, problem.clone())),
    };
    let service = deployment_name(base_name, &v.label);
    let path = policy.path_of(v);
    let answer = fetch::fetch(&ctx.client, &owner.namespace, &service, port, path, policy).await;
    let fetched = match answer {
        Ok(fetched) => fetched,
        Err(failure) => return failed(failure),
    };
    let etag = etag_of(&fetched.bytes);
    let name = screen_secret_name(&owner.name, &v.label);
    let cached = ctx.secrets.as_ref().and_then(|store| {
        store.get(&kube::runtime::reflector::ObjectRef::new(&name).within(&owner.namespace))
    });
    let cached = cached.filter(|s| is_controlled_by(&s.metadata, &owner.uid));
    let same = cached
        .as_ref()
        .and_then(|s| s.screen.as_ref())
        .is_some_and(|s| s.etag == etag && s.content_type == fetched.media);
    let len = i64::try_from(fetched.bytes.len()).unwrap_or(i64::MAX);
    let fresh = VariantScreen {
        etag: Some(etag.clone()),
        content_type: Some(fetched.media.clone()),
        bytes: len,
        fetched_at: tried_at.clone(),
        tried_at: tried_at.clone(),
        stale: false,
        reason: None,
        message: None,
    };
    if same {
        ctx.metrics.screen_fetched(UNCHANGED);
        return fresh;
    }
    // R53: what every replica holds of all screens stays within MUTANT_SCREEN_CACHE_MIB.
    let key = format!("{}/{name}", owner.namespace);
    let len = fetched.bytes.len();
    if let Err(held) = ctx
        .screens
        .reserve(&key, len, cached_sizes(ctx), ctx.screen_cache_bytes)
    {
        return failed((
            Failure::CacheFull,
            format!(
                "keeping this screen ({len} bytes) would take the screens of all Mutations past \
                 MUTANT_SCREEN_CACHE_MIB ({} bytes, {held} held)",
                ctx.screen_cache_bytes
            ),
        ));
    }
    let screen = Screen {
        label: v.label.clone(),
        etag,
        content_type: fetched.media,
        bytes: fetched.bytes.into_boxed_slice(),
    };
    match ctx.store.put_screen(owner, &v.label, &screen).await {
        Ok(true) => {
            ctx.metrics.screen_fetched(NEW);
            fresh
        }
        Ok(false) => {
            ctx.screens.release(&key);
            failed((
                Failure::Foreign,
                format!(
                    "Secret {name:?} exists and is not this Mutation's: the screen is not kept"
                ),
            ))
        }
        Err(err) => {
            ctx.screens.release(&key);
            failed((
                Failure::Unreachable,
                format!("the screen could not be kept in Secret {name:?}: {err}"),
            ))
        }
    }
}

/// The screens this replica's cache holds, as `ns/name` and size.
fn cached_sizes(ctx: &Context) -> impl Iterator<Item = (String, usize)> {
    let cached = ctx
        .secrets
        .as_ref()
        .map(|store| store.state())
        .unwrap_or_default();
    cached.into_iter().filter_map(|s| {
        let len = s.screen.as_ref()?.bytes.len();
        let key = format!("{}/{}", s.metadata.namespace()?, s.metadata.name()?);
        Some((key, len))
    })
}

/// Deletes the screen Secrets of `owner` whose variants are gone.
async fn forget_gone(ctx: &Context, owner: &Owner, variants: &[Variant]) -> Result<()> {
    let Some(store) = ctx.secrets.as_ref() else {
        return Ok(());
    };
    let gone: Vec<(String, String)> = store
        .state()
        .iter()
        .filter(|s| s.screen.is_some())
        .filter(|s| s.metadata.namespace() == Some(owner.namespace.as_str()))
        .filter(|s| label_of(s, OWNER_LABEL) == Some(owner.name.as_str()))
        .filter(|s| is_controlled_by(&s.metadata, &owner.uid))
        .filter(|s| {
            let label = label_of(s, VARIANT_LABEL);
            !variants.iter().any(|v| Some(v.label.as_str()) == label)
        })
        .filter_map(|s| Some((s.metadata.name()?.to_owned(), s.metadata.uid()?.to_owned())))
        .collect();
    for (name, uid) in gone {
        ctx.store
            .delete_screen(&owner.namespace, &name, &uid)
            .await?;
    }
    Ok(())
}

/// Label `key` of cached Secret `s`.
fn label_of<'s>(s: &'s CachedSecret, key: &str) -> Option<&'s str> {
    s.metadata.labels.as_ref()?.get(key)
}
