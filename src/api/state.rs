//! What every handler shares: [`ApiState`] (client, caches, auth, limits, budgets, the
//! writers of batched edits).

use std::sync::Arc;

use kube::Client;

use super::{
    auth::{Auth, Caller},
    budget::{Buckets, InFlight, MissChecks, Validations, WRITES_PER_DEVICE, WRITES_PER_TOKEN},
    error::ApiError,
    heartbeats::Heartbeats,
    namespaces::{Served, Serves},
};
use crate::{cache::Caches, config::TrustedProxies, http::ServerConfig, store::Store};

/// What every handler needs.
pub struct ApiState {
    /// The API client (writes, and reads that must be fresh).
    pub client: Client,
    /// The controllers' caches.
    pub caches: Caches,
    /// How callers are authenticated.
    pub auth: Auth,
    /// Body limits and timeouts.
    pub server: ServerConfig,
    /// The one writer of Mutations and their Secrets, shared with the controllers (R52).
    pub store: Store,
    /// The namespaces the API serves (`MUTANT_API_NAMESPACES`, else `MUTANT_WATCH_NAMESPACE`,
    /// else those labelled for it: R33).
    pub namespaces: Served,
    /// The budget of misses checked with the API server (`fresh.rs`).
    pub misses: MissChecks,
    /// The budget of validated reads (`Cache-Control: no-cache`, `fresh.rs`).
    pub validations: Validations,
    /// The operator's own ServiceAccount and the API server's version, when known: no base
    /// may run as it, or break the baseline its namespace is held to (R33).
    pub pod_security: crate::variant::PodSecurity,
    /// What this replica heard from devices (R40).
    pub heartbeats: Heartbeats,
    /// The budget of changes per device token (`WRITES_PER_DEVICE`).
    pub device_writes: Buckets<Caller>,
    /// The budget of changes per Mutation's token (`WRITES_PER_TOKEN`).
    pub token_writes: Buckets<Caller>,
    /// The bytes of bodies and answers this replica holds for its callers (R44).
    pub buffers: Arc<crate::http::Budget>,
    /// The requests each caller, and each Mutation with all its devices, has in flight: at
    /// most a quarter of the connections each (R44).
    pub in_flight: InFlight,
    /// The listener's connections, and the proxies it trusts to name their clients.
    pub connections: Arc<crate::http::Connections>,
    /// The operator's metrics (polls answered `ready: false`, R42).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// How long one request may take, all its calls to the API server included
    /// (`MUTANT_API_REQUEST_DEADLINE_SECONDS`, R34).
    pub deadline: std::time::Duration,
}

impl ApiState {
    /// What the handlers share: the client and caches, how callers are authenticated, the
    /// listener's limits, the namespaces served and what pod security needs (the operator's
    /// own ServiceAccount and Secrets, the API server's version); edit locks and budgets
    /// start empty.
    pub fn new(
        client: Client,
        caches: Caches,
        auth: Auth,
        server: ServerConfig,
        namespaces: Served,
        pod_security: crate::variant::PodSecurity,
    ) -> Self {
        ApiState {
            client: client.clone(),
            caches,
            auth,
            server,
            store: Store::new(client.clone()),
            namespaces,
            misses: MissChecks::default(),
            validations: Validations::default(),
            pod_security,
            heartbeats: Heartbeats::default(),
            device_writes: Buckets::new(WRITES_PER_DEVICE),
            token_writes: Buckets::new(WRITES_PER_TOKEN),
            buffers: crate::http::Budget::new(server.buffer_bytes, server.buffer_share),
            in_flight: InFlight::new(server.max_connections),
            connections: crate::http::connections(&server, TrustedProxies::default()),
            metrics: Arc::new(crate::metrics::Metrics::new()),
            deadline: std::time::Duration::from_secs(
                crate::config::DEFAULT_API_REQUEST_DEADLINE_SECONDS,
            ),
        }
    }

    /// Whether the API serves namespace `ns`; 503 while that is not known yet (the labelled
    /// namespaces not listed).
    pub fn serves(&self, ns: &str) -> Result<bool, ApiError> {
        match self.namespaces.serves(ns) {
            Serves::Yes => Ok(true),
            Serves::No => Ok(false),
            Serves::Starting => Err(ApiError::new(
                hyper::StatusCode::SERVICE_UNAVAILABLE,
                "starting: the namespaces labelled for the API are not listed yet",
            )),
        }
    }

    /// The admin's answer about namespace `ns`, which the API does not serve: 404, saying how
    /// to serve it.
    pub fn not_served(&self, ns: &str) -> ApiError {
        ApiError::not_found(self.namespaces.why_not(ns))
    }
}
