//! Screens (R53), pure: a Mutation's `spec.screen` read and bounded ([`ScreenPolicy`]), where
//! each variant's picture is asked for, when it is due, what an answer must be to be kept
//! ([`judge`]), the Secret a screen is kept in and what the cache keeps of it ([`Screen`]).
//!
//! A screen is fetched from the variant's own Service, by the port the owner named and the
//! path the owner (the spec or the admin token) set; nothing a device sends goes into it.

use std::{sync::Arc, time::Duration};

use k8s_openapi::{
    ByteString, api::core::v1::Secret, apimachinery::pkg::util::intstr::IntOrString,
};

use k8s_openapi::jiff::Timestamp;

use super::{
    devices::parse_duration,
    sleep::{at, plus, secs},
    wake::Rhythm,
};
use crate::crd::{
    ServiceSpec, Variant, VariantScreen,
    screen::{
        DEFAULT_REFRESH_EVERY, DEFAULT_SCREEN_BYTES, DEFAULT_SCREEN_TIMEOUT, DEFAULT_SCREEN_TYPES,
        MAX_SCREEN_BYTES, ScreenSpec,
    },
};

/// The key of a screen Secret's data that holds the picture.
pub const SCREEN_KEY: &str = "screen";
/// The annotation of a screen Secret with the picture's content type.
pub const TYPE_ANNOTATION: &str = "mutantops.neiam.org/screen-type";
/// The annotation of a screen Secret with the picture's ETag (its SHA-256, quoted).
pub const ETAG_ANNOTATION: &str = "mutantops.neiam.org/screen-etag";
/// The shortest `refreshEvery`.
pub const MIN_REFRESH: Duration = Duration::from_secs(10);
/// The longest `timeout`.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);
/// How soon a fetch that failed is tried again, at most (sooner when `refreshEvery` is).
pub const RETRY_FAILED: Duration = Duration::from_secs(30);
/// How soon a fetch that found no endpoint while its renderer was ready is tried again: the
/// EndpointSlice follows the Deployment's readiness by a moment.
pub const RETRY_NO_ENDPOINT: Duration = Duration::from_secs(2);

/// `spec.screen`, read and bounded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScreenPolicy {
    /// The Service port: its name or number.
    pub port: IntOrString,
    /// The path of the picture.
    pub path: String,
    /// The paths of the variants that have their own.
    pub paths: std::collections::BTreeMap<String, String>,
    /// How old a screen may get before it is fetched again.
    pub refresh_every: Duration,
    /// How long one fetch may take.
    pub timeout: Duration,
    /// The largest picture accepted.
    pub max_bytes: usize,
    /// The content types accepted, lower case.
    pub types: Vec<String>,
}

impl ScreenPolicy {
    /// Reads `spec`; Err names the field and the bound it breaks.
    pub fn parse(spec: &ScreenSpec) -> Result<ScreenPolicy, String> {
        let duration = |field: &str, value: Option<&str>, default: &str| {
            parse_duration(value.unwrap_or(default))
                .map_err(|e| format!("spec.screen.{field}: {e}"))
        };
        let refresh_every = duration(
            "refreshEvery",
            spec.refresh_every.as_deref(),
            DEFAULT_REFRESH_EVERY,
        )?;
        if refresh_every < MIN_REFRESH {
            return Err(format!(
                "spec.screen.refreshEvery: at least {}s",
                MIN_REFRESH.as_secs()
            ));
        }
        let timeout = duration("timeout", spec.timeout.as_deref(), DEFAULT_SCREEN_TIMEOUT)?;
        if timeout.is_zero() || timeout > MAX_TIMEOUT {
            return Err(format!(
                "spec.screen.timeout: from 1s to {}s",
                MAX_TIMEOUT.as_secs()
            ));
        }
        let max_bytes = spec.max_bytes.unwrap_or(DEFAULT_SCREEN_BYTES);
        if !(1..=MAX_SCREEN_BYTES).contains(&max_bytes) {
            return Err(format!(
                "spec.screen.maxBytes {max_bytes}: from 1 to {MAX_SCREEN_BYTES} (a Secret holds \
                 at most 1 MiB)"
            ));
        }
        path_ok(&spec.path).map_err(|e| format!("spec.screen.path: {e}"))?;
        for (label, path) in &spec.paths {
            path_ok(path).map_err(|e| format!("spec.screen.paths.{label}: {e}"))?;
        }
        if let IntOrString::Int(port) = spec.port
            && !(1..=65535).contains(&port)
        {
            return Err(format!("spec.screen.port {port}: from 1 to 65535"));
        }
        let types = if spec.types.is_empty() {
            DEFAULT_SCREEN_TYPES.iter().map(|t| t.to_string()).collect()
        } else {
            spec.types.iter().map(|t| t.to_ascii_lowercase()).collect()
        };
        Ok(ScreenPolicy {
            port: spec.port.clone(),
            path: spec.path.clone(),
            paths: spec.paths.clone(),
            refresh_every,
            timeout,
            max_bytes: usize::try_from(max_bytes).unwrap_or(0),
            types,
        })
    }

