//! The operator's caches, built first and handed to everything that reads them: the
//! controllers, the HTTP API, the admin listener and the metrics.
//!
//! Every owner is cached; of what the operator generates, only what carries its kind label
//! (label-selected watches: never every Secret, Deployment or Service of the cluster). The watch streams
//! that fill the caches ([`Feeds`]) are driven by the controllers, which also react to them.
//!
//! Readers that wait for the caches (readiness, the API's read-your-writes, a controller
//! waiting for the first list) are told of every change: each feed bumps a version and marks
//! its first full list on one `watch` channel ([`Caches::until`]); nothing polls.

use std::{pin::Pin, sync::Arc};

use futures::{Stream, TryStreamExt};
use k8s_openapi::{NamespaceResourceScope, api::core::v1::Secret};
use kube::{
    Api, Client, Resource,
    runtime::{WatchStreamExt, reflector, reflector::Store, watcher},
};
use tokio::{sync::watch, time::Instant};

use crate::{
    connect::Health,
    crd::{MutantDeployment, Mutation, OwnerKind, OwnerResource},
    variant::{KIND_LABEL, ObservedDeployment, ObservedService},
};

/// A stream of objects from one watch, boxed so the controllers can take any of them.
pub type Feed<K> = Pin<Box<dyn Stream<Item = Result<K, watcher::Error>> + Send>>;

/// One cache of the operator: a bit in [`CacheState::listed`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cache {
    /// The owners of a kind.
    Owners(OwnerKind),
    /// The Deployments generated for owners of a kind.
    Deployments(OwnerKind),
    /// The Mutations' Secrets.
    Secrets,
    /// The variants' Services generated for owners of a kind (R36).
    Services(OwnerKind),
}

impl Cache {
    fn bit(self) -> u8 {
        match self {
            Cache::Owners(OwnerKind::MutantDeployment) => 1,
            Cache::Owners(OwnerKind::Mutation) => 1 << 1,
            Cache::Deployments(OwnerKind::MutantDeployment) => 1 << 2,
            Cache::Deployments(OwnerKind::Mutation) => 1 << 3,
            Cache::Secrets => 1 << 4,
            Cache::Services(OwnerKind::MutantDeployment) => 1 << 5,
            Cache::Services(OwnerKind::Mutation) => 1 << 6,
        }
    }
}

/// What the API, the probes and the metrics read: the caches readiness depends on.
const SERVED: [Cache; 3] = [
    Cache::Owners(OwnerKind::MutantDeployment),
    Cache::Owners(OwnerKind::Mutation),
    Cache::Secrets,
];

/// The caches' progress, sent on every change.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheState {
    /// Bumped by every change applied to any cache.
    pub version: u64,
    /// One bit per [`Cache`] that has had its first full list.
    listed: u8,
}

impl CacheState {
    /// Whether `cache` has had its first full list.
    pub fn listed(&self, cache: Cache) -> bool {
        self.listed & cache.bit() != 0
    }
}

/// The caches, cheap to clone: every clone reads the same stores.
#[derive(Clone)]
pub struct Caches {
    /// All MutantDeployments.
    pub mutant_deployments: Store<MutantDeployment>,
    /// All Mutations.
    pub mutations: Store<Mutation>,
    /// The Mutations' own Secrets.
    pub secrets: Store<Secret>,
    /// The Deployments generated for MutantDeployments.
    pub md_deployments: DeploymentCache,
    /// The Deployments generated for Mutations.
    pub mutation_deployments: DeploymentCache,
    /// The Services generated for MutantDeployments' variants.
    pub md_services: ServiceCache,
    /// The Services generated for Mutations' variants.
    pub mutation_services: ServiceCache,
    changes: watch::Receiver<CacheState>,
    freshness: Freshness,
}

/// How long the caches may go without the API server before they are not served from.
#[derive(Clone, Debug, Default)]
pub struct Freshness {
    /// Whether the API server answers the operator's client.
    pub health: Health,
    /// How long it may fail to answer (`MUTANT_STALE_AFTER_SECONDS`); `None` for ever.
    pub stale_after: Option<std::time::Duration>,
}

/// Whether the caches are answered from (the API, `/readyz`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Serving {
    /// Synced, and the API server answers.
    Yes,
    /// The first full list has not arrived yet.
    Starting,
    /// The API server has not answered for this long, more than the bound: the caches may
    /// hold what is gone (a deleted Secret's token), so nothing is authorised from them.
    CutOff(std::time::Duration),
}

impl Caches {
    /// Whether the owners and Secrets have had their first full list (R26: readiness).
    pub fn ready(&self) -> bool {
        let state = self.changes.borrow();
        SERVED.iter().all(|&cache| state.listed(cache))
    }

    /// Whether the caches may be answered from: synced, and not cut off from the API server
    /// for longer than the bound (R26, R34). Clears by itself with the server's next answer.
    pub fn serving(&self) -> Serving {
        if !self.ready() {
            return Serving::Starting;
        }
        match (
            self.freshness.health.unanswered_for(),
            self.freshness.stale_after,
        ) {
            (Some(down), Some(bound)) if down >= bound => Serving::CutOff(down),
            _ => Serving::Yes,
        }
    }

