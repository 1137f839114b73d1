//! The bytes one listener may hold for its clients at once: request bodies being read and
//! handled, and answers not yet taken by the client (R44, R34).
//!
//! Every listener already holds a fixed amount per open connection (hyper's read and write
//! buffers, TLS records), bounded by its connection cap. What a request adds beyond
//! [`FREE_BYTES`] (a body, an answer) is reserved from a [`Budget`] first: the listener as a
//! whole holds at most its total, and one caller (a token, else a client address) at most
//! its share. A reservation that does not fit is refused at once, never waited for, so a
//! client who holds a share cannot make anybody else wait; the refused request is answered 503
//! with `Retry-After`. So the memory of the process is bounded by design: the fixed part per
//! connection times the cap, plus the total.

use crate::HashMap;
use std::{
    fmt,
    sync::{Arc, Mutex, PoisonError},
};

use futures::FutureExt as _;
use http_body_util::{BodyExt as _, Full};
use hyper::{Response, body::Bytes};

use super::response::Body;

/// What a request may hold without a reservation: a body or answer this small costs no more
/// than the buffers every connection has anyway.
pub const FREE_BYTES: usize = 16 * 1024;

/// Who holds a reservation: a token's identity, or a client address for callers without one.
pub type Key = Arc<str>;

/// The key that is `parts` written one after the other, made with one allocation (a request
/// makes its keys on every call, R44).
pub fn key_of(parts: &[&str]) -> Key {
    with_joined(parts, |joined| Arc::from(joined))
}

/// `f` of `parts` written one after the other, on the stack when they fit in 512 bytes (a
/// request's look-up keys, made on every call), in a new string otherwise.
pub fn with_joined<R>(parts: &[&str], f: impl FnOnce(&str) -> R) -> R {
    let mut buf = [0u8; 512];
    let mut len = 0;
    for part in parts {
        let Some(slot) = buf.get_mut(len..len + part.len()) else {
            return f(&parts.concat());
        };
        slot.copy_from_slice(part.as_bytes());
        len += part.len();
    }
    // Whole `str`s written back to back are text.
    match std::str::from_utf8(&buf[..len]) {
        Ok(joined) => f(joined),
        Err(_) => f(&parts.concat()),
    }
}

/// Why a reservation was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The caller holds its share already.
    Share {
        /// The share, in bytes.
        share: usize,
    },
    /// The listener holds its total already.
    Total {
        /// The total, in bytes.
        total: usize,
    },
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::Share { share } => write!(
                f,
                "this caller's requests already hold {} of buffered bodies and answers, its \
                 share of this replica's memory; retry when one of them has finished",
                super::limits::human_size(*share)
            ),
            Refused::Total { total } => write!(
                f,
                "this replica already holds {} of buffered bodies and answers, all it may; \
                 retry in a second",
                super::limits::human_size(*total)
            ),
        }
    }
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    by_key: HashMap<Key, usize>,
}

/// The bytes a listener may hold: `total` in all, `share` per caller.
#[derive(Debug)]
pub struct Budget {
    total: usize,
    share: usize,
    held: Mutex<Held>,
}

impl Budget {
    /// A budget of `total` bytes, of which one caller may hold `share` (at most `total`).
    pub fn new(total: usize, share: usize) -> Arc<Self> {
        Arc::new(Budget {
            total,
            share: share.min(total),
            held: Mutex::new(Held::default()),
        })
    }

    /// The total, in bytes.
    pub fn total(&self) -> usize {
        self.total
    }

    /// What one caller may hold, in bytes.
    pub fn share(&self) -> usize {
        self.share
    }

    /// Bytes held right now, in all.
    pub fn in_use(&self) -> usize {
        self.lock().total
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An empty reservation for `key`, to grow as bytes arrive.
    pub fn open(self: &Arc<Self>, key: Key) -> Reservation {
        Reservation {
            budget: self.clone(),
            key,
            bytes: 0,
        }
    }

    fn take(&self, key: &Key, bytes: usize) -> Result<(), Refused> {
        let mut held = self.lock();
        let mine = held.by_key.get(key).copied().unwrap_or(0);
        if mine.saturating_add(bytes) > self.share {
            return Err(Refused::Share { share: self.share });
        }
        if held.total.saturating_add(bytes) > self.total {
            return Err(Refused::Total { total: self.total });
        }
        held.total += bytes;
        *held.by_key.entry(key.clone()).or_default() += bytes;
        Ok(())
    }

    fn give_back(&self, key: &Key, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let mut held = self.lock();
        held.total = held.total.saturating_sub(bytes);
        if let Some(mine) = held.by_key.get_mut(key) {
            *mine = mine.saturating_sub(bytes);
            if *mine == 0 {
                held.by_key.remove(key);
            }
        }
    }
}

/// Bytes reserved for one caller; given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<Budget>,
    key: Key,
    bytes: usize,
}

impl Reservation {
    /// Makes the reservation cover `bytes` in all (never less than it covers already): the
    /// first [`FREE_BYTES`] are free.
    pub fn cover(&mut self, bytes: usize) -> Result<(), Refused> {
        let wanted = bytes.saturating_sub(FREE_BYTES);
        if wanted > self.bytes {
            self.budget.take(&self.key, wanted - self.bytes)?;
            self.bytes = wanted;
        }
        Ok(())
    }