    /// How long after its last fetch a screen is stale though no fetch failed (no leader has
    /// fetched it for a refresh and a timeout).
    pub fn stale_after(&self) -> Duration {
        self.refresh_every + self.timeout
    }

    /// The path of `v`'s picture: its own in `spec.screen.paths`, or the spec's.
    pub fn path_of<'a>(&'a self, v: &Variant) -> &'a str {
        self.paths.get(&v.label).map_or(&self.path, String::as_str)
    }

    /// The name of the owner's Service port the screen is fetched from (`""` for an unnamed
    /// one, as EndpointSlices name it), or why there is none.
    pub fn port_name(&self, service: Option<&ServiceSpec>) -> Result<String, String> {
        let Some(service) = service else {
            return Err(
                "spec.screen needs spec.service: a screen is fetched from the variant's \
                        Service"
                    .to_string(),
            );
        };
        let found = service.ports.iter().find(|p| match &self.port {
            IntOrString::Int(n) => p.port == *n,
            IntOrString::String(name) => p.name.as_deref() == Some(name.as_str()),
        });
        match found {
            Some(p) => Ok(p.name.clone().unwrap_or_default()),
            None => Err(format!(
                "spec.screen.port {}: spec.service has no such port",
                match &self.port {
                    IntOrString::Int(n) => n.to_string(),
                    IntOrString::String(s) => format!("{s:?}"),
                }
            )),
        }
    }

    /// How long after the last fetch of `s` (`since_tried` ago) the next is due: a refresh
    /// after a good one, sooner after one that failed, and soonest after one that found no
    /// endpoint while the renderer was `ready`.
    pub fn due_in(&self, since_tried: Duration, s: &VariantScreen, ready: bool) -> Duration {
        let every = if !s.stale {
            self.refresh_every
        } else if ready && s.reason.as_deref() == Some(Failure::NoEndpoint.reason()) {
            self.refresh_every.min(RETRY_NO_ENDPOINT)
        } else {
            self.refresh_every.min(RETRY_FAILED)
        };
        every.saturating_sub(since_tried)
    }
}

/// The rhythm of a variant's screen from what its status (or the leader's memory) says of it
/// (R53): when it was last fetched, and when the next fetch is due (after a failure, or with
/// none yet, as soon as a fetch is tried again).
pub fn rhythm(policy: &ScreenPolicy, s: &VariantScreen, now: Timestamp) -> Rhythm {
    let fetched = s.fetched_at.as_deref().and_then(at);
    let tried = s.tried_at.as_deref().and_then(at);
    let due = match (fetched, tried) {
        (Some(f), _) if !s.stale => plus(f, secs(policy.refresh_every)),
        (_, Some(t)) => plus(t, secs(policy.due_in(Duration::ZERO, s, true))),
        (_, None) => now,
    };
    Rhythm { fetched, due }
}

/// Whether `path` is one the operator asks for: starting with '/', at most 1024 bytes, no
/// whitespace, control character or '#'.
pub fn path_ok(path: &str) -> Result<(), String> {
    if !path.starts_with('/') || path.len() > 1024 {
        return Err(format!(
            "{path:?}: must start with '/' and be at most 1024 bytes"
        ));
    }
    if path.bytes().any(|b| b <= b' ' || b == b'#' || b == 0x7f) {
        return Err(format!("{path:?}: no whitespace, control character or '#'"));
    }
    Ok(())
}

