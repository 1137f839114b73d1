//! Prometheus metrics (R25), served as OpenMetrics text on the metrics listener.
//!
//! The families are those of the tables in docs/operations.md, with the same names, types
//! and labels:
//!
//! | family | type | labels |
//! |---|---|---|
//! | `mutant_operator_reconciliations_total` | counter | `kind`, `outcome` (`ok`/`error`) |
//! | `mutant_operator_reconcile_duration_seconds` | histogram | `kind`, `outcome` |
//! | `mutant_operator_reconcile_errors_total` | counter | `kind`, `error` (`invalid`/`api`/`client`) |
//! | `mutant_operator_controller_errors_total` | counter | `kind`, `error` (`queue`/`object_not_found`/`runner`) |
//! | `mutant_operator_managed_objects` | gauge | `kind` |
//! | `mutant_operator_variants` | gauge | `kind` |
//! | `mutant_operator_mutation_variants` | gauge | `state` |
//! | `mutant_operator_build_info` | gauge | `version` |
//!
//! plus, beyond the table, `mutant_operator_leader` (gauge, 1 while this replica holds the
//! leader Lease and its reconciles act, else 0; see `lease`) and the standard
//! `process_*` series, read from `/proc` at each scrape (Linux only; a value that cannot be
//! read is left out): `process_cpu_seconds_total` (utime + stime of `/proc/self/stat` at a
//! fixed `USER_HZ` of 100, the crate having no `libc` for `sysconf`),
//! `process_resident_memory_bytes` and `process_virtual_memory_bytes` (`VmRSS`, `VmSize` of
//! `/proc/self/status`), `process_open_fds` (entries of `/proc/self/fd`), `process_max_fds`
//! (soft "Max open files" of `/proc/self/limits`) and `process_start_time_seconds` (`btime`
//! of `/proc/stat` plus the process's `starttime` ticks, read once at start).
//!
//! [`Metrics::encode`] gives OpenMetrics text (what Prometheus asks for);
//! [`Metrics::encode_text`] the same series in Prometheus text 0.0.4, which
//! `promtool check metrics` (2.x) parses without complaint; [`Metrics::encode_for`] picks by
//! the request's `Accept` header as the Go client library does: text unless OpenMetrics is
//! asked for.
//!
//! The rollouts in steps (`spec.rollout`, R43) are read off the owners' caches at each
//! scrape too (`rollout`): `mutantops_rollouts` by kind and phase, and for each rollout that
//! is not complete `mutantops_rollout_step` and
//! `mutantops_rollout_step_started_timestamp_seconds`.
//!
//! Every known label combination of the counters and the histogram is created at start, so
//! each series exists at 0 before anything happens. The three cache gauges are computed at
//! scrape time from the controllers' caches ([`Metrics::set_caches`]); `kind` is
//! `MutantDeployment` or `Mutation`.

mod gauges;
mod labels;
mod process;
mod rollout;
pub mod screens;
mod sleep;
#[cfg(test)]
mod tests;

