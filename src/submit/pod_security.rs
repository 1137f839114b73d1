//! Whether the operator makes an owner's Deployments in their namespace (R33), asked by a
//! reconcile before it writes and by the HTTP API before it stores a Mutation: the pure
//! [`Review`] of their pod templates, and, only when it finds what Pod Security "baseline"
//! forbids at some version, one GET of the namespace for its opt-in label and the version it
//! pins, then the review at that version (R33). Namespaces are never watched or
//! cached: an owner whose base breaks baseline costs that GET in each of its reconciles.

use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, Client};
use serde_json::Value;

use crate::variant::{
    ENFORCE_LABEL, ENFORCE_VERSION_LABEL, NamespaceLabel, PodSecurity, Policy, Review,
};

/// Why the Deployments `deployments` (as JSON) may not be made in `namespace`, naming the
/// fields and how to opt in; `None` when they may. `known` is what the operator knows from
/// its start (its own ServiceAccount and Secrets, the API server's version). A namespace the operator may
/// not read (403) counts as not opted in, and the message says so; any other failure to read
/// it is returned, to be retried.
pub async fn refusal<'a>(
    client: &Client,
    known: &PodSecurity,
    namespace: &str,
    deployments: impl IntoIterator<Item = &'a Value>,
) -> Result<Option<String>, kube::Error> {
    let deployments: Vec<&Value> = deployments.into_iter().collect();
    let review = Review::of(
        deployments.iter().copied(),
        namespace,
        known,
        Policy::Strictest,
    );
    if !review.needs_namespace() {
        return Ok(review.refusal(namespace, None));
    }
    let label = namespace_label(client, namespace).await?;
    let policy = label.policy(known.server);
    let review = Review::of(deployments, namespace, known, policy);
    Ok(review.refusal(namespace, Some(&label)))
}

/// The namespace's [`ENFORCE_LABEL`] and [`ENFORCE_VERSION_LABEL`], read with a GET of its
/// metadata.
async fn namespace_label(client: &Client, namespace: &str) -> Result<NamespaceLabel, kube::Error> {
    let api: Api<Namespace> = Api::all(client.clone());
    match api.get_metadata_opt(namespace).await {
        Ok(found) => {
            let mut labels = found.and_then(|ns| ns.metadata.labels).unwrap_or_default();
            Ok(NamespaceLabel::Read {
                level: labels.remove(ENFORCE_LABEL),
                version: labels.remove(ENFORCE_VERSION_LABEL),
            })
        }
        Err(err) if crate::forbidden(&err) => Ok(NamespaceLabel::Unreadable(
            "the API server answered 403: it may not get namespaces".to_owned(),
        )),
        Err(err) => Err(err),
    }
}
