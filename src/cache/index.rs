//! The store of what the operator generates for one owner kind (Deployments or Services):
//! every object found by its name, and an owner's objects found by the owner label without
//! scanning the others (scanning made converging N owners O(N²)).
//!
//! At 1000 x 5 this store is a large part of the operator's memory, so it keeps each object
//! once, behind one `Arc`, and no key of its own: the table of names holds only the pointers
//! (hashed by namespace and name, read off the object), and each owner's list holds the same
//! pointers sorted by name. kube's reflector store kept a 96-byte key and two strings per
//! object beside it, and the owner index a copy of every name. A relist builds a new store
//! and swaps it in when the list is done, as kube's store does.
//!
//! An owner is named by the owner label (a Deployment without it is nobody's to prune, see
//! `variant::may_prune`); which owner an object was under before a change is read off the
//! stored copy it replaces.

use std::{
    collections::HashMap,
    hash::{BuildHasher, RandomState},
    sync::{Arc, PoisonError, RwLock},
};

use hashbrown::{HashTable, hash_table::Entry};
use kube::runtime::watcher;

use crate::variant::{HasMeta, OWNER_LABEL};

/// `namespace/owner`: one allocation for both (neither may hold a '/').
type Key = Box<str>;

fn key(namespace: &str, name: &str) -> Key {
    let mut key = String::with_capacity(namespace.len() + 1 + name.len());
    key.push_str(namespace);
    key.push('/');
    key.push_str(name);
    key.into_boxed_str()
}

/// Where an object is: its namespace and name.
fn place<K: HasMeta>(obj: &K) -> (&str, &str) {
    let meta = obj.meta_view();
    (
        meta.namespace().unwrap_or_default(),
        meta.name().unwrap_or_default(),
    )
}

/// One full set of objects.
struct Objects<K> {
    /// Every object, hashed by [`place`].
    by_name: HashTable<Arc<K>>,
    /// `namespace/owner` -> its objects, sorted by name.
    by_owner: HashMap<Key, Vec<Arc<K>>>,
}

impl<K> Default for Objects<K> {
    fn default() -> Self {
        Objects {
            by_name: HashTable::new(),
            by_owner: HashMap::new(),
        }
    }
}

impl<K: HasMeta> Objects<K> {
    fn get(&self, hasher: &RandomState, at: (&str, &str)) -> Option<&Arc<K>> {
        self.by_name
            .find(hasher.hash_one(at), |obj| place(&**obj) == at)
    }

    fn insert(&mut self, hasher: &RandomState, obj: Arc<K>) {
        let at = place(&*obj);
        let entry = self.by_name.entry(
            hasher.hash_one(at),
            |o| place(&**o) == at,
            |o| hasher.hash_one(place(&**o)),
        );
        let before = match entry {
            Entry::Occupied(mut stored) => Some(std::mem::replace(stored.get_mut(), obj.clone())),
            Entry::Vacant(free) => {
                free.insert(obj.clone());
                None
            }
        };
        if let Some(before) = before {
            self.unindex(&*before);
        }
        self.index(obj);
    }

    fn remove(&mut self, hasher: &RandomState, at: (&str, &str)) {
        let found = self
            .by_name
            .find_entry(hasher.hash_one(at), |o| place(&**o) == at);
        if let Ok(stored) = found {
            let (before, _) = stored.remove();
            self.unindex(&*before);
        }
    }

    /// Adds `obj` to its owner's list, if it names one.
    fn index(&mut self, obj: Arc<K>) {
        let meta = obj.meta_view();
        let (Some(namespace), Some(name), Some(owner)) =
            (meta.namespace(), meta.name(), meta.label(OWNER_LABEL))
        else {
            return;
        };
        let list = self.by_owner.entry(key(namespace, owner)).or_default();
        match list.binary_search_by(|o| place(&**o).1.cmp(name)) {
            Ok(at) => {
                if let Some(slot) = list.get_mut(at) {
                    *slot = obj.clone();
                }
            }
            Err(at) => list.insert(at, obj.clone()),
        }
    }

