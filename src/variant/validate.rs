//! Validation of variants (R8) and of the base Deployment (R10). The messages name the field
//! and say what is wrong, so the HTTP API can return them as they are.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Deserialize;
use serde_json::Value;

use super::names::{
    LABEL_RULE, SUBDOMAIN_RULE, deployment_name, is_dns1123_label, is_dns1123_subdomain,
    validate_env_name, validate_label,
};
use super::owner::MAX_DEPLOYMENT_NAME;
use crate::crd::{
    StrMap, Variant,
    limits::{MAX_ENV, MAX_ENV_NAME, MAX_ENV_VALUE, MAX_INSTANCES, MAX_VARIANTS},
};

/// The deepest nesting of arrays and objects a base may have (R10). A real Deployment is about
/// a dozen levels deep; the limit keeps every base far below serde_json's 128 levels wherever
/// it sits in a response (the client cuts what nests deeper than `connect::depth::MAX_DEPTH`,
/// so that one object cannot break a list of them).
pub const MAX_BASE_DEPTH: usize = 64;

/// Whether arrays and objects nest in `value` more than `levels` deep (`[]` is one level).
fn nests_deeper_than(value: &Value, levels: usize) -> bool {
    match value {
        Value::Array(items) => {
            levels == 0 || items.iter().any(|c| nests_deeper_than(c, levels - 1))
        }
        Value::Object(fields) => {
            levels == 0 || fields.values().any(|c| nests_deeper_than(c, levels - 1))
        }
        _ => false,
    }
}

/// Checks a list of variants as the controller will (R8), that no label is given twice and
/// that there are at most [`MAX_VARIANTS`]: what the HTTP API accepts. The first problem found
/// is reported, with its variant.
pub fn validate_variants(base_name: &str, variants: &[Variant]) -> Result<(), String> {
    check_variant_count(variants.len())?;
    let mut seen = std::collections::BTreeSet::new();
    for v in variants {
        validate_variant(base_name, v).map_err(|e| format!("variant {:?}: {e}", v.label))?;
        if !seen.insert(v.label.as_str()) {
            return Err(format!("variant {:?}: label given twice", v.label));
        }
    }
    Ok(())
}

/// Fails when an owner would have more than [`MAX_VARIANTS`] variants (the CRD's `maxItems`).
pub fn check_variant_count(count: usize) -> Result<(), String> {
    if count > MAX_VARIANTS {
        Err(format!(
            "variants: {count}, at most {MAX_VARIANTS} allowed per owner"
        ))
    } else {
        Ok(())
    }
}

/// Checks one variant against the rules of R8 and the hard maxima of the CRD (R32): label,
/// Deployment name length, every env name, the number of env entries and the length of their
/// names and values, instances, and its placement and containers (R37; not whether the base
/// has the containers it names: `placement::known_containers`). All
/// problems are reported, joined with `"; "`.
pub fn validate_variant(base_name: &str, v: &Variant) -> Result<(), String> {
    let mut problems = Vec::new();
    match validate_label(&v.label) {
        Ok(()) => {
            let name = deployment_name(base_name, &v.label);
            if name.len() > MAX_DEPLOYMENT_NAME {
                problems.push(format!(
                    "deployment name {name:?}: {} characters, at most {MAX_DEPLOYMENT_NAME} \
                     allowed (base name, '-', label); use a shorter label",
                    name.len()
                ));
            }
        }
        Err(e) => problems.push(e),
    }
    let envs = std::iter::once((String::from("env"), &v.env)).chain(
        v.containers
            .iter()
            .map(|c| (format!("containers {:?}: env", c.name), &c.env)),
    );
    for (at, env) in envs {
        env_problems(&at, env, &mut problems);
    }
    if v.instances < 0 {
        problems.push(format!("instances {}: must not be negative", v.instances));
    } else if v.instances > MAX_INSTANCES {
        problems.push(format!(
            "instances {}: at most {MAX_INSTANCES} allowed",
            v.instances
        ));
    }
    super::placement::placement_problems(v, &mut problems);
    join(problems)
}

