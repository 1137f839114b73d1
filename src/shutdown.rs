//! Shutdown: SIGTERM (what Kubernetes sends) or SIGINT (Ctrl-C) is turned into a [`Shutdown`]
//! handle that every part of the operator (controllers, HTTP listeners) can wait on.

use tokio::{
    signal::unix::{SignalKind, signal as unix_signal},
    sync::watch,
};

use crate::Result;

/// A cloneable handle that resolves once shutdown has begun.
#[derive(Clone, Debug)]
pub struct Shutdown(watch::Receiver<bool>);

/// Starts shutdown for every [`Shutdown`] handle made from it.
#[derive(Debug)]
pub struct Trigger(watch::Sender<bool>);

/// A linked trigger and handle.
pub fn channel() -> (Trigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (Trigger(tx), Shutdown(rx))
}

impl Trigger {
    /// Begins shutdown.
    pub fn fire(&self) {
        self.0.send_replace(true);
    }
}

impl Shutdown {
    /// Resolves when shutdown has begun (or its trigger is gone).
    pub async fn wait(self) {
        let mut rx = self.0;
        let _ = rx.wait_for(|down| *down).await;
    }
}

/// Resolves when the process receives SIGTERM or SIGINT.
pub async fn signal() -> Result<()> {
    let mut term = unix_signal(SignalKind::terminate())?;
    let mut int = unix_signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => tracing::info!("received SIGTERM; shutting down"),
        _ = int.recv() => tracing::info!("received SIGINT; shutting down"),
    }
    Ok(())
}
