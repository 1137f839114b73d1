//! mutantops: a Kubernetes operator that runs one base Deployment as several variants.
//!
//! The binary in `main.rs` only parses its arguments and hands over to [`cli::run`]; everything
//! else lives in the modules below. Public are only what the binary and the integration tests
//! use (`cli`, `crd`, `variant`, `connect`, `metrics`, and of `api` the route table and the
//! 401 body), so the compiler reports whatever nothing uses.
#![forbid(unsafe_code)]

mod admin;
pub mod api;
mod cache;
pub mod cli;
mod config;
pub mod connect;
mod controller;
pub mod crd;
mod http;
mod lease;
mod logging;
pub mod metrics;
mod operator;
mod shutdown;
mod store;
mod submit;
pub mod variant;

/// Everything that can go wrong in mutantops, with a bounded label for metrics.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A setting from the command line or the environment (or a limit the process runs
    /// under) that cannot be used: which one, and why.
    #[error("invalid configuration: {setting}: {problem}")]
    Config {
        /// The setting, as its user writes it (`MUTANT_API_ADDR`, `RLIMIT_NOFILE`).
        setting: &'static str,
        /// What is wrong with it, and how to put it right where that is not plain.
        problem: String,
    },

    /// No usable connection settings for the Kubernetes API (in cluster or kubeconfig): what
    /// was being read, and why it failed when another error says so.
    #[error("cannot load Kubernetes client configuration: {what}")]
    KubeConfig {
        /// What was being read or refused (a file, a setting).
        what: String,
        /// The failure underneath, if any.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },

    /// A request to the Kubernetes API server failed (the failure is its source).
    #[error("kubernetes api")]
    Kube(#[source] kube::Error),

    /// Local I/O failed (sockets, signals, stdout).
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),

    /// The OS random source failed.
    #[error("random source")]
    Random(#[source] getrandom::Error),

    /// An object from the API server lacks a field it always has (name, namespace, uid).
    #[error("{object} has no metadata.{field}")]
    MissingField {
        /// The object, as `Kind "name"` (or the kind alone when the name is missing).
        object: String,
        /// The field of `metadata` that is missing.
        field: &'static str,
    },

    /// Serialising an object failed.
    #[error("serialize")]
    Serialize(#[source] serde_json::Error),

    /// A write of a Mutation or of its Secrets that the store refused or could not make: the
    /// HTTP status it would answer a caller with, and why.
    #[error("write refused ({code}): {message}")]
    Refused {
        /// The HTTP status of the refusal (409 a conflict, 413 over a bound, 503 unavailable).
        code: u16,
        /// What was refused, and why.
        message: String,
    },

    /// A step of the operator's own logic ended where it cannot: a defect, named by a fixed
    /// text.
    #[error("internal: {0}")]
    Internal(&'static str),
}

impl Error {
    /// The setting `setting` cannot be used, because of `problem`.
    pub fn config(setting: &'static str, problem: impl Into<String>) -> Self {
        Error::Config {
            setting,
            problem: problem.into(),
        }
    }

    /// A configuration that cannot be used, said in `what`, with no error underneath.
    pub fn kube_config(what: impl Into<String>) -> Self {
        Error::KubeConfig {
            what: what.into(),
            source: None,
        }
    }

    /// A configuration that cannot be used, said in `what`, because of `source`.
    pub fn kube_config_from(
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error::KubeConfig {
            what: what.into(),
            source: Some(Box::new(source)),
        }
    }
}

impl Error {
    /// The bounded label of `mutant_operator_reconcile_errors_total`: `api` when the API
    /// server answered with an error, `invalid` when an object lacks what it must have, and
    /// `client` for everything on this side (connection, TLS, decoding, local I/O).
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(_)) | Error::Refused { .. } => "api",
            Error::MissingField { .. } => "invalid",
            Error::Kube(_)
            | Error::Config { .. }
            | Error::KubeConfig { .. }
            | Error::Io(_)
            | Error::Serialize(_)
            | Error::Random(_)
            | Error::Internal(_) => "client",
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
    not_found(err) || api_status_is(err, 403, Some("NamespaceTerminating"))
}

/// Whether the API server answered `err` with `code` and, if given, `reason`: the status's
/// own reason (`AlreadyExists`) or that of one of its causes (`NamespaceTerminating`). The one
/// place an answer of the API server is told by its reason.
pub fn api_status_is(err: &kube::Error, code: u16, reason: Option<&str>) -> bool {
    matches!(err, kube::Error::Api(status) if status_is(status, code, reason))
}

/// [`api_status_is`] for an error answer already taken out of its `kube::Error`.
pub fn status_is(status: &kube::core::Status, code: u16, reason: Option<&str>) -> bool {
    status.code == code
        && reason.is_none_or(|reason| {
            status.reason == reason
                || status
                    .details
                    .as_ref()
                    .is_some_and(|d| d.causes.iter().any(|c| c.reason == reason))
        })
}

/// Whether `err` is the API server's 409 `AlreadyExists`: a create found the name taken.
pub fn already_exists(err: &kube::Error) -> bool {
    api_status_is(err, 409, Some("AlreadyExists"))
}

/// Whether the API server answered `err` with 404: there is no object of that name (any
/// more).
pub fn not_found(err: &kube::Error) -> bool {
    api_status_is(err, 404, None)
}

/// Whether the API server answered `err` with 409: the name is taken, or the object is not
/// the one the write was for any more (its resourceVersion moved on, or a uid precondition
/// failed).
pub fn conflict(err: &kube::Error) -> bool {
    api_status_is(err, 409, None)
}

/// Whether the API server answered `err` with 403, whatever the cause: RBAC, a quota, an
/// admission policy, a namespace being deleted.
pub fn forbidden(err: &kube::Error) -> bool {
    api_status_is(err, 403, None)
}

impl Error {
    /// See [`expected_api_error`].
    pub fn is_expected(&self) -> bool {
        matches!(self, Error::Kube(err) if expected_api_error(err))
    }
}

/// The hash map of what requests look up (callers, addresses, Mutations by uid): aHash with
/// keys drawn at start, as quick as a few multiplications per key where std's SipHash costs a
/// few hundred instructions, and as unpredictable to a client that picks the keys. aHash is in
/// the build already (kube-runtime's stores use it).
pub(crate) type HashMap<K, V> = std::collections::HashMap<K, V, ahash::RandomState>;

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Formats an error with its chain of causes: `a: b: c`. This crate's errors leave their
/// source out of their own message; some of kube's and hyper's put it in as well, so a cause
/// whose text is already written is not written again.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.contains(&text) {
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
        assert!(!Error::config("X", "y").is_expected());
        assert!(!Error::kube_config("x").is_expected());
    }

    // An owner without a uid says so once, naming it (variant's tests read
    // it off an object); errors keep their sources, and the chain names each once.
    #[test]
    fn errors_name_what_is_missing_and_keep_their_sources() {
        let missing = Error::MissingField {
            object: r#"Mutation "x""#.to_string(),
            field: "uid",
        };
        assert_eq!(missing.to_string(), r#"Mutation "x" has no metadata.uid"#);
        assert_eq!(missing.metric_label(), "invalid");

        let config = Error::config("POD_NAMESPACE", "not a namespace name: x");
        assert_eq!(
            config.to_string(),
            "invalid configuration: POD_NAMESPACE: not a namespace name: x"
        );
        assert_eq!(config.metric_label(), "client");

        let io = std::io::Error::other("no such file");
        let err = Error::kube_config_from("kubeconfig /k", io);
        assert!(std::error::Error::source(&err).is_some());
        assert_eq!(
            error_chain(&err),
            "cannot load Kubernetes client configuration: kubeconfig /k: no such file"
        );
        let kube_err = kube::Error::Api(Box::new(
            kube::core::Status::failure("quota exceeded", "Forbidden").with_code(403),
        ));
        let said = kube_err.to_string();
        // kube's message holds its source's already: written once.
        assert_eq!(
            error_chain(&Error::Kube(kube_err)),
            format!("kubernetes api: {said}")
        );
    }

    #[test]
    fn statuses_are_told_by_code_and_reason() {
        let status = |code: u16, reason: &str| {
            kube::Error::Api(Box::new(
                kube::core::Status::failure("m", reason).with_code(code),
            ))
        };
        assert!(already_exists(&status(409, "AlreadyExists")));
        assert!(!already_exists(&status(409, "Conflict")));
        assert!(!already_exists(&status(400, "AlreadyExists")));
        assert!(api_status_is(&status(404, "NotFound"), 404, None));
        // told by the code alone, whatever the reason
        assert!(not_found(&status(404, "Whatever")) && !not_found(&status(410, "Gone")));
        assert!(conflict(&status(409, "AlreadyExists")) && conflict(&status(409, "Conflict")));
        assert!(!conflict(&status(422, "Invalid")));
        assert!(forbidden(&status(403, "Forbidden")) && !forbidden(&status(401, "Forbidden")));
        let unreachable = kube::Error::Service(Box::new(std::io::Error::other("refused")));
        assert!(!not_found(&unreachable) && !conflict(&unreachable) && !forbidden(&unreachable));
    }

    #[test]
    fn error_chain_joins_causes() {
        let inner = std::io::Error::other("connection refused");
        let outer = Error::Io(inner);
        assert_eq!(error_chain(&outer), "i/o: connection refused");
    }
}
