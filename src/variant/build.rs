//! Building the Deployment of each variant (R4), planning a whole spec (R8, R9) and telling
//! whether an observed Deployment still matches what would be applied (R5, R12).

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use serde_json::{Map, Value, json};

use super::access::literal_env_value;
use super::names::{deployment_name, unservable_name};
use super::observed::ObservedDeployment;
use super::owner::{HASH_ANNOTATION, Owner, may_prune};
use super::placement::known_containers;
use super::status::variant_state;
use super::step::{Step, step_for};
use super::validate::{Base, validate_variant};
use crate::crd::{
    OwnerKind, StrMap, Variant, VariantState, VariantStatus, limits::MAX_OBJECT_BYTES,
};

/// Annotations that other writers keep on a live Deployment; a base copied from one may carry
/// them, and applying them would fight those writers.
const SERVER_ANNOTATIONS: [&str; 2] = [
    "deployment.kubernetes.io/revision",
    "kubectl.kubernetes.io/last-applied-configuration",
];

/// Builds the Deployment of one variant, the whole object to server-side-apply (R4). Pure and
/// deterministic: the same input gives byte-identical JSON.
///
/// From the base's metadata it keeps only `labels` and `annotations` (less the revision and
/// last-applied annotations that other writers maintain); it sets name
/// `<base>-<label>`, the owner's namespace, the three mutantops labels (also on the selector and
/// the pod template), [`HASH_ANNOTATION`] and the controller ownerReference, and drops `status`.
/// `spec.replicas` becomes `instances`. In every container of the pod template (not the init
/// containers) a variant variable replaces each base entry of the same name in place, whole
/// (even a `valueFrom` one); the others are appended in name order. A Mutation's values are
/// written literal ([`literal_env_value`]: the kubelet does not expand `$(VAR)` in them); a
/// MutantDeployment's, declared in git beside its base, as written. Its nodeSelector,
/// tolerations and containers are merged over the pod template as `placement::merge` says
/// (R37). The variant is not validated here: see
/// [`plan`].
pub fn build(base: &Base, owner: &Owner, v: &Variant) -> Value {
    let ours = owner.labels(&v.label);
    let base_meta = base.value().get("metadata");

    let mut labels = object_of(base_meta.and_then(|m| m.get("labels")));
    add_labels(&mut labels, &ours);
    let mut metadata = Map::new();
    metadata.insert("name".into(), deployment_name(base.name(), &v.label).into());
    metadata.insert("namespace".into(), owner.namespace.clone().into());
    metadata.insert("labels".into(), Value::Object(labels));
    let mut annotations = object_of(base_meta.and_then(|m| m.get("annotations")));
    for written_by_others in SERVER_ANNOTATIONS {
        annotations.remove(written_by_others);
    }
    if !annotations.is_empty() {
        metadata.insert("annotations".into(), Value::Object(annotations));
    }
    metadata.insert("ownerReferences".into(), owner.owner_references_json());

    let mut spec = object_of(base.value().get("spec"));
    spec.insert("replicas".into(), v.instances.into());
    if let Some(match_labels) = object_at(&mut spec, &["selector", "matchLabels"]) {
        add_labels(match_labels, &ours);
    }
    if let Some(template_labels) = object_at(&mut spec, &["template", "metadata", "labels"]) {
        add_labels(template_labels, &ours);
    }
    if let Some(Value::Array(containers)) =
        object_at(&mut spec, &["template", "spec"]).and_then(|pod| pod.get_mut("containers"))
    {
        let literal = owner.kind == OwnerKind::Mutation;
        for c in containers.iter_mut().filter_map(Value::as_object_mut) {
            merge_env(c, &v.env, literal);
            let name = c.get("name").and_then(Value::as_str).map(str::to_owned);
            if let Some(own) = v.containers.iter().find(|o| Some(&o.name) == name.as_ref()) {
                merge_env(c, &own.env, literal);
            }
        }
    }
    if let Some(pod) = object_at(&mut spec, &["template", "spec"]) {
        super::placement::merge(pod, v);
    }

    let mut object = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": spec,
    });
    let hash = format!("{:016x}", fnv1a64(object.to_string().as_bytes()));
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut)
        && let Some(annotations) = object_at(meta, &["annotations"])
    {
        annotations.insert(HASH_ANNOTATION.into(), hash.into());
    }
    object
}

/// A clone of `v` if it is an object, else an empty object.
fn object_of(v: Option<&Value>) -> Map<String, Value> {
    v.and_then(Value::as_object).cloned().unwrap_or_default()
}

