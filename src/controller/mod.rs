//! The two controllers, one per owner kind (`MutantDeployment`, `Mutation`), run by
//! kube-runtime's `Controller`.
//!
//! Each is driven by the feeds of [`crate::cache`]: its owners and, through label selectors,
//! only the Deployments and Services (and for Mutations the Secrets) that it generated. Owners are
//! re-queued on spec changes only (generation), so the operator's own status writes do not
//! loop; a periodic resync is the backstop (R13). A Mutation whose variants sleep is also
//! re-queued when a device's poll is written or its silence is accepted (`changes`):
//! a poll is what wakes a variant (R42).

mod announce;
mod context;
mod deployments;
mod devices;
mod events;
mod feature;
mod hold;
mod reconcile;
pub mod rollout;
mod screens;
pub mod secret;
mod services;
pub mod sleep;
mod tell;
mod write;

use crate::store::Store;
use std::sync::Arc;

use futures::{Future, StreamExt, TryStreamExt};
use kube::{
    ResourceExt,
    runtime::{Controller, controller::Action, reflector},
};
use tokio::sync::watch;

use crate::{
    Error,
    cache::{Cache, Caches, Feeds, OwnerFeeds},
    crd::{MutantDeployment, Mutation, OwnerResource},
    lease,
    metrics::Metrics,
    shutdown::Shutdown,
    variant::PodSecurity,
};

/// Reconciles of one kind in flight at once. kube-runtime's default is unbounded: a restart
/// over 1000 Mutations ran hundreds at once, each with its planned Deployments and its own
/// connection to the API server, and that burst (not the caches) made the memory peak. A few
/// in flight keep a small API server busy.
const RECONCILE_CONCURRENCY: u16 = 8;

/// Changes to one owner within this time are folded into one reconcile: the variants of a
/// Mutation turning Ready one after another then cost one status write, not one each.
const RECONCILE_DEBOUNCE: std::time::Duration = std::time::Duration::from_millis(200);

/// The backoff of the controller over all its watches at once: none, each feed of
/// [`crate::cache`] backs off on its own. kube-runtime's default holds every watch of the
/// controller after an error of any one, longer with each (R34: after a stall,
/// watches listing again waited 20 to 45 s on each other's errors, their caches stale).
struct EachFeedOnItsOwn;

impl Iterator for EachFeedOnItsOwn {
    type Item = std::time::Duration;

    fn next(&mut self) -> Option<std::time::Duration> {
        Some(std::time::Duration::ZERO)
    }
}

impl kube::runtime::utils::Backoff for EachFeedOnItsOwn {
    fn reset(&mut self) {}
}

use context::{Context, RETRY_AFTER};
pub use reconcile::reconcile;

