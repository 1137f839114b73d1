//! What every step of a reconcile shares: the [`Context`] of one controller, and how soon an
//! owner is reconciled again.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use kube::{Client, runtime::reflector::Store};
use tokio::sync::watch;

use super::{announce, events};
use crate::{
    cache::Caches,
    crd::{DeviceStatus, Mutation, OwnerResource, OwnerStatus, Variant, VariantScreen},
    http::ApiError,
    metrics::Metrics,
    store::{CONTROLLER_CALL_LIMIT, OPERATOR_MANAGER},
    variant::Owner,
    variant::{CachedSecret, PodSecurity},
};

/// How long a failed reconcile waits before it is retried.
pub const RETRY_AFTER: Duration = Duration::from_secs(10);
/// How often an owner is reconciled when nothing happens (a backstop for missed events).
pub const RESYNC_AFTER: Duration = Duration::from_secs(300);
/// How soon an owner is reconciled again when a quota or an admission policy refused one of
/// its variants (R35): not a failure to retry at once, but what frees a quota or changes a
/// policy is no event the operator watches.
pub const REFUSED_RETRY: Duration = Duration::from_secs(60);

/// Shared state of one controller.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// The one writer of Mutations and their Secrets, shared with the HTTP API (R52).
    pub store: crate::store::Store,
    /// Every cache: this controller's generated Deployments (`Caches::deployments`), and the
    /// wait for their first list.
    pub caches: Caches,
    /// The Mutations' Secrets (label-selected); `None` for MutantDeployments.
    pub secrets: Option<Store<CachedSecret>>,
    /// Publishes Events on owners.
    pub events: events::Events,
    /// Problems announced recently, so each is announced once.
    pub announced: announce::Announced,
    /// Reconcile counters and timings.
    pub metrics: Arc<Metrics>,
    /// Whether this replica is the leader: only the leader's reconciles act (R30).
    pub leader: watch::Receiver<bool>,
    /// The operator's own ServiceAccount and the API server's version, when known: no
    /// Deployment it makes runs as it, or breaks the baseline its namespace is held to (R33).
    pub pod_security: PodSecurity,
    /// What this replica remembers of expiring sleeping variants (R42).
    pub expiry: ExpiryMemory,
    /// The statuses this replica wrote that its cache may not have yet.
    pub written: WrittenStatuses,
    /// The bases of revisions a rollout holds variants on (R43).
    pub revisions: RevisionMemory,
    /// When the statuses of progress under way were first put off (R50).
    pub progress: super::hold::ProgressHold,
    /// What the last fetches of each owner's screens found (R53).
    pub screens: ScreenMemory,
    /// The bytes of screens all Mutations may keep together (R53).
    pub screen_cache_bytes: usize,
}

/// The most owners whose screens [`ScreenMemory`] remembers; past it, it starts over (each
/// owner's status still says when its screens were last fetched).
const SCREEN_OWNERS: usize = 4096;

/// What this replica's last fetches of each owner's screens found, by owner uid and variant
/// label: a status is not written in every reconcile (and the cache brings it back a moment
/// later), so the next reconcile reads what was fetched here rather than fetching again.
#[derive(Default)]
pub struct ScreenMemory {
    owners: Mutex<HashMap<String, std::collections::BTreeMap<String, VariantScreen>>>,
    /// The size of each screen Secret (`ns/name`) this replica wrote, which its cache may
    /// not show yet.
    sizes: Mutex<HashMap<String, usize>>,
}

impl ScreenMemory {
    /// What was last found of owner `uid`'s screens, if remembered.
    pub(super) fn get(&self, uid: &str) -> std::collections::BTreeMap<String, VariantScreen> {
        self.owners
            .lock()
            .ok()
            .and_then(|owners| owners.get(uid).cloned())
            .unwrap_or_default()
    }

