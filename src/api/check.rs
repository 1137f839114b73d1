//! The checks of a create or an added variant with the API server before anything is stored
//! (R24, R33, R35): what Pod Security lets the namespace run, and a dry run of each variant's
//! Deployment.

use futures::StreamExt;
use kube::Api;

use super::{error::ApiError, state::ApiState};
use crate::{
    crd::{OwnerKind, ServiceSpec, Variant, limits::MAX_OBJECT_BYTES},
    submit::{DryRun, dry_run, dry_run_of, pod_security},
    variant::{
        Base, DeploymentWire, MetaView, ObservedService, Owner, build_service,
        converge::bare_variant, deployment_name, foreign,
    },
};

/// The label of the variant whose Deployment stands for the base alone in a dry run.
const BASE_PROBE: &str = "base";

/// How many variants are checked with the API server at once.
const CHECKS_AT_ONCE: usize = 8;

/// Asks the API server, without writing anything, whether it would accept the Deployment of
/// each of `variants` (a dry-run create with strict field validation, answered by code), and
/// answers with the server's message for the first it refuses (R24, R35): 403 when the server
/// said 403 (a ResourceQuota, an admission policy), else 400 (a malformed object, a
/// ValidatingAdmissionPolicy's 422). A base or variant the server refuses is refused up front
/// rather than reported in status later. A variant whose Deployment name is taken by someone
/// else's Deployment answers 409 (R9), when that is known: from the caches (a
/// Deployment generated for another owner), or from the dry run (the name is taken: then its
/// metadata is read). When the server cannot say, the write goes ahead and the controller
/// reports what happens.
///
/// First, what the operator does not make (R33): a base whose pod template breaks Pod
/// Security "baseline", unless the namespace is labelled privileged (read from the API server
/// only then), or runs as the operator's own ServiceAccount, is 400 naming the fields.
///
/// And what the API server would store only to refuse later (R32, R35): a Deployment
/// larger than [`MAX_OBJECT_BYTES`] is 400, counted in bytes with every container's copy of
/// the env; with `service` (the owner's), each variant's Service is built and dry-run beside
/// its Deployment, answered as the Deployment's dry run is.
///
/// Without variants, the base alone is dry-run (the Deployment of a variant with nothing of
/// its own): a base the server would refuse is refused now, not when its first variant comes.
pub async fn check_with_server(
    state: &ApiState,
    owner: &Owner,
    base: &Base,
    variants: &[Variant],
    service: Option<&ServiceSpec>,
) -> Result<(), ApiError> {
    let built: Vec<_> = variants
        .iter()
        .map(|v| crate::variant::build(base, owner, v))
        .collect();
    let deployments = std::iter::once(base.value()).chain(&built);
    let known = &state.pod_security;
    if let Some(problem) =
        pod_security::refusal(&state.client, known, &owner.namespace, deployments).await?
    {
        return Err(ApiError::bad_request(problem));
    }
    if variants.is_empty() {
        let bare = crate::variant::build(base, owner, &bare_variant(BASE_PROBE));
        if let DryRun::Refused { code, message, .. } =
            dry_run(&state.client, &owner.namespace, &bare).await
        {
            return Err(answer(
                code,
                format!("deployment: rejected by the Kubernetes API: {message}"),
            ));
        }
    }
    // Each variant's checks are requests of their own: a few at a time, so that a create of
    // a hundred variants is answered within the request deadline (R34); the answer is the
    // first refusal in the order of the variants, as when they ran one by one.
    // Collected first: a lazy map's closure would not be general enough for a Send future.
    let checks: Vec<_> = variants
        .iter()
        .zip(&built)
        .map(|(variant, object)| check_variant(state, owner, base, variant, object, service))
        .collect();
    let mut checks = futures::stream::iter(checks).buffered(CHECKS_AT_ONCE);
    while let Some(checked) = checks.next().await {
        checked?;
    }
    Ok(())
}

/// The checks of one variant's Deployment (`object`) and, with `service`, its Service: a name
/// taken by someone else's Deployment (from the caches, else the dry run), the size bound,
/// the API server's dry runs (R9, R24, R32, R35).
async fn check_variant(
    state: &ApiState,
    owner: &Owner,
    base: &Base,
    variant: &Variant,
    object: &serde_json::Value,
    service: Option<&ServiceSpec>,
) -> Result<(), ApiError> {
    let name = deployment_name(base.name(), &variant.label);
    let taken = |meta: &dyn MetaView| {
        foreign(meta, owner).filter(|f| !f.passing).map(|f| {
            ApiError::conflict(format!(
                "variant {:?}: Deployment {name:?} already exists and {}; it is not \
                     this Mutation's and is left alone: choose another label",
                variant.label, f.by
            ))
        })
    };
    for kind in [OwnerKind::Mutation, OwnerKind::MutantDeployment] {
        if let Some(cached) = state.caches.deployments(kind).get(&owner.namespace, &name)
            && let Some(conflict) = taken(&cached.metadata)
        {
            return Err(conflict);
        }
    }
    let bytes = serde_json::to_vec(object).map_or(0, |b| b.len());
    if bytes > MAX_OBJECT_BYTES {
        return Err(ApiError::bad_request(format!(
            "variant {:?}: its Deployment would be {bytes} bytes of JSON, more than the \
             {MAX_OBJECT_BYTES} the operator writes (the API server's storage refuses about \
             1.5 MiB); its env is copied into each of the base's containers, so send less",
            variant.label
        )));
    }
    match dry_run(&state.client, &owner.namespace, object).await {
        DryRun::Refused { code, message, .. } => {
            return Err(refused(&variant.label, "", code, &message));
        }
        DryRun::Taken => {
            let api: Api<DeploymentWire> = Api::namespaced(state.client.clone(), &owner.namespace);
            if let Ok(Some(existing)) = api.get_metadata_opt(&name).await
                && let Some(conflict) = taken(&existing.metadata)
            {
                return Err(conflict);
            }
        }
        DryRun::Accepted | DryRun::Unknown => {}
    }
    if let Some(spec) = service
        && variant.service != Some(false)
    {
        let object = build_service(base, owner, &variant.label, spec)
            .map_err(|e| ApiError::bad_request(format!("variant {:?}: {e}", variant.label)))?;
        let dry = dry_run_of::<ObservedService>(&state.client, &owner.namespace, &object);
        if let DryRun::Refused { code, message, .. } = dry.await {
            return Err(refused(&variant.label, "its Service ", code, &message));
        }
    }
    Ok(())
}

/// The answer to the API server's refusal of a dry run of variant `label`'s object (`what`:
/// "" for its Deployment, "its Service "): the server's 403 (a quota, an admission policy) is
/// the caller's 403 (R35); its 400 or 422 (a malformed object, or an admission policy's
/// denial) is 400.
fn refused(label: &str, what: &str, code: u16, message: &str) -> ApiError {
    answer(
        code,
        format!("variant {label:?}: {what}rejected by the Kubernetes API: {message}"),
    )
}

/// The caller's answer to a dry run the API server refused with `code`: 403 stays 403 (R35),
/// anything else is 400.
fn answer(code: u16, message: String) -> ApiError {
    if code == 403 {
        ApiError::forbidden(message)
    } else {
        ApiError::bad_request(message)
    }
}
