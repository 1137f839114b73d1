//! Step 4's writes, for a variant's Deployment and its Service alike: the requests of the one
//! step machine ([`converge`]) carried out ([`drive`]), the prune of what no declared variant
//! has ([`prune`]), and the owner's status. Every decision is the machine's; an error answer
//! is told by its code and details, never by its text ([`converge::answered`]).

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Api, Client, Resource,
    api::{Patch, PatchParams},
};
use serde_json::Value;

use super::{context::Context, events::EventType, tell};
use crate::{
    Error,
    crd::{OwnerResource, OwnerStatus},
    variant::{
        self, FIELD_MANAGER, MetaView, Owner,
        converge::{self, Done, Next, Outcome, Subject},
    },
};

/// The requests of the step machine for one object (a variant's Deployment or Service): what
/// differs between the kinds. Each answers as the API server did.
pub(super) trait Writes {
    /// The object as read back from the API server.
    type Observed: Send + Sync;
    /// What the machine knows of it, with `current` as the object of that name as known.
    fn subject<'a>(&'a self, current: Option<&'a Self::Observed>) -> impl Subject + 'a;
    /// Its metadata, for the hand-over.
    fn meta(current: &Self::Observed) -> &dyn MetaView;
    /// The hand-over's JSON patch for `current`, when it was created with a POST.
    fn handover_patch(current: &Self::Observed) -> Option<Value>;
    /// POSTs it (strict field validation).
    async fn create(&self, client: &Client) -> Result<Self::Observed, kube::Error>;
    /// GETs the object of its name.
    async fn get(&self, client: &Client) -> Result<Option<Self::Observed>, kube::Error>;
    /// Server-side applies it (forced: the operator owns these fields, R5).
    async fn apply(&self, client: &Client) -> Result<Self::Observed, kube::Error>;
    /// Its hand-over goes to this type's path.
    async fn hand_over(
        &self,
        client: &Client,
        meta: &dyn MetaView,
        patch: Value,
    ) -> Result<(), kube::Error>;
    /// A dry-run create of it: the server's message when it refuses it as malformed.
    async fn dry_run(&self, client: &Client) -> Option<String>;
    /// A dry run of the base alone (R10): the server's message when it refuses that.
    async fn probe_base(&self, client: &Client) -> Option<String>;
}

/// The defect of a [`Driven`] whose `done` is [`Done::Failed`], which [`drive`] returns as
/// its `Err` instead.
pub(super) const FAILED_WITHOUT_ERROR: &str = "the step machine ended in failure without an error";

/// How one object's steps ended ([`drive`]): the machine's last word, the object as it now
/// is, and whether this reconcile created it.
pub(super) struct Driven<O> {
    /// How it ended; never [`Done::Failed`] (that is the `Err` of [`drive`]).
    pub done: Done,
    /// The object of its name as last known.
    pub current: Option<Arc<O>>,
    /// Whether the POST made it.
    pub created: bool,
}

/// Carries out the step machine for one object from what the cache holds of it (`cached`):
/// each request it asks for, and what that came to, fed back. A failure of the server or the
/// network is the error, for the reconcile to be retried.
pub(super) async fn drive<W: Writes>(
    client: &Client,
    writes: &W,
    cached: Option<Arc<W::Observed>>,
) -> Result<Driven<W::Observed>, Error> {
    let mut current = cached;
    let mut next = converge::start(&writes.subject(current.as_deref()));
    let mut created = false;
    let mut failure: Option<Error> = None;
    loop {
        let outcome = match &next {
            Next::Done(Done::Failed) => {
                return Err(failure.unwrap_or(Error::Internal(
                    "an object's writes ended in failure with no error to report",
                )));
            }
            Next::Done(done) => {
                let done = done.clone();
                return Ok(Driven {
                    done,
                    current,
                    created,
                });
            }
            Next::Create => match writes.create(client).await {
                Ok(made) => {
                    (current, created) = (Some(Arc::new(made)), true);
                    Outcome::Created
                }
                Err(err) => failed(&next, err, &mut failure),
            },
            Next::LookUp => match writes.get(client).await {
                Ok(found) => {
                    current = found.map(Arc::new);
                    Outcome::LookedUp
                }
                Err(err) => failed(&next, err, &mut failure),
            },
            Next::HandOver => {
                let handed = match current.as_deref() {
                    Some(object) => match W::handover_patch(object) {
                        Some(patch) => writes.hand_over(client, W::meta(object), patch).await,
                        None => Ok(()),
                    },
                    None => Ok(()),
                };
                match handed {
                    Ok(()) => Outcome::HandedOver,
                    Err(err) => failed(&next, err, &mut failure),
                }
            }
            Next::Apply => match writes.apply(client).await {
                Ok(written) => {
                    current = Some(Arc::new(written));
                    Outcome::Applied
                }
                Err(err) => failed(&next, err, &mut failure),
            },
            Next::DryRun => Outcome::DryRun(writes.dry_run(client).await),
            Next::ProbeBase { .. } => Outcome::BaseProbed(writes.probe_base(client).await),
        };
        next = converge::next(&next, outcome, &writes.subject(current.as_deref()));
    }
}

