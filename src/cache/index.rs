//! Which generated Deployments (or Services) belong to which owner, so that a reconcile finds
//! its own without scanning every cached one (which made converging N owners O(N²)).
//!
//! Kept by the Deployment and Service feeds next to the store, from the same watch events (and
//! the store's copy of the object from before each event): an owner is named by the owner label (a Deployment without it is nobody's to prune, see
//! `variant::may_prune`); a relist builds a new index and swaps it in when the list is done,
//! as the store does.

use std::{
    collections::HashMap,
    sync::{Arc, PoisonError, RwLock},
};

use kube::runtime::watcher;

use crate::variant::{HasMeta, OWNER_LABEL};

/// `namespace/name`: one allocation for both (neither may hold a '/').
type Key = Box<str>;

fn key(namespace: &str, name: &str) -> Key {
    let mut key = String::with_capacity(namespace.len() + 1 + name.len());
    key.push_str(namespace);
    key.push('/');
    key.push_str(name);
    key.into_boxed_str()
}

/// `namespace/owner` -> the names of its objects, sorted. Which owner an object was under
/// before a change is read off the store's copy of it (the caller passes it), so no second
/// map from each object to its owner is kept.
#[derive(Debug, Default)]
struct Map(HashMap<Key, Vec<Box<str>>>);

impl Map {
    fn insert<K: HasMeta>(&mut self, d: &K) {
        let meta = d.meta_view();
        let (Some(namespace), Some(name), Some(owner)) =
            (meta.namespace(), meta.name(), meta.label(OWNER_LABEL))
        else {
            return;
        };
        let names = self.0.entry(key(namespace, owner)).or_default();
        if let Err(at) = names.binary_search_by(|n| (**n).cmp(name)) {
            names.insert(at, name.into());
        }
    }

    fn remove<K: HasMeta>(&mut self, d: &K) {
        let meta = d.meta_view();
        let (Some(namespace), Some(name), Some(owner)) =
            (meta.namespace(), meta.name(), meta.label(OWNER_LABEL))
        else {
            return;
        };
        let owner = key(namespace, owner);
        if let Some(names) = self.0.get_mut(&owner) {
            names.retain(|n| **n != *name);
            if names.is_empty() {
                self.0.remove(&owner);
            }
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    live: Map,
    /// The index being built by a relist, until its end.
    pending: Option<Map>,
}

/// The owner index of one cache of generated objects; clones share it.
#[derive(Clone, Debug, Default)]
pub struct OwnerIndex(Arc<RwLock<Inner>>);

impl OwnerIndex {
    /// Applies one watch event; `before` is the store's copy of the object the event is
    /// about, before the event (read before the store applies it).
    pub fn apply<K: HasMeta>(&self, event: &watcher::Event<K>, before: Option<&K>) {
        let mut inner = self.0.write().unwrap_or_else(PoisonError::into_inner);
        match event {
            watcher::Event::Init => inner.pending = Some(Map::default()),
            watcher::Event::InitApply(d) => {
                inner.pending.get_or_insert_with(Map::default).insert(d)
            }
            watcher::Event::InitDone => inner.live = inner.pending.take().unwrap_or_default(),
            watcher::Event::Apply(d) => {
                if let Some(before) = before {
                    inner.live.remove(before);
                }
                inner.live.insert(d);
            }
            watcher::Event::Delete(d) => {
                if let Some(before) = before {
                    inner.live.remove(before);
                }
                inner.live.remove(d);
            }
        }
    }

    /// The names of the objects in `namespace` that carry owner label `owner`.
    pub fn names(&self, namespace: &str, owner: &str) -> Vec<String> {
        let inner = self.0.read().unwrap_or_else(PoisonError::into_inner);
        inner
            .live
            .0
            .get(&key(namespace, owner))
            .map(|names| names.iter().map(|n| n.to_string()).collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::variant::ObservedDeployment;

    fn dep(namespace: &str, name: &str, owner: Option<&str>) -> ObservedDeployment {
        let labels = owner
            .map(|o| json!({ OWNER_LABEL: o }))
            .unwrap_or(json!({}));
        serde_json::from_value(json!({
            "metadata": {"namespace": namespace, "name": name, "labels": labels}
        }))
        .unwrap_or_default()
    }

    /// The index beside a store (name -> object), as the watch keeps both.
    #[derive(Default)]
    struct Watched {
        index: OwnerIndex,
        store: HashMap<(String, String), ObservedDeployment>,
    }

    impl Watched {
        fn apply(&mut self, event: watcher::Event<ObservedDeployment>) {
            let at = |d: &ObservedDeployment| {
                let name = d.metadata.name.as_deref().unwrap_or_default().to_owned();
                (
                    d.metadata
                        .namespace
                        .as_deref()
                        .unwrap_or_default()
                        .to_owned(),
                    name,
                )
            };
            let before = match &event {
                watcher::Event::Apply(d) | watcher::Event::Delete(d) => self.store.get(&at(d)),
                _ => None,
            };
            self.index.apply(&event, before);
            match event {
                watcher::Event::Apply(d) | watcher::Event::InitApply(d) => {
                    self.store.insert(at(&d), d);
                }
                watcher::Event::Delete(d) => {
                    self.store.remove(&at(&d));
                }
                _ => {}
            }
        }
    }

    // R6, R11: each owner finds exactly its Deployments, through changes and relists
    #[test]
    fn the_index_follows_the_watch() {
        let mut w = Watched::default();
        w.apply(watcher::Event::Init);
        w.apply(watcher::Event::InitApply(dep("a", "web-x", Some("web"))));
        assert!(
            w.index.names("a", "web").is_empty(),
            "a relist counts at its end"
        );
        w.apply(watcher::Event::InitDone);
        assert_eq!(w.index.names("a", "web"), ["web-x"]);

        w.apply(watcher::Event::Apply(dep("a", "web-y", Some("web"))));
        w.apply(watcher::Event::Apply(dep("b", "web-x", Some("web"))));
        w.apply(watcher::Event::Apply(dep("a", "api-x", Some("api"))));
        w.apply(watcher::Event::Apply(dep("a", "web-y", Some("web"))));
        assert_eq!(w.index.names("a", "web"), ["web-x", "web-y"]);
        assert_eq!(w.index.names("b", "web"), ["web-x"]);
        assert_eq!(w.index.names("a", "api"), ["api-x"]);

        // a label changed by hand moves the Deployment; one removed takes it out
        w.apply(watcher::Event::Apply(dep("a", "web-y", Some("api"))));
        w.apply(watcher::Event::Apply(dep("a", "web-x", None)));
        assert!(w.index.names("a", "web").is_empty());
        assert_eq!(w.index.names("a", "api"), ["api-x", "web-y"]);

        // a delete takes it out, under the owner it was cached under
        w.apply(watcher::Event::Delete(dep("a", "api-x", None)));
        assert_eq!(w.index.names("a", "api"), ["web-y"]);

        // a relist replaces everything
        w.apply(watcher::Event::Init);
        w.apply(watcher::Event::InitApply(dep("c", "z", Some("web"))));
        w.apply(watcher::Event::InitDone);
        assert!(w.index.names("a", "api").is_empty() && w.index.names("b", "web").is_empty());
        assert_eq!(w.index.names("c", "web"), ["z"]);
    }
}
