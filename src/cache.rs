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

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::{
    Client,
    runtime::{WatchStreamExt, reflector::Store, watcher},
};
use tokio::{sync::watch, time::Instant};

use crate::{
    connect::Health,
    crd::{MutantDeployment, Mutation, OwnerKind, OwnerResource},
    variant::{CachedSecret, DeploymentWire, ObservedService, parsed::Parsed},
};

/// What the API, the probes and the metrics read: the caches readiness depends on.
const SERVED: [Cache; 3] = [
    Cache::Owners(OwnerKind::MutantDeployment),
    Cache::Owners(OwnerKind::Mutation),
    Cache::Secrets,
];

/// The caches, cheap to clone: every clone reads the same stores.
#[derive(Clone)]
pub struct Caches {
    /// All MutantDeployments.
    pub mutant_deployments: Store<MutantDeployment>,
    /// All Mutations.
    pub mutations: Store<Mutation>,
    /// The Mutations' own Secrets, compact.
    pub secrets: Store<CachedSecret>,
    /// The Deployments generated for MutantDeployments.
    pub md_deployments: DeploymentCache,
    /// The Deployments generated for Mutations.
    pub mutation_deployments: DeploymentCache,
    /// The Services generated for MutantDeployments' variants.
    pub md_services: ServiceCache,
    /// The Services generated for Mutations' variants.
    pub mutation_services: ServiceCache,
    /// The MutantDeployments' policies, parsed once per generation.
    md_parsed: Arc<Parsings>,
    /// The Mutations' policies, parsed once per generation.
    mutation_parsed: Arc<Parsings>,
    changes: watch::Receiver<CacheState>,
    freshness: Freshness,
    /// How many times [`Caches::mutation`] was asked (tests count a request's look-ups).
    #[cfg(test)]
    pub(crate) lookups: Arc<std::sync::atomic::AtomicUsize>,
}

/// How long the caches may go without the API server before they are not served from.
#[derive(Clone, Debug, Default)]
pub struct Freshness {
    /// Whether the API server answers the operator's client.
    pub health: Health,
    /// How long it may fail to answer (`MUTANT_STALE_AFTER_SECONDS`); `None` for ever.
    pub stale_after: Option<std::time::Duration>,
    /// How long a watch may go without an event or a bookmark: the client's bound on its
    /// watchers' silence (`MUTANT_WATCH_STALE_AFTER_SECONDS`), from which the watches' own
    /// timeout follows ([`stale::watch_timeout`]); `None` for no bound.
    pub watch_stale_after: Option<std::time::Duration>,
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
    /// The watch of this cache went silent (neither an event nor a bookmark within
    /// `MUTANT_WATCH_STALE_AFTER_SECONDS`) and has not listed again yet: as for `CutOff`,
    /// nothing is authorised from the caches (R34).
    Stale(Cache),
}

/// What [`Serving::Stale`] means, for the API's 503 and `/readyz`.
pub fn stale_message(cache: Cache) -> String {
    format!(
        "this replica's watch of {cache} went silent (neither an event nor a bookmark within \
         MUTANT_WATCH_STALE_AFTER_SECONDS) and is listing them again, so what it knows may be \
         out of date"
    )
}

impl Caches {
    /// Mutation `ns/name` as cached, if it is.
    pub fn mutation(&self, ns: &str, name: &str) -> Option<Arc<Mutation>> {
        #[cfg(test)]
        self.lookups
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.mutations
            .get(&kube::runtime::reflector::ObjectRef::new(name).within(ns))
    }

    /// `owner`'s policies, parsed once per generation (R50): what its spec sets of
    /// `spec.devices`, their sleep and `spec.rollout`, as the object at hand says.
    pub fn parsed<K: OwnerResource>(&self, owner: &K) -> Arc<Parsed> {
        match K::KIND {
            OwnerKind::MutantDeployment => self.md_parsed.of(owner),
            OwnerKind::Mutation => self.mutation_parsed.of(owner),
        }
    }

    /// Whether the owners and Secrets have had their first full list (R26: readiness).
    pub fn ready(&self) -> bool {
        let state = self.changes.borrow();
        SERVED.iter().all(|&cache| state.listed(cache))
    }

