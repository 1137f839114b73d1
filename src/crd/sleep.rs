//! Variants that sleep with their displays (R42): [`SleepSpec`], field `sleep` of a Mutation's
//! `spec.devices`, with its [`QuietHours`]; what a device's polls taught ([`PollStats`], in its
//! status entry); and what a variant's status says of its sleep ([`VariantSleep`]).
//!
//! Like the rest of the spec these decode leniently; the schema carries the bounds, and what
//! it cannot say (durations in order, wakes per hour the durations allow) is checked by
//! `variant::sleep`, the zone, days and times by `variant::quiet`, and reported in the
//! Mutation's status message.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Default of [`SleepSpec::idle_after`].
pub const DEFAULT_IDLE_AFTER: &str = "10m";
/// Default of [`SleepSpec::warmup`]: above the p95 of a wake measured on the real node (a
/// poll of an idle variant to its Service answering: 3 to 4 s for the stand-in workload,
/// BENCHMARKS.md "Wake to ready on the real node"), which is the platform's part only; the
/// rest is room for a renderer's own start on a board.
pub const DEFAULT_WARMUP: &str = "30s";
/// Default of [`SleepSpec::keep_warm`].
pub const DEFAULT_KEEP_WARM: &str = "90s";
/// Default of [`SleepSpec::expire_after`]: a week.
pub const DEFAULT_EXPIRE_AFTER: &str = "168h";
/// Default of [`SleepSpec::max_wake_per_hour`].
pub const DEFAULT_MAX_WAKE_PER_HOUR: i32 = 30;
/// Default of [`SleepSpec::site_silent_min`].
pub const DEFAULT_SITE_SILENT_MIN: i32 = 5;

/// When a Mutation's variants sleep: scaled to zero while no device needs them, started
/// `warmup` before a device's next expected poll, kept up `keepWarm` after its last one.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SleepSpec {
    /// No Online device of the variant for this long: it is scaled to zero (default 10m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub idle_after: Option<String>,

    /// How long before a device's next expected poll its variant is started (default 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub warmup: Option<String>,

    /// How long after a device's last poll its variant stays up (default 90s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub keep_warm: Option<String>,

    /// A variant made by enrollment whose devices have all been Gone this long is removed,
    /// with their records (default 168h). Variants of the spec are only idled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub expire_after: Option<String>,

    /// When nothing is woken: variants sleep, and a poll is told to come back when they end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiet_hours: Option<QuietHours>,

    /// Most starts of one variant in an hour (default 30): durations that would start and
    /// stop a variant more often are refused, and a variant that woke this often stays up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub max_wake_per_hour: Option<i32>,

    /// A namespace whose devices go silent together is a power cut, not a departure: when
    /// more than half of them, and at least this many (default 5), went silent within one
    /// lateAfter, nothing is idled or expired (condition SiteSilent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 500))]
    pub site_silent_min: Option<i32>,
}

/// A duration as Kubernetes writes one, in whole seconds, minutes and hours.
pub(super) fn duration_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "maxLength": 32,
        "pattern": "^([0-9]+(h|m|s))+$"
    })
}

/// Quiet hours: from `from` to `to` (local times of `timeZone`) on each of `days`; a `to` at
/// or before `from` ends on the next day.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuietHours {
    /// The days quiet hours start on (Mon, Tue, Wed, Thu, Fri, Sat, Sun); absent or empty:
    /// every day.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 7), inner(length(max = 3)))]
    pub days: Vec<String>,
    /// Start, local time HH:MM.
    #[schemars(length(max = 5))]
    pub from: String,
    /// End, local time HH:MM.
    #[schemars(length(max = 5))]
    pub to: String,
    /// An IANA time zone, e.g. Europe/Berlin (the zone data is in the binary).
    #[schemars(length(max = 64))]
    pub time_zone: String,
}

/// What a device's polls taught of it: when it last polled, how often it polls, and how far
/// from the expected time it usually comes.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PollStats {
    /// Its last poll (RFC 3339).
    pub last: String,
    /// Seconds between its polls: its `Refresh-Rate`, else a moving average of the gaps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_seconds: Option<u32>,
    /// A moving average of how early or late it came, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lateness_seconds: Option<u32>,
    /// Its last poll found its variant not ready: when it was told to come back (RFC 3339).
    /// The variant waits for it, `keepWarm` after that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<String>,
}

/// Whether a sleeping variant is up.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum SleepState {
    /// Running its instances.
    Awake,
    /// Scaled to zero; `instances` in the spec is kept.
    Idle,
}

/// What woke a variant.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum WakeCause {
    /// A device polled.
    Poll,
    /// A device's next poll is due.
    Ahead,
    /// Nothing predicts when its devices come, or the sleep was turned on or changed.
    Unknown,
    /// The owner pinned the variant (`sleep: false`) or removed `spec.devices.sleep`.
    Admin,
}

impl WakeCause {
    /// Every cause, in order.
    pub const ALL: [WakeCause; 4] = [
        WakeCause::Poll,
        WakeCause::Ahead,
        WakeCause::Unknown,
        WakeCause::Admin,
    ];

    /// The cause as written in status and in metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            WakeCause::Poll => "poll",
            WakeCause::Ahead => "ahead",
            WakeCause::Unknown => "unknown",
            WakeCause::Admin => "admin",
        }
    }
}

/// A sleeping variant's state, as the leader last decided it.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VariantSleep {
    /// Awake or Idle.
    pub state: SleepState,
    /// Since when (RFC 3339).
    pub since: String,
    /// Why, in words.
    pub reason: String,
    /// What woke it last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<WakeCause>,
    /// Its starts within the last hour (RFC 3339), at most maxWakePerHour.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 3600))]
    pub wakes: Vec<String>,
}
