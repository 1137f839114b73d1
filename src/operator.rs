//! Running the operator: connect to the API server, then run until asked to stop.

use kube::Client;

use crate::{Error, Result, config::Config};

/// Connects to the Kubernetes API (service account in a cluster, kubeconfig outside) and runs
/// until SIGTERM or SIGINT.
pub async fn run(config: Config) -> Result<()> {
    let client = Client::try_default().await.map_err(|e| match e {
        kube::Error::InferConfig(e) => Error::KubeConfig(e),
        other => Error::Kube(other),
    })?;
    let version = client.apiserver_version().await?;
    tracing::info!(
        server = %version.git_version,
        api_addr = %config.api_addr,
        metrics_addr = %config.metrics_addr,
        "connected to the Kubernetes API server"
    );
    crate::shutdown::signal().await?;
    tracing::info!("stopping");
    Ok(())
}