/// The object at `path` below `map`, created (replacing a null or non-object) where missing.
/// Always `Some`; an `Option` only to avoid a panic path.
fn object_at<'a>(
    map: &'a mut Map<String, Value>,
    path: &[&str],
) -> Option<&'a mut Map<String, Value>> {
    let mut here = map;
    for key in path {
        let slot = here.entry(*key).or_insert(Value::Null);
        if !slot.is_object() {
            *slot = Value::Object(Map::new());
        }
        here = slot.as_object_mut()?;
    }
    Some(here)
}

fn add_labels(map: &mut Map<String, Value>, labels: &[(&str, &str)]) {
    for (k, v) in labels {
        map.insert((*k).to_owned(), (*v).into());
    }
}

/// Extends one container's `env` with the variant's (R4); `literal`: with each value escaped
/// so that the kubelet passes it on as written.
fn merge_env(container: &mut Map<String, Value>, env: &StrMap, literal: bool) {
    if env.is_empty() {
        return;
    }
    let list = container.entry("env").or_insert(Value::Null);
    if !list.is_array() {
        *list = Value::Array(Vec::new());
    }
    let Value::Array(items) = list else { return };
    for (name, value) in env {
        let value = if literal {
            literal_env_value(value)
        } else {
            value.to_owned()
        };
        let entry = json!({ "name": name, "value": value });
        let mut replaced = false;
        for item in items.iter_mut() {
            if item.get("name").and_then(Value::as_str) == Some(name) {
                *item = entry.clone();
                replaced = true;
            }
        }
        if !replaced {
            items.push(entry);
        }
    }
}

/// 64-bit FNV-1a: small, stable across platforms and releases, good enough to notice change.
pub(super) fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// What to do with one declared variant, in spec order (see [`plan`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Planned {
    /// Server-side-apply `object` as Deployment `name`.
    Apply {
        /// The variant's label.
        label: String,
        /// The Deployment's name.
        name: String,
        /// The full Deployment from [`build`].
        object: Value,
        /// The variant's replica count.
        instances: i32,
    },
    /// Skip: the variant breaks a rule of R8; `message` says which.
    Invalid {
        /// The variant's label, as written.
        label: String,
        /// The Deployment name it would get.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// Skip: the label repeats an earlier one, or the Deployment belongs to someone else (R9).
    Conflict {
        /// The variant's label.
        label: String,
        /// The Deployment name it would get.
        name: String,
        /// Why it cannot be applied.
        message: String,
    },
}

impl Planned {
    /// The variant's label.
    pub fn label(&self) -> &str {
        match self {
            Planned::Apply { label, .. }
            | Planned::Invalid { label, .. }
            | Planned::Conflict { label, .. } => label,
        }
    }

    /// The name of the variant's Deployment (computed even when it cannot be applied).
    pub fn name(&self) -> &str {
        match self {
            Planned::Apply { name, .. }
            | Planned::Invalid { name, .. }
            | Planned::Conflict { name, .. } => name,
        }
    }

    /// The same variant as a `Conflict` with `message` (R9: someone else's object holds the
    /// name, [`left_alone`](super::left_alone)).
    pub fn into_conflict(self, message: String) -> Planned {
        let (label, name) = self.into_names();
        Planned::Conflict {
            label,
            name,
            message,
        }
    }

    /// The same variant as `Invalid` with `message`: the API server refused its Deployment.
    pub fn into_invalid(self, message: String) -> Planned {
        let (label, name) = self.into_names();
        Planned::Invalid {
            label,
            name,
            message,
        }
    }

    /// Its label and its Deployment's name.
    fn into_names(self) -> (String, String) {
        match self {
            Planned::Apply { label, name, .. }
            | Planned::Invalid { label, name, .. }
            | Planned::Conflict { label, name, .. } => (label, name),
        }
    }

    /// The variant's status line (R11). `observed` is its Deployment as last seen, if this
    /// owner controls one; Invalid and Conflict variants report 0 replicas.
    pub fn status(&self, observed: Option<&ObservedDeployment>) -> VariantStatus {
        let (state, message, replicas, ready_replicas) = match self {
            Planned::Apply { instances, .. } => {
                let (state, replicas, ready) = variant_state(*instances, observed);
                (state, None, replicas, ready)
            }
            Planned::Invalid { message, .. } => {
                (VariantState::Invalid, Some(message.clone()), 0, 0)
            }
            Planned::Conflict { message, .. } => {
                (VariantState::Conflict, Some(message.clone()), 0, 0)
            }
        };
        VariantStatus {
            label: self.label().to_owned(),
            state,
            message,
            deployment: self.name().to_owned(),
            replicas,
            ready_replicas,
            service: None,
            sleep: None,
            screen: None,
        }
    }
}

