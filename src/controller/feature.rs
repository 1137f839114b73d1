//! What an owner's features (its devices' states, R40; their sleep, R42; its rollout in steps,
//! R43) add to a reconcile, in one shape: each is prepared before the variants are planned,
//! may change which variants are declared and how each is reported, adds its part to the
//! owner's status, and says when it wants the owner looked at again. `reconcile` folds over
//! them: plan -> converge -> report -> requeue.

use std::time::Duration;

use crate::crd::{OwnerStatus, Variant, VariantStatus};

/// One feature's part in a reconcile. Every method has the default of a feature that has
/// nothing to say at that point.
pub trait Feature {
    /// The variants to plan, as this feature has them run (sleep: an idle one at zero
    /// instances).
    fn declare(&self, variants: Vec<Variant>) -> Vec<Variant> {
        variants
    }

    /// The variants' statuses, as this feature reports them (sleep: an idle one `Idle`).
    fn variants(&self, statuses: Vec<VariantStatus>) -> Vec<VariantStatus> {
        statuses
    }

    /// Its part of the owner's `status`, from what was written before (`previous`), at `now`.
    fn report(&self, _status: &mut OwnerStatus, _previous: &OwnerStatus, _now: &str) {}

    /// How soon it wants the owner reconciled again, if it does: a change that time alone
    /// brings.
    fn next(&self) -> Option<Duration> {
        None
    }
}

/// What a feature wrote once the status was (the devices' states, an expiry): only when to
/// look again.
pub struct Later(pub Option<Duration>);

impl Feature for Later {
    fn next(&self) -> Option<Duration> {
        self.0
    }
}
