//! Which generated Deployments (or Services) belong to which owner, so that a reconcile finds
//! its own without scanning every cached one (which made converging N owners O(N²)).
//!
//! Kept by the Deployment and Service feeds next to the store, from the same watch events: an owner is
//! named by the owner label (a Deployment without it is nobody's to prune, see
//! `variant::may_prune`); a relist builds a new index and swaps it in when the list is done,
//! as the store does.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{Arc, PoisonError, RwLock},
};

use kube::runtime::watcher;

use crate::variant::{HasMeta, OWNER_LABEL};

/// A namespace and a name.
type Key = (String, String);

#[derive(Debug, Default)]
struct Map {
    /// (namespace, owner name) -> the names of its Deployments.
    by_owner: HashMap<Key, BTreeSet<String>>,
    /// (namespace, Deployment name) -> its owner name, for when the label changes.
    owner_of: HashMap<Key, String>,
}

impl Map {
    fn insert<K: HasMeta>(&mut self, d: &K) {
        let meta = d.meta_view();
        let (Some(namespace), Some(name)) = (meta.namespace(), meta.name()) else {
            return;
        };
        self.remove(namespace, name);
        if let Some(owner) = meta.label(OWNER_LABEL) {
            self.by_owner
                .entry((namespace.to_owned(), owner.to_owned()))
                .or_default()
                .insert(name.to_owned());
            self.owner_of
                .insert((namespace.to_owned(), name.to_owned()), owner.to_owned());
        }
    }

    fn remove(&mut self, namespace: &str, name: &str) {
        let Some(owner) = self
            .owner_of
            .remove(&(namespace.to_string(), name.to_string()))
        else {
            return;
        };
        let key = (namespace.to_string(), owner);
        if let Some(names) = self.by_owner.get_mut(&key) {
            names.remove(name);
            if names.is_empty() {
                self.by_owner.remove(&key);
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
    /// Applies one watch event, after the store has.
    pub fn apply<K: HasMeta>(&self, event: &watcher::Event<K>) {
        let mut inner = self.0.write().unwrap_or_else(PoisonError::into_inner);
        match event {
            watcher::Event::Init => inner.pending = Some(Map::default()),
            watcher::Event::InitApply(d) => {
                inner.pending.get_or_insert_with(Map::default).insert(d)
            }
            watcher::Event::InitDone => inner.live = inner.pending.take().unwrap_or_default(),
            watcher::Event::Apply(d) => inner.live.insert(d),
            watcher::Event::Delete(d) => {
                let meta = d.meta_view();
                if let (Some(namespace), Some(name)) = (meta.namespace(), meta.name()) {
                    inner.live.remove(namespace, name);
                }
            }
        }
    }

    /// The names of the objects in `namespace` that carry owner label `owner`.
    pub fn names(&self, namespace: &str, owner: &str) -> Vec<String> {
        let inner = self.0.read().unwrap_or_else(PoisonError::into_inner);
        inner
            .live
            .by_owner
            .get(&(namespace.to_string(), owner.to_string()))
            .map(|names| names.iter().cloned().collect())
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

    // R6, R11: each owner finds exactly its Deployments, through changes and relists
    #[test]
    fn the_index_follows_the_watch() {
        let index = OwnerIndex::default();
        index.apply(&watcher::Event::<ObservedDeployment>::Init);
        index.apply(&watcher::Event::InitApply(dep("a", "web-x", Some("web"))));
        assert!(
            index.names("a", "web").is_empty(),
            "a relist counts at its end"
        );
        index.apply(&watcher::Event::<ObservedDeployment>::InitDone);
        assert_eq!(index.names("a", "web"), ["web-x"]);

        index.apply(&watcher::Event::Apply(dep("a", "web-y", Some("web"))));
        index.apply(&watcher::Event::Apply(dep("b", "web-x", Some("web"))));
        index.apply(&watcher::Event::Apply(dep("a", "api-x", Some("api"))));
        assert_eq!(index.names("a", "web"), ["web-x", "web-y"]);
        assert_eq!(index.names("b", "web"), ["web-x"]);
        assert_eq!(index.names("a", "api"), ["api-x"]);

        // a label changed by hand moves the Deployment; one removed takes it out
        index.apply(&watcher::Event::Apply(dep("a", "web-y", Some("api"))));
        index.apply(&watcher::Event::Apply(dep("a", "web-x", None)));
        assert!(index.names("a", "web").is_empty());
        assert_eq!(index.names("a", "api"), ["api-x", "web-y"]);

        index.apply(&watcher::Event::Delete(dep("a", "api-x", Some("api"))));
        assert_eq!(index.names("a", "api"), ["web-y"]);

        // a relist replaces everything
        index.apply(&watcher::Event::<ObservedDeployment>::Init);
        index.apply(&watcher::Event::InitApply(dep("c", "z", Some("web"))));
        index.apply(&watcher::Event::<ObservedDeployment>::InitDone);
        assert!(index.names("a", "api").is_empty() && index.names("b", "web").is_empty());
        assert_eq!(index.names("c", "web"), ["z"]);
    }
}
