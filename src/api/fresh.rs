//! Reads across replicas. Each replica answers from its own caches, which follow the API
//! server through watches. A Mutation created, or a variant added, through another replica can
//! reach a client before this replica's watch has brought it: the client would get 404, or 401
//! for the new Mutation's token. So a miss is checked once with the API server (the Mutation's
//! metadata): when the Mutation exists there at another resourceVersion than cached, the
//! request waits (up to 3 s) until this replica's caches show that version, and its Secret
//! when a token is to be checked, then is answered from them as usual.
//!
//! The checks are bounded per replica ([`MissChecks`]), so wrong names and wrong tokens cannot
//! be turned into load on the API server; past the bound a miss is answered from the cache as
//! it is. A caller learns nothing it would not learn without them: the token is still compared
//! only with the cached Secret, and a wrong one still gets the same 401.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use kube::{Api, runtime::reflector::ObjectRef};

use super::{
    auth::Caller,
    state::{ApiError, ApiState, cached_mutation, catch_up},
};
use crate::{
    cache::{CacheState, Caches},
    controller::secret::secret_name,
    crd::Mutation,
};

/// Checks a replica may make per second, and at once.
const CHECKS_PER_SECOND: f64 = 20.0;
const BURST: f64 = 20.0;
/// How long a request waits for its Secret to reach this replica's cache.
const SECRET_WAIT: Duration = Duration::from_secs(3);

/// A token bucket of checks with the API server.
pub struct MissChecks(Mutex<(f64, Instant)>);

impl Default for MissChecks {
    fn default() -> Self {
        MissChecks(Mutex::new((BURST, Instant::now())))
    }
}

impl MissChecks {
    /// Takes one check, if the budget has one.
    fn take(&self) -> bool {
        let Ok(mut bucket) = self.0.lock() else {
            return false;
        };
        let now = Instant::now();
        let (tokens, at) = *bucket;
        let tokens = (tokens + now.duration_since(at).as_secs_f64() * CHECKS_PER_SECOND).min(BURST);
        if tokens >= 1.0 {
            *bucket = (tokens - 1.0, now);
            true
        } else {
            *bucket = (tokens, now);
            false
        }
    }
}

/// What a miss needs to be answered again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// The Mutation (a name or label this replica does not show).
    Mutation,
    /// The Mutation and its Secret (a token this replica cannot check yet).
    Secret,
}

/// Checks a miss about Mutation `ns/name` with the API server (see the module). Returns
/// whether the Mutation exists there (the caches having been waited for), so the lookup is
/// worth doing again: the caches may also have caught up while the API server answered.
pub async fn refresh(state: &ApiState, ns: &str, name: &str, need: Need) -> bool {
    if !state.misses.take() {
        return false;
    }
    let key = ObjectRef::new(name).within(ns);
    let cached = |caches: &Caches| {
        caches
            .mutations
            .get(&key)
            .and_then(|m| m.metadata.resource_version.clone())
    };
    let api: Api<Mutation> = Api::namespaced(state.client.clone(), ns);
    let Ok(Some(current)) = api.get_metadata_opt(name).await else {
        return false;
    };
    let version = current.metadata.resource_version;
    let newer = cached(&state.caches) != version;
    if newer {
        catch_up(state, ns, name, version.as_deref()).await;
    }
    let secret_key = ObjectRef::new(&secret_name(name)).within(ns);
    if need == Need::Secret && state.caches.secrets.get(&secret_key).is_none() {
        let deadline = tokio::time::Instant::now() + SECRET_WAIT;
        let _ = state
            .caches
            .until(Some(deadline), |caches: &Caches, _: &CacheState| {
                caches.secrets.get(&secret_key).map(|_| ())
            })
            .await;
    }
    true
}

/// [`cached_mutation`], with a miss checked with the API server first (see the module).
pub async fn mutation(
    state: &ApiState,
    caller: &Caller,
    ns: &str,
    name: &str,
) -> Result<Arc<Mutation>, ApiError> {
    match cached_mutation(state, caller, ns, name) {
        Err(_) if caller.may_use(ns, name) && refresh(state, ns, name, Need::Mutation).await => {
            cached_mutation(state, caller, ns, name)
        }
        found => found,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_are_bounded() {
        let checks = MissChecks::default();
        let granted = (0..100).filter(|_| checks.take()).count();
        // The burst, plus what refills while the loop runs (far under a check).
        assert!((20..=21).contains(&granted), "{granted}");
        assert!(!checks.take());
    }
}
