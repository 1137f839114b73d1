//! The pure part of leader election: what one read of the Lease says, since when this replica
//! has seen it unchanged, and what to do about it. No I/O and no clock of its own: every
//! instant comes in as an argument, so the unit tests drive it with an injected clock.

use std::time::Duration;

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::MicroTime,
    jiff::Timestamp,
};
use tokio::time::Instant;

/// What one read of the Lease says, as far as the decision goes. Two reads that give equal
/// `Observed` values saw the same record: nobody renewed or took it in between.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// `spec.holderIdentity`.
    pub holder: Option<String>,
    /// `spec.renewTime`: compared only for a change, never with this replica's clock.
    pub renew_time: Option<Timestamp>,
    /// `spec.leaseDurationSeconds`.
    pub duration_seconds: Option<i32>,
}

impl Observed {
    /// The fields of a Lease that the decision reads.
    pub fn of(lease: &Lease) -> Observed {
        let spec = lease.spec.clone().unwrap_or_default();
        Observed {
            holder: spec.holder_identity,
            renew_time: spec.renew_time.map(|t| t.0),
            duration_seconds: spec.lease_duration_seconds,
        }
    }
}

/// Since when this replica has seen the Lease record unchanged, on its monotonic clock: the
/// local clock that [`decide`] times expiry with.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    last: Option<(Observed, Instant)>,
}

impl Seen {
    /// Records the record read at `now` (`None`: there is no Lease) and returns since when it
    /// has been unchanged: `now` when it differs from the previous read (or there was none, or
    /// the Lease is gone), else the earlier moment.
    pub fn observe(&mut self, record: Option<&Observed>, now: Instant) -> Instant {
        match (&self.last, record) {
            (Some((previous, since)), Some(record)) if previous == record => *since,
            (_, record) => {
                self.last = record.map(|r| (r.clone(), now));
                now
            }
        }
    }
}

/// What to do after reading the Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// There is no Lease: create it, held by this replica.
    Create,
    /// This replica holds it: renew it.
    Renew,
    /// It has no holder, or its holder let it expire: take it over.
    TakeOver,
    /// Another replica holds it and it has not expired: follow.
    Follow {
        /// The leader.
        holder: String,
        /// When the Lease expires unless its record changes first (this replica's clock).
        expires: Instant,
    },
}

/// Decides what `me` does with the Lease as read at `now`, a record this replica has seen
/// unchanged since `unchanged_since` (from [`Seen::observe`]). `default_duration` stands in for
/// a Lease without `leaseDurationSeconds` (or a nonsensical one).
///
/// Another's Lease is expired when `unchanged_since + leaseDurationSeconds < now`: exactly at
/// that instant it is still valid. Both instants are this replica's monotonic clock, so no
/// wall clock (ours or the holder's) takes part: a `renewTime` far in the past or the future
/// says nothing about whether the holder is alive, only its change does.
pub fn decide(
    lease: Option<&Observed>,
    me: &str,
    unchanged_since: Instant,
    now: Instant,
    default_duration: Duration,
) -> Decision {
    let Some(lease) = lease else {
        return Decision::Create;
    };
    let holder = match lease.holder.as_deref() {
        None | Some("") => return Decision::TakeOver,
        Some(holder) if holder == me => return Decision::Renew,
        Some(holder) => holder,
    };
    let duration = lease
        .duration_seconds
        .and_then(|s| u64::try_from(s).ok())
        .filter(|s| *s > 0)
        .map_or(default_duration, Duration::from_secs);
    match unchanged_since.checked_add(duration) {
        Some(expires) if expires < now => Decision::TakeOver,
        // Valid; or so far away that it overflows, which is valid for good.
        expires => Decision::Follow {
            holder: holder.to_string(),
            expires: expires.unwrap_or(now + default_duration),
        },
    }
}

/// The Lease spec to write for `decision` (`None` for [`Decision::Follow`]): held by `me`,
/// renewed `now`, for `duration_seconds`. A take-over sets `acquireTime` and counts one more
/// `leaseTransitions`; a renewal keeps both.
pub fn next_spec(
    decision: &Decision,
    old: Option<&LeaseSpec>,
    me: &str,
    now: Timestamp,
    duration_seconds: i32,
) -> Option<LeaseSpec> {
    let old = old.cloned().unwrap_or_default();
    let now = Some(MicroTime(now));
    let spec = match decision {
        Decision::Follow { .. } => return None,
        Decision::Create => LeaseSpec {
            acquire_time: now.clone(),
            lease_transitions: Some(0),
            ..LeaseSpec::default()
        },
        Decision::Renew => LeaseSpec {
            acquire_time: old.acquire_time.clone().or_else(|| now.clone()),
            ..old
        },
        Decision::TakeOver => LeaseSpec {
            acquire_time: now.clone(),
            lease_transitions: Some(old.lease_transitions.unwrap_or(0).saturating_add(1)),
            ..old
        },
    };
    Some(LeaseSpec {
        holder_identity: Some(me.to_string()),
        renew_time: now,
        lease_duration_seconds: Some(duration_seconds),
        ..spec
    })
}

/// The spec of a released Lease: no holder, so the next replica takes it at once (and a
/// client that waits for expiry instead waits one second).
pub fn released_spec(old: Option<&LeaseSpec>, now: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        renew_time: Some(MicroTime(now)),
        lease_duration_seconds: Some(1),
        ..old.cloned().unwrap_or_default()
    }
}
