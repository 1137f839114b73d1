//! Whether the operator makes an owner's Deployments in their namespace (R33), asked by a
//! reconcile before it writes and by the HTTP API before it stores a Mutation: the pure
//! [`Review`] of their pod templates, and, only when it finds what Pod Security "baseline"
//! forbids, one GET of the namespace for its opt-in label. Namespaces are never watched or
//! cached: an owner whose base breaks baseline costs that GET in each of its reconciles.

use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, Client};
use serde_json::Value;

use crate::variant::{ENFORCE_LABEL, NamespaceLabel, Review, ServiceAccountRef};

/// Why the Deployments `deployments` (as JSON) may not be made in `namespace`, naming the
/// fields and how to opt in; `None` when they may. `own` is the operator's ServiceAccount,
/// when known. A namespace the operator may not read (403) counts as not opted in, and the
/// message says so; any other failure to read it is returned, to be retried.
pub async fn refusal<'a>(
    client: &Client,
    own: Option<&ServiceAccountRef>,
    namespace: &str,
    deployments: impl IntoIterator<Item = &'a Value>,
) -> Result<Option<String>, kube::Error> {
    let review = Review::of(deployments, namespace, own);
    let label = if review.needs_namespace() {
        Some(namespace_label(client, namespace).await?)
    } else {
        None
    };
    Ok(review.refusal(namespace, label.as_ref()))
}

/// The namespace's [`ENFORCE_LABEL`], read with a GET of its metadata.
async fn namespace_label(client: &Client, namespace: &str) -> Result<NamespaceLabel, kube::Error> {
    let api: Api<Namespace> = Api::all(client.clone());
    match api.get_metadata_opt(namespace).await {
        Ok(found) => Ok(NamespaceLabel::Read(found.and_then(|ns| {
            ns.metadata
                .labels
                .and_then(|mut labels| labels.remove(ENFORCE_LABEL))
        }))),
        Err(kube::Error::Api(status)) if status.code == 403 => Ok(NamespaceLabel::Unreadable(
            "the API server answered 403: it may not get namespaces".to_owned(),
        )),
        Err(err) => Err(err),
    }
}
