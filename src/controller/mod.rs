//! The two controllers, one per owner kind (`MutantDeployment`, `Mutation`), run by
//! kube-runtime's `Controller`.
//!
//! Each watches its owners and, through label selectors, only the Deployments (and for
//! Mutations the Secrets) that it generated; `managedFields` and kubectl's last-applied
//! annotation are dropped from cached objects to keep memory small. Owners are re-queued on
//! spec changes only (generation), so the operator's own status writes do not loop; a periodic
//! resync is the backstop (R13).

mod announce;
mod reconcile;
pub mod secret;

use std::{
    fmt::Debug,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::{Future, StreamExt};
use k8s_openapi::{NamespaceResourceScope, api::core::v1::Secret};
use kube::{
    Api, Client, Resource, ResourceExt,
    runtime::{
        Controller, WatchStreamExt,
        controller::Action,
        events::{Recorder, Reporter},
        predicates, reflector,
        reflector::Store,
        watcher,
    },
};
use serde::{Serialize, de::DeserializeOwned};
use tokio::sync::watch;

use crate::{
    Error,
    crd::{EmbeddedJson, MutantDeployment, Mutation, OwnerStatus, Variant},
    lease,
    metrics::Metrics,
    shutdown::Shutdown,
    variant::{KIND_LABEL, ObservedDeployment, OwnerKind},
};

/// Reconciles of one kind in flight at once. kube-runtime's default is unbounded: a restart
/// over 1000 Mutations ran hundreds at once, each with its planned Deployments and its own
/// connection to the API server, and that burst (not the caches) made the memory peak. A few
/// in flight keep a small API server busy.
const RECONCILE_CONCURRENCY: u16 = 8;

/// Changes to one owner within this time are folded into one reconcile: the variants of a
/// Mutation turning Ready one after another then cost one status write, not one each.
const RECONCILE_DEBOUNCE: std::time::Duration = std::time::Duration::from_millis(200);

pub use reconcile::reconcile;

/// How long a failed reconcile waits before it is retried.
pub const RETRY_AFTER: Duration = Duration::from_secs(10);
/// How often an owner is reconciled when nothing happens (a backstop for missed events).
pub const RESYNC_AFTER: Duration = Duration::from_secs(300);

/// What the reconciler needs to know of an owner kind.
pub trait OwnerResource:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + DeserializeOwned
    + Serialize
    + Send
    + Sync
    + 'static
{
    /// Which kind this is.
    const KIND: OwnerKind;
    /// The base Deployment as written.
    fn base(&self) -> &EmbeddedJson;
    /// The declared variants, in order.
    fn variants(&self) -> &[Variant];
    /// The last reported status.
    fn owner_status(&self) -> Option<&OwnerStatus>;
}

impl OwnerResource for MutantDeployment {
    const KIND: OwnerKind = OwnerKind::MutantDeployment;
    fn base(&self) -> &EmbeddedJson {
        &self.spec.deployment
    }
    fn variants(&self) -> &[Variant] {
        &self.spec.mutations
    }
    fn owner_status(&self) -> Option<&OwnerStatus> {
        self.status.as_ref()
    }
}

impl OwnerResource for Mutation {
    const KIND: OwnerKind = OwnerKind::Mutation;
    fn base(&self) -> &EmbeddedJson {
        &self.spec.deployment
    }
    fn variants(&self) -> &[Variant] {
        &self.spec.variants
    }
    fn owner_status(&self) -> Option<&OwnerStatus> {
        self.status.as_ref()
    }
}

/// Shared state of one controller.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// This controller's generated Deployments (label-selected), as much of each as
    /// reconcile reads.
    pub deployments: Store<ObservedDeployment>,
    /// Becomes true once the first list of `deployments` is in. (Not the store's own
    /// `wait_until_ready`, which wakes only the last of several waiters.)
    pub deployments_listed: watch::Receiver<bool>,
    /// The Mutations' Secrets (label-selected); `None` for MutantDeployments.
    pub secrets: Option<Store<Secret>>,
    /// Publishes Events on owners.
    pub recorder: Recorder,
    /// Problems announced recently, so each is announced once.
    pub announced: announce::Announced,
    /// Reconcile counters and timings.
    pub metrics: Arc<Metrics>,
    /// Whether this replica is the leader: only the leader's reconciles act (R30).
    pub leader: watch::Receiver<bool>,
}

/// The caches of a running pair of controllers, for readers such as the HTTP API and metrics.
#[derive(Clone)]
pub struct Caches {
    /// All MutantDeployments.
    pub mutant_deployments: Store<MutantDeployment>,
    /// All Mutations.
    pub mutations: Store<Mutation>,
    /// The Mutations' own Secrets.
    pub secrets: Store<Secret>,
    synced: Arc<AtomicBool>,
}

