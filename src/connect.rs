//! The connection to the Kubernetes API server.
//!
//! kube's ready-made client ([`kube::Client::try_from`]) speaks every authentication method a
//! kubeconfig can name: exec plugins, auth providers with JSONPath queries, OIDC refresh. Those
//! bring a regular-expression engine, a JSONPath engine and a second YAML parser, about
//! 1.9 MiB of the binary (docs/benchmarks.md), for methods an operator in its own cluster
//! never uses. This module builds the
//! same stack (rustls with ring, connect/read/write timeouts, a deadline on every call but the
//! watchers' watches and paged lists ([`health`]), kube's retry of 429/503/504,
//! impersonation headers, and a guard of its own against deeply nested JSON in responses about
//! the operator's resources: [`depth`]) with the methods an operator needs:
//!
//! - in a cluster: the ServiceAccount token file and the cluster's CA file, both read again
//!   every minute because bound tokens rotate, and so may the CA;
//! - with a kubeconfig (development, tests, running beside the cluster): a bearer `token` or
//!   `tokenFile`, or a client certificate and key, and the cluster's CA (or the system's roots
//!   when the kubeconfig names none).
//!
//! Where the settings come from, first match wins (the order of client-go and
//! controller-runtime): the files in `KUBECONFIG`; the cluster the process runs in
//! (`KUBERNETES_SERVICE_HOST`); `~/.kube/config`. A kubeconfig that asks for anything else (an
//! exec plugin, an auth provider, a username and password, `insecure-skip-tls-verify`, a proxy)
//! is refused with an error that names the setting, rather than connecting some other way.

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use hyper::{
    Request,
    header::{AUTHORIZATION, HeaderValue},
};
use hyper_rustls::{FixedServerNameResolver, HttpsConnectorBuilder};
use hyper_timeout::TimeoutConnector;
use hyper_util::{
    client::legacy::{Client as HttpClient, connect::HttpConnector},
    rt::{TokioExecutor, TokioTimer},
};
use kube::{
    Client,
    client::{Body, ClientBuilder, ConfigExt as _, retry::RetryPolicy},
    config::{AuthInfo, KubeConfigOptions, Kubeconfig},
};
use rustls::pki_types::ServerName;
use secrecy::ExposeSecret as _;
use tower::{BoxError, ServiceBuilder, retry::RetryLayer};

use crate::{Error, Result};

/// How often a token file or the in-cluster CA file is read again: projected ServiceAccount
/// tokens are replaced by the kubelet well before they expire (at 80% of their life, at least
/// an hour), the CA when the cluster's CA is rotated; client-go re-reads on the same schedule.
const FILE_REFRESH: Duration = Duration::from_secs(60);

/// How long a connection to the API server is kept open unused before it is closed. hyper-util
/// closes idle connections on time only with a pool timer: without one the pool kept every
/// connection a burst of requests had opened for as long as the process ran, the oldest
/// behind the one in use (scripts/soak: one more socket at rest after a few minutes of churn).
const POOL_IDLE: Duration = Duration::from_secs(30);

/// Where the connection settings come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The kubeconfig files listed in `KUBECONFIG`, merged in order.
    Kubeconfig(Vec<PathBuf>),
    /// The cluster the process runs in: its ServiceAccount and `KUBERNETES_SERVICE_HOST`.
    InCluster,
}

/// Picks the source from the environment, as client-go does: `KUBECONFIG` when it names at
/// least one file, else the cluster when `KUBERNETES_SERVICE_HOST` is set, else
/// `~/.kube/config` when it exists.
pub fn source(
    env: impl Fn(&str) -> Option<OsString>,
    exists: impl Fn(&Path) -> bool,
) -> Result<Source> {
    if let Some(value) = env("KUBECONFIG") {
        let paths: Vec<PathBuf> = std::env::split_paths(&value)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        if !paths.is_empty() {
            return Ok(Source::Kubeconfig(paths));
        }
    }
    if env("KUBERNETES_SERVICE_HOST").is_some_and(|h| !h.is_empty()) {
        return Ok(Source::InCluster);
    }
    if let Some(home) = env("HOME").filter(|h| !h.is_empty()) {
        let path = Path::new(&home).join(".kube").join("config");
        if exists(&path) {
            return Ok(Source::Kubeconfig(vec![path]));
        }
    }
    Err(Error::kube_config(
        "no connection settings: KUBECONFIG is unset, KUBERNETES_SERVICE_HOST is unset (not in \
         a cluster) and there is no ~/.kube/config"
            .to_owned(),
    ))
}