/// Builds the controller of kind `K` over the caches and the feeds that fill them. Returns
/// the future that runs it until `shutdown` resolves.
fn controller<K, S>(
    store: Store,
    caches: &Caches,
    feeds: OwnerFeeds<K>,
    metrics: Arc<Metrics>,
    shutdown: S,
    leader: watch::Receiver<bool>,
    who: Identity,
) -> impl Future<Output = ()> + use<K, S>
where
    K: OwnerResource,
    S: Future<Output = ()> + Send + Sync + 'static,
{
    let OwnerFeeds {
        cache: owners,
        owners: owner_feed,
        deployments,
        services,
        secrets,
    } = feeds;
    let owner_feed = owner_feed.try_filter(changed_only(changes::<K>));
    // A replica that becomes the leader reconciles every owner it has cached: while it
    // followed, its reconciles did nothing.
    let mut controller = Controller::for_stream(owner_feed, owners)
        .with_config(
            kube::runtime::controller::Config::default()
                .concurrency(RECONCILE_CONCURRENCY)
                .debounce(RECONCILE_DEBOUNCE),
        )
        .trigger_backoff(EachFeedOnItsOwn)
        .owns_stream(deployments)
        .owns_stream(services)
        .reconcile_all_on(lease::became_leader(leader.clone()));
    let has_secrets = secrets.is_some();
    if let Some(secrets) = secrets {
        controller = controller.owns_stream(secrets);
    }

    let client = store.client().clone();
    let context = Arc::new(Context {
        store,
        events: events::Events::new(client.clone(), who.instance),
        client,
        caches: caches.clone(),
        secrets: has_secrets.then(|| caches.secrets.clone()),
        announced: announce::Announced::default(),
        metrics: metrics.clone(),
        leader,
        pod_security: who.pod_security,
        screen_cache_bytes: who.screen_cache_bytes,
        expiry: context::ExpiryMemory::default(),
        written: context::WrittenStatuses::default(),
        revisions: context::RevisionMemory::default(),
        screens: context::ScreenMemory::default(),
        progress: hold::ProgressHold::default(),
    });
    // R26: the counts of repeated Events are written even when the repeats
    // stop; the task ends with the controller (its context).
    let flushed = Arc::downgrade(&context);
    tokio::spawn(async move {
        let mut every = tokio::time::interval(events::SERIES_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let Some(context) = flushed.upgrade() else {
                return;
            };
            context.events.flush().await;
        }
    });
    let kind = K::KIND.kind();
    controller
        .graceful_shutdown_on(shutdown)
        .run(timed_reconcile::<K>, error_policy::<K>, context)
        .for_each(move |result| {
            let metrics = metrics.clone();
            async move {
                match result {
                    // Logged ("reconciled") by timed_reconcile, when this replica leads.
                    Ok(_) => {}
                    // Counted, with its cause, by timed_reconcile.
                    Err(kube::runtime::controller::Error::ReconcilerFailed(..)) => {}
                    Err(err) => {
                        let label = match &err {
                            kube::runtime::controller::Error::ObjectNotFound(_) => {
                                "object_not_found"
                            }
                            kube::runtime::controller::Error::QueueError(_) => "queue",
                            _ => "runner",
                        };
                        metrics.controller_error(K::KIND, label);
                        let error = crate::error_chain(&err);
                        if matches!(err, kube::runtime::controller::Error::ObjectNotFound(_)) {
                            // An event for an owner deleted meanwhile: nothing to reconcile.
                            tracing::debug!(kind, error, "owner gone before its reconcile");
                        } else if watch_expired(&err) {
                            tracing::info!(kind, error, "watch expired; listing again");
                        } else {
                            tracing::warn!(kind, error, "controller error");
                        }
                    }
                }
            }
        })
}

/// [`reconcile`], timed and counted in the metrics, when this replica is the leader. A
/// follower does nothing (no request, no metric) and waits for a change: when it becomes the
/// leader, every owner is reconciled again (`reconcile_all_on`). A reconcile in flight when
/// leadership is lost finishes; it is bounded.
async fn timed_reconcile<K: OwnerResource>(
    obj: Arc<K>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let object = reflector::ObjectRef::from_obj(obj.as_ref());
    if !*ctx.leader.borrow() {
        tracing::debug!(kind = K::KIND.kind(), %object, "not the leader; skipping");
        return Ok(Action::await_change());
    }
    // Until the first lists of the variant Deployments and Services (and of the Secrets, for
    // Mutations) are in, a missing one would be created and, on the server's 409, looked up
    // (R9): a new leader at scale would send thousands of requests for what the lists bring
    // anyway.
    // Waiting ends when the lists are in, or when a watch is gone (shutdown); in flight, it
    // counts toward the concurrency bound like any reconcile.
    if !ctx.caches.listed(Cache::Deployments(K::KIND)).await
        || !ctx.caches.listed(Cache::Services(K::KIND)).await
        || (ctx.secrets.is_some() && !ctx.caches.listed(Cache::Secrets).await)
    {
        return Ok(Action::await_change());
    }
    let started = std::time::Instant::now();
    let result = reconcile(obj, ctx.clone()).await;
    let error = result.as_ref().err().map(Error::metric_label);
    ctx.metrics.reconciled(K::KIND, started.elapsed(), error);
    if result.is_ok() {
        tracing::debug!(kind = K::KIND.kind(), %object, "reconciled");
    }
    result
}

