//! The caches of what the operator generates for a kind of owner: the variants' Deployments
//! and Services, each label-selected (only what carries the kind's label is watched) and
//! indexed by owner.

use super::{
    index::Generated,
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
    runtime::{WatchStreamExt, watcher},
};

/// The Deployments generated for one owner kind, kept compact ([`ObservedDeployment`]).
pub type DeploymentCache = Generated<ObservedDeployment>;

/// The Services generated for one owner kind's variants (R36).
pub type ServiceCache = Generated<ObservedService>;

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
    S: HasMeta + Send + Sync + 'static,
{
    let config = watcher::Config::default().labels(&generated_selector(kind));
    let store = Generated::default();
    let writer = store.clone();
    let events = reflected_as(
        client,
        namespace,
        config,
        cache,
        watching,
        split,
        move |e| writer.apply(e),
    );
    (store, Box::pin(events.touched_objects()))
}
