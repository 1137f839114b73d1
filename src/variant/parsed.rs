//! An owner's policies as typed values (R50): `spec.devices`, its `sleep`, `spec.rollout` and
//! `spec.screen` (R53),
//! each checked and parsed by its own `of`. The caches keep one [`Parsed`] per owner and
//! generation, made when the owner enters them, so a request or a reconcile reads durations,
//! times and time zones that are already parsed.

use std::sync::Arc;

use super::{devices::Policy, rollout::RolloutPolicy, screen::ScreenPolicy, sleep::SleepPolicy};
use crate::crd::OwnerResource;

/// What an owner's spec says of its devices, their sleep and its rollout, checked: each `None`
/// when the spec does not set it, `Err` with the problem when it does not hold.
#[derive(Debug, Default)]
pub struct Parsed {
    /// `spec.devices` ([`Policy::of`]).
    pub devices: Option<Result<Policy, String>>,
    /// `spec.devices.sleep` ([`SleepPolicy::of`]), checked whether or not `spec.devices` holds.
    pub sleep: Option<Result<SleepPolicy, String>>,
    /// `spec.rollout` ([`RolloutPolicy::of`]).
    pub rollout: Option<Result<RolloutPolicy, String>>,
    /// `spec.screen` ([`ScreenPolicy::parse`]).
    pub screen: Option<Result<ScreenPolicy, String>>,
}

impl Parsed {
    /// Checks and parses what `owner`'s spec sets.
    pub fn of<K: OwnerResource>(owner: &K) -> Parsed {
        let devices = owner.devices();
        Parsed {
            devices: devices.map(Policy::of),
            sleep: devices.and_then(|d| d.sleep.as_ref()).map(SleepPolicy::of),
            rollout: owner.rollout().map(RolloutPolicy::of),
            screen: owner.screen().map(ScreenPolicy::parse),
        }
    }

    /// Whether the spec sets nothing to parse: then every owner can share one [`Parsed`].
    pub fn is_empty(&self) -> bool {
        self.devices.is_none()
            && self.sleep.is_none()
            && self.rollout.is_none()
            && self.screen.is_none()
    }

    /// The devices policy, when `spec.devices` is set and holds.
    pub fn devices(&self) -> Option<&Policy> {
        self.devices.as_ref()?.as_ref().ok()
    }

    /// The sleep policy, when `spec.devices.sleep` is set and holds.
    pub fn sleep(&self) -> Option<&SleepPolicy> {
        self.sleep.as_ref()?.as_ref().ok()
    }

    /// The screen policy, when `spec.screen` is set and holds.
    pub fn screen(&self) -> Option<&ScreenPolicy> {
        self.screen.as_ref()?.as_ref().ok()
    }
}

/// The [`Parsed`] of an owner that sets none of it, shared.
pub fn nothing() -> Arc<Parsed> {
    static NOTHING: std::sync::OnceLock<Arc<Parsed>> = std::sync::OnceLock::new();
    NOTHING.get_or_init(|| Arc::new(Parsed::default())).clone()
}