/// A watch whose resourceVersion the API server no longer has (410 Expired, after each etcd
/// compaction or an API server restart): expected, and the watcher lists again by itself.
fn watch_expired<E>(
    err: &kube::runtime::controller::Error<E, kube::runtime::watcher::Error>,
) -> bool {
    matches!(
        err,
        kube::runtime::controller::Error::QueueError(kube::runtime::watcher::Error::WatchError(status))
            if crate::status_is(status, 410, None)
    )
}

/// A failed reconcile is logged and retried after [`RETRY_AFTER`]: at warn, unless the failure
/// is expected ([`Error::is_expected`]: the object or its namespace is being deleted), which
/// is logged at info.
fn error_policy<K: OwnerResource>(obj: Arc<K>, err: &Error, _ctx: Arc<Context>) -> Action {
    let (kind, namespace, name) = (K::KIND.kind(), obj.namespace(), obj.name_any());
    let error = crate::error_chain(err);
    if err.is_expected() {
        tracing::info!(
            kind,
            namespace,
            name,
            error,
            "reconcile stopped: the object or its namespace is going away; retrying in 10s"
        );
    } else {
        tracing::warn!(
            kind,
            namespace,
            name,
            error,
            "reconcile failed; retrying in 10s"
        );
    }
    Action::requeue(RETRY_AFTER)
}

/// Who the operator is, to its controllers.
#[derive(Clone, Debug, Default)]
pub struct Identity {
    /// This replica's name (`POD_NAME`), in the Events it publishes.
    pub instance: Option<String>,
    /// Its ServiceAccount (`POD_NAMESPACE`, `POD_SERVICE_ACCOUNT`) and the API server's
    /// version, when known (R33).
    pub pod_security: PodSecurity,
    /// The bytes of screens all Mutations may keep together (`MUTANT_SCREEN_CACHE_MIB`, R53).
    pub screen_cache_bytes: usize,
}

/// Builds both controllers over the caches and their feeds, writing Mutations and their
/// Secrets through `store`. Returns the future that runs them
/// (and so fills the caches) until `shutdown` resolves. `who` names this replica in the
/// Events it publishes, and the ServiceAccount no Deployment it makes may run as.
pub fn start(
    store: Store,
    caches: &Caches,
    feeds: Feeds,
    metrics: Arc<Metrics>,
    shutdown: Shutdown,
    leader: watch::Receiver<bool>,
    who: Identity,
) -> impl Future<Output = ()> + use<> {
    let run_md = controller::<MutantDeployment, _>(
        store.clone(),
        caches,
        feeds.mutant_deployments,
        metrics.clone(),
        shutdown.clone().wait(),
        leader.clone(),
        who.clone(),
    );
    let run_mutations = controller::<Mutation, _>(
        store,
        caches,
        feeds.mutations,
        metrics,
        shutdown.wait(),
        leader,
        who,
    );
    async move {
        futures::join!(run_md, run_mutations);
    }
}

/// How long an owner's last value of [`changes`] is remembered without a new event of it: the
/// entries of deleted owners go after this (an owner not heard of for so long passes again).
const CHANGES_KEPT: std::time::Duration = std::time::Duration::from_secs(3600);