impl Caches {
    /// Whether every cache has received its first full list.
    pub fn ready(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Caches with nothing behind them yet, and the writers that fill them, for tests of
    /// what reads caches.
    #[cfg(test)]
    pub(crate) fn for_tests() -> (Caches, CacheWriters) {
        let (mutant_deployments, md) = reflector::store();
        let (mutations, m) = reflector::store();
        let (secrets, s) = reflector::store();
        let caches = Caches {
            mutant_deployments,
            mutations,
            secrets,
            synced: Arc::new(AtomicBool::new(false)),
        };
        (
            caches.clone(),
            CacheWriters {
                caches,
                mutant_deployments: md,
                mutations: m,
                secrets: s,
            },
        )
    }

    /// Resolves once every cache has received its first full list (never, if a watch cannot
    /// start: the caller decides how long to wait).
    async fn mark_when_synced(self) {
        let synced = futures::try_join!(
            self.mutant_deployments.wait_until_ready(),
            self.mutations.wait_until_ready(),
            self.secrets.wait_until_ready(),
        );
        if synced.is_ok() {
            self.synced.store(true, Ordering::Release);
            tracing::info!("caches synced");
        }
    }
}

/// The writers behind [`Caches::for_tests`].
#[cfg(test)]
pub(crate) struct CacheWriters {
    caches: Caches,
    pub mutant_deployments: reflector::store::Writer<MutantDeployment>,
    pub mutations: reflector::store::Writer<Mutation>,
    pub secrets: reflector::store::Writer<Secret>,
}

#[cfg(test)]
impl CacheWriters {
    /// Delivers the end of the first full list to every cache, and waits until the caches
    /// count as synced.
    pub async fn sync(&mut self) {
        self.mutant_deployments
            .apply_watcher_event(&watcher::Event::InitDone);
        self.mutations
            .apply_watcher_event(&watcher::Event::InitDone);
        self.secrets.apply_watcher_event(&watcher::Event::InitDone);
        self.caches.clone().mark_when_synced().await;
    }
}

/// Drops what the operator never reads from cached objects: `managedFields` and kubectl's
/// last-applied annotation (a full copy of the object).
fn slim<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// The label selector of everything generated for owners of `kind`.
pub fn generated_selector(kind: OwnerKind) -> String {
    format!("{KIND_LABEL}={}", kind.label_value())
}

/// Builds the controller of kind `K`. `secrets` is given for Mutations only. Returns the
/// owners' cache and the future that runs the controller until `shutdown` resolves.
fn controller<K, S>(
    client: Client,
    namespace: Option<&str>,
    metrics: Arc<Metrics>,
    shutdown: S,
    secrets: Option<(Store<Secret>, reflector::store::Writer<Secret>)>,
    leader: watch::Receiver<bool>,
) -> (Store<K>, impl Future<Output = ()> + use<K, S>)
where
    K: OwnerResource,
    S: Future<Output = ()> + Send + Sync + 'static,
{
    let selector = generated_selector(K::KIND);
    let owners: Api<K> = scoped(&client, namespace);
    let (owner_store, owner_writer) = reflector::store();
    let owner_stream = watcher(owners, watcher::Config::default())
        .default_backoff()
        .modify(slim)
        .reflect(owner_writer)
        .applied_objects()
        .predicate_filter(predicates::generation, Default::default());

    // Decoding drops what is never read (see ObservedDeployment): no `slim` needed.
    let deployments: Api<ObservedDeployment> = scoped(&client, namespace);
    let (deployment_store, deployment_writer) = reflector::store();
    let deployment_stream = watcher(deployments, watcher::Config::default().labels(&selector))
        .default_backoff()
        .reflect(deployment_writer)
        .touched_objects();

    // A replica that becomes the leader reconciles every owner it has cached: while it
    // followed, its reconciles did nothing.
    let mut controller = Controller::for_stream(owner_stream, owner_store.clone())
        .with_config(
            kube::runtime::controller::Config::default()
                .concurrency(RECONCILE_CONCURRENCY)
                .debounce(RECONCILE_DEBOUNCE),
        )
        .owns_stream(deployment_stream)
        .reconcile_all_on(lease::became_leader(leader.clone()));
    let secret_store = match secrets {
        Some((store, writer)) => {
            let api: Api<Secret> = scoped(&client, namespace);
            let stream = watcher(api, watcher::Config::default().labels(&selector))
                .default_backoff()
                .modify(slim)
                .reflect(writer)
                .touched_objects();
            controller = controller.owns_stream(stream);
            Some(store)
        }
        None => None,
    };

    let reporter = Reporter {
        controller: "mutantops".into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let context = Arc::new(Context {
        recorder: Recorder::new(client.clone(), reporter),
        client,
        deployments_listed: listed(deployment_store.clone()),
        deployments: deployment_store,
        secrets: secret_store,
        announced: announce::Announced::default(),
        metrics: metrics.clone(),
        leader,
    });
    let kind = K::KIND.kind();
    let run = controller
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
                            kube::runtime::controller::Error::ObjectNotFound(_) => "object_not_found",
                            kube::runtime::controller::Error::QueueError(_) => "queue",
                            _ => "runner",
                        };
                        metrics.controller_error(K::KIND, label);
                        tracing::warn!(kind, error = %crate::cli::error_chain(&err), "controller error");
                    }
                }
            }
        });
    (owner_store, run)
}

