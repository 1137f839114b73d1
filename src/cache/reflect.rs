//! The watches that fill the caches: each keeps a store of what it lists and watches, tells
//! the waiters of each change ([`super::state`]), and passes the objects on as a [`Feed`] for
//! a controller to react to.

use std::pin::Pin;

use futures::{Stream, TryStreamExt};
use k8s_openapi::{NamespaceResourceScope, api::core::v1::Secret};
use kube::{
    Api, Client, Resource,
    runtime::{
        WatchStreamExt,
        reflector::{self, Store},
        watcher,
    },
};

use super::{
    backoff::WatchBackoff,
    stale::{Watching, relisting},
    state::{Cache, signalling},
};
use crate::{
    crd::{MutantDeployment, Mutation, OwnerKind},
    variant::{DeploymentWire, KIND_LABEL, ObservedService},
};

/// Objects per page of a watch's list (kube's default is 500). A page is held whole while its
/// objects are stored, as JSON and then decoded, and every watch lists at once when the
/// operator starts: at 1000 x 5, pages of 500 Deployments (about 2 MB of JSON each) made most
/// of a restart's peak above the caches themselves. The price is more list requests on a
/// restart (about 70 instead of 19 at 1000 x 5), none in a steady state.
const LIST_PAGE: u32 = 100;

/// A stream of objects from one watch, boxed so the controllers can take any of them.
pub type Feed<K> = Pin<Box<dyn Stream<Item = Result<K, watcher::Error>> + Send>>;

/// What a watch can decode: a namespaced Kubernetes type, one of those below.
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

impl Cached for MutantDeployment {}
impl Cached for Mutation {}
impl Cached for Secret {}
impl Cached for DeploymentWire {}
impl Cached for ObservedService {}

/// The label selector of everything generated for owners of `kind`.
pub fn generated_selector(kind: OwnerKind) -> String {
    format!("{KIND_LABEL}={}", kind.label_value())
}

/// A watch of `K` (filtered by `config`) that fills a new store, hands each event to `also`
/// (after the store, before anyone is told) and signals each change of `cache`: the store and
/// the watch's events.
pub fn reflected<K: Cached, F: FnMut(&watcher::Event<K>) + Send + 'static>(
    client: &Client,
    namespace: Option<&str>,
    config: watcher::Config,
    cache: Cache,
    watching: &Watching,
    also: F,
) -> (
    Store<K>,
    impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + use<K, F>,
) {
    let api: Api<K> = scoped(client, namespace);
    let (store, writer) = reflector::store();
    let events = relisting(api, config.page_size(LIST_PAGE), cache, watching)
        .backoff(WatchBackoff::default())
        .modify(slim)
        .reflect(writer)
        .inspect_ok(also)
        .inspect_ok(signalling(&watching.signal, cache));
    (store, events)
}

/// A watch of `W` like [`reflected`], for a store that keeps another form `S` of what the
/// watch decodes: `split` parts each object into what is kept and what is passed on, and
/// `keep` stores each event of the kept form before anyone is told of it.
pub fn reflected_as<W, S, F>(
    client: &Client,
    namespace: Option<&str>,
    config: watcher::Config,
    cache: Cache,
    watching: &Watching,
    split: fn(W) -> (S, W),
    mut keep: F,
) -> impl Stream<Item = Result<watcher::Event<W>, watcher::Error>> + Send + use<W, S, F>
where
    W: Cached,
    S: Send + 'static,
    F: FnMut(watcher::Event<S>) + Send + 'static,
{
    let api: Api<W> = scoped(client, namespace);
    relisting(api, config.page_size(LIST_PAGE), cache, watching)
        .backoff(WatchBackoff::default())
        .modify(slim)
        .map_ok(move |event| {
            let (kept, passed) = split_event(event, split);
            keep(kept);
            passed
        })
        .inspect_ok(signalling(&watching.signal, cache))
}

/// One event as two: of the stored form, and of the form passed on.
fn split_event<W, S>(event: watcher::Event<W>, split: fn(W) -> (S, W)) -> SplitEvent<S, W> {
    use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
    let both = |obj: W, wrap: fn(S) -> watcher::Event<S>, again: fn(W) -> watcher::Event<W>| {
        let (kept, passed) = split(obj);
        (wrap(kept), again(passed))
    };
    match event {
        Apply(obj) => both(obj, Apply, Apply),
        Delete(obj) => both(obj, Delete, Delete),
        InitApply(obj) => both(obj, InitApply, InitApply),
        Init => (Init, Init),
        InitDone => (InitDone, InitDone),
    }
}

type SplitEvent<S, W> = (watcher::Event<S>, watcher::Event<W>);

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