/// `object`, unless it is over [`MAX_OBJECT_BYTES`] of JSON, which etcd would refuse to store
/// (R32, R35): measured only for a variant whose env could make it so.
fn within_size(object: Value, v: &Variant) -> Result<Value, String> {
    let env: usize = v
        .env
        .iter()
        .map(|(k, val)| k.len() + val.len())
        .sum::<usize>()
        + v.containers
            .iter()
            .flat_map(|c| c.env.iter())
            .map(|(k, val)| k.len() + val.len())
            .sum::<usize>();
    if env < MAX_OBJECT_BYTES / 64 {
        return Ok(object);
    }
    let bytes = serde_json::to_vec(&object).map_or(0, |b| b.len());
    if bytes > MAX_OBJECT_BYTES {
        return Err(format!(
            "its Deployment would be {bytes} bytes of JSON, more than the {MAX_OBJECT_BYTES} the \
             operator writes (etcd stores about 1.5 MiB); its env is copied into each of the \
             base's containers"
        ));
    }
    Ok(object)
}

/// Plans every declared variant, in spec order (R4, R8, R9): a label that repeats an earlier
/// one is a `Conflict` (the first keeps it, valid or not), a variant breaking R8 is `Invalid`,
/// the rest are built, unless too large to store (R32). An owner whose name is
/// too long for a label value makes every variant `Invalid`. Foreign Deployments are checked
/// afterwards with [`left_alone`](super::left_alone).
pub fn plan(base: &Base, owner: &Owner, variants: &[Variant]) -> Vec<Planned> {
    let owner_problem = unservable_name(owner.kind.kind(), &owner.name);
    let mut first: BTreeMap<&str, usize> = BTreeMap::new();
    variants
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let label = v.label.clone();
            let name = deployment_name(base.name(), &v.label);
            if let Entry::Occupied(e) = first.entry(v.label.as_str()) {
                let message = format!(
                    "label {label:?} repeats variant {} of the list, which keeps it",
                    e.get() + 1
                );
                return Planned::Conflict {
                    label,
                    name,
                    message,
                };
            }
            first.insert(&v.label, i);
            let check = owner_problem
                .clone()
                .map_or_else(|| validate_variant(base.name(), v), Err)
                .and_then(|()| known_containers(base.value(), v));
            let object = check.map(|()| build(base, owner, v));
            match object.and_then(|object| within_size(object, v)) {
                Err(message) => Planned::Invalid {
                    label,
                    name,
                    message,
                },
                Ok(object) => Planned::Apply {
                    object,
                    label,
                    name,
                    instances: v.instances,
                },
            }
        })
        .collect()
}

/// Decides [`Step`] for `planned`, given its Deployment as known: from the cache
/// (`from_server` false; a miss is created, or looked up when the cache holds someone
/// else's) or from the API server (the step machine asks [`left_alone`](super::left_alone)
/// of what the server answers before resolving again).
pub fn resolve(
    planned: &Planned,
    observed: Option<&ObservedDeployment>,
    owner: &Owner,
    from_server: bool,
) -> Step {
    let Planned::Apply { object, .. } = planned else {
        return Step::Keep;
    };
    let ours = observed.is_some_and(|d| may_prune(&d.metadata, owner));
    step_for(observed.is_some(), ours, from_server, || {
        needs_apply(object, observed)
    })
}

/// Whether `desired` (from [`build`]) must be applied over `observed` (R5, R12). False only
/// when every field of `desired` is present in `observed` with the same value, so a steady
/// state makes no write while a hand edit or delete is put back. A changed desired state
/// always differs through [`HASH_ANNOTATION`], even if it only removes fields.
///
/// Zero values (`null`, `false`, `0`, `""`, `[]`, `{}`) match an absent field, as the API
/// server omits them, and a number matches the same digits as a string (quantities). Other
/// server normalisations (e.g. `0.5` CPU read back as `500m`) only cost a no-op apply.
pub fn needs_apply(desired: &Value, observed: Option<&ObservedDeployment>) -> bool {
    observed.is_none_or(|observed| !is_subset(desired, &observed.comparable()))
}

pub(super) fn is_subset(desired: &Value, observed: &Value) -> bool {
    match (desired, observed) {
        (Value::Object(d), Value::Object(o)) => d.iter().all(|(k, dv)| match o.get(k) {
            None | Some(Value::Null) => is_zero(dv),
            Some(ov) => is_subset(dv, ov),
        }),
        (Value::Array(d), Value::Array(o)) => {
            d.len() == o.len() && d.iter().zip(o).all(|(dv, ov)| is_subset(dv, ov))
        }
        (Value::Number(n), Value::String(s)) => n.to_string() == *s,
        (d, Value::Null) => is_zero(d),
        (d, o) => d == o,
    }
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_i64() == Some(0) || n.as_u64() == Some(0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
    }
}