/// What a failed request of `last` came to; the error is kept, for the reconcile to return
/// when the machine ends in failure.
fn failed(last: &Next, err: kube::Error, failure: &mut Option<Error>) -> Outcome {
    let outcome = match &err {
        kube::Error::Api(status) => converge::answered(last, status),
        _ => Outcome::Failed,
    };
    *failure = Some(err.into());
    outcome
}

/// Server-side applies `object` as `name` through `api` (forced: the operator owns these
/// fields, R5).
pub(super) async fn apply<T>(api: &Api<T>, name: &str, object: &Value) -> Result<T, kube::Error>
where
    T: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(name, &params, &Patch::Apply(object)).await
}

/// Sends the JSON patch (RFC 6902) of [`variant::CreatedEntry::handover_patch`] to the object
/// of type `K` (a Deployment, a Service) that `meta` names.
pub(super) async fn hand_over<K: Resource<DynamicType = ()>>(
    client: &Client,
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
    client.request::<serde::de::IgnoredAny>(request).await?;
    Ok(())
}

/// What is pruned, for its Event.
pub(super) struct Pruned {
    /// The objects' apiVersion and kind.
    pub api_version: &'static str,
    /// Their kind.
    pub kind: &'static str,
    /// The Event's reason.
    pub reason: &'static str,
    /// Why each goes, as the end of the Event's note.
    pub why: &'static str,
}

/// Deletes `stale` objects (R6, R36) of the owner `obj`, each with a uid precondition so one
/// made again under the same name meanwhile is not hit; one Event each.
pub(super) async fn prune<K: OwnerResource, T>(
    ctx: &Context,
    obj: &K,
    api: &Api<T>,
    stale: Vec<variant::Stale>,
    what: &Pruned,
) -> crate::Result<()>
where
    T: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    for stale in stale {
        if delete_stale(api, &stale).await? {
            let name = &stale.name;
            let note = format!("deleted {} {name}: {}", what.kind, what.why);
            let related = ObjectReference {
                api_version: Some(what.api_version.to_string()),
                kind: Some(what.kind.to_string()),
                name: Some(name.clone()),
                namespace: obj.meta().namespace.clone(),
                ..ObjectReference::default()
            };
            tell::publish(
                ctx,
                obj,
                EventType::Normal,
                what.reason,
                note,
                Some(related),
            )
            .await;
        }
    }
    Ok(())
}

/// Deletes `stale` (R6, R36) with a uid precondition, so an object made again under that name
/// meanwhile is not hit. Whether it deleted it: one already gone, or replaced by another
/// object of that name, is nothing to prune.
async fn delete_stale<T>(api: &Api<T>, stale: &variant::Stale) -> crate::Result<bool>
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
        Err(err) if crate::not_found(&err) || crate::conflict(&err) => Ok(false),
        Err(err) => Err(err.into()),
    }
}

/// Server-side applies an owner's status, through the store (R52).
pub(super) async fn status<K: OwnerResource>(
    ctx: &Context,
    owner: &Owner,
    status: &OwnerStatus,
) -> crate::Result<()> {
    ctx.store.apply_status::<K>(owner, status).await
}

#[cfg(test)]
mod tests;