    /// The Deployments generated for owners of `kind`.
    pub fn deployments(&self, kind: OwnerKind) -> &DeploymentCache {
        match kind {
            OwnerKind::MutantDeployment => &self.md_deployments,
            OwnerKind::Mutation => &self.mutation_deployments,
        }
    }

    /// The Services generated for the variants of owners of `kind` (R36).
    pub fn services(&self, kind: OwnerKind) -> &ServiceCache {
        match kind {
            OwnerKind::MutantDeployment => &self.md_services,
            OwnerKind::Mutation => &self.mutation_services,
        }
    }

    /// Calls `check` now and after every change of any cache, until it returns `Some`, the
    /// `deadline` passes, or the caches stop (shutdown): then `None`.
    pub async fn until<T>(
        &self,
        deadline: Option<Instant>,
        mut check: impl FnMut(&Caches, &CacheState) -> Option<T>,
    ) -> Option<T> {
        let mut changes = self.changes.clone();
        loop {
            let state = *changes.borrow_and_update();
            if let Some(found) = check(self, &state) {
                return Some(found);
            }
            let changed = match deadline {
                Some(deadline) => tokio::time::timeout_at(deadline, changes.changed()).await,
                None => Ok(changes.changed().await),
            };
            if !matches!(changed, Ok(Ok(()))) {
                return None;
            }
        }
    }

    /// Resolves true once `cache` has had its first full list; false if the caches stop first.
    pub async fn listed(&self, cache: Cache) -> bool {
        self.until(None, |_, state| state.listed(cache).then_some(()))
            .await
            .is_some()
    }
}

/// The watch streams behind one owner kind's caches, for its controller to drive.
pub struct OwnerFeeds<K: OwnerResource> {
    /// The owners' cache, which `owners` fills.
    pub cache: Store<K>,
    /// The owners: every object applied (added or changed).
    pub owners: Feed<K>,
    /// The generated Deployments: every object touched (changed or deleted).
    pub deployments: Feed<ObservedDeployment>,
    /// The generated Services: every object touched (changed or deleted).
    pub services: Feed<ObservedService>,
    /// The Mutations' Secrets (touched); `None` for MutantDeployments.
    pub secrets: Option<Feed<Secret>>,
}

/// The watch streams behind every cache.
pub struct Feeds {
    /// Those of the MutantDeployment controller.
    pub mutant_deployments: OwnerFeeds<MutantDeployment>,
    /// Those of the Mutation controller.
    pub mutations: OwnerFeeds<Mutation>,
}

/// The label selector of everything generated for owners of `kind`.
pub fn generated_selector(kind: OwnerKind) -> String {
    format!("{KIND_LABEL}={}", kind.label_value())
}

/// Builds the caches over `namespace` (or every namespace), and the feeds that fill them once
/// they are polled; `freshness` says when they are too old to answer from.
pub fn start(client: &Client, namespace: Option<&str>, freshness: Freshness) -> (Caches, Feeds) {
    let (signal, changes) = watch::channel(CacheState::default());
    let signal = Arc::new(signal);
    let (mutant_deployments, md_owners) = owners::<MutantDeployment>(client, namespace, &signal);
    let (mutations, mutation_owners) = owners::<Mutation>(client, namespace, &signal);
    let md = OwnerKind::MutantDeployment;
    let (md_deployments, md_feed) = generated(client, namespace, md, Cache::Deployments, &signal);
    let (md_services, md_service_feed) = generated(client, namespace, md, Cache::Services, &signal);
    let m = OwnerKind::Mutation;
    let (mutation_deployments, mutation_feed) =
        generated(client, namespace, m, Cache::Deployments, &signal);
    let (mutation_services, mutation_service_feed) =
        generated(client, namespace, m, Cache::Services, &signal);
    let (secrets, secret_feed) = secrets(client, namespace, &signal);
    let caches = Caches {
        mutant_deployments,
        mutations,
        secrets,
        md_deployments,
        mutation_deployments,
        md_services,
        mutation_services,
        changes,
        freshness,
    };
    let feeds = Feeds {
        mutant_deployments: OwnerFeeds {
            cache: caches.mutant_deployments.clone(),
            owners: md_owners,
            deployments: md_feed,
            services: md_service_feed,
            secrets: None,
        },
        mutations: OwnerFeeds {
            cache: caches.mutations.clone(),
            owners: mutation_owners,
            deployments: mutation_feed,
            services: mutation_service_feed,
            secrets: Some(secret_feed),
        },
    };
    (caches, feeds)
}

