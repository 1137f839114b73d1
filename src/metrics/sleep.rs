//! The series of sleeping variants (R42, R25): starts by cause, the time from a
//! start to a ready replica, polls that came before their variant was ready, and expiries.
//! How many variants are idle and awake is read off the caches at each scrape (`gauges`).

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, histogram::Histogram},
    registry::{Registry, Unit},
};

use crate::crd::WakeCause;

/// Upper bounds (seconds) of the wake-to-ready buckets: a cached image starts in about a
/// second, a headless browser in tens.
const WAKE_BUCKETS: [f64; 10] = [0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0, 34.0, 60.0];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CauseLabel {
    cause: &'static str,
}

/// The sleep series.
#[derive(Debug)]
pub(super) struct SleepMetrics {
    wakes: Family<CauseLabel, Counter>,
    wake_to_ready: Histogram,
    late_polls: Counter,
    expired: Counter,
}

impl SleepMetrics {
    /// Registers the families, every cause at 0.
    pub(super) fn register(registry: &mut Registry) -> Self {
        let wakes = Family::<CauseLabel, Counter>::default();
        for cause in WakeCause::ALL {
            wakes.get_or_create_owned(&CauseLabel {
                cause: cause.as_str(),
            });
        }
        registry.register(
            "mutantops_variant_wakes",
            "Starts of sleeping variants, by cause (poll, ahead of an expected poll, unknown, admin)",
            wakes.clone(),
        );
        let wake_to_ready = Histogram::new(WAKE_BUCKETS);
        registry.register_with_unit(
            "mutantops_variant_wake_to_ready",
            "Time from a sleeping variant's start to its first ready replica",
            Unit::Seconds,
            wake_to_ready.clone(),
        );
        let late_polls = Counter::default();
        registry.register(
            "mutantops_late_wakes",
            "Polls of a device whose variant was not ready yet (answered ready: false)",
            late_polls.clone(),
        );
        let expired = Counter::default();
        registry.register(
            "mutantops_variants_expired",
            "Variants made by enrollment removed because their devices were gone",
            expired.clone(),
        );
        SleepMetrics {
            wakes,
            wake_to_ready,
            late_polls,
            expired,
        }
    }

    pub(super) fn woke(&self, cause: WakeCause) {
        self.wakes
            .get_or_create(&CauseLabel {
                cause: cause.as_str(),
            })
            .inc();
    }

    pub(super) fn ready_after(&self, seconds: f64) {
        self.wake_to_ready.observe(seconds);
    }

    pub(super) fn late_poll(&self) {
        self.late_polls.inc();
    }

    pub(super) fn expired(&self, n: u64) {
        self.expired.inc_by(n);
    }
}
