//! Shares of a listener's busy connections (R44, R34): how many requests one
//! key (a client address in the server loop; a caller, and a Mutation with all its devices, in
//! the API) may have in flight at once.
//! One more is answered 503 at once, so a client that keeps its requests busy (a body sent a
//! byte a second) holds at most its share of the connections, never all of them.

use crate::HashMap;
use std::{
    hash::Hash,
    sync::{Arc, Mutex, PoisonError},
};

/// Requests in flight per key, at most `max` each.
#[derive(Debug)]
pub struct Shares<K> {
    max: usize,
    counts: Mutex<HashMap<K, usize>>,
}

impl<K: Hash + Eq + Clone> Shares<K> {
    /// At most `max` (at least one) requests in flight per key.
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Shares {
            max: max.max(1),
            counts: Mutex::new(HashMap::default()),
        })
    }

    /// The most requests in flight per key.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Counts a request of `key` in flight until the guard is dropped; `None` when `key` has
    /// its share in flight already.
    pub fn enter(self: &Arc<Self>, key: K) -> Option<InFlight<K>> {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let count = counts.entry(key.clone()).or_default();
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(InFlight {
            shares: self.clone(),
            key,
        })
    }
}

/// A request in flight ([`Shares::enter`]).
#[derive(Debug)]
pub struct InFlight<K: Hash + Eq> {
    shares: Arc<Shares<K>>,
    key: K,
}

impl<K: Hash + Eq> Drop for InFlight<K> {
    fn drop(&mut self) {
        let mut counts = self
            .shares
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = counts.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // R44: a key holds at most its share; a request that ends frees its place;
    // keys are forgotten when they have nothing in flight.
    #[test]
    fn a_key_holds_at_most_its_share() {
        let shares = Shares::new(2);
        let a1 = shares.enter("a");
        let a2 = shares.enter("a");
        assert!(a1.is_some() && a2.is_some());
        assert!(shares.enter("a").is_none());
        assert!(shares.enter("b").is_some());
        drop(a1);
        let a3 = shares.enter("a");
        assert!(a3.is_some());
        drop((a2, a3));
        assert!(shares.counts.lock().unwrap().is_empty());
    }
}