    /// Reserves `len` bytes for screen Secret `key` (`ns/name`) within `bound`, counting what
    /// this replica wrote and, for the others, what its cache holds (`cached`); Err is what is
    /// held, when it does not fit. Checked and reserved at once, so fetches that end together
    /// cannot both pass.
    pub(super) fn reserve(
        &self,
        key: &str,
        len: usize,
        cached: impl Iterator<Item = (String, usize)>,
        bound: usize,
    ) -> Result<(), usize> {
        let Ok(mut sizes) = self.sizes.lock() else {
            return Err(bound);
        };
        let others: usize = cached
            .filter(|(k, _)| k != key && !sizes.contains_key(k))
            .map(|(_, n)| n)
            .sum();
        let written: usize = sizes
            .iter()
            .filter(|(k, _)| *k != key)
            .map(|(_, n)| n)
            .sum();
        let held = others + written;
        if held + len > bound {
            return Err(held);
        }
        sizes.insert(key.to_owned(), len);
        Ok(())
    }

    /// Forgets screen Secret `key` (`ns/name`): deleted, or its write failed.
    pub(super) fn release(&self, key: &str) {
        if let Ok(mut sizes) = self.sizes.lock() {
            sizes.remove(key);
        }
    }

    /// Remembers `screens` as owner `uid`'s, in place of what was.
    pub(super) fn put(
        &self,
        uid: &str,
        screens: std::collections::BTreeMap<String, VariantScreen>,
    ) {
        if let Ok(mut owners) = self.owners.lock() {
            if owners.len() >= SCREEN_OWNERS && !owners.contains_key(uid) {
                owners.clear();
            }
            owners.insert(uid.to_owned(), screens);
        }
    }
}

/// The bases of the revisions a rollout holds variants on, per owner uid and revision, as
/// read from their ControllerRevisions (`controller::rollout`): each is read once, and
/// forgotten when no variant or fallback of its owner needs it.
#[derive(Default)]
pub struct RevisionMemory {
    bases: Mutex<HashMap<(String, String), Arc<str>>>,
}

impl RevisionMemory {
    /// The base text of `revision` of owner `uid`, if remembered.
    pub(super) fn get(&self, uid: &str, revision: &str) -> Option<Arc<str>> {
        let bases = self.bases.lock().ok()?;
        bases.get(&(uid.to_owned(), revision.to_owned())).cloned()
    }

    /// Remembers `text` as the base of `revision` of owner `uid`.
    pub(super) fn put(&self, uid: &str, revision: &str, text: &str) {
        if let Ok(mut bases) = self.bases.lock() {
            bases.insert((uid.to_owned(), revision.to_owned()), Arc::from(text));
        }
    }

    /// Forgets the revisions of owner `uid` other than `held`.
    pub(super) fn keep(&self, uid: &str, held: &[&str]) {
        if let Ok(mut bases) = self.bases.lock() {
            bases.retain(|(u, r), _| u != uid || held.contains(&r.as_str()));
        }
    }
}

/// A store edit's outcome for the controller: a Mutation deleted meanwhile (404) is `None`.
fn unless_gone(edited: Result<Arc<Mutation>, ApiError>) -> crate::Result<Option<Arc<Mutation>>> {
    match edited {
        Ok(m) => Ok(Some(m)),
        Err(err) if err.0 == hyper::StatusCode::NOT_FOUND => Ok(None),
        Err(err) => Err(err.into()),
    }
}

impl Context {
    /// Edits `owner`'s device list through the store, each call within the controller's limit:
    /// the Mutation as written, or `None` when it was deleted meanwhile (nothing to edit).
    pub(super) async fn edit_devices<F>(
        &self,
        owner: &Owner,
        change: F,
    ) -> crate::Result<Option<Arc<Mutation>>>
    where
        F: Fn(&Mutation) -> Result<Vec<DeviceStatus>, ApiError> + Send + Sync + 'static,
    {
        let edit =
            self.store
                .edit_devices(&owner.namespace, &owner.name, CONTROLLER_CALL_LIMIT, change);
        unless_gone(edit.await)
    }

