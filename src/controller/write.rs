//! Step 4's writes of a variant's Deployment: create with a POST, server-side apply over an
//! existing one, and telling a refusal (of the object itself, or by a policy of the cluster:
//! not worth retrying) from a failure of the server or the network, by the answer's code and
//! details, never by its text ([`variant::classify`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{
    Api, Client, Resource,
    api::{Patch, PatchParams},
};
use serde::de::{DeserializeOwned, IgnoredAny};
use serde_json::Value;

use super::Context;
use crate::{
    Error,
    variant::{self, FIELD_MANAGER, ObservedDeployment, Refusal},
};

/// Why a write of a variant's Deployment failed.
pub(super) enum WriteError {
    /// The API server answered with an error status for the write itself.
    Refused(Box<kube::core::Status>),
    /// Anything else: the connection, or the step before the write.
    Failed(Error),
}

impl From<kube::Error> for WriteError {
    fn from(err: kube::Error) -> Self {
        match err {
            kube::Error::Api(status) => WriteError::Refused(status),
            err => WriteError::Failed(err.into()),
        }
    }
}

/// Creates a variant's Deployment with a POST under the operator's field manager, with strict
/// field validation (an undeclared field is refused with 400, not dropped). Its fields are
/// then recorded under an `Update` entry, which [`apply`] hands over to server-side apply
/// before it first applies over the Deployment.
pub(super) async fn create(
    ctx: &Context,
    namespace: &str,
    object: &Value,
) -> Result<ObservedDeployment, WriteError> {
    Ok(post::<ObservedDeployment, _>(&ctx.client, namespace, object, false).await?)
}

/// POSTs `object` to the namespace's objects of type `K` (Deployments, Services) under the
/// operator's field manager, with strict field validation; `dry_run`: the server checks it and
/// writes nothing.
pub(super) async fn post<K: Resource<DynamicType = ()>, T: DeserializeOwned>(
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
    match post::<ObservedDeployment, IgnoredAny>(client, namespace, object, true).await {
        Ok(_) => DryRun::Accepted,
        Err(kube::Error::Api(status)) => match variant::classify(&status) {
            Some(refusal) => DryRun::Refused {
                refusal,
                code: status.code,
                message: variant::server_message(&status.message),
            },
            None if status.code == 409 => DryRun::Taken,
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
    match dry_run(client, namespace, object).await {
        DryRun::Refused {
            refusal: Refusal::Malformed,
            message,
            ..
        } => Some(message),
        _ => None,
    }
}

/// What a refused write of `object` means: `Ok` with whose refusal and the server's message
/// (trimmed) when retrying cannot help ([`variant::classify`]: the object is malformed, or a
/// quota or an admission policy refuses it); `Err` when it may be the server's or the
/// network's failure, to retry. A 5xx that a dry-run create of the same object answers with
/// 400 or 422 is the object's too (server-side apply answers 500 for a field the schema does
/// not declare, whatever the field validation asked for).
pub(super) async fn rejection(
    ctx: &Context,
    namespace: &str,
    object: &Value,
    status: Box<kube::core::Status>,
) -> Result<(Refusal, String), Error> {
    if let Some(refusal) = variant::classify(&status) {
        return Ok((refusal, variant::server_message(&status.message)));
    }
    if status.code >= 500
        && let Some(message) = refusal(&ctx.client, namespace, object).await
    {
        return Ok((Refusal::Malformed, message));
    }
    Err(kube::Error::Api(status).into())
}

/// Server-side applies a variant's Deployment over `current` (forced: the operator owns these
/// fields, R5). A Deployment the operator created with a POST first has its `Update` entry
/// made the `Apply` one ([`variant::CreatedEntry`]), so that a field no longer declared is
/// removed by this apply; the entry is guarded, and a Deployment changed meanwhile fails the
/// reconcile, to be retried over the newer one. A policy that refuses that hand-over (an
/// admission policy on updates) refuses the variant, as it would refuse the apply (R35).
pub(super) async fn apply(
    ctx: &Context,
    api: &Api<ObservedDeployment>,
    name: &str,
    object: &Value,
    current: Option<&ObservedDeployment>,
) -> Result<ObservedDeployment, WriteError> {
    if let Some(current) = current
        && let Some(entry) = current.created_entry
    {
        let resource_version = current
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or_default();
        hand_over::<ObservedDeployment>(
            ctx,
            &current.metadata,
            entry.handover_patch(resource_version),
        )
        .await
        .map_err(|e| match e {
            kube::Error::Api(status) if variant::classify(&status) == Some(Refusal::Denied) => {
                WriteError::Refused(status)
            }
            e => WriteError::Failed(e.into()),
        })?;
    }
    let params = PatchParams::apply(FIELD_MANAGER).force();
    Ok(api.patch(name, &params, &Patch::Apply(object)).await?)
}

/// Sends the JSON patch (RFC 6902) of [`variant::CreatedEntry::handover_patch`] to the object
/// of type `K` (a Deployment, a Service) that `meta` names.
pub(super) async fn hand_over<K: Resource<DynamicType = ()>>(
    ctx: &Context,
    meta: &ObjectMeta,
    patch: Value,
) -> Result<(), kube::Error> {
    let url = format!(
        "{}/{}?fieldManager={FIELD_MANAGER}",
        K::url_path(&(), meta.namespace.as_deref()),
        meta.name.as_deref().unwrap_or_default(),
    );
    let body = serde_json::to_vec(&patch).map_err(kube::Error::SerdeError)?;
    let request = hyper::Request::patch(url)
        .header(hyper::header::CONTENT_TYPE, "application/json-patch+json")
        .body(body)
        .map_err(|e| kube::Error::BuildRequest(kube::core::request::Error::BuildRequest(e)))?;
    ctx.client.request::<IgnoredAny>(request).await?;
    Ok(())
}