/// The problems of one env map (`at` names it): names, the number of entries, the length of
/// names and values (R8, R32).
fn env_problems(at: &str, env: &StrMap, problems: &mut Vec<String>) {
    // A variant's own env names say which name they are; a container's say whose.
    let whose = |e: String| if at == "env" { e } else { format!("{at}: {e}") };
    problems.extend(
        env.keys()
            .filter_map(|k| validate_env_name(k).err().map(whose)),
    );
    if env.len() > MAX_ENV {
        problems.push(format!(
            "{at}: {} entries, at most {MAX_ENV} allowed",
            env.len()
        ));
    }
    for (name, value) in env {
        let (name_length, value_length) = (name.chars().count(), value.chars().count());
        if name_length > MAX_ENV_NAME {
            problems.push(format!(
                "{at} name {:?}...: {name_length} characters, at most {MAX_ENV_NAME} allowed",
                name.chars().take(16).collect::<String>()
            ));
        }
        if value_length > MAX_ENV_VALUE {
            problems.push(format!(
                "{at} {name:?}: value of {value_length} characters, at most {MAX_ENV_VALUE} \
                 allowed"
            ));
        }
    }
}

/// Ok when there is no problem, else all of them joined with `"; "`.
fn join(problems: Vec<String>) -> Result<(), String> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// What of a base the operator reads typed: its selector and its pod template's labels, which
/// must agree. Every other field is the API server's to judge, as it judges them (R10): the
/// API's create and its variant changes dry-run the Deployments they would make, and an apply
/// the server refuses as malformed has the base alone dry-run, which marks a refused base
/// Invalid before anything is applied or pruned. Decoding every field of a typed Deployment
/// here instead took a quarter of a MiB of the binary, to say less than the server says.
#[derive(Deserialize)]
struct Shape {
    spec: Option<ShapeSpec>,
}

#[derive(Deserialize)]
struct ShapeSpec {
    selector: LabelSelector,
    template: ShapeTemplate,
}

#[derive(Deserialize)]
struct ShapeTemplate {
    metadata: Option<ShapeMeta>,
}

#[derive(Deserialize)]
struct ShapeMeta {
    labels: Option<BTreeMap<String, String>>,
}

/// A validated base Deployment (R10). It keeps the raw JSON as written, which
/// [`build`](super::build()) copies, so fields unknown to k8s-openapi survive.
#[derive(Clone, Debug, PartialEq)]
pub struct Base {
    value: Value,
    name: String,
}

impl Base {
    /// Validates a base (R10): nested at most [`MAX_BASE_DEPTH`] levels, an object with `apiVersion: apps/v1`, `kind: Deployment`,
    /// `metadata.name` a DNS-1123 subdomain, `spec.selector`, and `spec.template.spec.containers`
    /// non-empty with unique DNS-1123 names; its selector and pod template labels must decode
    /// (a wrongly typed one is reported with serde's message) and match ([`Shape`]: the rest
    /// is the API server's to refuse). Structural problems are all reported, joined with
    /// `"; "`.
    pub fn parse(value: &Value) -> Result<Base, String> {
        if nests_deeper_than(value, MAX_BASE_DEPTH) {
            return Err(format!(
                "deployment: nests arrays and objects deeper than {MAX_BASE_DEPTH} levels"
            ));
        }
        let Some(obj) = value.as_object() else {
            return Err("deployment: must be an object: an apps/v1 Deployment with \
                apiVersion, kind, metadata.name and spec"
                .to_owned());
        };
        let mut problems = Vec::new();
        for (field, want) in [("apiVersion", "apps/v1"), ("kind", "Deployment")] {
            match obj.get(field) {
                Some(Value::String(s)) if s == want => {}
                None | Some(Value::Null) => {
                    problems.push(format!("deployment.{field}: required, must be {want:?}"))
                }
                Some(other) => {
                    problems.push(format!("deployment.{field}: must be {want:?}, not {other}"))
                }
            }
        }
        let name = match obj.get("metadata").and_then(|m| m.get("name")) {
            Some(Value::String(n)) if is_dns1123_subdomain(n) => Some(n.clone()),
            Some(Value::String(n)) => {
                problems.push(format!("deployment.metadata.name {n:?}: {SUBDOMAIN_RULE}"));
                None
            }
            None | Some(Value::Null) => {
                problems.push("deployment.metadata.name: required".to_owned());
                None
            }
            Some(other) => {
                problems.push(format!(
                    "deployment.metadata.name: must be a string, not {other}"
                ));
                None
            }
        };
        check_spec(obj.get("spec"), &mut problems);
        join(problems)?;

        // Through text rather than `from_value`: a deserializer over a string is the one the
        // client already uses for API responses, where one over `Value` adds its own code.
        let shape: Shape =
            serde_json::from_str(&value.to_string()).map_err(|e| deployment_error(&e))?;
        if let Some(spec) = &shape.spec {
            let labels = spec
                .template
                .metadata
                .as_ref()
                .and_then(|m| m.labels.as_ref());
            selector_mismatch(&spec.selector, labels.unwrap_or(&BTreeMap::new()))?;
        }
        Ok(Base {
            value: value.clone(),
            name: name.unwrap_or_default(),
        })
    }