    /// Edits `owner`'s variants through the store under the controller's field manager, as
    /// [`Context::edit_devices`] edits its devices.
    pub(super) async fn edit_variants<F>(
        &self,
        owner: &Owner,
        change: F,
    ) -> crate::Result<Option<Arc<Mutation>>>
    where
        F: Fn(&Mutation) -> Result<Vec<Variant>, ApiError> + Send + Sync + 'static,
    {
        let (ns, name) = (&owner.namespace, &owner.name);
        let edit =
            self.store
                .edit_variants(ns, name, OPERATOR_MANAGER, CONTROLLER_CALL_LIMIT, change);
        unless_gone(edit.await)
    }

    /// The status to reconcile `obj` from: its cached one, or the one this replica last
    /// wrote while the cache does not have it yet ([`WrittenStatuses`]).
    pub(super) fn previous<K: OwnerResource>(&self, uid: &str, obj: &K) -> OwnerStatus {
        let cached = obj.owner_status().cloned().unwrap_or_default();
        let version = obj.meta().resource_version.as_deref();
        let moved = |ns: &str, name: &str, from: &str| self.moved_on(K::KIND, ns, name, from);
        self.written
            .previous(uid, version, cached, Instant::now(), moved)
    }

    /// Remembers that `status` was just written for `obj`, as cached.
    pub(super) fn wrote<K: OwnerResource>(&self, uid: &str, obj: &K, status: &OwnerStatus) {
        let meta = obj.meta();
        let at = At {
            namespace: meta.namespace.as_deref().unwrap_or_default(),
            name: meta.name.as_deref().unwrap_or_default(),
            version: meta.resource_version.as_deref(),
        };
        let moved = |ns: &str, name: &str, from: &str| self.moved_on(K::KIND, ns, name, from);
        self.written.wrote(uid, at, status, Instant::now(), moved);
    }

    /// Whether the cache holds owner `ns/name` of `kind` at another version than `from`, or
    /// no longer holds it.
    fn moved_on(&self, kind: crate::crd::OwnerKind, ns: &str, name: &str, from: &str) -> bool {
        use kube::runtime::reflector::ObjectRef;
        let version = match kind {
            crate::crd::OwnerKind::Mutation => self
                .caches
                .mutations
                .get(&ObjectRef::new(name).within(ns))
                .and_then(|m| m.metadata.resource_version.clone()),
            crate::crd::OwnerKind::MutantDeployment => self
                .caches
                .mutant_deployments
                .get(&ObjectRef::new(name).within(ns))
                .and_then(|m| m.metadata.resource_version.clone()),
        };
        version.as_deref() != Some(from)
    }
}

/// Which object a status was written from: where it is, and the version the cache held.
#[derive(Clone, Copy, Debug)]
pub(super) struct At<'a> {
    /// Its namespace.
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
    /// Its `resourceVersion` as cached.
    pub version: Option<&'a str>,
}

/// How long a written status stands in for the cached one, at most: the watch delivers it in
/// milliseconds; one it never delivers is not waited for.
const WRITTEN_STANDS: Duration = Duration::from_secs(60);

/// The status this replica last wrote per owner uid, with the resourceVersion of the cached
/// object it was computed from, until the cache has moved past that object.
///
/// A reconcile may start before the watch has delivered the status the previous one wrote
/// (a Deployment event re-queues the owner first). Computed from the older status, it would
/// decide again what was just decided: a sleeping variant's wake would be started, written
/// and counted twice (R42, `mutantops_variant_wakes_total`).
///
/// Each entry is a whole status, so entries go as soon as any reconcile sees that the cache
/// has moved on from theirs: at 1000 owners converging, statuses kept until their own owner's
/// next reconcile made 1.7 MiB of the memory peak (scripts/bench, memory profile).
#[derive(Default)]
pub struct WrittenStatuses {
    by_uid: Mutex<HashMap<String, Written>>,
}

/// One written status, and what it was written from.
struct Written {
    namespace: String,
    name: String,
    from: String,
    status: OwnerStatus,
    at: Instant,
}

