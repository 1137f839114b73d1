//! Running the operator: connect to the API server, run the controllers until SIGTERM or
//! SIGINT, then stop them cleanly.

use crate::store::Store;
use kube::Client;

use std::sync::Arc;

use crate::{
    Result,
    admin::{self, AdminState},
    api::{self, ApiState, auth::Auth},
    cache,
    config::Config,
    connect, controller,
    http::{self, ServerConfig},
    lease::{self, Elector},
    metrics::Metrics,
    shutdown, submit,
    variant::{PodSecurity, ServiceAccountRef, Version},
};

/// The user agent of every request the operator makes: visible in the API server's audit log
/// and metrics, so the operator's own traffic can be told apart.
pub const USER_AGENT: &str = concat!("mutantops/", env!("CARGO_PKG_VERSION"));

/// How long shutdown waits for the controllers' in-flight reconciles.
const CONTROLLERS_STOP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The API server's version, waiting for the server to be reachable: during a control-plane
/// outage the operator waits (1 s, doubling to 16 s between tries) instead of exiting into the
/// kubelet's crash-loop back-off. An answered error (401, 403) fails at once: waiting does not
/// fix credentials.
async fn server_version(client: &Client) -> Result<k8s_openapi::apimachinery::pkg::version::Info> {
    let mut delay = std::time::Duration::from_secs(1);
    loop {
        match client.apiserver_version().await {
            Ok(version) => return Ok(version),
            Err(err @ kube::Error::Api(_)) => return Err(err.into()),
            Err(err) => {
                tracing::warn!(
                    error = %crate::error_chain(&err),
                    retry_in = ?delay,
                    "the Kubernetes API server cannot be reached yet; retrying"
                );
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(std::time::Duration::from_secs(16));
            }
        }
    }
}

/// The operator's own ServiceAccount (`POD_NAMESPACE`, `POD_SERVICE_ACCOUNT`), which no
/// Deployment it makes may run as (R33); `None`, said in the log, when either is unset (as
/// outside a cluster).
fn own_account(config: &Config) -> Option<ServiceAccountRef> {
    match (&config.pod_namespace, &config.pod_service_account) {
        (Some(namespace), Some(name)) => {
            tracing::info!(
                namespace,
                name,
                "Deployments that would run as the operator's own ServiceAccount are refused"
            );
            Some(ServiceAccountRef {
                namespace: namespace.clone(),
                name: name.clone(),
            })
        }
        _ => {
            tracing::info!(
                "POD_NAMESPACE or POD_SERVICE_ACCOUNT unset: bases are not checked against the \
                 operator's own ServiceAccount"
            );
            None
        }
    }
}

/// The API server's version as a version of the Pod Security Standards: the policy of a
/// namespace that pins none (R33). `None`, said in the log, for a version it
/// cannot read: then such a namespace is checked against the strictest of every version.
fn policy_version(info: &k8s_openapi::apimachinery::pkg::version::Info) -> Option<Version> {
    let version = Version::of_server(&info.major, &info.minor);
    match version {
        Some(version) => tracing::info!(
            %version,
            "Pod Security baseline is checked as of this version where a namespace pins none"
        ),
        None => tracing::warn!(
            major = %info.major,
            minor = %info.minor,
            "the API server's version is not 1.<minor>: where a namespace pins no Pod \
             Security version, baseline is checked as the strictest of every version"
        ),
    }
    version
}

