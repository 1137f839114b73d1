//! The label sets of the operator's series and the values each label takes.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{family::Family, histogram::Histogram},
};

use crate::crd::{OwnerKind, VariantState};

/// Both owner kinds, in the order their series are listed.
pub(super) const KINDS: [OwnerKind; 2] = [OwnerKind::MutantDeployment, OwnerKind::Mutation];
/// Values of the `outcome` label.
pub(super) const OUTCOMES: [&str; 2] = ["ok", "error"];
/// Values of `error` in `mutant_operator_reconcile_errors_total`.
pub(super) const RECONCILE_ERRORS: [&str; 3] = ["invalid", "api", "client"];
/// Values of `error` in `mutant_operator_controller_errors_total`.
pub(super) const CONTROLLER_ERRORS: [&str; 3] = ["queue", "object_not_found", "runner"];
/// Every variant state, in the order the `state` series are listed.
pub(super) const STATES: [VariantState; 5] = [
    VariantState::Progressing,
    VariantState::Ready,
    VariantState::Invalid,
    VariantState::Conflict,
    VariantState::Idle,
];
/// Upper bounds (seconds) of the reconcile duration buckets: 1 ms to 10 s in 1-2.5-5 steps.
pub(super) const DURATION_BUCKETS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Initial capacity of the exposition buffer, before the first scrape tells the real size.
pub(super) const INITIAL_CAPACITY: usize = 8 * 1024;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct KindOutcome {
    pub(super) kind: &'static str,
    pub(super) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct KindError {
    pub(super) kind: &'static str,
    pub(super) error: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct KindLabel {
    pub(super) kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct StateLabel {
    pub(super) state: &'static str,
}

/// `mutantops_devices`: devices of one Mutation in one state (R39).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct DeviceStateLabels {
    pub(super) namespace: String,
    pub(super) mutation: String,
    pub(super) state: &'static str,
}

/// `mutantops_device_series_capped`: one Mutation with `spec.devices` (R40).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct MutationLabels {
    pub(super) namespace: String,
    pub(super) mutation: String,
}

/// The per-device families (R40), of a Mutation with at most `MUTANT_METRICS_MAX_DEVICES`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct DeviceLabels {
    pub(super) namespace: String,
    pub(super) mutation: String,
    pub(super) device: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct VersionLabel {
    pub(super) version: &'static str,
}

/// A histogram with [`DURATION_BUCKETS`].
pub(super) fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

pub(super) type DurationFamily = Family<KindOutcome, Histogram, fn() -> Histogram>;