    /// Takes `obj` out of its owner's list.
    fn unindex(&mut self, obj: &K) {
        let meta = obj.meta_view();
        let (Some(namespace), Some(name), Some(owner)) =
            (meta.namespace(), meta.name(), meta.label(OWNER_LABEL))
        else {
            return;
        };
        let owner = key(namespace, owner);
        if let Some(list) = self.by_owner.get_mut(&owner) {
            list.retain(|o| place(&**o).1 != name);
            if list.is_empty() {
                self.by_owner.remove(&owner);
            }
        }
    }
}

struct Inner<K> {
    live: Objects<K>,
    /// The store being built by a relist, until its end.
    pending: Option<Objects<K>>,
    hasher: RandomState,
}

/// The store of one kind of generated object; clones share it.
pub struct Generated<K>(Arc<RwLock<Inner<K>>>);

impl<K> Clone for Generated<K> {
    fn clone(&self) -> Self {
        Generated(self.0.clone())
    }
}

impl<K> Default for Generated<K> {
    fn default() -> Self {
        Generated(Arc::new(RwLock::new(Inner {
            live: Objects::default(),
            pending: None,
            hasher: RandomState::new(),
        })))
    }
}

impl<K: HasMeta> Generated<K> {
    /// Applies one watch event.
    pub fn apply(&self, event: watcher::Event<K>) {
        let mut guard = self.0.write().unwrap_or_else(PoisonError::into_inner);
        let inner = &mut *guard;
        let hasher = &inner.hasher;
        match event {
            watcher::Event::Init => inner.pending = Some(Objects::default()),
            watcher::Event::InitApply(obj) => inner
                .pending
                .get_or_insert_with(Objects::default)
                .insert(hasher, Arc::new(obj)),
            watcher::Event::InitDone => {
                inner.live = inner.pending.take().unwrap_or_default();
                inner
                    .live
                    .by_name
                    .shrink_to_fit(|o| hasher.hash_one(place(&**o)));
            }
            watcher::Event::Apply(obj) => inner.live.insert(hasher, Arc::new(obj)),
            watcher::Event::Delete(obj) => inner.live.remove(hasher, place(&obj)),
        }
    }

