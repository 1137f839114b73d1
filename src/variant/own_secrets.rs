//! The operator's own Secrets (R33): in the operator's namespace, the
//! Secrets that hold its credentials, such as the admin token (`mutantops-api`) and the API's
//! TLS key (`mutantops-api-tls`). A pod that references one can read it, so no Deployment the
//! operator makes may ([`own_secret_findings`]), in any way a pod can: a `secret` volume, a
//! projected volume's `secret` source, a volume plugin's `secretRef` or `secretName`,
//! `envFrom[].secretRef`, `env[].valueFrom.secretKeyRef`, `imagePullSecrets`. A Secret's name
//! is local to its namespace, so only a template in the operator's namespace can.
//!
//! Which Secrets those are is input ([`OwnSecrets`]): the two names above, and what the
//! operator learns of itself when it starts (`submit::own`).

use serde_json::Value;

use super::baseline::{Finding, key, shown_str};

/// The Secret of the admin token, as `deploy/` and the chart name it.
pub const API_TOKEN_SECRET: &str = "mutantops-api";

/// The Secret of the API's certificate and key, as `deploy/devices/` and the chart name it.
pub const API_TLS_SECRET: &str = "mutantops-api-tls";

/// The Secrets no Deployment the operator makes may reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnSecrets {
    /// The operator's namespace (`POD_NAMESPACE`).
    pub namespace: String,
    /// Their names, sorted, without repeats.
    pub names: Vec<String>,
}

impl OwnSecrets {
    /// [`API_TOKEN_SECRET`], [`API_TLS_SECRET`] and `more`, in `namespace`.
    pub fn new(namespace: &str, more: impl IntoIterator<Item = String>) -> Self {
        let mut names: Vec<String> = [API_TOKEN_SECRET, API_TLS_SECRET]
            .into_iter()
            .map(str::to_owned)
            .chain(more)
            .filter(|name| !name.is_empty())
            .collect();
        names.sort();
        names.dedup();
        OwnSecrets {
            namespace: namespace.to_owned(),
            names,
        }
    }
}

/// Every Secret the pod template `template` (a PodTemplateSpec as JSON, at path `at`)
/// references: the field that names it and the name. Found by the field's name, so that a
/// volume plugin's reference counts as well as the common ones: an object under `secret`, or
/// a key ending in `secretRef` or `secretKeyRef` (any case), names it in `name`; a key ending
/// in `secretName` holds the name itself; `imagePullSecrets` lists them.
pub fn secret_references(template: &Value, at: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(spec) = template.get("spec") {
        walk(spec, &format!("{at}.spec"), &mut out);
    }
    out
}

fn walk(value: &Value, path: &str, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let here = format!("{path}.{k}");
                let lower = k.to_ascii_lowercase();
                if lower.ends_with("secretname") {
                    found(out, here, Some(v));
                } else if k == "imagePullSecrets" {
                    for (i, item) in v.as_array().into_iter().flatten().enumerate() {
                        found(out, format!("{here}[{i}].name"), item.get("name"));
                    }
                } else {
                    if lower == "secret"
                        || lower.ends_with("secretref")
                        || lower.ends_with("secretkeyref")
                    {
                        found(out, format!("{here}.name"), v.get("name"));
                    }
                    // A `secret` volume names it in `secretName`, one level down.
                    walk(v, &here, out);
                }
            }
        }
        Value::Array(list) => {
            for (i, item) in list.iter().enumerate() {
                walk(item, &format!("{path}[{}]", key(item, i)), out);
            }
        }
        _ => {}
    }
}

/// Adds `name` (at `field`) to `out` when it is a name.
fn found(out: &mut Vec<(String, String)>, field: String, name: Option<&Value>) {
    if let Some(name) = name.and_then(Value::as_str).filter(|n| !n.is_empty()) {
        out.push((field, name.to_owned()));
    }
}

/// Where the pod template `template` (at path `at`), to run in `namespace`, references one of
/// the operator's own Secrets `own`, in the order of the template; nothing outside the
/// operator's namespace.
pub fn own_secret_findings(
    template: &Value,
    at: &str,
    namespace: &str,
    own: &OwnSecrets,
) -> Vec<Finding> {
    if namespace != own.namespace {
        return Vec::new();
    }
    secret_references(template, at)
        .into_iter()
        .filter(|(_, name)| own.names.binary_search(name).is_ok())
        .map(|(field, name)| Finding {
            field,
            problem: format!(
                "Secret {} holds the operator's own credentials, which nothing the operator \
                 makes may reference",
                shown_str(&name)
            ),
        })
        .collect()
}