/// A filter of the owners' feed that passes an owner only when `changes` of it differs from
/// the last value it passed with (or has none). Kept by a 64-bit hash of the namespace, name
/// and uid, not by their text: three strings and a 100-byte key per owner in kube's own
/// predicate filter, a quarter of a MiB at 1000 Mutations.
fn changed_only<K: OwnerResource>(
    changes: fn(&K) -> Option<u64>,
) -> impl FnMut(&K) -> std::future::Ready<bool> {
    let mut last: crate::HashMap<u64, (u64, tokio::time::Instant)> = crate::HashMap::default();
    let mut swept = tokio::time::Instant::now();
    let keys = ahash::RandomState::new();
    move |obj| {
        let now = tokio::time::Instant::now();
        if now.duration_since(swept) >= CHANGES_KEPT {
            last.retain(|_, (_, seen)| now.duration_since(*seen) < CHANGES_KEPT);
            swept = now;
        }
        let Some(value) = changes(obj) else {
            return std::future::ready(true);
        };
        let meta = obj.meta();
        let key = keys.hash_one((&meta.namespace, &meta.name, &meta.uid));
        let before = last.insert(key, (value, now));
        let passes = before
            .is_none_or(|(was, seen)| was != value || now.duration_since(seen) >= CHANGES_KEPT);
        std::future::ready(passes)
    }
}

/// What re-queues an owner (its watch's predicate): its generation, as for every owner; for a
/// Mutation whose variants sleep, its devices' last polls and the time its silence was
/// accepted; for an owner with `spec.rollout`, its resume and abort annotations. The
/// operator's own status writes change none of these, so they do not loop.
fn changes<K: OwnerResource>(obj: &K) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let generation = obj.meta().generation;
    let sleeps = obj.devices().is_some_and(|d| d.sleep.is_some());
    let rolls = obj.rollout().is_some();
    if !sleeps && !rolls {
        return generation.map(|g| g as u64);
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    generation.hash(&mut hasher);
    let annotation = |key: &str| obj.meta().annotations.as_ref().and_then(|a| a.get(key));
    if sleeps {
        for d in obj.owner_status().map_or(&[][..], |s| &s.devices[..]) {
            if let Some(poll) = &d.poll {
                (&d.id, &poll.last).hash(&mut hasher);
            }
        }
        annotation(sleep::SILENCE_ACCEPTED).hash(&mut hasher);
    }
    if rolls {
        annotation(crate::variant::rollout::RESUME_ANNOTATION).hash(&mut hasher);
        annotation(crate::variant::rollout::ABORT_ANNOTATION).hash(&mut hasher);
    }
    Some(hasher.finish())
}

#[cfg(test)]
mod tests {
    /// The scripted API server of the controller's tests (`write`, `reconcile`).
    pub(super) mod scripted;

    use kube::{
        core::Status,
        runtime::{controller::Error as ControllerError, watcher},
    };

    use super::{changed_only, changes, watch_expired};
    use crate::crd::{Mutation, fixtures};

    fn watch_error(code: u16, reason: &str) -> ControllerError<std::io::Error, watcher::Error> {
        let mut status = Status::failure("too old resource version: 1 (2)", reason);
        status.code = code;
        ControllerError::QueueError(watcher::Error::WatchError(Box::new(status)))
    }

    // R51: a watch compacted away is expected (info), other watch errors are not
    #[test]
    fn only_an_expired_watch_is_expected() {
        assert!(watch_expired(&watch_error(410, "Expired")));
        assert!(!watch_expired(&watch_error(500, "InternalError")));
        let no_version: ControllerError<std::io::Error, _> =
            ControllerError::QueueError(watcher::Error::NoResourceVersion);
        assert!(!watch_expired(&no_version));
    }

    // R6: an owner passes the feed when its generation changes (or it is new), not for a
    // status write; each owner is remembered apart from the others
    #[test]
    fn the_owner_feed_passes_changes_only() {
        let mut pass = changed_only(changes::<Mutation>);
        let at = |name: &str, generation: i64| {
            let mut m = fixtures::mutation(name, vec![]);
            m.metadata.generation = Some(generation);
            m
        };
        let mut passes = |m: &Mutation| pass(m).into_inner();
        assert!(passes(&at("web", 1)));
        assert!(!passes(&at("web", 1)));
        assert!(passes(&at("api", 1)));
        assert!(passes(&at("web", 2)));
        assert!(!passes(&at("api", 1)));
        let mut new_uid = at("web", 2);
        new_uid.metadata.uid = Some("another".into());
        assert!(passes(&new_uid));
    }
}