    /// Whether the caches may be answered from: synced, not cut off from the API server for
    /// longer than the bound (R26, R34), and none of their watches silent since its last full
    /// list (R34). Clears by itself with the server's next answer, and the next
    /// full list.
    pub fn serving(&self) -> Serving {
        if !self.ready() {
            return Serving::Starting;
        }
        if let (Some(down), Some(bound)) = (
            self.freshness.health.unanswered_for(),
            self.freshness.stale_after,
        ) && down >= bound
        {
            return Serving::CutOff(down);
        }
        let state = *self.changes.borrow();
        match SERVED.iter().find(|&&cache| state.stale(cache)) {
            Some(&cache) => Serving::Stale(cache),
            None => Serving::Yes,
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
    /// The generated Deployments: every object touched (changed or deleted), as decoded
    /// (the cache keeps their compact form).
    pub deployments: Feed<DeploymentWire>,
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

/// Builds the caches over `namespace` (or every namespace), and the feeds that fill them once
/// they are polled; `freshness` says when they are too old to answer from.
pub fn start(client: &Client, namespace: Option<&str>, freshness: Freshness) -> (Caches, Feeds) {
    let (signal, changes) = watch::channel(CacheState::default());
    let watching = Watching {
        signal: Arc::new(signal),
        timeout: watch_timeout(freshness.watch_stale_after),
    };
    let w = &watching;
    let (md_parsed, mutation_parsed) = (Arc::<Parsings>::default(), Arc::<Parsings>::default());
    let (mutant_deployments, md_owners) =
        owners::<MutantDeployment>(client, namespace, w, md_parsed.clone());
    let (mutations, mutation_owners) =
        owners::<Mutation>(client, namespace, w, mutation_parsed.clone());
    let md = OwnerKind::MutantDeployment;
    let (md_deployments, md_feed) = deployments(client, namespace, md, w);
    let (md_services, md_service_feed) = services(client, namespace, md, w);
    let m = OwnerKind::Mutation;
    let (mutation_deployments, mutation_feed) = deployments(client, namespace, m, w);
    let (mutation_services, mutation_service_feed) = services(client, namespace, m, w);
    let (secrets, secret_feed) = secrets(client, namespace, w);
    let caches = Caches {
        mutant_deployments,
        mutations,
        secrets,
        md_deployments,
        mutation_deployments,
        md_services,
        mutation_services,
        md_parsed,
        mutation_parsed,
        changes,
        freshness,
        #[cfg(test)]
        lookups: Arc::default(),
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

/// The cache of every owner of kind `K`, whose policies `parsings` parses as they come; its
/// feed yields the owners added or changed.
fn owners<K: OwnerResource + Cached>(
    client: &Client,
    namespace: Option<&str>,
    watching: &Watching,
    parsings: Arc<Parsings>,
) -> (Store<K>, Feed<K>) {
    let config = watcher::Config::default();
    let cache = Cache::Owners(K::KIND);
    let parse = move |event: &watcher::Event<K>| parsings.watched(event);
    let (store, events) = reflected(client, namespace, config, cache, watching, parse);
    (store, Box::pin(events.applied_objects()))
}

/// The Mutations' Secrets (those carrying the Mutation kind's label); the feed yields those
/// changed or deleted.
fn secrets(
    client: &Client,
    namespace: Option<&str>,
    watching: &Watching,
) -> (Store<CachedSecret>, Feed<Secret>) {
    let config = watcher::Config::default().labels(&generated_selector(OwnerKind::Mutation));
    let (store, mut writer) = kube::runtime::reflector::store();
    let keep = move |event| writer.apply_watcher_event(&event);
    let split = CachedSecret::split;
    let events = reflected_as(
        client,
        namespace,
        config,
        Cache::Secrets,
        watching,
        split,
        keep,
    );
    (store, Box::pin(events.touched_objects()))
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
    let (mutant_deployments, md) = kube::runtime::reflector::store();
    let (mutations, m) = kube::runtime::reflector::store();
    let (secrets, s) = kube::runtime::reflector::store();
    let md_deployments = DeploymentCache::default();
    let mutation_deployments = DeploymentCache::default();
    let (md_services, mutation_services) = (ServiceCache::default(), ServiceCache::default());
    let deployments = [md_deployments.clone(), mutation_deployments.clone()];
    let caches = Caches {
        mutant_deployments,
        mutations,
        secrets,
        md_deployments,
        mutation_deployments,
        md_services,
        mutation_services,
        md_parsed: Arc::default(),
        mutation_parsed: Arc::default(),
        changes,
        freshness,
        #[cfg(test)]
        lookups: Arc::default(),
    };
    let writers = Writers {
        signal: Arc::new(signal),
        mutant_deployments: md,
        mutations: m,
        mutation_parsed: caches.mutation_parsed.clone(),
        secrets: s,
        deployments,
    };
    (caches, writers)
}

/// Where the writers of `kind`'s generated objects are in [`Writers`].
#[cfg(test)]
fn kind_at(kind: OwnerKind) -> usize {
    match kind {
        OwnerKind::MutantDeployment => 0,
        OwnerKind::Mutation => 1,
    }
}

/// The writers behind [`for_tests`]: each event is applied, then signalled, as the feeds do.
#[cfg(test)]
pub(crate) struct Writers {
    signal: Arc<watch::Sender<CacheState>>,
    mutant_deployments: kube::runtime::reflector::store::Writer<MutantDeployment>,
    mutations: kube::runtime::reflector::store::Writer<Mutation>,
    mutation_parsed: Arc<Parsings>,
    secrets: kube::runtime::reflector::store::Writer<CachedSecret>,
    /// The generated Deployments' writers: MutantDeployments', then Mutations'.
    deployments: [DeploymentCache; 2],
}

#[cfg(test)]
impl Writers {
    /// Applies `event` to the Mutation cache.
    pub fn mutation(&mut self, event: watcher::Event<Mutation>) {
        self.mutations.apply_watcher_event(&event);
        self.mutation_parsed.watched(&event);
        signalling(&self.signal, Cache::Owners(OwnerKind::Mutation))(&event);
    }

    /// Applies `secret` to the Secret cache, kept as the watch keeps it.
    pub fn secret(&mut self, secret: Secret) {
        let (kept, _) = crate::variant::CachedSecret::split(secret);
        self.secrets
            .apply_watcher_event(&watcher::Event::Apply(kept));
    }

    /// Applies `event` to the MutantDeployment cache.
    pub fn mutant_deployment(&mut self, event: watcher::Event<MutantDeployment>) {
        self.mutant_deployments.apply_watcher_event(&event);
        signalling(&self.signal, Cache::Owners(OwnerKind::MutantDeployment))(&event);
    }

    /// Applies `event` to the cache of the Deployments generated for owners of `kind`.
    pub fn deployment(
        &mut self,
        kind: OwnerKind,
        event: watcher::Event<crate::variant::ObservedDeployment>,
    ) {
        self.deployments[kind_at(kind)].apply(event);
    }

    /// Marks `cache` stale, as a watch that went silent does.
    pub fn went_silent(&mut self, cache: Cache) {
        state::mark_stale(&self.signal, cache);
    }

    /// Delivers the end of the first full list to every cache readiness depends on.
    pub fn sync(&mut self) {
        self.mutant_deployment(watcher::Event::InitDone);
        self.mutation(watcher::Event::InitDone);
        self.secrets.apply_watcher_event(&watcher::Event::InitDone);
        signalling::<Secret>(&self.signal, Cache::Secrets)(&watcher::Event::InitDone);
    }
}

mod backoff;
mod generated;
mod index;
mod parsed;
mod reflect;
mod stale;
mod state;

pub use backoff::WatchBackoff;
pub use generated::{DeploymentCache, ServiceCache};
use generated::{deployments, services};
use parsed::Parsings;
use reflect::{Cached, reflected, reflected_as};
pub use reflect::{Feed, generated_selector};
use stale::Watching;
pub use stale::watch_timeout;
#[cfg(test)]
use state::signalling;
pub use state::{Cache, CacheState};

#[cfg(test)]
mod tests;
