//! Running the operator: connect to the API server, run the controllers until SIGTERM or
//! SIGINT, then stop them cleanly.

use kube::Client;

use crate::{Error, Result, config::Config, controller, shutdown};

/// The user agent of every request the operator makes: visible in the API server's audit log
/// and metrics, so the operator's own traffic can be told apart.
pub const USER_AGENT: &str = concat!("mutantops/", env!("CARGO_PKG_VERSION"));

/// A client from the in-cluster service account or the local kubeconfig.
pub async fn client() -> Result<Client> {
    let mut config = kube::Config::infer().await.map_err(Error::KubeConfig)?;
    config.headers.push((
        hyper::header::USER_AGENT,
        hyper::header::HeaderValue::from_static(USER_AGENT),
    ));
    Ok(Client::try_from(config)?)
}

/// Connects to the Kubernetes API (service account in a cluster, kubeconfig outside) and runs
/// until SIGTERM or SIGINT.
pub async fn run(config: Config) -> Result<()> {
    let client = client().await?;
    let version = client.apiserver_version().await?;
    tracing::info!(
        server = %version.git_version,
        api_addr = %config.api_addr,
        metrics_addr = %config.metrics_addr,
        namespace = config.watch_namespace.as_deref().unwrap_or("(all)"),
        "connected to the Kubernetes API server"
    );

    let (trigger, stop) = shutdown::channel();
    let controllers = tokio::spawn(controller::run(
        client,
        config.watch_namespace.clone(),
        stop,
        |_caches| {},
    ));
    shutdown::signal().await?;
    trigger.fire();
    if let Err(err) = controllers.await {
        tracing::error!(error = %err, "the controllers stopped abnormally");
    }
    tracing::info!("stopped");
    Ok(())
}
