//! Reads across replicas. Each replica answers from its own caches, which follow the API
//! server through watches. A Mutation created, or a variant added, through another replica can
//! reach a client before this replica's watch has brought it: the client would get 404, or 401
//! for the new Mutation's token. So a miss is checked once with the API server (the Mutation's
//! metadata): when the Mutation exists there at another resourceVersion than cached, the
//! request waits (up to 3 s) until this replica's caches show that version, and its Secret
//! when a token is to be checked, then is answered from them as usual.
//!
//! The checks are bounded per asker and per replica (`budget::MissChecks`), so wrong names and
//! wrong tokens cannot be turned into load on the API server; past the bound a miss is answered from the cache as
//! it is. A caller learns nothing it would not learn without them: the token is still compared
//! only with the cached Secret, and a wrong one still gets the same 401.
//!
//! What a replica shows of an existing Mutation can still be older, for the milliseconds its
//! watch takes, than an edit acknowledged by another replica. Edits themselves always read the
//! Mutation from the API server, so none is lost; a read that must reflect every write
//! acknowledged before it, through any replica, says so with `Cache-Control: no-cache` (the
//! HTTP request directive for "validate with the origin first"): [`validate`] then reads the
//! Mutation's metadata (or, for the list, the namespace's) from the API server and waits until
//! this replica's cache shows those versions. Only authenticated callers reach it, within the
//! budgets of `budget::Validations`. Plain reads stay answered from the cache alone:
//! an API server round trip on every GET would cut what a replica serves many times over.
//!
//! Here too are the plain reads and waits on the cache that make a client read its own writes
//! ([`cached_mutation`], [`catch_up`]), all comparing versions with one [`at_least`].

use std::{sync::Arc, time::Duration};

use hyper::{HeaderMap, StatusCode, header::CACHE_CONTROL};
use kube::{Api, api::ListParams, runtime::reflector::ObjectRef};

use super::{auth::Caller, budget::Asker, error::ApiError, state::ApiState};
use crate::{
    cache::{CacheState, Caches},
    crd::Mutation,
    variant::secret_name,
};

/// How long a request waits for its Secret to reach this replica's cache.
const SECRET_WAIT: Duration = Duration::from_secs(3);

/// Whether a request asks for a validated read: a `Cache-Control` directive `no-cache`.
pub fn wants_validation(headers: &HeaderMap) -> bool {
    headers
        .get_all(CACHE_CONTROL)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|directive| directive.trim().eq_ignore_ascii_case("no-cache"))
}

/// Brings this replica's cache up to what the API server holds now, for a read of Mutation
/// `ns/name` or (`None`) of the namespace's Mutations: reads their metadata from the API server
/// and waits (up to 3 s) until the cache shows the same versions, and none that is gone.
pub async fn validate(
    state: &ApiState,
    caller: &Caller,
    ns: &str,
    name: Option<&str>,
) -> Result<(), ApiError> {
    if !state.validations.per_token.take(caller) {
        let rate = state.validations.per_token.rate();
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "too many validated reads (Cache-Control: no-cache) with this token: at most {} \
                 a second, {} at once; read without no-cache, or retry later",
                rate.per_second, rate.burst
            ),
        ));
    }
    let _turn = state
        .validations
        .at_once
        .acquire()
        .await
        .map_err(|_| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting down"))?;
    let api: Api<Mutation> = Api::namespaced(state.client.clone(), ns);
    let Some(name) = name else {
        let listed = api.list_metadata(&ListParams::default()).await?;
        let wanted: Vec<(String, Option<String>)> = listed
            .items
            .into_iter()
            .filter_map(|m| Some((m.metadata.name?, m.metadata.resource_version)))
            .collect();
        let deadline = crate::http::overdue::until(tokio::time::Instant::now() + SECRET_WAIT);
        let shown = |caches: &Caches, _: &CacheState| {
            let all = wanted.iter().all(|(name, version)| {
                let key = ObjectRef::new(name).within(ns);
                caches.mutations.get(&key).is_some_and(|m| {
                    at_least(m.metadata.resource_version.as_deref(), version.as_deref())
                })
            });
            let no_other = caches.mutations.state().iter().all(|m| {
                m.metadata.namespace.as_deref() != Some(ns)
                    || m.metadata.deletion_timestamp.is_some()
                    || wanted
                        .iter()
                        .any(|(name, _)| m.metadata.name.as_ref() == Some(name))
            });
            (all && no_other).then_some(())
        };
        let _ = state.caches.until(Some(deadline), shown).await;
        return Ok(());
    };
    let current = api.get_metadata_opt(name).await?;
    let version = current.and_then(|m| m.metadata.resource_version);
    catch_up(state, ns, name, version.as_deref()).await;
    Ok(())
}

