//! The open connections of one listener, and its caps (R34, R44).
//!
//! Every accepted connection takes a slot. One client address holds at most a quarter of
//! them ([`Open::per_address`], at least one): a new connection of an address at its cap
//! closes that address's own longest idle connection (no request in flight: a keep-alive
//! between requests, or a client that has not sent a whole request head yet) once it has
//! been idle a second, however young, and is refused (503) when none has, rather than anyone
//! else's being closed. A trusted proxy
//! (`MUTANT_API_TRUSTED_PROXIES`) speaks for many clients and is held only to the listener's
//! cap; its requests are told apart by the client it names (`forwarded.rs`).
//!
//! At [`ServerConfig::max_connections`] the next connection is let in only by closing an idle
//! one of another address, levelling what addresses hold: one of an address holding at least
//! two more than the newcomer's, however young (a host that reopens its connections every few
//! seconds cannot keep a new board out); or, older than
//! [`ServerConfig::header_read_timeout`], one of an address holding more than the newcomer's.
//! Of those, the address holding the most loses its longest idle connection. A connection of
//! an address holding no more than the newcomer's is never closed for it, nor a young one of
//! an address holding one more: a board in a slow TLS handshake, or sending its first
//! request, keeps its connection however fast somebody else opens theirs. Failing those, the
//! newcomer's own address loses its longest idle connection (idle a second); failing that,
//! the new connection is refused, and the loop says in its log that the listener is
//! saturated.
//! Idle connections are also closed after [`ServerConfig::header_read_timeout`] by hyper
//! itself. So a client that opens connections and sends nothing holds at most its quarter,
//! and only until somebody else needs room: the process keeps its file descriptors for its own
//! calls to the API server, and its metrics and probes have a listener and a cap of their own.
//!
//! [`ServerConfig::max_connections`]: super::ServerConfig::max_connections
//! [`ServerConfig::header_read_timeout`]: super::ServerConfig::header_read_timeout

