//! The open connections of one listener, and its cap (R34).
//!
//! Every accepted connection takes a slot; at [`ServerConfig::max_connections`] the next one
//! is let in only by closing an idle connection (no request in flight: a keep-alive between
//! requests, or a client that has not sent a whole request head yet) (R44): one
//! of an address that holds more than half of the slots, however young; else one of the
//! client address that holds the most idle connections, the one idle longest of those. A
//! connection younger than [`ServerConfig::header_read_timeout`] of an address within its
//! half is never closed for another: a board in a slow TLS handshake, or sending its first
//! request, keeps its connection however fast somebody else opens theirs. When no open
//! connection may be closed, the new one is refused, and the loop says in its log that the
//! listener is saturated.
//! Idle connections are also closed after [`ServerConfig::header_read_timeout`] by hyper
//! itself. So a client that opens connections and sends nothing can hold at most the cap, and
//! only until somebody else connects: the process keeps its file descriptors for its own calls
//! to the API server, and its metrics and probes have a listener and a cap of their own.
//!
//! [`ServerConfig::max_connections`]: super::ServerConfig::max_connections
//! [`ServerConfig::header_read_timeout`]: super::ServerConfig::header_read_timeout

use std::{
    collections::HashMap,
    net::{IpAddr, SocketAddr},
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use tokio::{sync::Notify, time::Instant};

/// The client address of a request, in every request's extensions (set by `http::serve`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer(pub SocketAddr);

/// What a plain-HTTP connection refused at the cap is told before it is closed.
pub(super) const REFUSED_AT_CAP: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n\
Content-Type: application/json\r\nContent-Length: 52\r\nConnection: close\r\n\r\n\
{\"error\":\"too many connections; retry in a second\"}\n";

/// How long the loop waits for a connection closed to make room to be gone.
pub(super) const EVICTION_WAIT: Duration = Duration::from_secs(1);

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
    /// At the cap, and every connection has a request in flight.
    Full,
}

/// The open connections of a listener.
#[derive(Debug)]
pub struct Open {
    max: usize,
    /// How young a connection is never closed for another.
    protect: Duration,
    slots: Mutex<(u64, HashMap<u64, Arc<Slot>>)>,
}

impl Open {
    /// At most `max` connections (at least one); none younger than `protect` closed to make
    /// room.
    pub fn new(max: usize, protect: Duration) -> Arc<Self> {
        Arc::new(Open {
            max: max.max(1),
            protect,
            slots: Mutex::new((0, HashMap::new())),
        })
    }

    /// The connection to close for a new one, if any may be. An address that holds more than
    /// half of the slots loses its longest idle connection first, however young (a host that
    /// opens connections as fast as it can); otherwise, of the connections older than
    /// `protect`, the longest idle one of the address holding the most of them.
    fn victim(&self, slots: &HashMap<u64, Arc<Slot>>) -> Option<u64> {
        let now = Instant::now();
        let mut held: HashMap<IpAddr, usize> = HashMap::new();
        for slot in slots.values() {
            *held.entry(slot.addr).or_default() += 1;
        }
        let share = self.max / 2;
        // Per address: how many may be closed, and its longest idle one.
        let mut by_addr: HashMap<IpAddr, (usize, Instant, u64)> = HashMap::new();
        for (id, slot) in slots {
            let greedy = held.get(&slot.addr).is_some_and(|&n| n > share);
            if !greedy && now.duration_since(slot.opened) < self.protect {
                continue;
            }
            let Some(since) = slot.idle_since() else {
                continue;
            };
            let entry = by_addr.entry(slot.addr).or_insert((0, since, *id));
            entry.0 += 1;
            if (since, *id) < (entry.1, entry.2) {
                (entry.1, entry.2) = (since, *id);
            }
        }
        by_addr
            .into_iter()
            .max_by(|(a_addr, a), (b_addr, b)| {
                let greedy = |addr: &IpAddr| held.get(addr).is_some_and(|&n| n > share);
                greedy(a_addr)
                    .cmp(&greedy(b_addr))
                    .then(a.0.cmp(&b.0))
                    .then(b.1.cmp(&a.1))
            })
            .map(|(_, (_, _, id))| id)
    }

    /// Takes a slot for a new connection from `addr`, closing an idle one if at the cap.
    pub(super) fn admit(&self, addr: IpAddr) -> Admit {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let mut evicted = None;
        if slots.1.len() >= self.max {
            let Some(id) = self.victim(&slots.1).filter(|id| slots.1[id].evict()) else {
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

/// Frees a connection's slot when its task ends, however it ends (after its socket is
/// closed: declared after it in the task), and tells whoever waits for that.
pub(super) struct Leave(pub(super) Arc<Open>, pub(super) u64, pub(super) Arc<Slot>);

impl Drop for Leave {
    fn drop(&mut self) {
        self.0.leave(self.1);
        self.2.gone.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOME: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    fn admitted(open: &Open) -> (Arc<Slot>, u64, bool) {
        admitted_from(open, HOME)
    }

    fn admitted_from(open: &Open, addr: IpAddr) -> (Arc<Slot>, u64, bool) {
        match open.admit(addr) {
            Admit::Yes { slot, id, evicted } => (slot, id, evicted.is_some()),
            Admit::Full => panic!("refused"),
        }
    }

    // R34: at the cap the longest idle connection makes room; busy ones never do;
    // when all are busy the new one is refused.
    #[tokio::test(start_paused = true)]
    async fn the_longest_idle_connection_makes_room() {
        let open = Open::new(3, Duration::ZERO);
        let (a, _, _) = admitted(&open);
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        let (b, _, _) = admitted(&open);
        let (c, _, _) = admitted(&open);
        let busy_a = a.busy();
        // a is busy: b is the longest idle.
        let (d, _, evicted) = admitted(&open);
        assert!(evicted);
        assert_eq!(open.len(), 3);
        tokio::time::timeout(std::time::Duration::from_secs(1), b.evicted())
            .await
            .unwrap_or_else(|_| panic!("b must be told to close"));
        let (busy_c, busy_d) = (c.busy(), d.busy());
        assert!(matches!(open.admit(HOME), Admit::Full));
        // A request that ends makes its connection idle again, and so evictable.
        drop(busy_a);
        let (e, _, evicted) = admitted(&open);
        assert!(evicted);
        let busy_e = e.busy();
        assert!(matches!(open.admit(HOME), Admit::Full));
        drop((busy_c, busy_d, busy_e));
    }

    #[tokio::test]
    async fn a_connection_that_ends_frees_its_slot() {
        let open = Open::new(1, Duration::ZERO);
        let (slot, id, _) = admitted(&open);
        drop(Leave(open.clone(), id, slot.clone()));
        tokio::time::timeout(std::time::Duration::from_secs(1), slot.gone())
            .await
            .unwrap_or_else(|_| panic!("the end of the connection is told"));
        assert_eq!(open.len(), 0);
        let (_, _, evicted) = admitted(&open);
        assert!(!evicted);
    }

    // R44: a connection younger than the head deadline is never closed for
    // another, unless its address holds more than half of the slots; of the rest, the
    // address holding the most idle connections loses first.
    #[tokio::test(start_paused = true)]
    async fn young_connections_stay_and_the_greediest_address_loses() {
        let ip = |n| IpAddr::V4(std::net::Ipv4Addr::new(192, 168, 1, n));
        let (board, host) = (ip(50), ip(66));
        let open = Open::new(4, Duration::from_secs(5));
        // The board's connection is the oldest: at a plain "longest idle" cap it lost first.
        let (board_slot, _, _) = admitted_from(&open, board);
        tokio::time::advance(Duration::from_secs(1)).await;
        let flood: Vec<_> = (0..3).map(|_| admitted_from(&open, host)).collect();
        // The host holds three of four slots: one of its own makes room, young as it is.
        let (_, _, evicted) = admitted_from(&open, host);
        assert!(evicted);
        let closed = flood
            .iter()
            .filter(|(slot, _, _)| slot.lock().evicted)
            .count();
        assert_eq!(closed, 1);
        tokio::time::timeout(Duration::from_millis(10), board_slot.evicted())
            .await
            .expect_err("the board's connection must stay");

        // Four addresses with one young connection each: nobody may be closed, the listener
        // refuses new ones until they are older than 5 s.
        let open = Open::new(4, Duration::from_secs(5));
        let each: Vec<_> = (1..=4).map(|n| admitted_from(&open, ip(n))).collect();
        assert!(matches!(open.admit(ip(9)), Admit::Full));
        tokio::time::advance(Duration::from_secs(5)).await;
        let (_, _, evicted) = admitted_from(&open, ip(9));
        assert!(evicted);
        drop(each);
    }
}