/// What a cache can hold: any namespaced Kubernetes type.
pub trait Cached:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> Cached for K where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// A watch of `K` (filtered by `config`) that fills a new store, hands each event to `also`
/// (after the store, before anyone is told) and signals each change of `cache`: the store and
/// the watch's events.
fn reflected<K: Cached, F: FnMut(&watcher::Event<K>) + Send + 'static>(
    client: &Client,
    namespace: Option<&str>,
    config: watcher::Config,
    cache: Cache,
    signal: &Arc<watch::Sender<CacheState>>,
    also: F,
) -> (
    Store<K>,
    impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + use<K, F>,
) {
    let api: Api<K> = scoped(client, namespace);
    let (store, writer) = reflector::store();
    let events = watcher(api, config)
        .default_backoff()
        .modify(slim)
        .reflect(writer)
        .inspect_ok(also)
        .inspect_ok(signalling(signal, cache));
    (store, events)
}

/// The cache of every owner of kind `K`; its feed yields the owners added or changed.
fn owners<K: OwnerResource>(
    client: &Client,
    namespace: Option<&str>,
    signal: &Arc<watch::Sender<CacheState>>,
) -> (Store<K>, Feed<K>) {
    let config = watcher::Config::default();
    let cache = Cache::Owners(K::KIND);
    let (store, events) = reflected(client, namespace, config, cache, signal, |_| {});
    (store, Box::pin(events.applied_objects()))
}

/// The Mutations' Secrets (those carrying the Mutation kind's label); the feed yields those
/// changed or deleted.
fn secrets(
    client: &Client,
    namespace: Option<&str>,
    signal: &Arc<watch::Sender<CacheState>>,
) -> (Store<Secret>, Feed<Secret>) {
    let config = watcher::Config::default().labels(&generated_selector(OwnerKind::Mutation));
    let (store, events) = reflected(client, namespace, config, Cache::Secrets, signal, |_| {});
    (store, Box::pin(events.touched_objects()))
}

/// Tells every waiter of a change to `cache`, once the store has applied it.
fn signalling<K>(
    signal: &Arc<watch::Sender<CacheState>>,
    cache: Cache,
) -> impl FnMut(&watcher::Event<K>) + use<K> {
    let signal = Arc::clone(signal);
    move |event| {
        let listed = matches!(event, watcher::Event::InitDone);
        if listed || matches!(event, watcher::Event::Apply(_) | watcher::Event::Delete(_)) {
            signal.send_modify(|state| {
                state.version = state.version.wrapping_add(1);
                if listed {
                    state.listed |= cache.bit();
                }
            });
        }
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

/// An `Api` over one namespace, or over all of them.
pub fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Caches with nothing behind them, and the writers that fill them, for tests of what reads
/// caches.
#[cfg(test)]
pub(crate) fn for_tests() -> (Caches, Writers) {
    for_tests_with(Freshness::default())
}

/// [`for_tests`] with a [`Freshness`].
#[cfg(test)]
pub(crate) fn for_tests_with(freshness: Freshness) -> (Caches, Writers) {
    let (signal, changes) = watch::channel(CacheState::default());
    let (mutant_deployments, md) = reflector::store();
    let (mutations, m) = reflector::store();
    let (secrets, s) = reflector::store();
    let caches = Caches {
        mutant_deployments,
        mutations,
        secrets,
        md_deployments: DeploymentCache::empty(),
        mutation_deployments: DeploymentCache::empty(),
        md_services: ServiceCache::empty(),
        mutation_services: ServiceCache::empty(),
        changes,
        freshness,
    };
    let writers = Writers {
        signal: Arc::new(signal),
        mutant_deployments: md,
        mutations: m,
        secrets: s,
    };
    (caches, writers)
}

/// The writers behind [`for_tests`]: each event is applied, then signalled, as the feeds do.
#[cfg(test)]
pub(crate) struct Writers {
    signal: Arc<watch::Sender<CacheState>>,
    mutant_deployments: reflector::store::Writer<MutantDeployment>,
    mutations: reflector::store::Writer<Mutation>,
    secrets: reflector::store::Writer<Secret>,
}

#[cfg(test)]
impl Writers {
    /// Applies `event` to the Mutation cache.
    pub fn mutation(&mut self, event: watcher::Event<Mutation>) {
        self.mutations.apply_watcher_event(&event);
        signalling(&self.signal, Cache::Owners(OwnerKind::Mutation))(&event);
    }

    /// Applies `event` to the MutantDeployment cache.
    pub fn mutant_deployment(&mut self, event: watcher::Event<MutantDeployment>) {
        self.mutant_deployments.apply_watcher_event(&event);
        signalling(&self.signal, Cache::Owners(OwnerKind::MutantDeployment))(&event);
    }

    /// Delivers the end of the first full list to every cache readiness depends on.
    pub fn sync(&mut self) {
        self.mutant_deployment(watcher::Event::InitDone);
        self.mutation(watcher::Event::InitDone);
        self.secrets.apply_watcher_event(&watcher::Event::InitDone);
        signalling::<Secret>(&self.signal, Cache::Secrets)(&watcher::Event::InitDone);
    }
}

mod generated;
mod index;

use generated::generated;
pub use generated::{DeploymentCache, ServiceCache};

#[cfg(test)]
mod tests;