/// A client for the API server named by the environment, sending `user_agent` with every
/// request.
pub async fn client(user_agent: &'static str) -> Result<Client> {
    client_with_health(user_agent, &Health::default(), None).await
}

/// [`client`], recording into `health` whether the API server answers, and failing the
/// watchers' requests silent for `watch_silence` ([`health`]).
pub async fn client_with_health(
    user_agent: &'static str,
    health: &Health,
    watch_silence: Option<Duration>,
) -> Result<Client> {
    let source = source(|name| std::env::var_os(name), Path::exists)?;
    let mut config = load(&source).await?;
    config.headers.push((
        hyper::header::USER_AGENT,
        HeaderValue::from_static(user_agent),
    ));
    build_with(config, FILE_REFRESH, health, watch_silence)
}

/// The kube configuration for a source.
pub async fn load(source: &Source) -> Result<kube::Config> {
    match source {
        Source::InCluster => kube::Config::incluster()
            .map_err(|e| Error::kube_config_from("in-cluster configuration", e)),
        Source::Kubeconfig(paths) => {
            let mut merged = Kubeconfig::default();
            for path in paths {
                merged = merged
                    .merge(read_kubeconfig(path)?)
                    .map_err(|e| Error::kube_config_from(path.display().to_string(), e))?;
            }
            let files = paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(":");
            kube::Config::from_custom_kubeconfig(merged, &KubeConfigOptions::default())
                .await
                .map_err(|e| Error::kube_config_from(format!("kubeconfig {files}"), e))
        }
    }
}

/// Reads one kubeconfig file; file paths in it are relative to its directory, as kubectl has
/// them.
pub fn read_kubeconfig(path: &Path) -> Result<Kubeconfig> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::kube_config_from(path.display().to_string(), e))?;
    parse_kubeconfig(&text, path.parent())
        .map_err(|e| Error::kube_config(format!("{}: {e}", path.display())))
}

/// Parses a kubeconfig; relative file paths in it are taken relative to `dir`.
pub fn parse_kubeconfig(text: &str, dir: Option<&Path>) -> std::result::Result<Kubeconfig, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut config: Kubeconfig = if text.trim().is_empty() {
        Kubeconfig::default()
    } else {
        serde_norway::from_str(text).map_err(|e| format!("not a kubeconfig: {e}"))?
    };
    let Some(dir) = dir else {
        return Ok(config);
    };
    let absolute = |path: &mut Option<String>| {
        if let Some(p) = path.as_deref()
            && Path::new(p).is_relative()
            && let Some(joined) = dir.join(p).to_str()
        {
            *path = Some(joined.to_owned());
        }
    };
    for named in &mut config.clusters {
        if let Some(cluster) = &mut named.cluster {
            absolute(&mut cluster.certificate_authority);
        }
    }
    for named in &mut config.auth_infos {
        if let Some(user) = &mut named.auth_info {
            absolute(&mut user.client_certificate);
            absolute(&mut user.client_key);
            absolute(&mut user.token_file);
        }
    }
    Ok(config)
}

/// The client for a configuration: TLS, timeouts, retries, credentials, extra headers.
pub fn build(config: kube::Config) -> Result<Client> {
    build_with_refresh(config, FILE_REFRESH)
}

/// [`build`], with the interval after which a token file or CA file is read again.
pub fn build_with_refresh(config: kube::Config, refresh: Duration) -> Result<Client> {
    build_with(config, refresh, &Health::default(), None)
}

/// [`build_with_refresh`], recording into `health` whether the API server answers; every call
/// but the watchers' watches and paged lists has [`health::CALL_DEADLINE`], and those fail
/// when silent for `watch_silence`.
pub fn build_with(
    config: kube::Config,
    refresh: Duration,
    health: &Health,
    watch_silence: Option<Duration>,
) -> Result<Client> {
    refuse_unsupported(&config).map_err(Error::kube_config)?;
    let credential =
        Credential::from_auth_info(&config.auth_info, refresh).map_err(Error::kube_config)?;
    let tls = tls_config(&config, refresh).map_err(Error::kube_config)?;

    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let https = HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let https = match &config.tls_server_name {
        Some(name) => {
            let name = ServerName::try_from(name.clone()).map_err(|e| {
                Error::kube_config_from(format!("tls-server-name {name:?} is not a valid name"), e)
            })?;
            https.with_server_name_resolver(FixedServerNameResolver::new(name))
        }
        None => https,
    };
    let mut connector = TimeoutConnector::new(https.enable_http1().wrap_connector(http));
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http_client: HttpClient<_, Body> = HttpClient::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(POOL_IDLE)
        .build(connector);

    let extra_headers = config
        .extra_headers_layer()
        .map_err(|e| Error::kube_config_from("headers", e))?;
    let service = ServiceBuilder::new()
        .layer(HealthLayer::new(health.clone(), health::CALL_DEADLINE).watch_silence(watch_silence))
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .map_request(move |mut request: Request<Body>| {
            if let Some(value) = credential.header() {
                request.headers_mut().insert(AUTHORIZATION, value);
            }
            request
        })
        .layer(extra_headers)
        .layer(depth::GuardLayer)
        .map_err(BoxError::from)
        .service(http_client);
    Ok(ClientBuilder::new(service, config.default_namespace).build())
}

