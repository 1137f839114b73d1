//! The gauges read off the caches at each scrape: owners and declared variants per kind,
//! Mutation variants per reported state.

use std::{
    fmt,
    sync::{PoisonError, RwLock},
};

use kube::runtime::reflector::Store;
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeLabelSet},
    metrics::MetricType,
};

use super::labels::{KINDS, KindLabel, STATES, StateLabel};
use crate::crd::{MutantDeployment, Mutation, OwnerResource};

/// The caches the gauges read.
#[derive(Clone)]
pub(super) struct CacheView {
    pub(super) mutant_deployments: Store<MutantDeployment>,
    pub(super) mutations: Store<Mutation>,
}

/// What the cache gauges say at one scrape.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct CacheCounts {
    /// Owners per kind, indexed as [`KINDS`].
    pub(super) objects: [u64; 2],
    /// Declared variants per kind, indexed as [`KINDS`].
    pub(super) variants: [u64; 2],
    /// Mutation variants per reported state, indexed as [`STATES`].
    pub(super) states: [u64; 4],
}

impl CacheView {
    pub(super) fn counts(&self) -> CacheCounts {
        let mut counts = CacheCounts::default();
        let mds = self.mutant_deployments.state();
        counts.objects[0] = mds.len() as u64;
        counts.variants[0] = mds.iter().map(|md| md.variants().len() as u64).sum();
        let mutations = self.mutations.state();
        counts.objects[1] = mutations.len() as u64;
        for mutation in &mutations {
            counts.variants[1] += mutation.variants().len() as u64;
            let reported = mutation.owner_status().map(|s| s.variants.as_slice());
            for variant in reported.unwrap_or_default() {
                if let Some(i) = STATES.iter().position(|s| *s == variant.state) {
                    counts.states[i] += 1;
                }
            }
        }
        counts
    }
}

/// Encodes the cache gauges on each scrape.
#[derive(Default)]
pub(super) struct CacheCollector {
    view: RwLock<Option<CacheView>>,
}

impl fmt::Debug for CacheCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheCollector").finish_non_exhaustive()
    }
}

impl CacheCollector {
    pub(super) fn set(&self, view: CacheView) {
        *self.view.write().unwrap_or_else(PoisonError::into_inner) = Some(view);
    }

    pub(super) fn counts(&self) -> CacheCounts {
        let view = self
            .view
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        view.map(|v| v.counts()).unwrap_or_default()
    }
}

impl Collector for CacheCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let counts = self.counts();
        let by_kind = |values: [u64; 2]| {
            KINDS
                .map(|k| k.kind())
                .map(|kind| KindLabel { kind })
                .into_iter()
                .zip(values)
        };
        gauge_family(
            &mut encoder,
            "mutant_operator_managed_objects",
            "Resources in the controller's cache, by owner kind.",
            by_kind(counts.objects),
        )?;
        gauge_family(
            &mut encoder,
            "mutant_operator_variants",
            "Variants declared in specs, summed per owner kind.",
            by_kind(counts.variants),
        )?;
        gauge_family(
            &mut encoder,
            "mutant_operator_mutation_variants",
            "Mutation variants by reported state.",
            STATES
                .map(|s| StateLabel { state: s.as_str() })
                .into_iter()
                .zip(counts.states),
        )
    }
}

/// Encodes one gauge family with the given series.
fn gauge_family<S: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (S, u64)>,
) -> Result<(), fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in series {
        metric.encode_family(&labels)?.encode_gauge(&value)?;
    }
    Ok(())
}