use crate::HashMap;
use std::{
    cmp::Reverse,
    net::IpAddr,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use tokio::{sync::Notify, time::Instant};

use super::forwarded;
use crate::config::TrustedProxies;

/// What a plain-HTTP connection refused at the cap is told before it is closed.
pub(super) const REFUSED_AT_CAP: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n\
Content-Type: application/json\r\nContent-Length: 52\r\nConnection: close\r\n\r\n\
{\"error\":\"too many connections; retry in a second\"}\n";

/// What a plain-HTTP connection refused for its address's cap is told before it is closed.
pub(super) const REFUSED_FOR_ADDRESS: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
Retry-After: 1\r\nContent-Type: application/json\r\nContent-Length: 78\r\n\
Connection: close\r\n\r\n\
{\"error\":\"this address has its share of connections open; retry in a second\"}\n";

/// How long the loop waits for a connection closed to make room to be gone.
pub(super) const EVICTION_WAIT: Duration = Duration::from_secs(1);

/// How long a connection of an address at its cap must have been idle before the address's
/// next connection closes it: a client's next request may be on its way in a fresher one
/// (a burst of requests, each on a connection of its own), and is then refused, with a 503
/// it can retry, rather than cut off without an answer. At most the head deadline.
const ARRIVING: Duration = Duration::from_secs(1);

/// How often refusals at the connection cap are logged, at most.
pub(super) const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// One open connection.
#[derive(Debug)]
pub(super) struct Slot {
    /// The client's address.
    addr: IpAddr,
    /// When it was accepted.
    opened: Instant,
    state: Mutex<SlotState>,
    evicted: Notify,
    gone: Notify,
}

#[derive(Debug)]
struct SlotState {
    in_flight: u32,
    idle_since: Instant,
    evicted: bool,
}

impl Slot {
    fn new(addr: IpAddr) -> Self {
        Slot {
            addr,
            opened: Instant::now(),
            state: Mutex::new(SlotState {
                in_flight: 0,
                idle_since: Instant::now(),
                evicted: false,
            }),
            evicted: Notify::new(),
            gone: Notify::new(),
        }
    }

    /// Resolves once the connection's task has ended and its socket is closed.
    pub(super) async fn gone(&self) {
        self.gone.notified().await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks a request in flight until the returned guard is dropped.
    pub(super) fn busy(self: &Arc<Self>) -> Busy {
        self.lock().in_flight += 1;
        Busy(self.clone())
    }

    /// Resolves when the connection is to be closed to make room for another.
    pub(super) async fn evicted(&self) {
        self.evicted.notified().await;
    }

    /// Since when the connection has been idle, if it is and is not being closed already.
    fn idle_since(&self) -> Option<Instant> {
        let state = self.lock();
        (state.in_flight == 0 && !state.evicted).then_some(state.idle_since)
    }

    /// Marks the connection to be closed, if it is still idle; `notify_one` keeps the signal
    /// for a connection task that is not waiting yet.
    fn evict(&self) -> bool {
        let mut state = self.lock();
        if state.in_flight > 0 || state.evicted {
            return false;
        }
        state.evicted = true;
        drop(state);
        self.evicted.notify_one();
        true
    }
}

/// A request in flight on a connection ([`Slot::busy`]).
pub(super) struct Busy(Arc<Slot>);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
        state.idle_since = Instant::now();
    }
}

/// What [`Open::admit`] decided for a new connection.
pub(super) enum Admit {
    /// Let in, with its slot; `evicted` is the idle connection being closed for it, if any.
    Yes {
        slot: Arc<Slot>,
        id: u64,
        evicted: Option<Arc<Slot>>,
    },
    /// Its address holds its share of the connections, none of them idle for a second.
    AddressFull,
    /// At the cap, and no open connection may be closed for it.
    Full,
}

/// The open connections of a listener.
#[derive(Debug)]
pub struct Open {
    max: usize,
    /// The most connections one client address holds (a trusted proxy's excepted).
    per_address: usize,
    /// How young a connection is never closed for an address holding one fewer.
    protect: Duration,
    /// How long a connection is idle before its own address's next may close it.
    arriving: Duration,
    /// The proxies whose word is taken for the client's address.
    trusted: TrustedProxies,
    slots: Mutex<(u64, HashMap<u64, Arc<Slot>>)>,
}

impl Open {
    /// At most `max` connections (at least one), a quarter of them (at least one) per client
    /// address but those in `trusted`; none younger than `protect` closed for an address
    /// holding one fewer.
    pub fn new(max: usize, protect: Duration, trusted: TrustedProxies) -> Arc<Self> {
        let max = max.max(1);
        Arc::new(Open {
            max,
            per_address: share_of(max),
            protect,
            arriving: ARRIVING.min(protect),
            trusted,
            slots: Mutex::new((0, HashMap::default())),
        })
    }

    /// The most connections one client address holds, and the most requests it has in
    /// flight (R44).
    pub fn per_address(&self) -> usize {
        self.per_address
    }

    /// Whom a request from `peer` with `headers` is from: `peer`, or the client a trusted
    /// proxy names (`forwarded.rs`).
    pub fn client(&self, peer: IpAddr, headers: &hyper::HeaderMap) -> IpAddr {
        forwarded::client(peer, headers, &self.trusted)
    }

    /// The idle connection to close for a new one from `addr` at the cap, if any may be:
    /// another address's, levelling what addresses hold (see the module's doc), else one of
    /// `addr`'s own.
    fn victim(&self, slots: &HashMap<u64, Arc<Slot>>, addr: IpAddr) -> Option<u64> {
        let now = Instant::now();
        let mut held: HashMap<IpAddr, usize> = HashMap::default();
        for slot in slots.values() {
            *held.entry(slot.addr).or_default() += 1;
        }
        let mine = held.get(&addr).copied().unwrap_or(0);
        // The most held first, then the longest idle.
        let mut theirs: Option<(usize, Reverse<(Instant, u64)>)> = None;
        for (&id, slot) in slots {
            if slot.addr == addr {
                continue;
            }
            let Some(since) = slot.idle_since() else {
                continue;
            };
            let holds = held.get(&slot.addr).copied().unwrap_or(0);
            let old = now.duration_since(slot.opened) >= self.protect;
            if holds >= mine + 2 || (old && holds > mine) {
                theirs = theirs.max(Some((holds, Reverse((since, id)))));
            }
        }
        theirs
            .map(|(_, Reverse((_, id)))| id)
            .or_else(|| self.own_idle(slots, addr))
    }

    /// `addr`'s longest idle connection, if one has been idle [`ARRIVING`] or longer.
    fn own_idle(&self, slots: &HashMap<u64, Arc<Slot>>, addr: IpAddr) -> Option<u64> {
        let now = Instant::now();
        slots
            .iter()
            .filter(|(_, slot)| slot.addr == addr)
            .filter_map(|(&id, slot)| slot.idle_since().map(|since| (since, id)))
            .filter(|(since, _)| now.duration_since(*since) >= self.arriving)
            .min()
            .map(|(_, id)| id)
    }

    /// Takes a slot for a new connection from `addr`, closing an idle one if `addr` is at its
    /// cap or the listener at its own.
    pub(super) fn admit(&self, addr: IpAddr) -> Admit {
        let addr = addr.to_canonical();
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let mut evicted = None;
        let held = slots.1.values().filter(|slot| slot.addr == addr).count();
        if held >= self.per_address && !self.trusted.trusts(addr) {
            let Some(id) = self
                .own_idle(&slots.1, addr)
                .filter(|id| slots.1[id].evict())
            else {
                return Admit::AddressFull;
            };
            evicted = slots.1.remove(&id);
        } else if slots.1.len() >= self.max {
            let Some(id) = self.victim(&slots.1, addr).filter(|id| slots.1[id].evict()) else {
                return Admit::Full;
            };
            // Its task ends at once; its slot is free from now on.
            evicted = slots.1.remove(&id);
        }
        slots.0 += 1;
        let id = slots.0;
        let slot = Arc::new(Slot::new(addr));
        slots.1.insert(id, slot.clone());
        Admit::Yes { slot, id, evicted }
    }

    /// Frees the slot of a connection that has ended.
    pub(super) fn leave(&self, id: u64) {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .1
            .remove(&id);
    }

    /// How many connections hold a slot.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .1
            .len()
    }
}

/// One client's share of a listener of `max` connections (R44): a quarter, at least one.
pub fn share_of(max: usize) -> usize {
    (max / 4).max(1)
}

/// Frees a connection's slot when the connection is shut down or its stream dropped, however
/// it ends (held by the stream: `deadline.rs`), and tells whoever waits for that.
pub(super) struct Leave(pub(super) Arc<Open>, pub(super) u64, pub(super) Arc<Slot>);

impl Drop for Leave {
    fn drop(&mut self) {
        self.0.leave(self.1);
        self.2.gone.notify_one();
    }
}

#[cfg(test)]
mod tests;
