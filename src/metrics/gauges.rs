//! The gauges read off the caches at each scrape: owners and declared variants per kind,
//! Mutation variants per reported state, and the devices of Mutations with `spec.devices`:
//! how many in each state, and per device (while its Mutation has no more than the cap) when each
//! was last seen and what it reported of its battery and signal; and the rollouts in steps
//! (`rollout`).

use std::{
    fmt,
    sync::{
        PoisonError, RwLock,
        atomic::{AtomicUsize, Ordering},
    },
};

use kube::runtime::reflector::Store;
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeLabelSet},
    metrics::MetricType,
};

use super::labels::{
    DeviceLabels, DeviceStateLabels, KINDS, KindLabel, MutationLabels, STATES, StateLabel,
};
use crate::config::DEFAULT_METRICS_MAX_DEVICES;
use crate::crd::{DeviceState, MutantDeployment, Mutation, OwnerResource, SleepState};

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
    pub(super) states: [u64; 5],
    /// Variants that sleep (R42), awake and idle.
    pub(super) sleep: [u64; 2],
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
                match variant.sleep.as_ref().map(|s| s.state) {
                    Some(SleepState::Awake) => counts.sleep[0] += 1,
                    Some(SleepState::Idle) => counts.sleep[1] += 1,
                    None => {}
                }
            }
        }
        counts
    }
}

/// Encodes the cache gauges on each scrape.
pub(super) struct CacheCollector {
    view: RwLock<Option<CacheView>>,
    /// The most devices with series of their own; above it, only `mutantops_devices`.
    pub(super) max_devices: AtomicUsize,
}

impl Default for CacheCollector {
    fn default() -> Self {
        CacheCollector {
            view: RwLock::default(),
            max_devices: AtomicUsize::new(DEFAULT_METRICS_MAX_DEVICES),
        }
    }
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
        self.view().map(|v| v.counts()).unwrap_or_default()
    }

    fn view(&self) -> Option<CacheView> {
        self.view
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Encodes the device families: `mutantops_devices` for every Mutation with `spec.devices`
/// (every state, 0 included, so that alerts see a device leave a state), and, for each that has
/// at most `max` devices, the per-device families; `mutantops_device_series_capped` says, per
/// Mutation, whether they were left out.
fn encode_devices(
    encoder: &mut DescriptorEncoder,
    mutations: &[std::sync::Arc<Mutation>],
    max: usize,
) -> Result<(), fmt::Error> {
    let with_devices: Vec<(&str, &str, &[crate::crd::DeviceStatus])> = mutations
        .iter()
        .filter(|m| m.spec.devices.is_some())
        .filter_map(|m| {
            let ns = m.metadata.namespace.as_deref()?;
            let name = m.metadata.name.as_deref()?;
            let devices = m.status.as_ref().map_or(&[][..], |s| &s.devices[..]);
            Some((ns, name, devices))
        })
        .collect();
    let mut states = encoder.encode_descriptor(
        "mutantops_devices",
        "Devices of Mutations with spec.devices, by state.",
        None,
        MetricType::Gauge,
    )?;
    for (namespace, mutation, devices) in &with_devices {
        for state in DeviceState::ALL {
            let count = devices.iter().filter(|d| d.state == state).count() as u64;
            let labels = DeviceStateLabels {
                namespace: (*namespace).to_owned(),
                mutation: (*mutation).to_owned(),
                state: state.as_str(),
            };
            states.encode_family(&labels)?.encode_gauge(&count)?;
        }
    }
    // Capped per Mutation (R40): a Mutation with more devices than the cap (fake ones,
    // say) loses its own per-device series, never another's.
    let mut capped = encoder.encode_descriptor(
        "mutantops_device_series_capped",
        "1 for a Mutation with more devices than MUTANT_METRICS_MAX_DEVICES, whose per-device \
         series are left out.",
        None,
        MetricType::Gauge,
    )?;
    for (namespace, mutation, devices) in &with_devices {
        let labels = MutationLabels {
            namespace: (*namespace).to_owned(),
            mutation: (*mutation).to_owned(),
        };
        capped
            .encode_family(&labels)?
            .encode_gauge(&u64::from(devices.len() > max))?;
    }
    let each = || {
        with_devices
            .iter()
            .filter(|(_, _, devices)| devices.len() <= max)
            .flat_map(|(namespace, mutation, devices)| {
                devices.iter().map(move |d| {
                    let labels = DeviceLabels {
                        namespace: (*namespace).to_owned(),
                        mutation: (*mutation).to_owned(),
                        device: d.id.clone(),
                    };
                    (labels, d)
                })
            })
    };
    let mut seen = encoder.encode_descriptor(
        "mutantops_device_last_seen_timestamp_seconds",
        "When each device was last seen, as written to its Mutation's status (Unix time).",
        None,
        MetricType::Gauge,
    )?;
    for (labels, d) in each() {
        if let Ok(t) = d.last_seen.parse::<k8s_openapi::jiff::Timestamp>() {
            seen.encode_family(&labels)?.encode_gauge(&t.as_second())?;
        }
    }
    let mut battery = encoder.encode_descriptor(
        "mutantops_device_battery_volts",
        "The battery voltage each device last reported (Battery-Voltage).",
        None,
        MetricType::Gauge,
    )?;
    for (labels, d) in each() {
        if let Some(mv) = d.reported.battery_millivolts {
            battery
                .encode_family(&labels)?
                .encode_gauge(&(f64::from(mv) / 1000.0))?;
        }
    }
    let mut rssi = encoder.encode_descriptor(
        "mutantops_device_rssi_dbm",
        "The Wi-Fi signal each device last reported (RSSI).",
        None,
        MetricType::Gauge,
    )?;
    for (labels, d) in each() {
        if let Some(dbm) = d.reported.rssi {
            rssi.encode_family(&labels)?.encode_gauge(&i64::from(dbm))?;
        }
    }
    Ok(())
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
        )?;
        gauge_family(
            &mut encoder,
            "mutantops_sleeping_variants",
            "Variants of Mutations with spec.devices.sleep, by whether they are up (Awake) or \
             scaled to zero (Idle).",
            ["Awake", "Idle"]
                .map(|state| StateLabel { state })
                .into_iter()
                .zip(counts.sleep),
        )?;
        let view = self.view();
        let mutations = view
            .as_ref()
            .map(|v| v.mutations.state())
            .unwrap_or_default();
        let mds = view
            .as_ref()
            .map(|v| v.mutant_deployments.state())
            .unwrap_or_default();
        let mut rolling = super::rollout::rollouts(&mds);
        rolling.extend(super::rollout::rollouts(&mutations));
        super::rollout::encode(&mut encoder, KINDS.map(|k| k.kind()), &rolling)?;
        super::screens::encode_ages(&mut encoder, &mutations)?;
        let max = self.max_devices.load(Ordering::Relaxed);
        encode_devices(&mut encoder, &mutations, max)
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
