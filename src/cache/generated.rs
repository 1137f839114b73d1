//! The caches of what the operator generates for a kind of owner: the variants' Deployments
//! and Services, each label-selected (only what carries the kind's label is watched) and
//! indexed by owner.

use std::sync::Arc;

use super::{
    index::OwnerIndex,
    reflect::{Cached, Feed, generated_selector, reflected_as},
    stale::Watching,
    state::Cache,
};
use crate::{
    crd::OwnerKind,
    variant::{DeploymentWire, HasMeta, ObservedDeployment, ObservedService},
};
use kube::{
    Client,
    runtime::{WatchStreamExt, reflector::Lookup, reflector::ObjectRef, reflector::Store, watcher},
};

/// The objects of one type generated for one owner kind: the store, and which are whose.
#[derive(Clone)]
pub struct Generated<K: Lookup<DynamicType = ()> + Clone + 'static> {
    /// Every object carrying the kind's label.
    pub store: Store<K>,
    index: OwnerIndex,
}

/// The Deployments generated for one owner kind, kept compact ([`ObservedDeployment`]).
pub type DeploymentCache = Generated<ObservedDeployment>;

/// The Services generated for one owner kind's variants (R36).
pub type ServiceCache = Generated<ObservedService>;

impl<K: Lookup<DynamicType = ()> + Clone + 'static> Generated<K> {
    /// The cached objects in `namespace` that carry owner label `owner` (not yet checked for
    /// the owner's uid: see `variant::may_prune`), without scanning the others.
    pub fn of_owner(&self, namespace: &str, owner: &str) -> Vec<Arc<K>> {
        self.index
            .names(namespace, owner)
            .into_iter()
            .filter_map(|name| self.store.get(&ObjectRef::new(&name).within(namespace)))
            .collect()
    }

    /// A cache with nothing behind it but the returned writer, for tests of what reads
    /// caches.
    #[cfg(test)]
    pub(crate) fn for_tests() -> (Self, GeneratedWriter<K>) {
        let (store, writer) = kube::runtime::reflector::store();
        let index = OwnerIndex::default();
        let writer = GeneratedWriter {
            writer,
            index: index.clone(),
        };
        (Generated { store, index }, writer)
    }
}

/// What fills a [`Generated`] cache of [`Generated::for_tests`]: each event is applied to the
/// store and the owner index, as the watch applies it.
#[cfg(test)]
pub(crate) struct GeneratedWriter<K: Lookup<DynamicType = ()> + Clone + 'static> {
    writer: kube::runtime::reflector::store::Writer<K>,
    index: OwnerIndex,
}

#[cfg(test)]
impl<K: Lookup<DynamicType = ()> + HasMeta + Clone + 'static> GeneratedWriter<K> {
    /// Applies `event` to the store, then to the index with the store's copy from before it.
    pub(crate) fn apply(&mut self, event: watcher::Event<K>) {
        let before = match &event {
            watcher::Event::Apply(obj) | watcher::Event::Delete(obj) => {
                self.writer.as_reader().get(&obj.to_object_ref(()))
            }
            _ => None,
        };
        self.writer.apply_watcher_event(&event);
        self.index.apply(&event, before.as_deref());
    }
}

/// The Deployments generated for owners of `kind`, cached as `Cache::Deployments(kind)`; the
/// feed yields those changed or deleted.
pub(super) fn deployments(
    client: &Client,
    namespace: Option<&str>,
    kind: OwnerKind,
    watching: &Watching,
) -> (DeploymentCache, Feed<DeploymentWire>) {
    let cache = Cache::Deployments(kind);
    generated(
        client,
        namespace,
        kind,
        cache,
        watching,
        DeploymentWire::split,
    )
}

/// The Services generated for the variants of owners of `kind`, cached as
/// `Cache::Services(kind)`; the feed yields those changed or deleted.
pub(super) fn services(
    client: &Client,
    namespace: Option<&str>,
    kind: OwnerKind,
    watching: &Watching,
) -> (ServiceCache, Feed<ObservedService>) {
    let cache = Cache::Services(kind);
    generated(client, namespace, kind, cache, watching, |s| (s.clone(), s))
}

/// The objects of type `W` generated for owners of `kind` (those carrying its kind label),
/// kept as `split` makes them, cached as `cache` and indexed by owner; the feed yields those
/// changed or deleted.
fn generated<W, S>(
    client: &Client,
    namespace: Option<&str>,
    kind: OwnerKind,
    cache: Cache,
    watching: &Watching,
    split: fn(W) -> (S, W),
) -> (Generated<S>, Feed<W>)
where
    W: Cached,
    S: Lookup<DynamicType = ()> + HasMeta + Clone + Send + Sync + 'static,
{
    let config = watcher::Config::default().labels(&generated_selector(kind));
    let index = OwnerIndex::default();
    let indexing = index.clone();
    let (store, events) = reflected_as(
        client,
        namespace,
        config,
        cache,
        watching,
        split,
        move |event: &watcher::Event<S>, before: Option<&S>| indexing.apply(event, before),
    );
    (
        Generated { store, index },
        Box::pin(events.touched_objects()),
    )
}
