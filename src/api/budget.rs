//! Token buckets, one per key (a client address, a token), for what a request may cost the
//! API server (R34); and the shares of the listener's connections a caller, and a Mutation
//! with all its devices, may have busy at once (R44).
//!
//! A bucket holds up to `burst` tokens and refills at `per_second`; each costly request takes
//! one. The keys are bounded too: at [`MAX_KEYS`] the full buckets (those of callers who have
//! been quiet long enough to refill) are forgotten, and a new key finds no room until some
//! are; so a caller with many addresses or tokens cannot make the map grow, only wait.

use crate::HashMap;
use std::{
    hash::Hash,
    net::IpAddr,
    sync::{Arc, Mutex, PoisonError},
};

use tokio::{sync::Semaphore, time::Instant};

use super::auth::Caller;
use crate::http::{self, Key, Shares};

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
            buckets: Mutex::new(HashMap::default()),
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

/// Checks of misses with the API server a replica makes per second, and at once, in all.
const CHECKS: Rate = Rate {
    per_second: 20.0,
    burst: 20.0,
};
/// Checks of misses one asker may make per second, and at once.
const CHECKS_PER_ASKER: Rate = Rate {
    per_second: 2.0,
    burst: 5.0,
};
/// Validated reads one token may ask for per second, and at once; more are 429.
pub const VALIDATED_READS_PER_TOKEN: Rate = Rate {
    per_second: 5.0,
    burst: 10.0,
};
/// Changes one device's token may ask for per second, and at once (R40): each is a write to
/// the API server. Charged to the device, so one board spending it never makes another's
/// requests 429.
pub const WRITES_PER_DEVICE: Rate = Rate {
    per_second: 1.0,
    burst: 5.0,
};

/// Changes a Mutation's own token may ask for per second, and at once (R34): each
/// costs writes of the Mutation, of Deployments and Services, and Events, so a board looping
/// add and delete cannot spend the API server's writes (on k3s, SQLite on an SD card). The
/// token is shared by a fleet (as its enrollment key with `spec.devices`): the burst lets
/// sixty boards register at once.
pub const WRITES_PER_TOKEN: Rate = Rate {
    per_second: 2.0,
    burst: 60.0,
};

/// Who a check of a miss is charged to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Asker {
    /// A token this replica cannot check (yet): the client's address (the connection's peer,
    /// or the client a trusted proxy names).
    Peer(IpAddr),
    /// An authenticated caller (a name or label this replica does not show).
    Caller(Caller),
}

/// The budgets of checks with the API server: one per asker, so that wrong tokens from one
/// address do not spend what other clients need, and one for the replica, which bounds the
/// load on the API server however many addresses ask.
pub struct MissChecks {
    replica: Buckets<()>,
    askers: Buckets<Asker>,
}

impl Default for MissChecks {
    fn default() -> Self {
        MissChecks {
            replica: Buckets::new(CHECKS),
            askers: Buckets::new(CHECKS_PER_ASKER),
        }
    }
}

impl MissChecks {
    /// Takes one check for `asker`, if both its budget and the replica's have one.
    pub(super) fn take(&self, asker: &Asker) -> bool {
        self.askers.take(asker) && self.replica.take(&())
    }
}

/// Validated reads a replica sends to the API server at once; more wait their turn.
const VALIDATIONS: usize = 16;

/// The replica's budget of validated reads (`Cache-Control: no-cache`): at most
/// [`VALIDATIONS`] at once, and [`VALIDATED_READS_PER_TOKEN`] per token.
pub struct Validations {
    pub(super) at_once: Semaphore,
    pub(super) per_token: Buckets<Caller>,
}

impl Default for Validations {
    fn default() -> Self {
        Validations {
            at_once: Semaphore::new(VALIDATIONS),
            per_token: Buckets::new(VALIDATED_READS_PER_TOKEN),
        }
    }
}

/// The requests in flight each caller (a token, a device, the admin) may have, and each
/// Mutation, its token and all its devices together (R44): a quarter of the listener's
/// connections each. So tokens minted from one enrollment key do not multiply what one
/// Mutation can hold, and one device spending its share leaves its Mutation's others theirs.
#[derive(Debug)]
pub struct InFlight {
    callers: Arc<Shares<Key>>,
    mutations: Arc<Shares<Key>>,
}

/// A caller's request, counted in its shares until dropped ([`InFlight::enter`]).
#[derive(Debug)]
pub struct Flying {
    _caller: http::InFlight<Key>,
    _mutation: Option<http::InFlight<Key>>,
}

