//! The shutdown signal: SIGTERM (what Kubernetes sends) or SIGINT (Ctrl-C).

use tokio::signal::unix::{SignalKind, signal as unix_signal};

use crate::Result;

/// Resolves when the process receives SIGTERM or SIGINT.
pub async fn signal() -> Result<()> {
    let mut term = unix_signal(SignalKind::terminate())?;
    let mut int = unix_signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => tracing::info!("received SIGTERM"),
        _ = int.recv() => tracing::info!("received SIGINT"),
    }
    Ok(())
}