/// Why a fetch kept the last good screen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The variant's Service has no ready endpoint, or none the operator asks.
    NoEndpoint,
    /// `spec.screen.port` names no port of `spec.service`, or there is no `spec.service`.
    NoPort,
    /// The connection failed.
    Unreachable,
    /// The answer did not come within the timeout.
    Timeout,
    /// The answer's status was not 2xx.
    Status,
    /// Its content type is not one accepted.
    Type,
    /// It is larger than `maxBytes`.
    TooLarge,
    /// It has no bytes.
    Empty,
    /// A Secret of the screen's name exists and is not this Mutation's.
    Foreign,
    /// Keeping it would take the screens of all Mutations past `MUTANT_SCREEN_CACHE_MIB`.
    CacheFull,
}

impl Failure {
    /// The reason, as the status, the Event and the metrics say it.
    pub fn reason(self) -> &'static str {
        match self {
            Failure::NoEndpoint => "NoEndpoint",
            Failure::NoPort => "NoPort",
            Failure::Unreachable => "Unreachable",
            Failure::Timeout => "Timeout",
            Failure::Status => "Status",
            Failure::Type => "Type",
            Failure::TooLarge => "TooLarge",
            Failure::Empty => "Empty",
            Failure::Foreign => "Foreign",
            Failure::CacheFull => "CacheFull",
        }
    }

    /// Every failure, for the metrics' series.
    pub const ALL: [Failure; 10] = [
        Failure::NoEndpoint,
        Failure::NoPort,
        Failure::Unreachable,
        Failure::Timeout,
        Failure::Status,
        Failure::Type,
        Failure::TooLarge,
        Failure::Empty,
        Failure::Foreign,
        Failure::CacheFull,
    ];
}

/// An answer's content type as compared: the media type without parameters, lower case.
pub fn media_type(header: &str) -> String {
    header
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// Whether an answer with `status`, `content_type` and `len` bytes (so far) is kept as the
/// screen, under `policy`; Err says why not, in words.
pub fn judge(
    policy: &ScreenPolicy,
    status: u16,
    content_type: Option<&str>,
    len: usize,
) -> Result<String, (Failure, String)> {
    if !(200..300).contains(&status) {
        return Err((Failure::Status, format!("the renderer answered {status}")));
    }
    let media = media_type(content_type.unwrap_or_default());
    if !policy.types.contains(&media) {
        return Err((
            Failure::Type,
            format!(
                "the renderer answered content type {media:?}, not one of {:?} (spec.screen.types)",
                policy.types
            ),
        ));
    }
    if len > policy.max_bytes {
        return Err((
            Failure::TooLarge,
            format!(
                "the renderer answered more than {} bytes (spec.screen.maxBytes)",
                policy.max_bytes
            ),
        ));
    }
    if len == 0 {
        return Err((Failure::Empty, "the renderer answered no bytes".to_string()));
    }
    Ok(media)
}

/// The ETag of `bytes`: their SHA-256 in lower-case hex, quoted.
pub fn etag_of(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = String::with_capacity(66);
    out.push('"');
    for b in digest.as_ref() {
        out.push(char::from_digit(u32::from(b >> 4), 16).unwrap_or('0'));
        out.push(char::from_digit(u32::from(b & 0xf), 16).unwrap_or('0'));
    }
    out.push('"');
    out
}

/// The name of the Secret that keeps the screen of variant `label` of Mutation `name`.
pub fn screen_secret_name(name: &str, label: &str) -> String {
    format!("{name}-screen-{label}")
}

/// A screen as this replica's cache keeps it: the picture, its type and ETag, and the
/// variant it is of.
#[derive(Debug, PartialEq, Eq)]
pub struct Screen {
    /// The variant's label.
    pub label: String,
    /// The ETag (SHA-256, quoted).
    pub etag: String,
    /// The content type.
    pub content_type: String,
    /// The picture.
    pub bytes: Box<[u8]>,
}

impl Screen {
    /// The screen a screen Secret holds (its data and annotations as written by the operator,
    /// its variant label), if it is one.
    pub fn from_secret(
        secret: &Secret,
        data: &mut std::collections::BTreeMap<String, ByteString>,
    ) -> Option<Arc<Screen>> {
        let annotations = secret.metadata.annotations.as_ref()?;
        let labels = secret.metadata.labels.as_ref()?;
        let bytes = data.remove(SCREEN_KEY)?.0.into_boxed_slice();
        Some(Arc::new(Screen {
            label: labels.get(super::owner::VARIANT_LABEL)?.clone(),
            etag: annotations.get(ETAG_ANNOTATION)?.clone(),
            content_type: annotations.get(TYPE_ANNOTATION)?.clone(),
            bytes,
        }))
    }
}

#[cfg(test)]
mod tests;