/// An `Api` over one namespace, or over all of them.
fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
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
    // Until the first list of the variant Deployments is in, a missing one is looked up on the
    // server (R9): a new leader at scale would GET hundreds that the list brings anyway.
    // Waiting ends when the list is in, or when the watch is gone (shutdown); in flight, it
    // counts toward the concurrency bound like any reconcile.
    if ctx
        .deployments_listed
        .clone()
        .wait_for(|listed| *listed)
        .await
        .is_err()
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

/// A flag that turns true once `store` has had its first full list, for any number of
/// waiters. kube-runtime's `Store::wait_until_ready` keeps one waker: of several tasks waiting
/// on it at once, only the last to poll is woken, and the others wait for ever. One task waits
/// on it here and tells everyone; the flag's sender is dropped (waiters get an error) when the
/// store's watch ends first.
fn listed<K>(store: Store<K>) -> watch::Receiver<bool>
where
    K: kube::Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
{
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        if store.wait_until_ready().await.is_ok() {
            let _ = tx.send(true);
        }
    });
    rx
}

/// A failed reconcile is logged and retried after [`RETRY_AFTER`].
fn error_policy<K: OwnerResource>(obj: Arc<K>, err: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(
        kind = K::KIND.kind(),
        namespace = obj.namespace().unwrap_or_default(),
        name = obj.name_any(),
        error = %crate::cli::error_chain(err),
        "reconcile failed; retrying in 10s"
    );
    Action::requeue(RETRY_AFTER)
}

/// Builds both controllers over `namespace` (or every namespace). Returns their caches, which
/// fill once the returned future runs, and the future that runs them until `shutdown`
/// resolves.
pub fn start(
    client: Client,
    namespace: Option<&str>,
    metrics: Arc<Metrics>,
    shutdown: Shutdown,
    leader: watch::Receiver<bool>,
) -> (Caches, impl Future<Output = ()> + use<>) {
    let (secret_store, secret_writer) = reflector::store();
    let (mutant_deployments, run_md) = controller::<MutantDeployment, _>(
        client.clone(),
        namespace,
        metrics.clone(),
        shutdown.clone().wait(),
        None,
        leader.clone(),
    );
    let (mutations, run_mutations) = controller::<Mutation, _>(
        client,
        namespace,
        metrics,
        shutdown.wait(),
        Some((secret_store.clone(), secret_writer)),
        leader,
    );
    let caches = Caches {
        mutant_deployments,
        mutations,
        secrets: secret_store,
        synced: Arc::new(AtomicBool::new(false)),
    };
    let synced = caches.clone().mark_when_synced();
    (caches, async move {
        futures::join!(run_md, run_mutations, synced);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Eight reconciles waiting for the first Deployment list at once are all let through
    /// when it arrives (the store's own wait would wake only one of them).
    #[tokio::test]
    async fn every_waiter_sees_the_first_list() {
        let (store, mut writer) = reflector::store::<ObservedDeployment>();
        let flag = listed(store);
        let waiters: Vec<_> = (0..8)
            .map(|_| {
                let mut flag = flag.clone();
                tokio::spawn(async move { flag.wait_for(|listed| *listed).await.is_ok() })
            })
            .collect();
        // Let every waiter start waiting before the list ends.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        writer.apply_watcher_event(&watcher::Event::InitDone);
        for waiter in waiters {
            let woke = tokio::time::timeout(std::time::Duration::from_secs(10), waiter).await;
            assert!(matches!(woke, Ok(Ok(true))), "{woke:?}");
        }
    }

    /// A watch that ends before its first list wakes the waiters with an error.
    #[tokio::test]
    async fn waiters_are_released_when_the_watch_ends() {
        let (store, writer) = reflector::store::<ObservedDeployment>();
        let mut flag = listed(store);
        drop(writer);
        let woke =
            tokio::time::timeout(std::time::Duration::from_secs(10), flag.wait_for(|l| *l)).await;
        assert!(matches!(woke, Ok(Err(_))), "{woke:?}");
    }
}
