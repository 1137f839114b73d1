//! The series of screens (R53, R25): fetches of the renderers by result. Each screen's age is
//! read off the caches at each scrape (`gauges`).

use std::{fmt, sync::Arc};

use k8s_openapi::jiff::Timestamp;
use prometheus_client::{
    encoding::{DescriptorEncoder, EncodeLabelSet},
    metrics::{MetricType, counter::Counter, family::Family},
    registry::Registry,
};

use crate::{crd::Mutation, variant::screen::Failure};

/// What a fetch that kept its answer is counted as: a new screen, or the same one again.
pub const NEW: &str = "new";
/// See [`NEW`].
pub const UNCHANGED: &str = "unchanged";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

/// The screen series.
#[derive(Debug)]
pub(super) struct ScreenMetrics {
    fetches: Family<ResultLabel, Counter>,
}

impl ScreenMetrics {
    /// Registers the family, every result at 0.
    pub(super) fn register(registry: &mut Registry) -> Self {
        let fetches = Family::<ResultLabel, Counter>::default();
        let results = [NEW, UNCHANGED]
            .into_iter()
            .chain(Failure::ALL.iter().map(|f| f.reason()));
        for result in results {
            fetches.get_or_create_owned(&ResultLabel { result });
        }
        registry.register(
            "mutantops_screen_fetches",
            "Fetches of variants' screens from their renderers, by result (new, unchanged, or why \
             the last good screen was kept)",
            fetches.clone(),
        );
        ScreenMetrics { fetches }
    }

    pub(super) fn fetched(&self, result: &'static str) {
        self.fetches.get_or_create(&ResultLabel { result }).inc();
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VariantLabels {
    namespace: String,
    mutation: String,
    variant: String,
}

/// Encodes `mutantops_screen_age_seconds`: for each variant of a Mutation with `spec.screen`
/// whose renderer has answered a screen, the seconds since it last did (as its status says).
pub(super) fn encode_ages(
    encoder: &mut DescriptorEncoder,
    mutations: &[Arc<Mutation>],
) -> Result<(), fmt::Error> {
    let mut ages = encoder.encode_descriptor(
        "mutantops_screen_age_seconds",
        "Seconds since each variant's renderer last answered the screen the API serves.",
        None,
        MetricType::Gauge,
    )?;
    let now = Timestamp::now();
    for m in mutations.iter().filter(|m| m.spec.screen.is_some()) {
        let (Some(ns), Some(name), Some(status)) = (
            m.metadata.namespace.as_deref(),
            m.metadata.name.as_deref(),
            m.status.as_ref(),
        ) else {
            continue;
        };
        for v in &status.variants {
            let fetched = v
                .screen
                .as_deref()
                .and_then(|s| s.fetched_at.as_deref())
                .and_then(|t| t.parse::<Timestamp>().ok());
            let Some(fetched) = fetched else { continue };
            let labels = VariantLabels {
                namespace: ns.to_owned(),
                mutation: name.to_owned(),
                variant: v.label.clone(),
            };
            let age = (now.as_second() - fetched.as_second()).max(0);
            ages.encode_family(&labels)?.encode_gauge(&age)?;
        }
    }
    Ok(())
}