    /// metadata.name of the base; variant Deployments are named `<name>-<label>`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The base as written.
    pub fn value(&self) -> &Value {
        &self.value
    }
}

/// The structural checks of a base's `spec`, appended to `problems`.
fn check_spec(spec: Option<&Value>, problems: &mut Vec<String>) {
    let Some(spec) = spec.and_then(Value::as_object) else {
        problems.push("deployment.spec: required, must be an object".to_owned());
        return;
    };
    if spec.get("selector").is_none_or(Value::is_null) {
        problems.push("deployment.spec.selector: required".to_owned());
    }
    let containers = spec
        .get("template")
        .and_then(|t| t.get("spec"))
        .and_then(|s| s.get("containers"));
    let Some(containers) = containers
        .and_then(Value::as_array)
        .filter(|c| !c.is_empty())
    else {
        problems.push(
            "deployment.spec.template.spec.containers: required, at least one container".to_owned(),
        );
        return;
    };
    let mut seen = Vec::new();
    for (i, c) in containers.iter().enumerate() {
        let at = format!("deployment.spec.template.spec.containers[{i}].name");
        match c.get("name") {
            Some(Value::String(n)) if !is_dns1123_label(n) => {
                problems.push(format!("{at} {n:?}: {LABEL_RULE}"))
            }
            Some(Value::String(n)) if seen.contains(&n) => {
                problems.push(format!("{at} {n:?}: must be unique"))
            }
            Some(Value::String(n)) => seen.push(n),
            _ => problems.push(format!("{at}: required")),
        }
    }
}

/// Fails when pod template `labels` do not satisfy `selector`: the API server would reject
/// such a Deployment.
fn selector_mismatch(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<(), String> {
    let fail = |what: String| {
        Err(format!(
            "deployment.spec.template.metadata.labels: must match deployment.spec.selector \
             ({what})"
        ))
    };
    for (k, v) in selector.match_labels.iter().flatten() {
        if labels.get(k) != Some(v) {
            return fail(format!("needs {k}={v}"));
        }
    }
    for req in selector.match_expressions.iter().flatten() {
        let values = req.values.as_deref().unwrap_or_default();
        let has = labels.get(&req.key);
        let ok = match req.operator.as_str() {
            "In" => has.is_some_and(|v| values.contains(v)),
            "NotIn" => !has.is_some_and(|v| values.contains(v)),
            "Exists" => has.is_some(),
            "DoesNotExist" => has.is_none(),
            op => return fail(format!("unknown operator {op:?} for {:?}", req.key)),
        };
        if !ok {
            return fail(format!("{} {} {values:?}", req.key, req.operator));
        }
    }
    Ok(())
}

/// A deserialization error of the base, without serde_json's position: it counts in the
/// compact text made from the parsed object, not in anything the user wrote.
fn deployment_error(e: &serde_json::Error) -> String {
    let message = e.to_string();
    let message = match message.rsplit_once(" at line ") {
        Some((head, _)) if e.line() > 0 => head.to_owned(),
        _ => message,
    };
    format!("deployment: {message}")
}
