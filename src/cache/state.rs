//! Which cache is which ([`Cache`]), and the progress every waiter reads ([`CacheState`]):
//! a version bumped by each change, which caches have had their first full list, and which
//! are stale: their watch went silent and they have not been listed again since.

use std::{fmt, sync::Arc};

use kube::runtime::watcher;
use tokio::sync::watch;

use crate::crd::OwnerKind;

/// One cache of the operator: a bit in [`CacheState::listed`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cache {
    /// The owners of a kind.
    Owners(OwnerKind),
    /// The Deployments generated for owners of a kind.
    Deployments(OwnerKind),
    /// The Mutations' Secrets.
    Secrets,
    /// The variants' Services generated for owners of a kind (R36).
    Services(OwnerKind),
}

impl fmt::Display for Cache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, kind) = match self {
            Cache::Owners(kind) => return write!(f, "{}s", kind.kind()),
            Cache::Secrets => return f.write_str("Mutations' Secrets"),
            Cache::Deployments(kind) => ("Deployments", kind),
            Cache::Services(kind) => ("Services", kind),
        };
        write!(f, "{what} of {}s", kind.kind())
    }
}

impl Cache {
    fn bit(self) -> u8 {
        match self {
            Cache::Owners(OwnerKind::MutantDeployment) => 1,
            Cache::Owners(OwnerKind::Mutation) => 1 << 1,
            Cache::Deployments(OwnerKind::MutantDeployment) => 1 << 2,
            Cache::Deployments(OwnerKind::Mutation) => 1 << 3,
            Cache::Secrets => 1 << 4,
            Cache::Services(OwnerKind::MutantDeployment) => 1 << 5,
            Cache::Services(OwnerKind::Mutation) => 1 << 6,
        }
    }
}

/// The caches' progress, sent on every change.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheState {
    /// Bumped by every change applied to any cache.
    pub version: u64,
    /// One bit per [`Cache`] that has had its first full list.
    listed: u8,
    /// One bit per [`Cache`] whose watch went silent and that has not been listed since.
    stale: u8,
}

impl CacheState {
    /// Whether `cache` has had its first full list.
    pub fn listed(&self, cache: Cache) -> bool {
        self.listed & cache.bit() != 0
    }

    /// Whether `cache`'s watch went silent and it has not been listed again since
    /// (R34).
    pub fn stale(&self, cache: Cache) -> bool {
        self.stale & cache.bit() != 0
    }
}

/// Tells every waiter that `cache`'s watch went silent: stale until its next full list.
pub fn mark_stale(signal: &watch::Sender<CacheState>, cache: Cache) {
    signal.send_modify(|state| {
        state.version = state.version.wrapping_add(1);
        state.stale |= cache.bit();
    });
}

/// Tells every waiter of a change to `cache`, once the store has applied it.
pub fn signalling<K>(
    signal: &Arc<watch::Sender<CacheState>>,
    cache: Cache,
) -> impl FnMut(&watcher::Event<K>) + use<K> {
    let signal = Arc::clone(signal);
    move |event| {
        let listed = matches!(event, watcher::Event::InitDone);
        if listed || matches!(event, watcher::Event::Apply(_) | watcher::Event::Delete(_)) {
            signal.send_modify(|state| {
                state.version = state.version.wrapping_add(1);
                if listed {
                    state.listed |= cache.bit();
                    state.stale &= !cache.bit();
                }
            });
        }
    }
}
