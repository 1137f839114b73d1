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

/// Whether the API server's answer is one a controller meets in normal operation rather than a
/// fault: the object is gone (404, deleted while it was being reconciled) or its namespace is
/// being deleted (403 with cause `NamespaceTerminating`). Recognised by code and cause, never
/// by message text. Such failures are logged at info, not warn.
pub fn expected_api_error(err: &kube::Error) -> bool {
    let kube::Error::Api(status) = err else {
        return false;
    };
    status.code == 404
        || (status.code == 403
            && status
                .details
                .as_ref()
                .is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating")))
}

impl Error {
    /// See [`expected_api_error`].
    pub fn is_expected(&self) -> bool {
        matches!(self, Error::Kube(err) if expected_api_error(err))
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
    fn gone_objects_and_terminating_namespaces_are_expected() {
        let status = |code: u16, cause: Option<&str>| {
            let mut s = serde_json::json!({
                "status": "Failure", "message": "message text is never read",
                "reason": "Whatever", "code": code,
            });
            if let Some(reason) = cause {
                s["details"] = serde_json::json!({"causes": [{"reason": reason}]});
            }
            let s: kube::core::Status = serde_json::from_value(s).unwrap_or_default();
            Error::Kube(kube::Error::Api(Box::new(s)))
        };
        assert!(status(404, None).is_expected());
        assert!(status(403, Some("NamespaceTerminating")).is_expected());
        assert!(!status(403, None).is_expected(), "RBAC refusals are faults");
        assert!(!status(409, None).is_expected());
        assert!(!status(500, Some("NamespaceTerminating")).is_expected());
        assert!(!Error::Config("x".into()).is_expected());
    }

    #[test]
    fn error_chain_joins_causes() {
        let inner = std::io::Error::other("connection refused");
        let outer = Error::Io(inner);
        assert_eq!(error_chain(&outer), "i/o: connection refused");
    }
}
