//! Leader election on a `coordination.k8s.io/v1` Lease, so several replicas can run (R30):
//! one leader reconciles, every replica watches, caches and serves the HTTP API and metrics.
//!
//! The Lease `mutantops-leader` lives in the operator's namespace (`POD_NAMESPACE`; else the
//! watch namespace; else `default`) and names its holder by `POD_NAME` (else
//! `<hostname>-<pid>`). A replica takes a Lease that is absent, has no holder, or whose record
//! it has seen unchanged for the Lease's `leaseDurationSeconds`; the holder renews it every
//! third of the duration. A leader that has not renewed for two thirds of the duration steps
//! down at once, before any other replica may take over.
//!
//! Every duration is timed on this replica's own monotonic clock, as client-go does: expiry
//! counts from the moment this replica last saw the record change, never from `renewTime`.
//! Boards without a real-time clock boot with a wall clock that is hours or years off until
//! NTP answers; comparing another replica's `renewTime` with that clock would make a board
//! whose clock is behind never take over from a dead leader, and one whose clock is ahead
//! take over from a live one. `renewTime` and `acquireTime` are still written (wall clock,
//! for people and `kubectl`), and a change of them is what shows the holder is alive.
//!
//! Every write is a `create` or a `replace` carrying the `resourceVersion` that was read, so
//! of two replicas racing for the Lease exactly one wins (the other gets 409). The leader
//! renews on the `resourceVersion` of its own last write, without reading first, and reads
//! only after a write failed: one request per renewal. On shutdown the
//! leader releases the Lease (no holder), so the next one takes over at once instead of
//! waiting for it to expire.
//!
//! What to do with what was read is decided by the pure [`decide`] and [`next_spec`] (in
//! `decide.rs`), which the unit tests exercise; [`Elector::run`] does only the I/O and the
//! timing.

use std::{sync::Arc, time::Duration};

use k8s_openapi::{
    api::coordination::v1::Lease, apimachinery::pkg::apis::meta::v1::ObjectMeta, jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{PostParams, ResourceExt},
};
use tokio::{sync::watch, time::Instant};

use crate::{config::Config, metrics::Metrics, shutdown::Shutdown};

mod decide;

pub use decide::{Decision, Observed, Seen, decide, next_spec, released_spec};

/// How long after the computed expiry a follower reads the Lease again: the read that may
/// take it over comes just after the expiry, not up to a retry period later.
const AFTER_EXPIRY: Duration = Duration::from_millis(50);

/// The name of the Lease.
pub const LEASE_NAME: &str = "mutantops-leader";

/// Where the Lease is, who this replica is, and the timing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The Lease's namespace.
    pub namespace: String,
    /// This replica's `holderIdentity`.
    pub identity: String,
    /// How long a Lease stays valid without renewal (`leaseDurationSeconds`).
    pub duration: Duration,
}

impl Settings {
    /// From the configuration: `POD_NAMESPACE`, else the watch namespace, else `default`;
    /// `POD_NAME`, else `<hostname>-<pid>`.
    pub fn from_config(config: &Config) -> Settings {
        let namespace = config
            .pod_namespace
            .clone()
            .or_else(|| config.watch_namespace.clone())
            .unwrap_or_else(|| "default".to_string());
        let identity = config
            .pod_name
            .clone()
            .unwrap_or_else(|| default_identity(config.hostname.as_deref()));
        Settings {
            namespace,
            identity,
            duration: config.lease_duration,
        }
    }

    /// How often the leader renews: a third of the duration.
    pub fn renew_every(&self) -> Duration {
        self.duration / 3
    }

    /// How often a follower (or a leader whose renewal failed) tries again: a fifth.
    pub fn retry_every(&self) -> Duration {
        self.duration / 5
    }

    /// How long a leader may go without a successful renewal before it steps down: two
    /// thirds, so it has stopped before the Lease expires for the others.
    pub fn step_down_after(&self) -> Duration {
        self.duration * 2 / 3
    }

    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.duration.as_secs()).unwrap_or(i32::MAX)
    }
}

