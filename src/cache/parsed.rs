//! Each owner's policies, parsed once per generation (R50): the owners' watch hands every
//! event to [`Parsings::watched`], which parses what an applied owner sets ([`Parsed::of`])
//! unless its generation was parsed already (a status write leaves the spec and the
//! generation as they were), and forgets deleted owners and, at the end of a relist, those
//! that were not listed again. An owner that sets none of it costs no entry.
//!
//! Readers ask [`Parsings::of`] with the object they hold: an entry of another generation
//! (the reader's object is newer or older than the watch's last event) is not used, and the
//! object is parsed then, so what a reader gets always matches the object it holds.

use crate::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use kube::runtime::watcher;

use crate::{
    crd::OwnerResource,
    variant::parsed::{self, Parsed},
};

/// The parsed policies of one owner kind's cache, by uid.
#[derive(Default)]
pub struct Parsings {
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    by_uid: HashMap<String, Entry>,
    /// Counts the relists: an entry not written since the current one began is of an owner
    /// the relist did not find.
    relist: u64,
}

struct Entry {
    generation: Option<i64>,
    relist: u64,
    parsed: Arc<Parsed>,
}

impl Parsings {
    /// `owner`'s policies, as its spec at its generation says.
    pub fn of<K: OwnerResource>(&self, owner: &K) -> Arc<Parsed> {
        let meta = owner.meta();
        let Some(uid) = meta.uid.as_deref() else {
            return share(Parsed::of(owner));
        };
        {
            let table = self.lock();
            if let Some(entry) = table.by_uid.get(uid)
                && entry.generation == meta.generation
            {
                return entry.parsed.clone();
            }
        }
        let parsed = share(Parsed::of(owner));
        self.keep(uid, meta.generation, &parsed);
        parsed
    }

    /// Takes in one event of the owners' watch.
    pub fn watched<K: OwnerResource>(&self, event: &watcher::Event<K>) {
        match event {
            watcher::Event::Apply(owner) | watcher::Event::InitApply(owner) => {
                let meta = owner.meta();
                let Some(uid) = meta.uid.as_deref() else {
                    return;
                };
                let mut table = self.lock();
                let relist = table.relist;
                if let Some(entry) = table.by_uid.get_mut(uid)
                    && entry.generation == meta.generation
                {
                    entry.relist = relist;
                    return;
                }
                drop(table);
                let parsed = share(Parsed::of(owner));
                self.keep(uid, meta.generation, &parsed);
            }
            watcher::Event::Delete(owner) => {
                if let Some(uid) = owner.meta().uid.as_deref() {
                    self.lock().by_uid.remove(uid);
                }
            }
            watcher::Event::Init => self.lock().relist += 1,
            watcher::Event::InitDone => {
                let mut table = self.lock();
                let relist = table.relist;
                table.by_uid.retain(|_, entry| entry.relist == relist);
            }
        }
    }

    /// How many owners have an entry.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().by_uid.len()
    }

    fn keep(&self, uid: &str, generation: Option<i64>, parsed: &Arc<Parsed>) {
        let mut table = self.lock();
        if parsed.is_empty() {
            table.by_uid.remove(uid);
            return;
        }
        let relist = table.relist;
        let entry = Entry {
            generation,
            relist,
            parsed: parsed.clone(),
        };
        table.by_uid.insert(uid.to_string(), entry);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `parsed` behind an `Arc`; the shared one when there is nothing in it.
fn share(parsed: Parsed) -> Arc<Parsed> {
    if parsed.is_empty() {
        parsed::nothing()
    } else {
        Arc::new(parsed)
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::watcher::Event;

    use super::*;
    use crate::crd::{DevicesSpec, Mutation, SleepSpec};

    /// Mutation `name` (uid `name`) at `generation`, with `spec.devices` when `late_after` is
    /// given, and a sleep spec beside it.
    fn mutation(name: &str, generation: i64, late_after: Option<&str>) -> Mutation {
        let spec = serde_json::json!({"deployment": {}, "variants": []});
        let mut m = Mutation::new(
            name,
            serde_json::from_value(spec).unwrap_or_else(|e| panic!("{e}")),
        );
        m.metadata.namespace = Some("team".into());
        m.metadata.uid = Some(name.into());
        m.metadata.generation = Some(generation);
        m.spec.devices = late_after.map(|late| {
            Box::new(DevicesSpec {
                late_after: Some(late.into()),
                sleep: Some(SleepSpec::default()),
                ..DevicesSpec::default()
            })
        });
        m
    }

    /// R50: an owner's policies are parsed when it enters the cache and then read, not parsed
    /// again, by every reader of that generation; a new generation is parsed anew, and a reader
    /// holding an object of another generation than the cache's gets its own object's.
    #[test]
    fn policies_are_parsed_once_per_generation() {
        let parsings = Parsings::default();
        let first = mutation("a", 1, Some("45m"));
        parsings.watched(&Event::Apply(first.clone()));
        assert_eq!(parsings.len(), 1);
        let read = parsings.of(&first);
        assert!(
            Arc::ptr_eq(&read, &parsings.of(&first)),
            "read twice, parsed once"
        );
        let late = read.devices().map(|p| p.late_after.as_secs());
        assert_eq!(late, Some(2700));
        assert!(read.sleep().is_some(), "{read:?}");

        // A status write: the same generation, nothing parsed again.
        parsings.watched(&Event::Apply(first.clone()));
        assert!(Arc::ptr_eq(&read, &parsings.of(&first)));

        // A change of spec: a new generation, parsed anew.
        let second = mutation("a", 2, Some("not a duration"));
        parsings.watched(&Event::Apply(second.clone()));
        let reread = parsings.of(&second);
        assert!(!Arc::ptr_eq(&read, &reread));
        let problem = reread.devices.as_ref().and_then(|p| p.as_ref().err());
        assert!(
            problem.is_some_and(|e| e.contains("lateAfter")),
            "{reread:?}"
        );
        // A reader still holding the first generation gets what that one says.
        assert_eq!(
            parsings
                .of(&first)
                .devices()
                .map(|p| p.late_after.as_secs()),
            Some(2700)
        );
    }

    /// Owners that set nothing to parse cost no entry; deleted owners, and owners a relist
    /// did not find again, are forgotten.
    #[test]
    fn entries_follow_the_cache() {
        let parsings = Parsings::default();
        let plain = mutation("plain", 1, None);
        parsings.watched(&Event::Apply(plain.clone()));
        assert_eq!(parsings.len(), 0);
        assert!(parsings.of(&plain).is_empty());
        assert_eq!(parsings.len(), 0);

        let (a, b) = (mutation("a", 1, Some("45m")), mutation("b", 1, Some("45m")));
        parsings.watched(&Event::Apply(a.clone()));
        parsings.watched(&Event::Apply(b.clone()));
        assert_eq!(parsings.len(), 2);
        parsings.watched(&Event::Delete(a.clone()));
        assert_eq!(parsings.len(), 1);

        // A relist that finds `a` again (created anew) but not `b`.
        parsings.watched(&Event::<Mutation>::Init);
        parsings.watched(&Event::InitApply(a.clone()));
        parsings.watched(&Event::<Mutation>::InitDone);
        assert_eq!(parsings.len(), 1);
        assert!(parsings.of(&a).devices().is_some());
    }
}