    /// The bytes reserved (beyond the free ones).
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.give_back(&self.key, self.bytes);
    }
}

/// The bytes of an answer, kept with the reservation that covers them: the reservation is
/// given back when the last reference to the bytes is dropped, which is once hyper has written
/// them to the socket or the connection is closed.
struct Answer {
    bytes: Bytes,
    _held: Reservation,
}

impl AsRef<[u8]> for Answer {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

/// `response` with its body covered by `held` until the client has taken it; refused when
/// the body is larger than [`FREE_BYTES`] and the budget cannot hold it.
pub fn hold_answer(
    response: Response<Body>,
    mut held: Reservation,
) -> Result<Response<Body>, Refused> {
    let (parts, body) = response.into_parts();
    // The whole body is in one buffer: collecting it is immediate.
    let bytes =
        body.collect()
            .now_or_never()
            .map_or_else(Bytes::new, |collected| match collected {
                Ok(collected) => collected.to_bytes(),
                Err(never) => match never {},
            });
    held.cover(bytes.len())?;
    let body = if held.bytes() == 0 {
        bytes
    } else {
        Bytes::from_owner(Answer { bytes, _held: held })
    };
    Ok(Response::from_parts(parts, Full::new(body)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Key {
        Arc::from(k)
    }

    // R44: a key is its parts back to back, however long they are.
    #[test]
    fn keys_are_their_parts_joined() {
        assert_eq!(&*key_of(&["token ", "ns", "/", "web"]), "token ns/web");
        assert_eq!(&*key_of(&[]), "");
        let long = "a".repeat(700);
        assert_eq!(
            &*key_of(&["device ", &long, "/x"]),
            format!("device {long}/x")
        );
        let just = "b".repeat(512);
        assert_eq!(&*key_of(&[&just]), just);
        assert_eq!(&*key_of(&["é", "ü"]), "éü");
    }

    // R44: a caller holds at most its share, the listener at most its total, and
    // what is dropped is given back.
    #[test]
    fn shares_and_the_total_bound_what_is_held() {
        let budget = Budget::new(4 * FREE_BYTES, 2 * FREE_BYTES);
        let mut a = budget.open(key("a"));
        // Small ones are free.
        assert_eq!(a.cover(FREE_BYTES), Ok(()));
        assert_eq!(budget.in_use(), 0);
        assert_eq!(a.cover(3 * FREE_BYTES), Ok(()));
        assert_eq!(budget.in_use(), 2 * FREE_BYTES);
        // One byte more than the share, however it is asked for.
        assert_eq!(
            a.cover(3 * FREE_BYTES + 1),
            Err(Refused::Share {
                share: 2 * FREE_BYTES
            })
        );
        let mut a2 = budget.open(key("a"));
        assert!(matches!(
            a2.cover(FREE_BYTES + 1),
            Err(Refused::Share { .. })
        ));
        let mut b = budget.open(key("b"));
        assert_eq!(b.cover(3 * FREE_BYTES), Ok(()));
        let mut c = budget.open(key("c"));
        assert_eq!(
            c.cover(FREE_BYTES + 1),
            Err(Refused::Total {
                total: 4 * FREE_BYTES
            })
        );
        // A refusal takes nothing; dropping gives back.
        assert_eq!(budget.in_use(), 4 * FREE_BYTES);
        drop(a);
        assert_eq!(budget.in_use(), 2 * FREE_BYTES);
        assert_eq!(c.cover(3 * FREE_BYTES), Ok(()));
        drop((b, c, a2));
        assert_eq!(budget.in_use(), 0);
        assert!(budget.lock().by_key.is_empty());
    }

    // R44: an answer holds its bytes until the last copy of them is dropped (hyper
    // has written them); a small one holds nothing; one that does not fit is refused.
    #[test]
    fn an_answer_holds_its_bytes_until_taken() {
        let budget = Budget::new(8 * FREE_BYTES, 3 * FREE_BYTES);
        let big = vec![b'x'; 3 * FREE_BYTES];
        let answer = |len: usize| {
            super::super::response::text(
                hyper::StatusCode::OK,
                "text/plain",
                String::from_utf8(big[..len].to_vec()).unwrap_or_default(),
            )
        };
        let small = hold_answer(answer(100), budget.open(key("a"))).unwrap();
        assert_eq!(budget.in_use(), 0);
        let held = hold_answer(answer(3 * FREE_BYTES), budget.open(key("a"))).unwrap();
        assert_eq!(budget.in_use(), 2 * FREE_BYTES);
        let bytes = held
            .into_body()
            .collect()
            .now_or_never()
            .unwrap()
            .unwrap()
            .to_bytes();
        assert_eq!(bytes.len(), 3 * FREE_BYTES);
        assert_eq!(
            budget.in_use(),
            2 * FREE_BYTES,
            "held while a copy is alive"
        );
        assert!(matches!(
            hold_answer(answer(3 * FREE_BYTES), budget.open(key("a"))),
            Err(Refused::Share { .. })
        ));
        drop(bytes);
        assert_eq!(budget.in_use(), 0);
        drop(small);
    }
}