/// Connects to the Kubernetes API (service account in a cluster, kubeconfig outside) and runs
/// until SIGTERM or SIGINT.
pub async fn run(config: Config) -> Result<()> {
    // A certificate that cannot be served ends the start here, before anything else.
    let api_tls = config
        .api_tls
        .as_ref()
        .map(http::tls::server_config)
        .transpose()?;
    // R34: both listeners' caps within the descriptors the process may open.
    let wanted = http::descriptors::Caps {
        api: config.api_max_connections,
        metrics: admin::METRICS_MAX_CONNECTIONS,
    };
    let caps = http::descriptors::fit_process(wanted)
        .map_err(|too_few| crate::Error::config("RLIMIT_NOFILE", too_few.to_string()))?;
    let health = connect::Health::default();
    let watch_stale_after = Some(config.watch_stale_after);
    let client = connect::client_with_health(USER_AGENT, &health, watch_stale_after).await?;
    let version = server_version(&client).await?;
    tracing::info!(
        server = %version.git_version,
        api_addr = %config.api_addr,
        api_tls = api_tls.is_some(),
        metrics_addr = %config.metrics_addr,
        namespace = config.watch_namespace.as_deref().unwrap_or("(all)"),
        "connected to the Kubernetes API server"
    );

    let api_listener = http::bind(config.api_addr).await?;
    let metrics_listener = http::bind(config.metrics_addr).await?;
    let auth = if config.api_insecure {
        tracing::warn!(
            "MUTANT_API_INSECURE=true: the HTTP API is served WITHOUT AUTHENTICATION; anyone who \
             can reach it can create, change and delete Mutations. Use this for local development only."
        );
        Auth::Off
    } else {
        if config.api_token.is_none() {
            tracing::info!(
                "no MUTANT_API_TOKEN: listing, creating and deleting Mutations through the API is disabled"
            );
        }
        Auth::Tokens(config.api_token.clone())
    };

    let (trigger, stop) = shutdown::channel();
    let metrics = Arc::new(Metrics::new());
    metrics.set_max_devices(config.metrics_max_devices);
    // Every replica watches and serves; only the leader's reconciles act (R30). The election
    // stops (and releases the Lease) only after the controllers have stopped.
    let (elector, leader) = Elector::new(
        client.clone(),
        lease::Settings::from_config(&config),
        metrics.clone(),
    );
    let (release, elector_stop) = shutdown::channel();
    let election = tokio::spawn(elector.run(elector_stop));
    let freshness = cache::Freshness {
        health,
        stale_after: Some(config.stale_after),
        watch_stale_after,
    };
    let (caches, feeds) = cache::start(&client, config.watch_namespace.as_deref(), freshness);
    let own_secrets = match &config.pod_namespace {
        Some(namespace) => Some(
            submit::own::secrets(&client, namespace, config.pod_service_account.as_deref()).await,
        ),
        None => None,
    };
    let pod_security = PodSecurity {
        own_account: own_account(&config),
        own_secrets,
        server: policy_version(&version),
    };
    let store = Store::new(client.clone()).reading(&caches);
    let controllers = controller::start(
        store.clone(),
        &caches,
        feeds,
        metrics.clone(),
        stop.clone(),
        leader,
        controller::Identity {
            instance: config.pod_name.clone(),
            pod_security: pod_security.clone(),
            screen_cache_bytes: config.screen_cache_mib * 1024 * 1024,
        },
    );
    metrics.set_caches(caches.clone());
    let controllers = tokio::spawn(controllers);
    // R33: the namespaces named by the configuration, else those labelled for
    // the API (never Kubernetes' own nor the operator's).
    let served = api::namespaces::served(
        config
            .api_namespaces
            .clone()
            .or_else(|| config.watch_namespace.clone().map(|ns| vec![ns])),
        config.pod_namespace.as_deref(),
        &client,
        stop.clone(),
        crate::cache::watch_timeout(watch_stale_after),
    );
    let api_listed = served.listed();
    let buffer_bytes = config.api_buffer_mib.saturating_mul(1024 * 1024);
    let server = ServerConfig {
        max_connections: caps.api,
        buffer_bytes,
        buffer_share: buffer_bytes / 4,
        ..ServerConfig::default()
    };
    // R34: behind a trusted proxy a request is its forwarded client's, for shares, budgets
    // and logs.
    if config.api_trusted_proxies.is_empty() {
        tracing::info!(
            "MUTANT_API_TRUSTED_PROXIES unset: every API request is its connection's peer's"
        );
    } else {
        tracing::info!(
            trusted_proxies = %config.api_trusted_proxies,
            "API requests from these proxies are their forwarded clients'"
        );
    }
    let connections = http::connections(&server, config.api_trusted_proxies.clone());
    let state = Arc::new(ApiState {
        metrics: metrics.clone(),
        deadline: config.api_request_deadline,
        store,
        connections,
        ..ApiState::new(client, caches.clone(), auth, server, served, pod_security)
    });
    let admin_state = Arc::new(AdminState {
        metrics,
        caches,
        api_listed: Some(api_listed),
    });
    let admin_task = tokio::spawn(admin::serve(
        admin_state,
        metrics_listener,
        caps.metrics,
        stop.clone(),
    ));
    let api = tokio::spawn(api::serve(state, api_listener, api_tls, stop));

    shutdown::signal().await?;
    trigger.fire();
    match api.await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => {
            tracing::error!(error = %crate::error_chain(&err), "the HTTP API failed")
        }
        Err(err) => tracing::error!(error = %err, "the HTTP API stopped abnormally"),
    }
    match admin_task.await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => {
            tracing::error!(error = %crate::error_chain(&err), "the metrics listener failed")
        }
        Err(err) => tracing::error!(error = %err, "the metrics listener stopped abnormally"),
    }
    // A controller whose cache never filled (a watch that cannot list: missing CRD or RBAC,
    // an object the client cannot decode) never finishes its graceful shutdown: it waits for
    // that cache. Bounded, so SIGTERM still ends the process and releases the Lease.
    let stopping = controllers.abort_handle();
    match tokio::time::timeout(CONTROLLERS_STOP_TIMEOUT, controllers).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => tracing::error!(error = %err, "the controllers stopped abnormally"),
        Err(_elapsed) => {
            stopping.abort();
            tracing::warn!(
                timeout = ?CONTROLLERS_STOP_TIMEOUT,
                "the controllers did not stop in time; stopping anyway"
            );
        }
    }
    release.fire();
    if let Err(err) = election.await {
        tracing::error!(error = %err, "leader election stopped abnormally");
    }
    tracing::info!("stopped");
    Ok(())
}
