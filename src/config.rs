//! Settings read from the environment at start-up. A malformed value is an error, never a
//! silent default: an operator that listens somewhere unexpected, or serves without auth by
//! accident, is worse than one that refuses to start.

use std::{ffi::OsString, fmt, net::SocketAddr, path::PathBuf, time::Duration};

use secrecy::{ExposeSecret as _, SecretString};

use crate::{Error, Result};

mod cidr;
pub use cidr::TrustedProxies;

/// Default listen address of the HTTP API.
pub const DEFAULT_API_ADDR: &str = "0.0.0.0:8080";
/// Default listen address of the metrics and probe listener.
pub const DEFAULT_METRICS_ADDR: &str = "0.0.0.0:9568";
/// Default `MUTANT_LEASE_DURATION_SECONDS`.
pub const DEFAULT_LEASE_DURATION_SECONDS: u64 = 15;
/// The shortest admin token accepted (`MUTANT_API_TOKEN`), in characters: 32 random hex
/// characters are 128 bits; anything shorter can be guessed or was typed by hand.
pub const MIN_ADMIN_TOKEN: usize = 32;

/// Default `MUTANT_METRICS_MAX_DEVICES`: the most devices that get metric series of their own.
pub const DEFAULT_METRICS_MAX_DEVICES: usize = 200;
/// Default `MUTANT_SCREEN_CACHE_MIB` (R53): the screens all Mutations may keep, which every
/// replica holds in its cache; with the 20 to 30 MiB a replica uses at 1000 owners, under the
/// 64 MiB limit of `deploy/`.
pub const DEFAULT_SCREEN_CACHE_MIB: usize = 8;
/// Default `MUTANT_API_MAX_CONNECTIONS`.
pub const DEFAULT_API_MAX_CONNECTIONS: usize = 256;
/// Default `MUTANT_API_BUFFER_MIB`: what the API holds of request bodies and answers at once
/// (R44); one caller holds at most a quarter of it.
pub const DEFAULT_API_BUFFER_MIB: usize = 8;
/// Default `MUTANT_API_REQUEST_DEADLINE_SECONDS` (R34): a device's firmware
/// gives up after 4.5 to 5 s (ESPHome, TRMNL), so the answer, a 503 at worst, comes before.
pub const DEFAULT_API_REQUEST_DEADLINE_SECONDS: u64 = 4;
/// Default `MUTANT_STALE_AFTER_SECONDS`: two Lease durations.
pub const DEFAULT_STALE_AFTER_SECONDS: u64 = 30;
/// How often kube-apiserver sends a bookmark on a watch that asked for them: its watch cache
/// sends one about every minute (kubernetes/kubernetes#90249), and one 2 s before the watch's
/// timeout. Measured on the test cluster (1.34.4): the first bookmark 60.4 s after the watch
/// began, the next a minute later.
pub const BOOKMARK_INTERVAL_SECONDS: u64 = 60;
/// Default `MUTANT_WATCH_STALE_AFTER_SECONDS` (R34): a watch with neither an
/// event nor a bookmark for twice the bookmark interval is stalled.
pub const DEFAULT_WATCH_STALE_AFTER_SECONDS: u64 = 2 * BOOKMARK_INTERVAL_SECONDS;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line.
    Json,
}

/// The admin token of the HTTP API: a `secrecy` secret (its `Debug` never shows the value,
/// and its memory is zeroed when dropped). Compared by value, for the tests of `Config`.
#[derive(Clone)]
pub struct Secret(SecretString);

impl Secret {
    /// Wraps a token.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(SecretString::from(value.into()))
    }

    /// The token's bytes, for a constant-time comparison.
    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.expose() == other.expose()
    }
}

impl Eq for Secret {}

