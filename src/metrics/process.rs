//! The standard `process_*` series, read from `/proc` at scrape time (Linux only).
//!
//! Every value is read afresh on each scrape; one that cannot be read (no `/proc`, a field
//! missing) is left out of the exposition rather than failing the scrape. CPU time and the
//! start time are in clock ticks, converted with a fixed [`USER_HZ`] of 100: the crate has no
//! `libc` to ask `sysconf(_SC_CLK_TCK)`, and 100 is what Linux reports to user space on every
//! architecture it supports.

use std::fmt;

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric},
    metrics::{counter::ConstCounter, gauge::ConstGauge},
    registry::Unit,
};

/// Clock ticks per second in `/proc` (Linux `USER_HZ`).
pub(super) const USER_HZ: f64 = 100.0;

/// One reading of the process's resources; `None` where `/proc` did not say.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Sample {
    /// User plus system CPU time, in seconds.
    pub(super) cpu_seconds: Option<f64>,
    /// Resident set size, in bytes.
    pub(super) resident_bytes: Option<u64>,
    /// Virtual memory size, in bytes.
    pub(super) virtual_bytes: Option<u64>,
    /// Open file descriptors.
    pub(super) open_fds: Option<u64>,
    /// Soft limit of open file descriptors.
    pub(super) max_fds: Option<u64>,
}

impl Sample {
    /// Reads `/proc/self`.
    pub(super) fn read() -> Self {
        let stat = std::fs::read_to_string("/proc/self/stat").ok();
        let status = std::fs::read_to_string("/proc/self/status").ok();
        let limits = std::fs::read_to_string("/proc/self/limits").ok();
        let status = status.as_deref();
        Sample {
            cpu_seconds: stat
                .as_deref()
                .and_then(parse_stat)
                .map(|s| (s.utime + s.stime) as f64 / USER_HZ),
            resident_bytes: status.and_then(|s| status_kb(s, "VmRSS")).map(kb_to_bytes),
            virtual_bytes: status.and_then(|s| status_kb(s, "VmSize")).map(kb_to_bytes),
            open_fds: std::fs::read_dir("/proc/self/fd")
                .ok()
                .map(|dir| dir.count() as u64),
            max_fds: limits.as_deref().and_then(max_open_files),
        }
    }
}

/// Unix time (seconds) at which this process started: the boot time (`btime` in `/proc/stat`)
/// plus the process's `starttime` ticks since boot (`/proc/self/stat`). `None` off Linux.
pub(super) fn start_time() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let start_ticks = parse_stat(&stat)?.starttime;
    let boot = boot_time(&std::fs::read_to_string("/proc/stat").ok()?)?;
    Some(boot as f64 + start_ticks as f64 / USER_HZ)
}

/// The fields of `/proc/<pid>/stat` that are used here, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stat {
    /// Field 14: user-mode CPU time.
    pub(super) utime: u64,
    /// Field 15: kernel-mode CPU time.
    pub(super) stime: u64,
    /// Field 22: start time after boot.
    pub(super) starttime: u64,
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) is in parentheses and may hold
/// spaces and parentheses itself, so fields are counted from the last `)`.
pub(super) fn parse_stat(stat: &str) -> Option<Stat> {
    let (_, rest) = stat.rsplit_once(')')?;
    // `rest` starts at field 3 (state); field n is at index n - 3.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        utime: field(14)?,
        stime: field(15)?,
        starttime: field(22)?,
    })
}

/// The value of a `Key:   123 kB` line of `/proc/<pid>/status`, in kB.
pub(super) fn status_kb(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let value = line.strip_prefix(key)?.strip_prefix(':')?;
        value.split_whitespace().next()?.parse().ok()
    })
}

/// The soft limit of the `Max open files` line of `/proc/<pid>/limits`; `None` when it is
/// `unlimited` or missing.
pub(super) fn max_open_files(limits: &str) -> Option<u64> {
    limits.lines().find_map(|line| {
        let values = line.strip_prefix("Max open files")?;
        values.split_whitespace().next()?.parse().ok()
    })
}

/// The `btime` line of `/proc/stat`: boot time in Unix seconds.
pub(super) fn boot_time(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|line| line.strip_prefix("btime ")?.trim().parse().ok())
}

fn kb_to_bytes(kb: u64) -> u64 {
    kb.saturating_mul(1024)
}

/// Encodes the `process_*` families on each scrape.
#[derive(Debug)]
pub(super) struct ProcessCollector {
    /// Read once: it does not change while the process runs.
    start_time: Option<f64>,
}

impl ProcessCollector {
    /// Reads the start time now; the rest is read at each scrape.
    pub(super) fn new() -> Self {
        ProcessCollector {
            start_time: start_time(),
        }
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let sample = Sample::read();
        if let Some(seconds) = sample.cpu_seconds {
            let metric = ConstCounter::new(seconds);
            metric.encode(encoder.encode_descriptor(
                "process_cpu",
                "Total user and system CPU time spent.",
                Some(&Unit::Seconds),
                metric.metric_type(),
            )?)?;
        }
        gauge(
            &mut encoder,
            "process_resident_memory",
            "Resident memory size.",
            Some(&Unit::Bytes),
            sample.resident_bytes,
        )?;
        gauge(
            &mut encoder,
            "process_virtual_memory",
            "Virtual memory size.",
            Some(&Unit::Bytes),
            sample.virtual_bytes,
        )?;
        gauge(
            &mut encoder,
            "process_open_fds",
            "Number of open file descriptors.",
            None,
            sample.open_fds,
        )?;
        gauge(
            &mut encoder,
            "process_max_fds",
            "Maximum number of open file descriptors (soft limit).",
            None,
            sample.max_fds,
        )?;
        gauge(
            &mut encoder,
            "process_start_time",
            "Start time of the process since the Unix epoch.",
            Some(&Unit::Seconds),
            self.start_time,
        )?;
        Ok(())
    }
}

/// Encodes one unlabelled gauge, or nothing when `value` is `None`.
fn gauge<N: prometheus_client::encoding::EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    value: Option<N>,
) -> Result<(), fmt::Error> {
    let Some(value) = value else {
        return Ok(());
    };
    let metric = ConstGauge::new(value);
    metric.encode(encoder.encode_descriptor(name, help, unit, metric.metric_type())?)
}
