//! Watches that go silent (R34). The client fails a watcher's request that has
//! had neither its head nor any more of its body (an event or a bookmark) for
//! `MUTANT_WATCH_STALE_AFTER_SECONDS` ([`crate::connect::WatchSilent`]); kube-runtime would
//! only open the watch again from where it was, after almost five minutes of its own idle
//! timeout, and nothing would say the cache was old meanwhile. Here such a failure marks the
//! cache stale ([`super::state::mark_stale`]), which the API and `/readyz` read, and starts
//! the watch anew: a full list, after which ([`watcher::Event::InitDone`]) the store holds
//! what the API server holds and the cache is fresh again.
//!
//! The API server must then speak on every healthy watch more often than the bound: it sends
//! a bookmark about once a minute and 2 s before a watch's timeout. "About" is not "always":
//! on a loaded machine an idle watch went 120 s without one (CI, a watch of MutantDeployments
//! in a namespace that had none), so a bound up to twice [`BOOKMARK_INTERVAL_SECONDS`], the
//! default included, asks each watch to end after half the bound ([`watch_timeout`]): a watch
//! opened again from where it was, no list.

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, ready},
    time::Duration,
};

use futures::{Stream, StreamExt as _, stream::BoxStream};
use kube::{Api, runtime::watcher};
use tokio::sync::watch;

use super::state::{Cache, CacheState, mark_stale};
use crate::{config::BOOKMARK_INTERVAL_SECONDS, connect::WatchSilent};

/// What every watch of the caches shares: where it tells of its changes, and how long the API
/// server keeps each of its watches open.
#[derive(Clone)]
pub struct Watching {
    /// Told of every change of any cache.
    pub signal: Arc<watch::Sender<CacheState>>,
    /// The watches' `timeoutSeconds`; `None` for kube-runtime's (290 s).
    pub timeout: Option<u32>,
}

/// The `timeoutSeconds` of the watches under a bound on their silence: kube-runtime's own
/// (290 s) when the bound leaves room for more than two of the server's bookmarks a minute
/// apart, else half the bound (at least 3 s), so that the bookmark the server sends 2 s before
/// each watch's end comes within it.
pub fn watch_timeout(silence: Option<Duration>) -> Option<u32> {
    let bound = silence?.as_secs();
    (bound <= 2 * BOOKMARK_INTERVAL_SECONDS)
        .then(|| u32::try_from((bound / 2).max(3)).unwrap_or(u32::MAX))
}

/// A watch of `api` that starts anew, with a full list, whenever it went silent; its cache
/// (`cache`) is stale from then until the list is complete.
pub fn relisting<K>(
    api: Api<K>,
    config: watcher::Config,
    cache: Cache,
    watching: &Watching,
) -> Relisting<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let config = match watching.timeout {
        Some(timeout) => config.timeout(timeout),
        None => config,
    };
    let start = move || watcher(api.clone(), config.clone()).boxed();
    Relisting {
        inner: start(),
        start: Box::new(start),
        cache,
        signal: Arc::clone(&watching.signal),
    }
}

/// See [`relisting`].
pub struct Relisting<K> {
    inner: BoxStream<'static, watcher::Result<watcher::Event<K>>>,
    start: Box<dyn Fn() -> BoxStream<'static, watcher::Result<watcher::Event<K>>> + Send>,
    cache: Cache,
    signal: Arc<watch::Sender<CacheState>>,
}

impl<K> Stream for Relisting<K> {
    type Item = watcher::Result<watcher::Event<K>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let item = ready!(this.inner.poll_next_unpin(cx));
        if let Some(Err(error)) = &item
            && let Some(silent) = WatchSilent::cause_of(error)
        {
            tracing::warn!(
                cache = %this.cache,
                "{silent}: not answered from until it is listed again"
            );
            mark_stale(&this.signal, this.cache);
            this.inner = (this.start)();
        }
        Poll::Ready(item)
    }
}