/// Settings this client does not implement, named so that the user can change them.
fn refuse_unsupported(config: &kube::Config) -> std::result::Result<(), String> {
    let user = &config.auth_info;
    let refused = if user.exec.is_some() {
        "the user's `exec` credential plugin"
    } else if user.auth_provider.is_some() {
        "the user's `auth-provider`"
    } else if user.username.is_some() || user.password.is_some() {
        "the user's `username`/`password` (basic authentication, gone from Kubernetes since 1.19)"
    } else if config.accept_invalid_certs {
        "the cluster's `insecure-skip-tls-verify`"
    } else if config.proxy_url.is_some() {
        "the cluster's `proxy-url`"
    } else {
        return Ok(());
    };
    Err(format!(
        "{refused} is not supported: mutantops authenticates with its ServiceAccount in a \
         cluster, and with a `token`, `tokenFile` or client certificate from a kubeconfig, \
         verifying the server against the cluster's `certificate-authority`"
    ))
}

/// The `Authorization` header of every request, if any.
#[derive(Clone)]
enum Credential {
    /// Client certificate only (or an unauthenticated test server).
    None,
    Bearer(HeaderValue),
    TokenFile(Arc<TokenFile>),
}

impl Credential {
    /// client-go's precedence: `token` over `tokenFile`.
    fn from_auth_info(user: &AuthInfo, refresh: Duration) -> std::result::Result<Self, String> {
        if let Some(token) = &user.token {
            return bearer(token.expose_secret())
                .map(Credential::Bearer)
                .map_err(|e| format!("kubeconfig token: {e}"));
        }
        if let Some(path) = &user.token_file {
            return TokenFile::new(PathBuf::from(path), refresh)
                .map(|f| Credential::TokenFile(Arc::new(f)));
        }
        Ok(Credential::None)
    }

    fn header(&self) -> Option<HeaderValue> {
        match self {
            Credential::None => None,
            Credential::Bearer(value) => Some(value.clone()),
            Credential::TokenFile(file) => Some(file.header()),
        }
    }
}

/// `Bearer <token>`, marked sensitive so that it is never logged.
fn bearer(token: &str) -> std::result::Result<HeaderValue, String> {
    let token = token.trim();
    if token.is_empty() {
        return Err("empty token".to_owned());
    }
    let mut value = HeaderValue::try_from(format!("Bearer {token}"))
        .map_err(|_| "the token has characters a header cannot carry".to_owned())?;
    value.set_sensitive(true);
    Ok(value)
}

/// A token read from a file, read again once `refresh` has passed. A failed read keeps the
/// last good token (the kubelet replaces the file atomically, so a failure is transient) and is
/// tried again after the next `refresh`.
pub(crate) struct TokenFile {
    path: PathBuf,
    refresh: Duration,
    current: Mutex<(HeaderValue, Instant)>,
}

impl TokenFile {
    /// Reads the file once; a file that cannot be read or holds no token is an error here.
    pub(crate) fn new(path: PathBuf, refresh: Duration) -> std::result::Result<Self, String> {
        let value = Self::read(&path)?;
        Ok(Self {
            path,
            refresh,
            current: Mutex::new((value, Instant::now())),
        })
    }

    fn read(path: &Path) -> std::result::Result<HeaderValue, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("token file {}: {e}", path.display()))?;
        bearer(&text).map_err(|e| format!("token file {}: {e}", path.display()))
    }

    /// The header for the current token.
    pub(crate) fn header(&self) -> HeaderValue {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current.1.elapsed() >= self.refresh {
            match Self::read(&self.path) {
                Ok(value) => current.0 = value,
                Err(e) => tracing::warn!("{e}; keeping the token read before"),
            }
            current.1 = Instant::now();
        }
        current.0.clone()
    }
}

pub(crate) mod depth;
pub(crate) mod health;
mod tls;

use health::HealthLayer;
pub use health::{DeadlineElapsed, Health, WatchSilent};

use tls::tls_config;

#[cfg(test)]
mod tests;
