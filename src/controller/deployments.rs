//! Step 4 of a reconcile (R4–R10, R35): each planned variant's Deployment through the step
//! machine ([`write::drive`]): created when the cache does not know it (looked up only when
//! the server says the name is taken), applied when it differs, its refusal by the API server
//! the variant's `Invalid` ([`variant::classify`]) unless the base alone is at fault (R10);
//! then the Deployments of variants no longer declared pruned ([`variant::stale`]).

use std::{collections::BTreeSet, sync::Arc};

use kube::Api;

use super::{context::Context, tell::Created, write};
use crate::{
    Result,
    crd::{OwnerResource, VariantStatus},
    submit,
    variant::{
        self, Base, DeploymentWire, MetaView, ObservedDeployment, Owner, Planned,
        converge::{self, DeploymentSubject, Done, Subject},
    },
};

/// How step 4 ended.
pub(super) enum Converged {
    /// Every valid variant is applied and the stale ones pruned: the variants' statuses, the
    /// Deployments created, and whether a policy of the cluster (a quota, an
    /// admission policy) refused a variant, which is then Invalid (R35).
    Applied(Vec<VariantStatus>, Vec<Created>, bool),
    /// The API server refused the first write for a reason of the object itself: the base is
    /// at fault, and nothing was applied or pruned (R10).
    BaseRejected(String),
}

/// Step 4: writes every planned variant whose Deployment is missing or differs from what is
/// declared ([`write_variant`]), then prunes the Deployments of variants no longer declared.
pub(super) async fn converge<K: OwnerResource>(
    ctx: &Context,
    owner: &Owner,
    obj: &K,
    base: &Base,
    planned: Vec<Planned>,
    observed: &[Arc<ObservedDeployment>],
) -> Result<Converged> {
    let api: Api<DeploymentWire> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let mut statuses = Vec::with_capacity(planned.len());
    let mut created = Vec::new();
    let mut declared = BTreeSet::new();
    let mut denied = false;

    for planned in planned {
        declared.insert(planned.name().to_string());
        // What observe found of this name; anything else of that name is looked up (R9).
        let cached = observed
            .iter()
            .find(|d| d.metadata.name() == Some(planned.name()))
            .cloned();
        match write_variant(ctx, &api, owner, base, planned, cached).await? {
            Written::Reported {
                status,
                created: new,
            } => {
                created.extend(new);
                statuses.push(status);
            }
            Written::Refused {
                status,
                denied: by_policy,
            } => {
                denied |= by_policy;
                statuses.push(status);
            }
            Written::BaseRejected(reason) => return Ok(Converged::BaseRejected(reason)),
        }
    }

    let stale = variant::stale(observed.iter().map(Arc::as_ref), owner, &declared);
    write::prune(ctx, obj, &api, stale, &PRUNED).await?;
    Ok(Converged::Applied(statuses, created, denied))
}

/// How one variant's writes ended ([`write_variant`]).
enum Written {
    /// Its status, and the Deployment it created, if any.
    Reported {
        status: VariantStatus,
        created: Option<Created>,
    },
    /// Refused by the API server: `Invalid`; `denied` by a policy of the cluster (R35).
    Refused { status: VariantStatus, denied: bool },
    /// The base is at fault (R10).
    BaseRejected(String),
}

/// The requests of step 4's step machine for one variant's Deployment ([`write::drive`]).
pub(super) struct DeploymentWrites<'a> {
    pub(super) api: &'a Api<DeploymentWire>,
    pub(super) owner: &'a Owner,
    pub(super) base: &'a Base,
    pub(super) planned: &'a Planned,
}

impl DeploymentWrites<'_> {
    /// The Deployment to write: only a variant that can be applied is ever written.
    fn object(&self) -> Result<&serde_json::Value, kube::Error> {
        match self.planned {
            Planned::Apply { object, .. } => Ok(object),
            _ => Err(kube::Error::Service(
                format!("variant {:?} cannot be applied", self.planned.label()).into(),
            )),
        }
    }
}

impl write::Writes for DeploymentWrites<'_> {
    type Observed = ObservedDeployment;

    fn subject<'a>(&'a self, current: Option<&'a ObservedDeployment>) -> impl Subject + 'a {
        DeploymentSubject {
            planned: self.planned,
            current,
            owner: self.owner,
        }
    }

    fn meta(current: &ObservedDeployment) -> &dyn MetaView {
        &current.metadata
    }

    fn handover_patch(current: &ObservedDeployment) -> Option<serde_json::Value> {
        let version = current.metadata.resource_version().unwrap_or_default();
        Some(current.created_entry?.handover_patch(version))
    }

    async fn create(&self, client: &kube::Client) -> Result<ObservedDeployment, kube::Error> {
        submit::post(client, &self.owner.namespace, self.object()?, false).await
    }

    async fn get(&self, _: &kube::Client) -> Result<Option<ObservedDeployment>, kube::Error> {
        let found = self.api.get_opt(self.planned.name()).await?;
        Ok(found.map(DeploymentWire::into_observed))
    }

    async fn apply(&self, _: &kube::Client) -> Result<ObservedDeployment, kube::Error> {
        let applied = write::apply(self.api, self.planned.name(), self.object()?).await?;
        Ok(DeploymentWire::into_observed(applied))
    }

    async fn hand_over(
        &self,
        client: &kube::Client,
        meta: &dyn MetaView,
        patch: serde_json::Value,
    ) -> Result<(), kube::Error> {
        write::hand_over::<DeploymentWire>(client, meta, patch).await
    }

    async fn dry_run(&self, client: &kube::Client) -> Option<String> {
        submit::refusal(client, &self.owner.namespace, self.object().ok()?).await
    }

    async fn probe_base(&self, client: &kube::Client) -> Option<String> {
        let bare = variant::build(
            self.base,
            self.owner,
            &converge::bare_variant(self.planned.label()),
        );
        submit::refusal(client, &self.owner.namespace, &bare).await
    }
}

/// Step 4 for one variant: its Deployment through the step machine ([`write::drive`]), and
/// what that came to for its status.
async fn write_variant(
    ctx: &Context,
    api: &Api<DeploymentWire>,
    owner: &Owner,
    base: &Base,
    planned: Planned,
    cached: Option<Arc<ObservedDeployment>>,
) -> Result<Written> {
    let writes = DeploymentWrites {
        api,
        owner,
        base,
        planned: &planned,
    };
    let driven = write::drive(&ctx.client, &writes, cached).await?;
    Ok(match driven.done {
        Done::Reported => {
            let own = driven
                .current
                .as_deref()
                .filter(|d| variant::may_prune(&d.metadata, owner));
            Written::Reported {
                status: planned.status(own),
                created: driven.created.then(|| Created {
                    label: planned.label().to_string(),
                    deployment: planned.name().to_string(),
                }),
            }
        }
        Done::Conflict(message) => Written::Reported {
            status: planned.into_conflict(message).status(None),
            created: None,
        },
        Done::Refused { message, denied } => Written::Refused {
            status: planned
                .into_invalid(format!("rejected by the API server: {message}"))
                .status(None),
            denied,
        },
        Done::BaseRejected(reason) => Written::BaseRejected(reason),
        Done::Failed => {
            return Err(crate::Error::Internal(write::FAILED_WITHOUT_ERROR));
        }
    })
}

/// Step 4's prune of Deployments ([`write::prune`], R6): one `VariantPruned` Event each.
const PRUNED: write::Pruned = write::Pruned {
    api_version: "apps/v1",
    kind: "Deployment",
    reason: "VariantPruned",
    why: "its variant is no longer declared",
};