/// `<hostname>-<pid>`, the hostname from `HOSTNAME` (`hostname`) or `/etc/hostname`.
pub fn default_identity(hostname: Option<&str>) -> String {
    let host = hostname
        .map(str::to_string)
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "mutantops".to_string());
    format!("{host}-{}", std::process::id())
}

/// What one attempt came to.
#[derive(Debug)]
enum Attempt {
    /// This replica holds the Lease now.
    Leading,
    /// Another replica holds it, until `expires` unless it renews.
    Following(String, Instant),
    /// Another write got there first (409); this replica does not hold it this round.
    Lost,
}

/// Runs the election for this replica and publishes whether it leads.
pub struct Elector {
    api: Api<Lease>,
    settings: Settings,
    metrics: Arc<Metrics>,
    leader: watch::Sender<bool>,
}

impl Elector {
    /// An elector that has not run yet (not leading), and the receiver of its state.
    pub fn new(
        client: Client,
        settings: Settings,
        metrics: Arc<Metrics>,
    ) -> (Elector, watch::Receiver<bool>) {
        let (leader, rx) = watch::channel(false);
        metrics.set_leader(false);
        let api = Api::namespaced(client, &settings.namespace);
        (
            Elector {
                api,
                settings,
                metrics,
                leader,
            },
            rx,
        )
    }

    /// Takes part in the election until `stop` resolves, then releases the Lease if this
    /// replica holds it. Fire `stop` only once the controllers have stopped, so that no
    /// reconcile runs after the Lease is released.
    pub async fn run(self, stop: Shutdown) {
        let s = &self.settings;
        tracing::info!(
            lease = LEASE_NAME,
            namespace = %s.namespace,
            identity = %s.identity,
            duration = ?s.duration,
            "taking part in leader election"
        );
        // While leading: when the last successful renewal was sent.
        let mut renewed: Option<Instant> = None;
        let mut seen = Seen::default();
        // While leading: the Lease as this replica last wrote it.
        let mut held: Option<Lease> = None;
        let mut last_leader: Option<String> = None;
        let stopped = stop.wait();
        tokio::pin!(stopped);
        loop {
            let started = Instant::now();
            let limit = match renewed {
                Some(at) => at + s.step_down_after(),
                None => started + s.retry_every(),
            };
            let attempt = tokio::select! {
                () = &mut stopped => break,
                attempt = tokio::time::timeout_at(limit, self.attempt(&mut seen, &mut held)) => attempt,
            };
            let mut next = Instant::now() + s.retry_every();
            match attempt {
                Ok(Ok(Attempt::Leading)) => {
                    if renewed.is_none() {
                        self.transition(true, "acquired the lease; this replica is the leader");
                    }
                    renewed = Some(started);
                    next = started + s.renew_every();
                }
                Ok(Ok(Attempt::Following(holder, expires))) => {
                    next = next.min(expires + AFTER_EXPIRY);
                    if renewed.take().is_some() {
                        self.transition(false, "another replica holds the lease; stepping down");
                    }
                    if last_leader.as_deref() != Some(holder.as_str()) {
                        tracing::info!(leader = %holder, "following the leader");
                        last_leader = Some(holder);
                    }
                }
                // A leader that lost a race retries within its deadline: the next read tells
                // whether someone else really took the Lease.
                Ok(Ok(Attempt::Lost)) => {
                    tracing::debug!("the lease was written concurrently");
                }
                Ok(Err(err)) => {
                    tracing::warn!(error = %crate::error_chain(&err), "leader election failed; retrying");
                }
                Err(_) => tracing::warn!("leader election timed out; retrying"),
            }
            if let Some(at) = renewed {
                let deadline = at + s.step_down_after();
                if Instant::now() >= deadline {
                    renewed = None;
                    self.transition(false, "could not renew the lease in time; stepping down");
                } else {
                    next = next.min(deadline);
                }
            }
            tokio::select! {
                () = &mut stopped => break,
                () = tokio::time::sleep_until(next) => {}
            }
        }
        if renewed.is_some() {
            self.transition(false, "shutting down; releasing the lease");
            match tokio::time::timeout(s.retry_every(), self.release()).await {
                Ok(Ok(())) => tracing::info!("released the lease"),
                Ok(Err(err)) => {
                    tracing::warn!(error = %crate::error_chain(&err), "releasing the lease failed")
                }
                Err(_) => tracing::warn!("releasing the lease timed out"),
            }
        }
    }

