//! Token buckets, one per key (a client address, a token), for what a request may cost the
//! API server (issue 25, items 5 and 6; R34).
//!
//! A bucket holds up to `burst` tokens and refills at `per_second`; each costly request takes
//! one. The keys are bounded too: at [`MAX_KEYS`] the full buckets (those of callers who have
//! been quiet long enough to refill) are forgotten, and a new key finds no room until some
//! are; so a caller with many addresses or tokens cannot make the map grow, only wait.

use std::{
    collections::HashMap,
    hash::Hash,
    sync::{Mutex, PoisonError},
};

use tokio::time::Instant;

/// The most keys remembered at once.
pub const MAX_KEYS: usize = 4096;

/// How fast a bucket refills, and how much it holds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    /// Tokens added per second.
    pub per_second: f64,
    /// The most tokens a bucket holds (and starts with).
    pub burst: f64,
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn refilled(self, rate: Rate, now: Instant) -> f64 {
        (self.tokens + now.duration_since(self.at).as_secs_f64() * rate.per_second).min(rate.burst)
    }
}

/// One bucket per key.
#[derive(Debug)]
pub struct Buckets<K> {
    rate: Rate,
    max_keys: usize,
    buckets: Mutex<HashMap<K, Bucket>>,
}

impl<K: Hash + Eq + Clone> Buckets<K> {
    /// Buckets of `rate`, for up to [`MAX_KEYS`] keys.
    pub fn new(rate: Rate) -> Self {
        Self::with_max_keys(rate, MAX_KEYS)
    }

    /// Buckets of `rate`, for up to `max_keys` keys.
    pub fn with_max_keys(rate: Rate, max_keys: usize) -> Self {
        Buckets {
            rate,
            max_keys,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// The rate of every bucket.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// Takes one token from `key`'s bucket, if it has one.
    pub fn take(&self, key: &K) -> bool {
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let rate = self.rate;
        if !buckets.contains_key(key) && buckets.len() >= self.max_keys {
            buckets.retain(|_, bucket| bucket.refilled(rate, now) < rate.burst);
            if buckets.len() >= self.max_keys {
                return false;
            }
        }
        let bucket = buckets.entry(key.clone()).or_insert(Bucket {
            tokens: rate.burst,
            at: now,
        });
        let tokens = bucket.refilled(rate, now);
        let granted = tokens >= 1.0;
        *bucket = Bucket {
            tokens: if granted { tokens - 1.0 } else { tokens },
            at: now,
        };
        granted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const RATE: Rate = Rate {
        per_second: 2.0,
        burst: 3.0,
    };

    #[tokio::test(start_paused = true)]
    async fn each_key_has_its_own_bucket() {
        let buckets = Buckets::new(RATE);
        let granted = |key: &str| (0..10).filter(|_| buckets.take(&key.to_string())).count();
        assert_eq!(granted("a"), 3);
        assert_eq!(granted("a"), 0);
        // Another caller is not held to what "a" spent.
        assert_eq!(granted("b"), 3);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(granted("a"), 2);
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(granted("a"), 3, "never more than the burst");
    }

    #[tokio::test(start_paused = true)]
    async fn the_keys_are_bounded() {
        let buckets = Buckets::with_max_keys(RATE, 2);
        assert!(buckets.take(&1));
        assert!(buckets.take(&2));
        // Both buckets are below full: a third key finds no room.
        assert!(!buckets.take(&3));
        // Once they have refilled, they are forgotten and make room.
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(buckets.take(&3));
        assert!(buckets.take(&4));
    }
}
