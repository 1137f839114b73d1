//! The caches of what the operator generates for a kind of owner: the variants' Deployments
//! and Services, each label-selected (only what carries the kind's label is watched) and
//! indexed by owner.

use std::sync::Arc;

use kube::{
    Client,
    runtime::{WatchStreamExt, reflector::ObjectRef, reflector::Store, watcher},
};
use tokio::sync::watch;

use super::{Cache, CacheState, Cached, Feed, generated_selector, index::OwnerIndex, reflected};
use crate::{
    crd::OwnerKind,
    variant::{ObservedDeployment, ObservedService},
};

/// The objects of one type generated for one owner kind: the store, and which are whose.
#[derive(Clone)]
pub struct Generated<K: Cached> {
    /// Every object carrying the kind's label.
    pub store: Store<K>,
    index: OwnerIndex,
}

/// The Deployments generated for one owner kind.
pub type DeploymentCache = Generated<ObservedDeployment>;

/// The Services generated for one owner kind's variants (R36).
pub type ServiceCache = Generated<ObservedService>;

impl<K: Cached> Generated<K> {
    /// The cached objects in `namespace` that carry owner label `owner` (not yet checked for
    /// the owner's uid: see `variant::may_prune`), without scanning the others.
    pub fn of_owner(&self, namespace: &str, owner: &str) -> Vec<Arc<K>> {
        self.index
            .names(namespace, owner)
            .into_iter()
            .filter_map(|name| self.store.get(&ObjectRef::new(&name).within(namespace)))
            .collect()
    }

    /// A cache with nothing behind it, for tests of what reads caches.
    #[cfg(test)]
    pub(crate) fn empty() -> Self {
        Generated {
            store: kube::runtime::reflector::store().0,
            index: OwnerIndex::default(),
        }
    }
}

/// The objects of type `K` generated for owners of `kind` (those carrying its kind label),
/// cached as `cache(kind)` and indexed by owner; the feed yields those changed or deleted.
pub(super) fn generated<K: Cached>(
    client: &Client,
    namespace: Option<&str>,
    kind: OwnerKind,
    cache: fn(OwnerKind) -> Cache,
    signal: &Arc<watch::Sender<CacheState>>,
) -> (Generated<K>, Feed<K>) {
    let config = watcher::Config::default().labels(&generated_selector(kind));
    let index = OwnerIndex::default();
    let indexing = index.clone();
    let (store, events) = reflected(
        client,
        namespace,
        config,
        cache(kind),
        signal,
        move |event| indexing.apply(event),
    );
    (
        Generated { store, index },
        Box::pin(events.touched_objects()),
    )
}