impl WrittenStatuses {
    /// The status to reconcile from: `cached` (of the object at `version`), or, while the
    /// cache still holds the object this replica last wrote a status from, the status written
    /// then, with the cached device list (not this writer's, R40). `moved(ns, name, from)`
    /// says whether the cache has moved on from version `from` of owner `ns/name`.
    pub(super) fn previous(
        &self,
        uid: &str,
        version: Option<&str>,
        cached: OwnerStatus,
        now: Instant,
        moved: impl Fn(&str, &str, &str) -> bool,
    ) -> OwnerStatus {
        let Ok(mut written) = self.by_uid.lock() else {
            return cached;
        };
        sweep(&mut written, now, moved);
        match written.get(uid) {
            Some(w) if Some(w.from.as_str()) == version => OwnerStatus {
                devices: cached.devices,
                device_summary: cached.device_summary,
                ..w.status.clone()
            },
            _ => {
                written.remove(uid);
                cached
            }
        }
    }

    /// Remembers that `status` was written from the object `at`.
    pub(super) fn wrote(
        &self,
        uid: &str,
        at: At<'_>,
        status: &OwnerStatus,
        now: Instant,
        moved: impl Fn(&str, &str, &str) -> bool,
    ) {
        let (Some(version), Ok(mut written)) = (at.version, self.by_uid.lock()) else {
            return;
        };
        sweep(&mut written, now, moved);
        let entry = Written {
            namespace: at.namespace.to_owned(),
            name: at.name.to_owned(),
            from: version.to_owned(),
            status: status.clone(),
            at: now,
        };
        written.insert(uid.to_owned(), entry);
    }

    /// How many statuses are kept.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.by_uid.lock().map_or(0, |w| w.len())
    }
}

/// Drops the entries older than [`WRITTEN_STANDS`] and those whose owner the cache holds at
/// another version, or no longer holds.
fn sweep(
    written: &mut HashMap<String, Written>,
    now: Instant,
    moved: impl Fn(&str, &str, &str) -> bool,
) {
    written.retain(|_, w| {
        now.saturating_duration_since(w.at) < WRITTEN_STANDS
            && !moved(&w.namespace, &w.name, &w.from)
    });
}

/// What this replica remembers of expiring sleeping variants (R42, `sleep::expire`): since
/// when, by its own monotonic clock, each variant has been due, and when it expired the ones
/// of the last hour.
#[derive(Default)]
pub struct ExpiryMemory {
    due: Mutex<HashMap<(String, String, String), Instant>>,
    done: Mutex<Vec<Instant>>,
}

impl ExpiryMemory {
    /// Of `due` (variants of Mutation `ns/name` due by the wall clock), those this replica has
    /// watched be due for `watched` at `now` of its monotonic clock, and how long until the
    /// next of the others is. A variant no longer due is forgotten, so that it is watched anew
    /// if it becomes due again; a wall clock that jumps forward starts the watch, nothing more.
    pub(super) fn watched(
        &self,
        ns: &str,
        name: &str,
        due: &[String],
        watched: Duration,
        now: Instant,
    ) -> (Vec<String>, Option<Duration>) {
        let Ok(mut seen) = self.due.lock() else {
            return (Vec::new(), None);
        };
        seen.retain(|(n, m, label), _| n != ns || m != name || due.contains(label));
        let mut ready = Vec::new();
        let mut wait: Option<Duration> = None;
        for label in due {
            let key = (ns.to_owned(), name.to_owned(), label.clone());
            let since = *seen.entry(key).or_insert(now);
            let left = watched.saturating_sub(now.saturating_duration_since(since));
            if left.is_zero() {
                ready.push(label.clone());
            } else {
                wait = Some(wait.map_or(left, |w| w.min(left)));
            }
        }
        (ready, wait)
    }

    /// Takes one of the `per_hour` expiries of the hour before `now`; false when none is left.
    pub(super) fn take(&self, per_hour: usize, now: Instant) -> bool {
        let Ok(mut done) = self.done.lock() else {
            return false;
        };
        done.retain(|t| now.saturating_duration_since(*t) < Duration::from_secs(3600));
        if done.len() >= per_hour {
            return false;
        }
        done.push(now);
        true
    }
}

#[cfg(test)]
mod tests;