/// Whether resourceVersion `have` is `want` or later (etcd's are increasing integers).
fn at_least(have: Option<&str>, want: Option<&str>) -> bool {
    have == want
        || matches!(
            (have.and_then(|h| h.parse::<u64>().ok()), want.and_then(|w| w.parse::<u64>().ok())),
            (Some(h), Some(w)) if h >= w
        )
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
pub async fn refresh(state: &ApiState, asker: &Asker, ns: &str, name: &str, need: Need) -> bool {
    if !state.misses.take(asker) {
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
        let deadline = crate::http::overdue::until(tokio::time::Instant::now() + SECRET_WAIT);
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
/// `known` is Mutation `ns/name` as the request already looked it up (`request::Ctx`): a read
/// answers from it without a second look-up.
pub async fn mutation(
    state: &ApiState,
    caller: &Caller,
    ns: &str,
    name: &str,
    known: Option<Arc<Mutation>>,
) -> Result<Arc<Mutation>, ApiError> {
    if let Some(m) = known.filter(|_| caller.may_use(ns, name)) {
        return Ok(m);
    }
    match cached_mutation(state, caller, ns, name) {
        Err(_)
            if caller.may_use(ns, name)
                && refresh(
                    state,
                    &Asker::Caller(caller.clone()),
                    ns,
                    name,
                    Need::Mutation,
                )
                .await =>
        {
            cached_mutation(state, caller, ns, name)
        }
        found => found,
    }
}

/// How long a write waits for the cache to show it.
const CACHE_CATCH_UP: Duration = Duration::from_secs(3);

/// A Mutation from the cache. For a caller that may not see it, and for one that does not
/// exist, a Mutation token gets the same 401 as a wrong token; the admin gets 404.
pub(crate) fn cached_mutation(
    state: &ApiState,
    caller: &Caller,
    ns: &str,
    name: &str,
) -> Result<Arc<Mutation>, ApiError> {
    if !caller.may_use(ns, name) {
        return Err(ApiError::unauthorized());
    }
    state.caches.mutation(ns, name).ok_or_else(|| match caller {
        Caller::Admin => ApiError::not_found(format!("mutation {ns}/{name} not found")),
        Caller::Mutation { .. } | Caller::Device { .. } => ApiError::unauthorized(),
    })
}

/// Waits until the cache shows Mutation `ns/name` at `resource_version` or later (`None`:
/// until it is gone), so the next read sees this write. Gives up quietly after a few seconds.
pub(crate) async fn catch_up(
    state: &ApiState,
    ns: &str,
    name: &str,
    resource_version: Option<&str>,
) {
    let key = ObjectRef::new(name).within(ns);
    let deadline = crate::http::overdue::until(tokio::time::Instant::now() + CACHE_CATCH_UP);
    let caught_up = |caches: &Caches, _: &CacheState| {
        let cached = caches.mutations.get(&key);
        let done = match (&cached, resource_version) {
            (None, None) => true,
            (Some(m), None) => m.metadata.deletion_timestamp.is_some(),
            (None, Some(_)) => false,
            // A newer write by someone else counts too.
            (Some(m), Some(rv)) => at_least(m.metadata.resource_version.as_deref(), Some(rv)),
        };
        done.then_some(())
    };
    let _ = state.caches.until(Some(deadline), caught_up).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    // R30: `Cache-Control: no-cache` asks for a validated read, in any spelling of the
    // header's list; other directives do not.
    #[test]
    fn no_cache_asks_for_validation() {
        let headers = |values: &[&str]| {
            let mut map = HeaderMap::new();
            for v in values {
                map.append(
                    CACHE_CONTROL,
                    hyper::header::HeaderValue::from_str(v).unwrap_or_else(|e| panic!("{e}")),
                );
            }
            map
        };
        assert!(wants_validation(&headers(&["no-cache"])));
        assert!(wants_validation(&headers(&["max-age=0, No-Cache"])));
        assert!(wants_validation(&headers(&["max-age=0", "no-cache"])));
        assert!(!wants_validation(&headers(&[])));
        assert!(!wants_validation(&headers(&["no-store", "max-age=0"])));
        assert!(!wants_validation(&headers(&["no-cache-please"])));
    }

    #[test]
    fn versions_compare_as_numbers_when_they_are() {
        assert!(at_least(Some("12"), Some("9")));
        assert!(!at_least(Some("9"), Some("12")));
        assert!(at_least(Some("x"), Some("x")));
        assert!(!at_least(Some("x"), Some("y")));
        assert!(!at_least(None, Some("1")));
    }
}