impl InFlight {
    /// The shares of a listener of `max_connections`.
    pub fn new(max_connections: usize) -> Self {
        let share = http::share_of(max_connections);
        InFlight {
            callers: Shares::new(share),
            mutations: Shares::new(share),
        }
    }

    /// Counts a request of `caller` (whose [`Caller::budget_key`] is `key`) in its own share
    /// and its Mutation's until the guard is dropped; the answer's message (503) when either
    /// is full, saying which.
    pub fn enter(&self, caller: &Caller, key: Key) -> Result<Flying, String> {
        let Some(own) = self.callers.enter(key) else {
            let who = match caller {
                Caller::Device { .. } => "device",
                Caller::Admin | Caller::Mutation { .. } => "token",
            };
            return Err(format!(
                "this {who} has {} requests in flight, its share of this replica's \
                 connections; retry in a second",
                self.callers.max()
            ));
        };
        let mutation = match caller {
            Caller::Admin => None,
            Caller::Mutation { namespace, name }
            | Caller::Device {
                namespace, name, ..
            } => {
                let key = http::key_of(&["mutation ", namespace, "/", name]);
                Some(self.mutations.enter(key).ok_or_else(|| {
                    format!(
                        "Mutation {name:?} has {} requests in flight, its token's and its \
                         devices' share of this replica's connections; retry in a second",
                        self.mutations.max()
                    )
                })?)
            }
        };
        Ok(Flying {
            _caller: own,
            _mutation: mutation,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn enter(shares: &InFlight, caller: &Caller) -> Result<Flying, String> {
        shares.enter(caller, caller.budget_key())
    }

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

    // R34: wrong tokens from one address spend that address's checks, not
    // another's; the replica's budget bounds them all.
    #[tokio::test(start_paused = true)]
    async fn checks_are_bounded_per_asker_and_per_replica() {
        let checks = MissChecks::default();
        let peer = |last: u8| Asker::Peer(IpAddr::from([10, 0, 0, last]));
        let granted = |asker: &Asker| (0..100).filter(|_| checks.take(asker)).count();
        assert_eq!(granted(&peer(1)), 5);
        assert_eq!(granted(&peer(1)), 0);
        assert_eq!(granted(&peer(2)), 5);
        let device = Asker::Caller(Caller::Mutation {
            namespace: "ns".into(),
            name: "web".into(),
        });
        assert_eq!(granted(&device), 5);
        // 15 of the replica's 20 are spent: 5 more for anyone, then none.
        assert_eq!((3..10).map(|i| granted(&peer(i))).sum::<usize>(), 5);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(granted(&peer(1)), 2);
    }

    // R44: a device's requests count against its own share and its Mutation's: devices
    // minted from one enrollment key hold the Mutation's quarter together, not a quarter
    // each; another Mutation's devices and the admin keep theirs.
    #[test]
    fn a_mutation_and_all_its_devices_share_a_quarter() {
        let shares = InFlight::new(16);
        let device = |mutation: &str, id: &str| Caller::Device {
            namespace: "ns".into(),
            name: mutation.into(),
            id: id.into(),
            variant: "v".into(),
        };
        let key = Caller::Mutation {
            namespace: "ns".into(),
            name: "web".into(),
        };
        // One device: its own share is four.
        let one: Vec<_> = (0..4)
            .map(|_| enter(&shares, &device("web", "a")))
            .collect();
        assert!(one.iter().all(Result::is_ok));
        let refused = enter(&shares, &device("web", "a")).unwrap_err();
        assert!(
            refused.contains("this device has 4 requests in flight"),
            "{refused}"
        );
        drop(one);
        // Four devices of one Mutation, and its key: four in flight in all.
        let held: Vec<_> = ["a", "b", "c", "d"]
            .iter()
            .map(|id| enter(&shares, &device("web", id)))
            .collect();
        assert!(held.iter().all(Result::is_ok));
        for caller in [device("web", "e"), key.clone()] {
            let refused = enter(&shares, &caller).unwrap_err();
            assert!(
                refused.contains("Mutation \"web\" has 4 requests in flight"),
                "{refused}"
            );
        }
        // Another Mutation's device, and the admin, are not held to it.
        assert!(enter(&shares, &device("other", "a")).is_ok());
        assert!(enter(&shares, &Caller::Admin).is_ok());
        // A refusal by the Mutation's share leaves nothing counted for the device.
        drop(held);
        let again: Vec<_> = (0..4)
            .map(|_| enter(&shares, &device("web", "e")))
            .collect();
        assert!(again.iter().all(Result::is_ok));
        assert!(enter(&shares, &key).is_err());
    }
}
