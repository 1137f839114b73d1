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
    metrics::Metrics,
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
}

/// What this replica remembers of expiring sleeping variants (R42, `sleep::expire`): since
/// when, by its own monotonic clock, each variant has been due, and when it expired the ones
/// of the last hour.
#[derive(Default)]
pub struct ExpiryMemory {
    pub(super) due: Mutex<HashMap<(String, String, String), Instant>>,
    pub(super) done: Mutex<Vec<Instant>>,
}
