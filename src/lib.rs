//! mutantops: a Kubernetes operator that runs one base Deployment as several variants.
//!
//! The binary in `main.rs` only parses its arguments and hands over to [`cli::run`]; everything
//! else lives in the modules below so that unit and integration tests can reach it.
#![forbid(unsafe_code)]

pub mod admin;
pub mod api;
pub mod cache;
pub mod cli;
pub mod config;
pub mod connect;
pub mod controller;
pub mod crd;
pub mod http;
pub mod lease;
pub mod logging;
pub mod metrics;
pub mod operator;
pub mod shutdown;
pub mod variant;

/// Everything that can go wrong in mutantops, with a bounded label for metrics.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A setting from the command line or the environment is malformed.
    #[error("invalid configuration: {0}")]
    Config(String),

    /// No usable connection settings for the Kubernetes API (in cluster or kubeconfig).
    #[error("cannot load Kubernetes client configuration: {0}")]
    KubeConfig(String),

    /// A request to the Kubernetes API server failed.
    #[error("kubernetes api: {0}")]
    Kube(#[source] kube::Error),

    /// Local I/O failed (sockets, signals, stdout).
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),

    /// The OS random source failed.
    #[error("random source: {0}")]
    Random(String),

    /// An object from the API server lacks a field it always has (uid, namespace).
    #[error("object {0} has no {1}")]
    MissingField(String, &'static str),

    /// Serialising an object failed.
    #[error("serialize: {0}")]
    Serialize(String),
}

impl Error {
    /// The bounded label of `mutant_operator_reconcile_errors_total`: `api` when the API
    /// server answered with an error, `invalid` when an object lacks what it must have, and
    /// `client` for everything on this side (connection, TLS, decoding, local I/O).
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(_)) => "api",
            Error::MissingField(..) => "invalid",
            Error::Kube(_)
            | Error::Config(_)
            | Error::KubeConfig(_)
            | Error::Io(_)
            | Error::Serialize(_)
            | Error::Random(_) => "client",
        }
    }
}

impl From<kube::Error> for Error {
    fn from(e: kube::Error) -> Self {
        Error::Kube(e)
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Formats an error with its chain of causes: `a: b: c`.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_chain_joins_causes() {
        let inner = std::io::Error::other("connection refused");
        let outer = Error::Io(inner);
        assert_eq!(error_chain(&outer), "i/o: connection refused");
    }
}