/// Everything the operator reads from its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `MUTANT_API_ADDR`.
    pub api_addr: SocketAddr,
    /// `MUTANT_METRICS_ADDR`.
    pub metrics_addr: SocketAddr,
    /// `MUTANT_API_TOKEN`; `None` when unset or empty.
    pub api_token: Option<Secret>,
    /// `MUTANT_API_INSECURE`. Only on a loopback `MUTANT_API_ADDR`, unless
    /// `MUTANT_API_INSECURE_ALLOW_REMOTE` is true as well.
    pub api_insecure: bool,
    /// `MUTANT_API_TLS_CERT_FILE` and `MUTANT_API_TLS_KEY_FILE`: the API speaks HTTPS with
    /// them; `None` (both unset) for plain HTTP.
    pub api_tls: Option<TlsFiles>,
    /// `MUTANT_LOG_FORMAT`.
    pub log_format: LogFormat,
    /// `MUTANT_WATCH_NAMESPACE`: reconcile only this namespace; `None` (unset or empty) for
    /// every namespace.
    pub watch_namespace: Option<String>,
    /// `MUTANT_API_NAMESPACES`: the namespaces the HTTP API serves (comma-separated), any
    /// namespace it watches, `kube-system` and its own included; `None` (unset or empty) for
    /// the watch namespace, else the namespaces labelled `mutantops.neiam.org/api=enabled`
    /// but Kubernetes' own and `POD_NAMESPACE` (R33).
    pub api_namespaces: Option<Vec<String>>,
    /// `MUTANT_API_MAX_CONNECTIONS`: the most connections the API listener keeps open.
    pub api_max_connections: usize,
    /// `MUTANT_API_TRUSTED_PROXIES`: the proxies (comma-separated CIDRs) whose
    /// `X-Forwarded-For` or `Forwarded` names a request's client; none when unset or empty.
    pub api_trusted_proxies: TrustedProxies,
    /// `MUTANT_API_BUFFER_MIB`: the MiB of request bodies and answers the API holds at once,
    /// beyond 16 KiB each; a caller holds at most a quarter.
    pub api_buffer_mib: usize,
    /// `MUTANT_API_REQUEST_DEADLINE_SECONDS`: how long the API takes over one request at
    /// most, every call it makes to the API server included; then it answers 503.
    pub api_request_deadline: Duration,
    /// `MUTANT_STALE_AFTER_SECONDS`: how long the API server may fail to answer before this
    /// replica stops answering from its caches and reports not ready.
    pub stale_after: Duration,
    /// `MUTANT_WATCH_STALE_AFTER_SECONDS`: how long a watch may go without an event or a
    /// bookmark before its cache is not answered from and the watch lists again.
    pub watch_stale_after: Duration,
    /// `MUTANT_METRICS_MAX_DEVICES`: the most devices of one Mutation that get metric series of
    /// their own; a Mutation with more exports only its counts per state.
    pub metrics_max_devices: usize,
    /// `MUTANT_SCREEN_CACHE_MIB`: the MiB of screens all Mutations may keep together (R53);
    /// a new screen past it is not kept and the last good one is served.
    pub screen_cache_mib: usize,
    /// `MUTANT_LEASE_DURATION_SECONDS`: how long the leader's Lease is valid without renewal.
    pub lease_duration: Duration,
    /// `POD_NAMESPACE`: where the leader Lease lives; `None` (unset or empty) for the watch
    /// namespace, else `default`.
    pub pod_namespace: Option<String>,
    /// `POD_NAME`: this replica's identity in the Lease; `None` (unset or empty) for
    /// `<hostname>-<pid>`.
    pub pod_name: Option<String>,
    /// `POD_SERVICE_ACCOUNT`: the operator's ServiceAccount (in `POD_NAMESPACE`), which no
    /// Deployment it makes may run as; `None` (unset or empty) when not known.
    pub pod_service_account: Option<String>,
    /// `HOSTNAME`: the host part of the default Lease identity; `None` (unset or empty) for
    /// `/etc/hostname`.
    pub hostname: Option<String>,
}