use std::{
    fmt,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use prometheus_client::{
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::{Registry, Unit},
};

use gauges::{CacheCollector, CacheView};
use labels::{
    CONTROLLER_ERRORS, DurationFamily, INITIAL_CAPACITY, KINDS, KindError, KindOutcome, OUTCOMES,
    RECONCILE_ERRORS, VersionLabel, duration_histogram,
};

use crate::{
    cache::Caches,
    crd::{OwnerKind, WakeCause},
};

/// The `Content-Type` of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The `Content-Type` of [`Metrics::encode_text`]: Prometheus text format 0.0.4.
pub const TEXT_CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The operator's metrics: counters updated by the controllers, gauges read at scrape time.
///
/// `Send + Sync`; share it in an `Arc` between the controllers and the metrics listener.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    reconciliations: Family<KindOutcome, Counter>,
    durations: DurationFamily,
    reconcile_errors: Family<KindError, Counter>,
    controller_errors: Family<KindError, Counter>,
    leader: Gauge,
    caches: Arc<CacheCollector>,
    sleep: sleep::SleepMetrics,
    screens: screens::ScreenMetrics,
    /// Length of the last exposition, to size the next one's buffer.
    last_len: AtomicUsize,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every family, with all known label combinations at 0, `build_info` for this
    /// crate's version and `leader` at 0 (until the election says otherwise).
    pub fn new() -> Self {
        let mut registry = Registry::default();
        // Help texts of registered families get their final '.' from the registry.

        let reconciliations = Family::<KindOutcome, Counter>::default();
        let durations: DurationFamily =
            Family::new_with_constructor(duration_histogram as fn() -> Histogram);
        for kind in KINDS {
            for outcome in OUTCOMES {
                let labels = KindOutcome {
                    kind: kind.kind(),
                    outcome,
                };
                reconciliations.get_or_create_owned(&labels);
                durations.get_or_create_owned(&labels);
            }
        }
        registry.register(
            "mutant_operator_reconciliations",
            "Reconciles finished, by owner kind and outcome",
            reconciliations.clone(),
        );
        registry.register_with_unit(
            "mutant_operator_reconcile_duration",
            "Time one reconcile took",
            Unit::Seconds,
            durations.clone(),
        );

        let reconcile_errors = error_family(&RECONCILE_ERRORS);
        registry.register(
            "mutant_operator_reconcile_errors",
            "Failed reconciles, retried after 10s",
            reconcile_errors.clone(),
        );
        let controller_errors = error_family(&CONTROLLER_ERRORS);
        registry.register(
            "mutant_operator_controller_errors",
            "Other controller errors; queue means a watch failed",
            controller_errors.clone(),
        );

        let build_info = Family::<VersionLabel, Gauge>::default();
        build_info
            .get_or_create(&VersionLabel {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        registry.register(
            "mutant_operator_build_info",
            "Build information; always 1",
            build_info,
        );

        let leader = Gauge::default();
        registry.register(
            "mutant_operator_leader",
            "1 while this replica is the leader and its controllers reconcile, else 0",
            leader.clone(),
        );

        let sleep = sleep::SleepMetrics::register(&mut registry);
        let screens = screens::ScreenMetrics::register(&mut registry);

        let caches = Arc::new(CacheCollector::default());
        registry.register_collector(Box::new(Arc::clone(&caches)));
        registry.register_collector(Box::new(process::ProcessCollector::new()));

        Metrics {
            registry,
            reconciliations,
            durations,
            reconcile_errors,
            controller_errors,
            leader,
            caches,
            sleep,
            screens,
            last_len: AtomicUsize::new(INITIAL_CAPACITY),
        }
    }

    /// Hands over the controllers' caches, from which `managed_objects`, `variants` and
    /// `mutation_variants` are computed at each scrape. Until then those gauges read 0.
    pub fn set_caches(&self, caches: Caches) {
        self.caches.set(CacheView {
            mutant_deployments: caches.mutant_deployments,
            mutations: caches.mutations,
        });
    }

    /// The most devices that get series of their own (`MUTANT_METRICS_MAX_DEVICES`); above
    /// it, only `mutantops_devices`.
    pub fn set_max_devices(&self, max: usize) {
        self.caches
            .max_devices
            .store(max, std::sync::atomic::Ordering::Relaxed);
    }

    /// Records one finished reconcile of an owner of `kind` that took `duration`. `error` is
    /// `None` on success, else the `error` label of `mutant_operator_reconcile_errors_total`
    /// (`invalid`, `api` or `client`).
    pub fn reconciled(&self, kind: OwnerKind, duration: Duration, error: Option<&'static str>) {
        let labels = KindOutcome {
            kind: kind.kind(),
            outcome: if error.is_some() { "error" } else { "ok" },
        };
        self.reconciliations.get_or_create(&labels).inc();
        self.durations
            .get_or_create(&labels)
            .observe(duration.as_secs_f64());
        if let Some(error) = error {
            self.reconcile_errors
                .get_or_create(&KindError {
                    kind: kind.kind(),
                    error,
                })
                .inc();
        }
    }

    /// Records a controller error outside a reconcile: `queue` (a watch failed),
    /// `object_not_found` or `runner`.
    pub fn controller_error(&self, kind: OwnerKind, error: &'static str) {
        self.controller_errors
            .get_or_create(&KindError {
                kind: kind.kind(),
                error,
            })
            .inc();
    }

    /// Counts a start of a sleeping variant (R42).
    pub fn variant_woke(&self, cause: WakeCause) {
        self.sleep.woke(cause);
    }

    /// Records the time from a sleeping variant's start to its first ready replica.
    pub fn variant_ready_after(&self, seconds: f64) {
        self.sleep.ready_after(seconds);
    }

    /// Counts a poll answered `ready: false`.
    pub fn late_wake(&self) {
        self.sleep.late_poll();
    }

    /// Counts variants expired.
    pub fn variants_expired(&self, n: usize) {
        self.sleep.expired(u64::try_from(n).unwrap_or(u64::MAX));
    }

    /// A fetch of a screen ended with `result` ([`screens::NEW`], [`screens::UNCHANGED`] or
    /// a failure's reason).
    pub fn screen_fetched(&self, result: &'static str) {
        self.screens.fetched(result);
    }

    /// Sets `mutant_operator_leader` to 1 (leading) or 0.
    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// The whole exposition in OpenMetrics text ([`CONTENT_TYPE`]), ending with `# EOF`.
    pub fn encode(&self) -> String {
        self.encode_with(prometheus_client::encoding::text::encode)
    }

    /// The whole exposition in the classic Prometheus text format 0.0.4
    /// ([`TEXT_CONTENT_TYPE`]): the same series, without `# UNIT` and `# EOF`, and with
    /// counters' `# HELP`/`# TYPE` naming the `_total` series. What `promtool check metrics`
    /// and clients that do not ask for OpenMetrics understand.
    pub fn encode_text(&self) -> String {
        self.encode_with(prometheus_client::encoding::prometheus_text::encode)
    }

    /// The exposition in the format an HTTP `Accept` header asks for, with its `Content-Type`:
    /// OpenMetrics when the header prefers it (`prefers_openmetrics`: Prometheus does),
    /// else Prometheus text 0.0.4, also for a missing header and `*/*` (curl's default), so
    /// `curl -s .../metrics | promtool check metrics` passes as Prometheus documents it.
    pub fn encode_for(&self, accept: Option<&str>) -> (&'static str, String) {
        if accept.is_some_and(prefers_openmetrics) {
            (CONTENT_TYPE, self.encode())
        } else {
            (TEXT_CONTENT_TYPE, self.encode_text())
        }
    }

    /// Encodes the registry into a buffer sized from the previous exposition.
    fn encode_with(&self, encode: fn(&mut String, &Registry) -> Result<(), fmt::Error>) -> String {
        let mut out = String::with_capacity(self.last_len.load(Ordering::Relaxed) + 1024);
        if let Err(err) = encode(&mut out, &self.registry) {
            // Writing to a String cannot fail; should it, the scrape gets what was written.
            tracing::warn!(error = %err, "encoding metrics failed");
        }
        self.last_len.store(out.len(), Ordering::Relaxed);
        out
    }

    /// Replaces the caches the gauges read (tests build stores without a [`Caches`]).
    #[cfg(test)]
    fn set_cache_view(&self, view: CacheView) {
        self.caches.set(view);
    }

    /// The stores the cache gauges read, without the rest of `Caches`: what
    /// [`Metrics::set_caches`] hands over, for a process (or a test) that has only these.
    pub fn set_stores(
        &self,
        mutant_deployments: kube::runtime::reflector::Store<crate::crd::MutantDeployment>,
        mutations: kube::runtime::reflector::Store<crate::crd::Mutation>,
    ) {
        self.caches.set(CacheView {
            mutant_deployments,
            mutations,
        });
    }
}

/// Whether an `Accept` header value prefers OpenMetrics to the classic text format, decided
/// as the Go client library decides: of the ranges naming `application/openmetrics-text` or
/// `text/plain` (other parameters ignored) with a non-zero quality, the one of highest quality
/// wins, the first listed on a tie; `*/*` and other types do not count.
fn prefers_openmetrics(accept: &str) -> bool {
    let mut best: Option<(f64, bool)> = None;
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let name = parts.next().unwrap_or_default();
        let openmetrics = if name.eq_ignore_ascii_case("application/openmetrics-text") {
            true
        } else if name.eq_ignore_ascii_case("text/plain") {
            false
        } else {
            continue;
        };
        let quality = parts
            .find_map(|param| param.strip_prefix("q="))
            .map_or(Some(1.0), |q| q.parse::<f64>().ok())
            .unwrap_or(0.0);
        if quality > 0.0 && best.is_none_or(|(q, _)| quality > q) {
            best = Some((quality, openmetrics));
        }
    }
    best.is_some_and(|(_, openmetrics)| openmetrics)
}

/// A counter family with every `kind` × `errors` series created at 0.
fn error_family(errors: &[&'static str]) -> Family<KindError, Counter> {
    let family = Family::<KindError, Counter>::default();
    for kind in KINDS {
        for &error in errors {
            family.get_or_create_owned(&KindError {
                kind: kind.kind(),
                error,
            });
        }
    }
    family
}
