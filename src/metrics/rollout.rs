//! The gauges of rollouts in steps (R43, R25), read off the owners' `status.rollout` at each
//! scrape: owners by kind and phase (every combination, 0 included), and for each owner whose
//! rollout is not complete, its step and when that step started.

use std::{fmt, sync::Arc};

use prometheus_client::{
    encoding::{DescriptorEncoder, EncodeLabelSet},
    metrics::MetricType,
};

use crate::crd::{OwnerResource, RolloutPhase, RolloutStatus};

/// Every phase, in the order the series are written.
const PHASES: [RolloutPhase; 4] = [
    RolloutPhase::Progressing,
    RolloutPhase::Paused,
    RolloutPhase::Degraded,
    RolloutPhase::Complete,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindPhase {
    kind: &'static str,
    phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OwnerPhase {
    kind: &'static str,
    namespace: String,
    name: String,
    phase: &'static str,
}

/// One owner's rollout, as the gauges read it.
pub(super) struct Rolling<'a> {
    kind: &'static str,
    namespace: &'a str,
    name: &'a str,
    status: &'a RolloutStatus,
}

/// The rollouts of `owners`.
pub(super) fn rollouts<K: OwnerResource>(owners: &[Arc<K>]) -> Vec<Rolling<'_>> {
    owners
        .iter()
        .filter_map(|o| {
            Some(Rolling {
                kind: K::KIND.kind(),
                namespace: o.meta().namespace.as_deref()?,
                name: o.meta().name.as_deref()?,
                status: o.owner_status()?.rollout.as_deref()?,
            })
        })
        .collect()
}

/// Encodes `mutantops_rollouts`, `mutantops_rollout_step` and
/// `mutantops_rollout_step_started_timestamp_seconds`.
pub(super) fn encode(
    encoder: &mut DescriptorEncoder,
    kinds: [&'static str; 2],
    all: &[Rolling],
) -> Result<(), fmt::Error> {
    let mut by_phase = encoder.encode_descriptor(
        "mutantops_rollouts",
        "Owners with spec.rollout, by kind and where their rollout stands.",
        None,
        MetricType::Gauge,
    )?;
    for kind in kinds {
        for phase in PHASES {
            let count = all
                .iter()
                .filter(|r| r.kind == kind && r.status.phase == phase)
                .count() as u64;
            let labels = KindPhase {
                kind,
                phase: phase.as_str(),
            };
            by_phase.encode_family(&labels)?.encode_gauge(&count)?;
        }
    }
    let running: Vec<(OwnerPhase, &RolloutStatus)> = all
        .iter()
        .filter(|r| r.status.phase != RolloutPhase::Complete)
        .map(|r| {
            let labels = OwnerPhase {
                kind: r.kind,
                namespace: r.namespace.to_owned(),
                name: r.name.to_owned(),
                phase: r.status.phase.as_str(),
            };
            (labels, r.status)
        })
        .collect();
    let mut step = encoder.encode_descriptor(
        "mutantops_rollout_step",
        "The step each rollout that is not complete is at (from 0).",
        None,
        MetricType::Gauge,
    )?;
    for (labels, status) in &running {
        step.encode_family(labels)?
            .encode_gauge(&i64::from(status.step))?;
    }
    let mut started = encoder.encode_descriptor(
        "mutantops_rollout_step_started_timestamp_seconds",
        "When the current step of each rollout that is not complete started (Unix time).",
        None,
        MetricType::Gauge,
    )?;
    for (labels, status) in &running {
        let at = status.step_started.as_deref();
        if let Some(t) = at.and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok()) {
            started
                .encode_family(labels)?
                .encode_gauge(&t.as_second())?;
        }
    }
    Ok(())
}