    /// The object `name` in `namespace`, if it is stored.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        let inner = self.0.read().unwrap_or_else(PoisonError::into_inner);
        inner.live.get(&inner.hasher, (namespace, name)).cloned()
    }

    /// The objects in `namespace` that carry owner label `owner` (not yet checked for the
    /// owner's uid: see `variant::may_prune`), sorted by name.
    pub fn of_owner(&self, namespace: &str, owner: &str) -> Vec<Arc<K>> {
        let inner = self.0.read().unwrap_or_else(PoisonError::into_inner);
        inner
            .live
            .by_owner
            .get(&key(namespace, owner))
            .cloned()
            .unwrap_or_default()
    }

    /// How many objects are stored.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        let inner = self.0.read().unwrap_or_else(PoisonError::into_inner);
        inner.live.by_name.len()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::variant::ObservedDeployment;

    fn dep(namespace: &str, name: &str, owner: Option<&str>) -> ObservedDeployment {
        dep_at(namespace, name, owner, "1")
    }

    fn dep_at(namespace: &str, name: &str, owner: Option<&str>, rv: &str) -> ObservedDeployment {
        let labels = owner
            .map(|o| json!({ OWNER_LABEL: o }))
            .unwrap_or(json!({}));
        serde_json::from_value(json!({
            "metadata": {"namespace": namespace, "name": name, "labels": labels,
                         "resourceVersion": rv}
        }))
        .unwrap_or_default()
    }

    fn names(store: &Generated<ObservedDeployment>, namespace: &str, owner: &str) -> Vec<String> {
        store
            .of_owner(namespace, owner)
            .iter()
            .map(|d| place(&**d).1.to_owned())
            .collect()
    }

    fn version(store: &Generated<ObservedDeployment>, namespace: &str, name: &str) -> String {
        store
            .get(namespace, name)
            .and_then(|d| d.meta_view().resource_version().map(str::to_owned))
            .unwrap_or_default()
    }

    // R6, R11: each owner finds exactly its Deployments, through changes and relists
    #[test]
    fn the_index_follows_the_watch() {
        let w = Generated::default();
        w.apply(watcher::Event::Init);
        w.apply(watcher::Event::InitApply(dep("a", "web-x", Some("web"))));
        assert!(
            names(&w, "a", "web").is_empty(),
            "a relist counts at its end"
        );
        assert!(w.get("a", "web-x").is_none(), "a relist counts at its end");
        w.apply(watcher::Event::InitDone);
        assert_eq!(names(&w, "a", "web"), ["web-x"]);

        w.apply(watcher::Event::Apply(dep("a", "web-y", Some("web"))));
        w.apply(watcher::Event::Apply(dep("b", "web-x", Some("web"))));
        w.apply(watcher::Event::Apply(dep("a", "api-x", Some("api"))));
        w.apply(watcher::Event::Apply(dep_at(
            "a",
            "web-y",
            Some("web"),
            "2",
        )));
        assert_eq!(names(&w, "a", "web"), ["web-x", "web-y"]);
        assert_eq!(names(&w, "b", "web"), ["web-x"]);
        assert_eq!(names(&w, "a", "api"), ["api-x"]);
        assert_eq!(w.len(), 4);

        // a change replaces the stored copy, in both the table and the owner's list
        assert_eq!(version(&w, "a", "web-y"), "2");
        let listed = w.of_owner("a", "web");
        let last = listed
            .last()
            .and_then(|d| d.meta_view().resource_version().map(str::to_owned));
        assert_eq!(last.as_deref(), Some("2"));

        // a label changed by hand moves the Deployment; one removed takes it out of every list
        w.apply(watcher::Event::Apply(dep("a", "web-y", Some("api"))));
        w.apply(watcher::Event::Apply(dep("a", "web-x", None)));
        assert!(names(&w, "a", "web").is_empty());
        assert_eq!(names(&w, "a", "api"), ["api-x", "web-y"]);
        assert!(w.get("a", "web-x").is_some(), "still found by its name");

        // a delete takes it out, under the owner it was stored under
        w.apply(watcher::Event::Delete(dep("a", "api-x", None)));
        assert_eq!(names(&w, "a", "api"), ["web-y"]);
        assert!(w.get("a", "api-x").is_none());
        assert_eq!(w.len(), 3);

        // a relist replaces everything
        w.apply(watcher::Event::Init);
        w.apply(watcher::Event::InitApply(dep("c", "z", Some("web"))));
        w.apply(watcher::Event::InitDone);
        assert!(names(&w, "a", "api").is_empty() && names(&w, "b", "web").is_empty());
        assert!(w.get("a", "web-y").is_none());
        assert_eq!(names(&w, "c", "web"), ["z"]);
        assert_eq!(w.len(), 1);
    }

    // R6: names are per namespace, and a table that grows past its buckets still finds all
    #[test]
    fn many_objects_each_found_by_name_and_owner() {
        let w = Generated::default();
        for owner in 0..300 {
            for variant in ["a", "b", "c"] {
                let name = format!("o{owner}-{variant}");
                w.apply(watcher::Event::Apply(dep(
                    "x",
                    &name,
                    Some(&format!("o{owner}")),
                )));
                w.apply(watcher::Event::Apply(dep("y", &name, None)));
            }
        }
        assert_eq!(w.len(), 1800);
        for owner in 0..300 {
            let expected: Vec<String> = ["a", "b", "c"]
                .iter()
                .map(|v| format!("o{owner}-{v}"))
                .collect();
            assert_eq!(names(&w, "x", &format!("o{owner}")), expected);
            assert!(names(&w, "y", &format!("o{owner}")).is_empty());
            assert!(w.get("y", &format!("o{owner}-b")).is_some());
        }
        assert!(w.get("z", "o1-a").is_none());
    }
}
