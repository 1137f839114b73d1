//! How soon a watch of the caches tries again after its list or watch failed (R48): from
//! half a second, doubling, to at most [`WatchBackoff::CAP`], and from the start again once
//! the watch delivers anything.
//!
//! kube-runtime's own backoff doubles from 0.8 s to 30 s and forgets its count only 120 s
//! after its last failure. Every failure of an outage counts: the API server being down
//! (each try refused), each list cut because its answer did not start in time, each watch
//! that expired (410) and must list again. A few of them in a row, as two API-server
//! restarts close together make, had a watch waiting 12.8 s, then 25.6 s, then 30 s before
//! its next try, long after the API server was back (a chaos seed took 80 s to converge
//! where others take 7). A board's k3s restarts in seconds to a minute: with a cap of 4 s a
//! watch is back at most 4 s after its API server, whatever came before. The price is a
//! try every 4 s per watch while the API server is away (the caches hold five watches), a
//! refused connection each.
//!
//! There is no jitter: one replica's few watches do not move in step with other clients, and
//! a fixed sequence is what the tests read.

use std::time::Duration;

use kube::runtime::utils::Backoff;

/// See the module: 0.5 s, 1 s, 2 s, 4 s, 4 s, ... until [`Backoff::reset`].
#[derive(Clone, Debug, Default)]
pub struct WatchBackoff {
    failures: u32,
}

impl WatchBackoff {
    /// The first wait, after one failure.
    pub const FIRST: Duration = Duration::from_millis(500);
    /// The longest wait.
    pub const CAP: Duration = Duration::from_secs(4);
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let doubled = Self::FIRST.saturating_mul(1 << self.failures.min(16));
        self.failures = self.failures.saturating_add(1);
        Some(doubled.min(Self::CAP))
    }
}

impl Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waits(backoff: &mut WatchBackoff, n: usize) -> Vec<u64> {
        backoff
            .take(n)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .collect()
    }

    // R48: the waits double from half a second to the cap and stay there, however many
    // failures an outage makes; anything the watch delivers starts them over.
    #[test]
    fn waits_double_to_the_cap_and_start_over_after_a_success() {
        let mut backoff = WatchBackoff::default();
        assert_eq!(waits(&mut backoff, 6), [500, 1000, 2000, 4000, 4000, 4000]);
        let mut long = WatchBackoff::default();
        assert_eq!(long.nth(100_000), Some(WatchBackoff::CAP));
        backoff.reset();
        assert_eq!(waits(&mut backoff, 2), [500, 1000]);
    }
}