    /// Publishes a change of leadership and logs it.
    fn transition(&self, leading: bool, message: &str) {
        self.leader.send_replace(leading);
        self.metrics.set_leader(leading);
        tracing::info!(leader = leading, identity = %self.settings.identity, "{message}");
    }

    /// One read, decision and (unless following) write. `seen` keeps, across attempts, since
    /// when the record has not changed.
    async fn attempt(&self, seen: &mut Seen, held: &mut Option<Lease>) -> crate::Result<Attempt> {
        let me = &self.settings.identity;
        // While this replica holds the Lease, what it last wrote is what the server holds,
        // unless someone wrote since: then the replace below, which carries that write's
        // resourceVersion, gets 409 and the next attempt reads. So a leader renews with one
        // request, not two (R50).
        let existing = match held.take() {
            Some(own) => Some(own),
            None => self.api.get_opt(LEASE_NAME).await?,
        };
        // The moment of the answer: the record was current then.
        let read_at = Instant::now();
        let observed = existing.as_ref().map(Observed::of);
        let unchanged_since = seen.observe(observed.as_ref(), read_at);
        let decision = decide(
            observed.as_ref(),
            me,
            unchanged_since,
            read_at,
            self.settings.duration,
        );
        let old_spec = existing.as_ref().and_then(|l| l.spec.as_ref());
        let seconds = self.settings.duration_seconds();
        let Some(spec) = next_spec(&decision, old_spec, me, Timestamp::now(), seconds) else {
            return Ok(match decision {
                Decision::Follow { holder, expires } => Attempt::Following(holder, expires),
                _ => Attempt::Lost,
            });
        };
        let written = match existing {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(LEASE_NAME.to_string()),
                        namespace: Some(self.settings.namespace.clone()),
                        labels: Some(
                            [(
                                "app.kubernetes.io/name".to_string(),
                                "mutantops".to_string(),
                            )]
                            .into(),
                        ),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                // Replace carries the resourceVersion that was read: optimistic concurrency.
                lease.spec = Some(spec);
                self.api
                    .replace(LEASE_NAME, &PostParams::default(), &lease)
                    .await
            }
        };
        match written {
            Ok(lease) => {
                *held = Some(lease);
                Ok(Attempt::Leading)
            }
            Err(err) if crate::conflict(&err) => Ok(Attempt::Lost),
            Err(err) => Err(err.into()),
        }
    }

    /// Gives up the Lease if this replica still holds it.
    async fn release(&self) -> crate::Result<()> {
        let Some(mut lease) = self.api.get_opt(LEASE_NAME).await? else {
            return Ok(());
        };
        let holder = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref());
        if holder != Some(self.settings.identity.as_str()) {
            return Ok(());
        }
        lease.spec = Some(released_spec(lease.spec.as_ref(), Timestamp::now()));
        match self
            .api
            .replace(&lease.name_any(), &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(()),
            // Someone else wrote it meanwhile: it is no longer ours to release.
            Err(err) if crate::conflict(&err) => Ok(()),
            Err(err) => Err(err.into()),
        }
    }
}

/// A stream that yields once each time `leader` turns true: hand it to
/// `Controller::reconcile_all_on` so a new leader reconciles every owner it has cached.
pub fn became_leader(
    leader: watch::Receiver<bool>,
) -> impl futures::Stream<Item = ()> + Send + 'static {
    futures::stream::unfold(leader, |mut rx| async move {
        loop {
            rx.changed().await.ok()?;
            if *rx.borrow_and_update() {
                return Some(((), rx));
            }
        }
    })
}

#[cfg(test)]
mod tests;
