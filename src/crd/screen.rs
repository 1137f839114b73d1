//! Screens served by the API (R53): [`ScreenSpec`], field `screen` of a Mutation's spec (where
//! each variant's renderer answers its picture, how often it is fetched, what is accepted),
//! and what a variant's status says of its screen ([`VariantScreen`]).
//!
//! Like the rest of the spec these decode leniently; the schema carries the bounds, and what
//! it cannot say (the durations' bounds) is checked by `variant::screen` and reported in the
//! Mutation's status message.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{service::int_or_string, sleep::duration_schema};

/// Default of [`ScreenSpec::refresh_every`].
pub const DEFAULT_REFRESH_EVERY: &str = "15m";
/// Default of [`ScreenSpec::timeout`].
pub const DEFAULT_SCREEN_TIMEOUT: &str = "10s";
/// Default of [`ScreenSpec::max_bytes`]: 256 KiB.
pub const DEFAULT_SCREEN_BYTES: i64 = 256 * 1024;
/// The most [`ScreenSpec::max_bytes`] may say: a screen is kept in a Secret, which holds at
/// most 1 MiB in all, so 1 MiB less 1 KiB for the rest of it.
pub const MAX_SCREEN_BYTES: i64 = 1024 * 1024 - 1024;
/// Default of [`ScreenSpec::types`].
pub const DEFAULT_SCREEN_TYPES: [&str; 3] = ["image/bmp", "image/png", "image/jpeg"];

/// Where each variant's renderer answers its picture, fetched by the operator once per
/// `refreshEvery` for the whole operator, kept in a Secret the Mutation owns and served to the
/// devices by the HTTP API (GET .../devices/{id}/screen) with an ETag, 304 when unchanged, and
/// the last good screen while the renderer is asleep or broken.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScreenSpec {
    /// The port of the variant's Service the renderer answers on: its name or its number
    /// (spec.service must declare it).
    #[schemars(schema_with = "int_or_string")]
    pub port: IntOrString,

    /// The path of the picture, starting with '/' (a query may follow).
    #[schemars(length(min = 1, max = 1024), regex(pattern = r"^/[^\s#]*$"))]
    pub path: String,

    /// The paths of the variants whose picture is elsewhere, by label (the owner's alone: a
    /// token never chooses where a screen is fetched from).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    #[schemars(schema_with = "paths_schema")]
    pub paths: std::collections::BTreeMap<String, String>,

    /// How old a screen may get before it is fetched again (default 15m, at least 10s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub refresh_every: Option<String>,

    /// How long one fetch may take, connection included (default 10s, at most 60s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub timeout: Option<String>,

    /// The largest picture accepted, in bytes (default 262144, at most 1047552).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_047_552))]
    pub max_bytes: Option<i64>,

    /// The content types accepted (default image/bmp, image/png, image/jpeg); any other
    /// answer keeps the last good screen.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 8),
        inner(
            length(min = 3, max = 127),
            regex(pattern = r"^[a-z0-9.+-]+/[a-z0-9.+-]+$")
        )
    )]
    pub types: Vec<String>,
}

/// What a variant's status says of its screen (Mutations with spec.screen).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VariantScreen {
    /// The ETag of the screen served (its SHA-256, quoted), when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// Its content type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// Its size in bytes.
    #[serde(default)]
    pub bytes: i64,
    /// When the renderer last answered this screen (RFC 3339): its age counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetched_at: Option<String>,
    /// When the operator last asked the renderer (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tried_at: Option<String>,
    /// Whether the last fetch failed, so what is served is the last good screen (or none).
    #[serde(default)]
    pub stale: bool,
    /// Why the last fetch failed: Unreachable, Timeout, Status, Type, TooLarge, Empty,
    /// NoEndpoint, NoPort, Foreign or CacheFull.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What the last fetch found, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Schema of `paths`: at most 500, each a path as `path` is.
fn paths_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "maxProperties": 500,
        "additionalProperties": {
            "type": "string",
            "minLength": 1,
            "maxLength": 1024,
            "pattern": "^/[^\\s#]*$"
        }
    })
}
