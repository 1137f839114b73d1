//! What the controller and the HTTP API both ask of the API server about the Deployments they
//! would make: a create (or a dry run of it, which admission and quotas see as they would see
//! the create) with strict field validation, and whether Pod Security lets the namespace run
//! them ([`pod_security`]), which Secrets are the operator's own ([`own`]). Below both, so that neither reaches into the other.

use kube::{Client, Resource};
use serde::de::{DeserializeOwned, IgnoredAny};
use serde_json::Value;

use crate::variant::{self, DeploymentWire, FIELD_MANAGER, Refusal};

pub mod own;
pub mod pod_security;

/// POSTs `object` to the namespace's Deployments (strict field validation; `dry_run`: the
/// server checks it and writes nothing).
pub async fn post<T: DeserializeOwned>(
    client: &Client,
    namespace: &str,
    object: &Value,
    dry_run: bool,
) -> Result<T, kube::Error> {
    post_to::<DeploymentWire, T>(client, namespace, object, dry_run).await
}

/// [`post`] to the namespace's objects of type `K`: the controller creates the variants'
/// Services (R36) as it creates their Deployments.
pub async fn post_to<K: Resource<DynamicType = ()>, T: DeserializeOwned>(
    client: &Client,
    namespace: &str,
    object: &Value,
    dry_run: bool,
) -> Result<T, kube::Error> {
    let url = format!(
        "{}?fieldManager={FIELD_MANAGER}&fieldValidation=Strict{}",
        K::url_path(&(), Some(namespace)),
        if dry_run { "&dryRun=All" } else { "" },
    );
    let body = serde_json::to_vec(object).map_err(kube::Error::SerdeError)?;
    let request = hyper::Request::post(url)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(body)
        .map_err(|e| kube::Error::BuildRequest(kube::core::request::Error::BuildRequest(e)))?;
    client.request(request).await
}

/// What a dry-run create of a Deployment answered ([`dry_run`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DryRun {
    /// The server would create it.
    Accepted,
    /// The server refuses it ([`variant::classify`]): the object itself (400, 422 naming
    /// fields) or a policy of the cluster (a quota's or an admission policy's 403 or 422), with
    /// the server's code and its message ([`variant::server_message`]).
    Refused {
        /// Whose refusal.
        refusal: Refusal,
        /// The server's status code.
        code: u16,
        /// The server's message, trimmed.
        message: String,
    },
    /// The object is valid, and a Deployment of that name exists (409 AlreadyExists: the
    /// server validates first).
    Taken,
    /// The server could not say (another error, or no answer).
    Unknown,
}

/// Asks the API server, without writing anything, what it would make of creating `object`: a
/// dry-run create with strict field validation. Admission runs on a dry run too, so a quota
/// or an admission policy that would refuse the Deployment refuses it here.
pub async fn dry_run(client: &Client, namespace: &str, object: &Value) -> DryRun {
    dry_run_of::<DeploymentWire>(client, namespace, object).await
}

/// [`dry_run`] of an object of type `K`: the HTTP API dry-runs a variant's Service beside its
/// Deployment (R24, R35).
pub async fn dry_run_of<K: Resource<DynamicType = ()>>(
    client: &Client,
    namespace: &str,
    object: &Value,
) -> DryRun {
    match post_to::<K, IgnoredAny>(client, namespace, object, true).await {
        Ok(_) => DryRun::Accepted,
        // Never a refusal of `classify`: the object is valid, and its name taken.
        Err(err) if crate::conflict(&err) => DryRun::Taken,
        Err(kube::Error::Api(status)) => match variant::classify(&status) {
            Some(refusal) => DryRun::Refused {
                refusal,
                code: status.code,
                message: variant::server_message(&status.message),
            },
            None => DryRun::Unknown,
        },
        Err(_) => DryRun::Unknown,
    }
}

/// Whether the API server refuses `object` itself as malformed, asked without writing
/// anything ([`dry_run`]): the server's message for a 400 or a 422 naming fields; `None` for
/// acceptance (a name already taken included: validation comes first), for a policy's refusal
/// (not the object's fault), and when the server cannot say.
pub async fn refusal(client: &Client, namespace: &str, object: &Value) -> Option<String> {
    refusal_of::<DeploymentWire>(client, namespace, object).await
}

/// [`refusal`] of an object of type `K` (a variant's Service).
pub async fn refusal_of<K: Resource<DynamicType = ()>>(
    client: &Client,
    namespace: &str,
    object: &Value,
) -> Option<String> {
    match dry_run_of::<K>(client, namespace, object).await {
        DryRun::Refused {
            refusal: Refusal::Malformed,
            message,
            ..
        } => Some(message),
        _ => None,
    }
}
