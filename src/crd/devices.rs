//! Devices as objects of a Mutation (R39, R40): [`DevicesSpec`], field `devices` of a
//! Mutation's spec, which turns its token into an enrollment key and gives every enrolled
//! device a token of its own; and [`DeviceStatus`] and [`DeviceSummary`], what the status says
//! of each device and of them all.
//!
//! Like the rest of the spec these decode leniently; the schema carries the bounds, and what
//! it cannot say (durations in order, a valid `openUntil`) is checked by `variant::devices`
//! and reported in the Mutation's status message.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::sleep::{PollStats, SleepSpec};

/// Default of [`DevicesSpec::max_devices`].
pub const DEFAULT_MAX_DEVICES: i32 = 50;
/// Most devices one Mutation may have: its devices Secret and status stay far below the 1 MiB
/// of an object at this many.
pub const MAX_DEVICES: i32 = 500;
/// Default of [`DevicesSpec::late_after`].
pub const DEFAULT_LATE_AFTER: &str = "30m";
/// Default of [`DevicesSpec::gone_after`].
pub const DEFAULT_GONE_AFTER: &str = "24h";
/// Default of [`DevicesSpec::persist_every`].
pub const DEFAULT_PERSIST_EVERY: &str = "10m";

/// Whether new devices may enroll with the Mutation's token.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Enrollment {
    /// Only the admin token enrolls devices (the default).
    #[default]
    Closed,
    /// The Mutation's token enrolls devices, until `openUntil` if set and while there are
    /// fewer than `maxDevices`.
    Open,
}

/// A Mutation's devices: set, and the Mutation's token becomes an enrollment key that may
/// enroll devices and nothing else; each device gets a token of its own, shown once.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DevicesSpec {
    /// Open: the Mutation's token enrolls new devices. Closed (the default): only the admin
    /// token does.
    #[serde(default)]
    pub enrollment: Enrollment,

    /// When an open enrollment closes by itself (RFC 3339, e.g. 2026-12-24T18:00:00Z).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub open_until: Option<String>,

    /// Most devices the Mutation may have (default 50, at most 500).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 500))]
    pub max_devices: Option<i32>,

    /// The device ids the Mutation's token may enroll (at most 500); absent: any id. A board's
    /// id (a MAC address, say) is then the owner's to list, and a lifted token cannot take the
    /// id of a board not listed. The admin token enrolls any id: the way to bind an id to its
    /// board is to enroll it with the admin token and provision the device's token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 500))]
    pub ids: Option<Vec<String>>,

    /// A device not heard from for this long is Late (default 30m). A duration as Kubernetes
    /// writes one: 90s, 45m, 24h, 1h30m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub late_after: Option<String>,

    /// A device not heard from for this long is Gone (default 24h); longer than lateAfter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub gone_after: Option<String>,

    /// How often a device's last-seen time is written while it keeps calling (default 10m);
    /// shorter than lateAfter. Changes of state are written at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub persist_every: Option<String>,

    /// Variants sleep with their devices: scaled to zero while no device needs them, started
    /// ahead of their devices' polls, and (made by enrollment) removed when their devices are
    /// gone. Absent: variants never sleep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sleep: Option<SleepSpec>,
}

/// A duration as Kubernetes writes one, in whole seconds, minutes and hours.
fn duration_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "maxLength": 32,
        "pattern": "^([0-9]+(h|m|s))+$"
    })
}

/// How recently a device was heard from.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum DeviceState {
    /// Heard from within lateAfter.
    Online,
    /// Not heard from for lateAfter.
    Late,
    /// Not heard from for goneAfter.
    Gone,
}

impl DeviceState {
    /// Every state, in order.
    pub const ALL: [DeviceState; 3] = [DeviceState::Online, DeviceState::Late, DeviceState::Gone];

    /// The state as written in status and in metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceState::Online => "Online",
            DeviceState::Late => "Late",
            DeviceState::Gone => "Gone",
        }
    }
}

/// What a device said of itself in the headers of its last requests (as TRMNL firmware sends
/// them), each checked when it arrived.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Reported {
    /// `Refresh-Rate`: seconds between its polls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_rate: Option<u32>,
    /// `Battery-Voltage`, in millivolts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub battery_millivolts: Option<u32>,
    /// `RSSI`: the Wi-Fi signal, in dBm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rssi: Option<i32>,
    /// `FW-Version`: its firmware's version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub fw_version: Option<String>,
    /// `Width`: its display's width, in pixels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
    /// `Height`: its display's height, in pixels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub height: Option<u32>,
}

impl Reported {
    /// Whether nothing was reported.
    pub fn is_empty(&self) -> bool {
        *self == Reported::default()
    }
}

/// One enrolled device.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeviceStatus {
    /// The device's id, as it enrolled.
    pub id: String,
    /// The label of the variant it uses.
    pub variant: String,
    /// When it enrolled (RFC 3339).
    pub enrolled_at: String,
    /// When it was last heard from, as last written (RFC 3339); written at most every
    /// persistEvery while it keeps calling, and at every change of state.
    pub last_seen: String,
    /// Online, Late or Gone.
    pub state: DeviceState,
    /// What it said of itself.
    #[serde(default, skip_serializing_if = "Reported::is_empty")]
    pub reported: Reported,
    /// Its polls (Mutations whose variants sleep): the last, how often, how punctual.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll: Option<PollStats>,
}

/// How many devices are in each state.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeviceSummary {
    /// Devices enrolled.
    pub total: i32,
    /// Devices Online.
    pub online: i32,
    /// Devices Late.
    pub late: i32,
    /// Devices Gone.
    pub gone: i32,
}