impl Config {
    /// Reads the configuration through `lookup` (normally `std::env::var_os`).
    pub fn from_env(lookup: impl Fn(&str) -> Option<OsString>) -> Result<Self> {
        let text = |name: &'static str| -> Result<Option<String>> {
            match lookup(name) {
                None => Ok(None),
                Some(value) => value
                    .into_string()
                    .map(Some)
                    .map_err(|_| Error::config(name, "not valid UTF-8")),
            }
        };
        let addr = |name: &'static str, default: &str| -> Result<SocketAddr> {
            let value = text(name)?.unwrap_or_else(|| default.to_string());
            value.trim().parse().map_err(|_| {
                Error::config(
                    name,
                    format!("{value:?} is not a socket address like {default}"),
                )
            })
        };
        let flag = |name: &'static str| -> Result<bool> {
            match text(name)? {
                None => Ok(false),
                Some(value) => parse_bool(&value)
                    .ok_or_else(|| Error::config(name, format!("{value:?} is not true or false"))),
            }
        };
        let api_insecure = flag("MUTANT_API_INSECURE")?;
        let insecure_remote = flag("MUTANT_API_INSECURE_ALLOW_REMOTE")?;
        let log_format = match text("MUTANT_LOG_FORMAT")?.as_deref().map(str::trim) {
            None | Some("" | "text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(other) => {
                return Err(Error::config(
                    "MUTANT_LOG_FORMAT",
                    format!("{other:?} is not text or json"),
                ));
            }
        };
        let api_token = text("MUTANT_API_TOKEN")?
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
            .map(Secret::new);
        if let Some(token) = &api_token {
            let length = token.expose().chars().count();
            if length < MIN_ADMIN_TOKEN {
                return Err(Error::config(
                    "MUTANT_API_TOKEN",
                    format!(
                        "{length} characters long: the admin token must be at least \
                         {MIN_ADMIN_TOKEN} (make one with `openssl rand -hex 32`)"
                    ),
                ));
            }
        }
        let watch_namespace = text("MUTANT_WATCH_NAMESPACE")?
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty());
        if let Some(ns) = &watch_namespace {
            crate::variant::validate_label(ns).map_err(|e| {
                Error::config(
                    "MUTANT_WATCH_NAMESPACE",
                    format!("not a namespace name: {e}"),
                )
            })?;
        }
        let api_namespaces = match text("MUTANT_API_NAMESPACES")? {
            None => None,
            Some(list) => {
                let names: Vec<String> = list
                    .split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .map(str::to_string)
                    .collect();
                for name in &names {
                    crate::variant::validate_label(name).map_err(|e| {
                        Error::config(
                            "MUTANT_API_NAMESPACES",
                            format!("{name:?} is not a namespace name: {e}"),
                        )
                    })?;
                    if let Some(watched) = &watch_namespace
                        && watched != name
                    {
                        return Err(Error::config(
                            "MUTANT_API_NAMESPACES",
                            format!(
                                "{name:?} is a namespace the operator does not watch \
                                 (MUTANT_WATCH_NAMESPACE={watched:?}): the API serves only what \
                                 the operator watches"
                            ),
                        ));
                    }
                }
                (!names.is_empty()).then_some(names)
            }
        };
        let whole = |name: &'static str, default: u64, min: u64, max: u64| -> Result<u64> {
            match text(name)? {
                None => Ok(default),
                Some(value) => match value.trim().parse::<u64>() {
                    Ok(n) if (min..=max).contains(&n) => Ok(n),
                    _ => Err(Error::config(
                        name,
                        format!("{value:?} is not a whole number from {min} to {max}"),
                    )),
                },
            }
        };
        let api_max_connections = usize::try_from(whole(
            "MUTANT_API_MAX_CONNECTIONS",
            DEFAULT_API_MAX_CONNECTIONS as u64,
            1,
            65_536,
        )?)
        .unwrap_or(DEFAULT_API_MAX_CONNECTIONS);
        let api_trusted_proxies = match text("MUTANT_API_TRUSTED_PROXIES")? {
            None => TrustedProxies::default(),
            Some(list) => TrustedProxies::parse(&list)
                .map_err(|why| Error::config("MUTANT_API_TRUSTED_PROXIES", why))?,
        };
        let api_buffer_mib = usize::try_from(whole(
            "MUTANT_API_BUFFER_MIB",
            DEFAULT_API_BUFFER_MIB as u64,
            1,
            1024,
        )?)
        .unwrap_or(DEFAULT_API_BUFFER_MIB);
        let api_request_deadline = Duration::from_secs(whole(
            "MUTANT_API_REQUEST_DEADLINE_SECONDS",
            DEFAULT_API_REQUEST_DEADLINE_SECONDS,
            1,
            60,
        )?);
        let stale_after = Duration::from_secs(whole(
            "MUTANT_STALE_AFTER_SECONDS",
            DEFAULT_STALE_AFTER_SECONDS,
            1,
            86_400,
        )?);
        // At least 4 s: a watch asked to end after half of it still gets its bookmark 2 s
        // before its end (see `cache::watch_timeout`).
        let watch_stale_after = Duration::from_secs(whole(
            "MUTANT_WATCH_STALE_AFTER_SECONDS",
            DEFAULT_WATCH_STALE_AFTER_SECONDS,
            4,
            86_400,
        )?);
        let metrics_max_devices = usize::try_from(whole(
            "MUTANT_METRICS_MAX_DEVICES",
            DEFAULT_METRICS_MAX_DEVICES as u64,
            0,
            100_000,
        )?)
        .unwrap_or(DEFAULT_METRICS_MAX_DEVICES);
        let screen_cache_mib = usize::try_from(whole(
            "MUTANT_SCREEN_CACHE_MIB",
            DEFAULT_SCREEN_CACHE_MIB as u64,
            1,
            1024,
        )?)
        .unwrap_or(DEFAULT_SCREEN_CACHE_MIB);
        let pod_namespace = text("POD_NAMESPACE")?
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty());
        if let Some(ns) = &pod_namespace {
            crate::variant::validate_label(ns).map_err(|e| {
                Error::config("POD_NAMESPACE", format!("not a namespace name: {e}"))
            })?;
        }
        let pod_name = text("POD_NAME")?
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty());
        let pod_service_account = text("POD_SERVICE_ACCOUNT")?
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty());
        if let Some(name) = &pod_service_account {
            crate::variant::validate_name(name).map_err(|e| {
                Error::config(
                    "POD_SERVICE_ACCOUNT",
                    format!("not a ServiceAccount name: {e}"),
                )
            })?;
        }
        let hostname = text("HOSTNAME")?
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty());
        let lease_duration = match text("MUTANT_LEASE_DURATION_SECONDS")? {
            None => Duration::from_secs(DEFAULT_LEASE_DURATION_SECONDS),
            Some(value) => match value.trim().parse::<u64>() {
                Ok(secs) if (2..=i32::MAX as u64).contains(&secs) => Duration::from_secs(secs),
                _ => {
                    return Err(Error::config(
                        "MUTANT_LEASE_DURATION_SECONDS",
                        format!("{value:?} is not a whole number of seconds, at least 2"),
                    ));
                }
            },
        };
        let path = |name: &'static str| -> Result<Option<PathBuf>> {
            Ok(text(name)?
                .map(|p| p.trim().to_string())
                .filter(|p| !p.is_empty())
                .map(PathBuf::from))
        };
        let api_tls = match (
            path("MUTANT_API_TLS_CERT_FILE")?,
            path("MUTANT_API_TLS_KEY_FILE")?,
        ) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
            (Some(_), None) => {
                return Err(Error::config(
                    "MUTANT_API_TLS_CERT_FILE",
                    "set but MUTANT_API_TLS_KEY_FILE is not: set both for HTTPS, or neither for \
                     HTTP",
                ));
            }
            (None, Some(_)) => {
                return Err(Error::config(
                    "MUTANT_API_TLS_KEY_FILE",
                    "set but MUTANT_API_TLS_CERT_FILE is not: set both for HTTPS, or neither for \
                     HTTP",
                ));
            }
        };
        let api_addr = addr("MUTANT_API_ADDR", DEFAULT_API_ADDR)?;
        if api_insecure && !api_addr.ip().is_loopback() && !insecure_remote {
            return Err(Error::config(
                "MUTANT_API_INSECURE",
                format!(
                    "true serves the API without auth, and MUTANT_API_ADDR={api_addr} is not a \
                     loopback address: anyone who reaches it would be admin. Listen on \
                     127.0.0.1, or set MUTANT_API_INSECURE_ALLOW_REMOTE=true as well if that is \
                     meant"
                ),
            ));
        }
        Ok(Config {
            api_tls,
            watch_namespace,
            api_namespaces,
            api_max_connections,
            api_trusted_proxies,
            api_buffer_mib,
            screen_cache_mib,
            api_request_deadline,
            stale_after,
            watch_stale_after,
            metrics_max_devices,
            lease_duration,
            pod_namespace,
            pod_name,
            pod_service_account,
            hostname,
            api_addr,
            metrics_addr: addr("MUTANT_METRICS_ADDR", DEFAULT_METRICS_ADDR)?,
            api_token,
            api_insecure,
            log_format,
        })
    }
}

/// The API's certificate chain and private key, PEM files (`MUTANT_API_TLS_CERT_FILE`,
/// `MUTANT_API_TLS_KEY_FILE`), read at start and again whenever they change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// `true`/`false` (also `1`/`0`, `yes`/`no`), any case; anything else is `None`.
fn parse_bool(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Some(true),
        "false" | "0" | "no" | "" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
