//! What the operator learns of itself when it starts (R33): the Secrets of
//! its namespace that are its own, which no Deployment it makes may reference. Besides the
//! admin token's and the TLS key's names as `deploy/` has them ([`OwnSecrets::new`]):
//!
//! - every Secret referenced by the pod template of a Deployment of its namespace that runs
//!   as its ServiceAccount (its own Deployment: nothing else may run as it), so a renamed
//!   token Secret or a TLS Secret of the chart's values counts too;
//! - every Secret of its namespace labelled `app.kubernetes.io/name` as its Deployment is;
//! - every token Secret of its ServiceAccount (type `kubernetes.io/service-account-token`,
//!   annotated with the account's name), which would let a pod act as the operator.
//!
//! Two or three lists, once, with the rights the operator has anyway (list Deployments and
//! Secrets, metadata only for the Secrets). What changes later (a Secret labelled after the
//! start) counts from the next start; a change of the operator's own Deployment restarts it.
//! A list that fails is said in the log and the rest is used.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client, ResourceExt as _, api::ListParams};
use serde::Deserialize;
use serde_json::Value;

use crate::variant::{OwnSecrets, ServiceAccountRef, own_account_finding, secret_references};

/// The label whose value the operator's Secrets share with its Deployment.
const NAME_LABEL: &str = "app.kubernetes.io/name";

/// The annotation of a ServiceAccount token Secret that names its account.
const ACCOUNT_ANNOTATION: &str = "kubernetes.io/service-account.name";

/// The Secrets of namespace `namespace` that are the operator's, `account` being its
/// ServiceAccount there when known.
pub async fn secrets(client: &Client, namespace: &str, account: Option<&str>) -> OwnSecrets {
    let mut names = BTreeSet::new();
    let mut labels = BTreeSet::new();
    if let Some(account) = account {
        let own = ServiceAccountRef {
            namespace: namespace.to_owned(),
            name: account.to_owned(),
        };
        match templates(client, namespace).await {
            Ok(templates) => {
                for template in templates {
                    if own_account_finding(&template, "", namespace, &own).is_none() {
                        continue;
                    }
                    names.extend(secret_references(&template, "").into_iter().map(|r| r.1));
                    if let Some(name) = template
                        .pointer("/metadata/labels")
                        .and_then(|l| l.get(NAME_LABEL))
                        .and_then(serde_json::Value::as_str)
                    {
                        labels.insert(name.to_owned());
                    }
                }
            }
            Err(err) => warn("Deployments", namespace, &err),
        }
        let tokens = ListParams::default().fields("type=kubernetes.io/service-account-token");
        for secret in list_secrets(client, namespace, &tokens).await {
            if secret.annotations().get(ACCOUNT_ANNOTATION) == Some(&own.name) {
                names.insert(secret.name_any());
            }
        }
    }
    for label in labels {
        let selector = ListParams::default().labels(&format!("{NAME_LABEL}={label}"));
        for secret in list_secrets(client, namespace, &selector).await {
            names.insert(secret.name_any());
        }
    }
    let own = OwnSecrets::new(namespace, names);
    tracing::info!(
        namespace,
        secrets = ?own.names,
        "Deployments that would reference the operator's own Secrets are refused"
    );
    own
}

/// A list of Deployments, of which only the pod templates are read: kept as JSON, which is
/// what the checks of [`own_account_finding`] read (not decoded into the typed Deployment and
/// written back).
#[derive(Deserialize)]
struct Listed {
    items: Vec<ListedDeployment>,
}

#[derive(Deserialize)]
struct ListedDeployment {
    spec: Option<ListedSpec>,
}

#[derive(Deserialize)]
struct ListedSpec {
    template: Option<Value>,
}

/// The pod templates of the Deployments of `namespace`.
async fn templates(client: &Client, namespace: &str) -> Result<Vec<Value>, kube::Error> {
    // `namespace` is a namespace's name, a DNS label: nothing in it needs escaping.
    let list = hyper::Request::get(format!("/apis/apps/v1/namespaces/{namespace}/deployments"))
        .body(Vec::new())
        .map_err(kube::Error::HttpError)?;
    let listed: Listed = client.request(list).await?;
    Ok(listed
        .items
        .into_iter()
        .filter_map(|d| d.spec.and_then(|s| s.template))
        .collect())
}

/// The metadata of the Secrets of `namespace` that `params` selects; none, said in the log,
/// when they cannot be listed.
async fn list_secrets(
    client: &Client,
    namespace: &str,
    params: &ListParams,
) -> Vec<kube::api::PartialObjectMeta<Secret>> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    match api.list_metadata(params).await {
        Ok(list) => list.items,
        Err(err) => {
            warn("Secrets", namespace, &err);
            Vec::new()
        }
    }
}

fn warn(what: &str, namespace: &str, err: &kube::Error) {
    tracing::warn!(
        namespace,
        error = %crate::error_chain(err),
        "could not list the {what} of the operator's namespace: the operator's own Secrets are \
         known only by their default names and what else could be read"
    );
}
