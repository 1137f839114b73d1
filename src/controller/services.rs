//! Step 4b of a reconcile: a Service per variant (R36), when the owner asks for them.
//!
//! After the Deployments, each variant whose Deployment is applied gets its Service
//! ([`variant::build_service`]), written by the Deployments' step machine
//! ([`variant::converge`], carried out by [`write::drive`]): created with a POST when the
//! cache does not know it (looked up only when the name is taken), server-side applied over
//! one of this owner's when it differs, never written over someone else's (the variant is then
//! `Conflict`). A Service that cannot be made, or that the API server refuses, makes the
//! variant `Invalid` with the reason; its Deployment still runs. Services of variants no
//! longer declared, or all of them once `service` is removed from the spec, are pruned like
//! Deployments: only those carrying the owner's labels and controlled by its uid.

use std::{collections::BTreeSet, sync::Arc};

use kube::Api;
use serde_json::Value;

use super::{context::Context, write};
use crate::{
    Result,
    crd::{OwnerResource, VariantService, VariantState, VariantStatus},
    submit,
    variant::{
        self, Base, MetaView, ObservedService, Owner,
        converge::{Done, ServiceSubject, Subject},
    },
};

/// What became of one variant's Service.
enum Outcome {
    /// It is as declared: how to reach it.
    Served(VariantService),
    /// It is not: the variant's new state (`Invalid`, `Conflict`) and why.
    NotServed(VariantState, String),
    /// The API server refused it for a policy of the cluster (a quota, an admission policy),
    /// which may change without an event: the variant is `Invalid`, tried again soon (R35).
    Denied(String),
}

/// Writes the Service of every variant in `statuses` whose Deployment is applied, sets its
/// `service` (or its new state and message), and prunes the owner's Services that no declared
/// variant has. Returns whether a policy of the cluster refused a Service.
pub(super) async fn converge<K: OwnerResource>(
    ctx: &Context,
    owner: &Owner,
    obj: &K,
    base: &Base,
    statuses: &mut [VariantStatus],
) -> Result<bool> {
    let api: Api<ObservedService> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let cached = ctx
        .caches
        .services(owner.kind)
        .of_owner(&owner.namespace, &owner.name);
    let mut declared = BTreeSet::new();
    let mut denied = false;
    if let Some(spec) = obj.service() {
        // R32, R36: a variant may say it gets no Service (its Service, if any, is
        // pruned as undeclared).
        let unserved: BTreeSet<&str> = obj
            .variants()
            .iter()
            .filter(|v| v.service == Some(false))
            .map(|v| v.label.as_str())
            .collect();
        for status in statuses.iter_mut() {
            if unserved.contains(status.label.as_str()) {
                continue;
            }
            declared.insert(status.deployment.clone());
            if !variant::serves(status.state) {
                continue;
            }
            let outcome = match variant::build_service(base, owner, &status.label, spec) {
                Ok(desired) => {
                    serve(ctx, &api, owner, &status.deployment, &desired, &cached).await?
                }
                Err(message) => Outcome::NotServed(VariantState::Invalid, message),
            };
            match outcome {
                Outcome::Served(service) => status.service = Some(Box::new(service)),
                Outcome::NotServed(state, message) => {
                    status.state = state;
                    status.message = Some(message);
                }
                Outcome::Denied(message) => {
                    denied = true;
                    status.state = VariantState::Invalid;
                    status.message = Some(message);
                }
            }
        }
    }
    let stale = variant::stale(cached.iter().map(Arc::as_ref), owner, &declared);
    write::prune(ctx, obj, &api, stale, &PRUNED).await?;
    Ok(denied)
}

/// The requests of the step machine for one variant's Service ([`write::drive`]).
pub(super) struct ServiceWrites<'a> {
    pub(super) api: &'a Api<ObservedService>,
    pub(super) owner: &'a Owner,
    pub(super) name: &'a str,
    pub(super) desired: &'a Value,
}

impl write::Writes for ServiceWrites<'_> {
    type Observed = ObservedService;

    fn subject<'a>(&'a self, current: Option<&'a ObservedService>) -> impl Subject + 'a {
        ServiceSubject {
            name: self.name,
            desired: self.desired,
            current,
            owner: self.owner,
        }
    }

    fn meta(current: &ObservedService) -> &dyn MetaView {
        &current.metadata
    }

    fn handover_patch(current: &ObservedService) -> Option<Value> {
        let version = current.metadata.resource_version.as_deref().unwrap_or("");
        Some(current.created_entry()?.handover_patch(version))
    }

    async fn create(&self, client: &kube::Client) -> Result<ObservedService, kube::Error> {
        submit::post_to::<ObservedService, _>(client, &self.owner.namespace, self.desired, false)
            .await
    }

    async fn get(&self, _: &kube::Client) -> Result<Option<ObservedService>, kube::Error> {
        self.api.get_opt(self.name).await
    }

    async fn apply(&self, _: &kube::Client) -> Result<ObservedService, kube::Error> {
        write::apply(self.api, self.name, self.desired).await
    }

    async fn hand_over(
        &self,
        client: &kube::Client,
        meta: &dyn MetaView,
        patch: Value,
    ) -> Result<(), kube::Error> {
        write::hand_over::<ObservedService>(client, meta, patch).await
    }

    async fn dry_run(&self, client: &kube::Client) -> Option<String> {
        submit::refusal_of::<ObservedService>(client, &self.owner.namespace, self.desired).await
    }

    async fn probe_base(&self, _: &kube::Client) -> Option<String> {
        // Never asked: a Service does not carry the base (`blames_base`).
        None
    }
}

/// Makes Service `name` as `desired` through the step machine ([`write::drive`]), from what
/// the cache knows of it (`cached`: this owner's by label).
async fn serve(
    ctx: &Context,
    api: &Api<ObservedService>,
    owner: &Owner,
    name: &str,
    desired: &Value,
    cached: &[Arc<ObservedService>],
) -> Result<Outcome> {
    let current = cached
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some(name))
        .cloned();
    let writes = ServiceWrites {
        api,
        owner,
        name,
        desired,
    };
    let driven = write::drive(&ctx.client, &writes, current).await?;
    let refused = |message: &str| format!("Service rejected by the API server: {message}");
    Ok(match driven.done {
        Done::Reported => match driven.current {
            Some(service) => Outcome::Served(variant::service_status(&service)),
            None => Outcome::NotServed(
                VariantState::Invalid,
                format!("Service {name:?} is neither cached nor made"),
            ),
        },
        Done::Conflict(message) => Outcome::NotServed(VariantState::Conflict, message),
        Done::Refused {
            message,
            denied: true,
        } => Outcome::Denied(refused(&message)),
        Done::Refused { message, .. } | Done::BaseRejected(message) => {
            Outcome::NotServed(VariantState::Invalid, refused(&message))
        }
        Done::Failed => {
            return Err(crate::Error::Internal(write::FAILED_WITHOUT_ERROR));
        }
    })
}

/// Step 4b's prune of Services ([`write::prune`], R36 as R6): one `ServicePruned` Event each.
const PRUNED: write::Pruned = write::Pruned {
    api_version: "v1",
    kind: "Service",
    reason: "ServicePruned",
    why: "no declared variant has it",
};
