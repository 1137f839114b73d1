//! Step 4's writes of a variant's Deployment: create with a POST, server-side apply over an
//! existing one, and telling a refusal (of the object itself, or by a policy of the cluster:
//! not worth retrying) from a failure of the server or the network, by the answer's code and
//! details, never by its text ([`variant::classify`]).

use kube::{
    Api, Resource,
    api::{Patch, PatchParams},
};
use serde_json::Value;

use super::context::Context;
use crate::{
    Error,
    crd::{OwnerResource, OwnerStatus},
    submit,
    variant::{self, DeploymentWire, FIELD_MANAGER, MetaView, ObservedDeployment, Owner, Refusal},
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
    Ok(submit::post(&ctx.client, namespace, object, false).await?)
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
        && let Some(message) = submit::refusal(&ctx.client, namespace, object).await
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
    api: &Api<DeploymentWire>,
    name: &str,
    object: &Value,
    current: Option<&ObservedDeployment>,
) -> Result<ObservedDeployment, WriteError> {
    if let Some(current) = current
        && let Some(entry) = current.created_entry
    {
        let resource_version = current.metadata.resource_version().unwrap_or_default();
        hand_over::<DeploymentWire>(
            ctx,
            &current.metadata,
            entry.handover_patch(resource_version),
        )
        .await
        .map_err(|e| match e {
            kube::Error::Api(status)
                if !moved_on(&status) && variant::classify(&status) == Some(Refusal::Denied) =>
            {
                WriteError::Refused(status)
            }
            e => WriteError::Failed(e.into()),
        })?;
    }
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let applied = api.patch(name, &params, &Patch::Apply(object)).await?;
    Ok(DeploymentWire::into_observed(applied))
}

/// Whether a handover's refusal says only that the object changed since it was read: its
/// `test` of the resourceVersion or of the entry failed (422, naming no field). A retry reads
/// it again; it is never the variant's fault (CI saw one marked Invalid this way, under load,
/// when the Deployment controller wrote its status between the cache and the handover).
pub(super) fn moved_on(status: &kube::core::Status) -> bool {
    status.code == 422
}

/// Sends the JSON patch (RFC 6902) of [`variant::CreatedEntry::handover_patch`] to the object
/// of type `K` (a Deployment, a Service) that `meta` names.
pub(super) async fn hand_over<K: Resource<DynamicType = ()>>(
    ctx: &Context,
    meta: &dyn MetaView,
    patch: Value,
) -> Result<(), kube::Error> {
    let url = format!(
        "{}/{}?fieldManager={FIELD_MANAGER}",
        K::url_path(&(), meta.namespace()),
        meta.name().unwrap_or_default(),
    );
    let body = serde_json::to_vec(&patch).map_err(kube::Error::SerdeError)?;
    let request = hyper::Request::patch(url)
        .header(hyper::header::CONTENT_TYPE, "application/json-patch+json")
        .body(body)
        .map_err(|e| kube::Error::BuildRequest(kube::core::request::Error::BuildRequest(e)))?;
    ctx.client.request::<serde::de::IgnoredAny>(request).await?;
    Ok(())
}

/// Deletes `stale` (R6, R36) with a uid precondition, so an object made again under that name
/// meanwhile is not hit. Whether it deleted it: one already gone, or replaced by another
/// object of that name, is nothing to prune.
pub(super) async fn delete_stale<T>(api: &Api<T>, stale: &variant::Stale) -> crate::Result<bool>
where
    T: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = kube::api::DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: stale.uid.clone(),
            resource_version: None,
        }),
        ..kube::api::DeleteParams::background()
    };
    match api.delete(&stale.name, &params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(false),
        Err(err) => Err(err.into()),
    }
}

/// Server-side applies an owner's status under the operator's field manager, so fields it no
/// longer reports are removed.
pub(super) async fn status<K: OwnerResource>(
    ctx: &Context,
    owner: &Owner,
    status: &OwnerStatus,
) -> crate::Result<()> {
    // Never the device list: its writer is `submit::devices`, under a field manager of its own.
    let status = OwnerStatus {
        devices: Vec::new(),
        device_summary: None,
        ..status.clone()
    };
    let patch = serde_json::json!({
        "apiVersion": owner.kind.api_version(),
        "kind": owner.kind.kind(),
        "status": status,
    });
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch_status(&owner.name, &params, &Patch::Apply(&patch))
        .await?;
    Ok(())
}
