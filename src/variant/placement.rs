//! Placement, images and resources per variant (R37): a variant's `nodeSelector`,
//! `tolerations` and `containers` merged over the base's pod template, and what a Mutation's
//! own token may ask of them.
//!
//! - `merge`: what [`build`](super::build()) does with them;
//! - `check`: the checks of their syntax and of the hard maxima (Invalid in status, 400 at the
//!   API), and [`known_containers`], that each container named is the base's;
//! - [`device_may_place`]: a token's node labels and tolerations only as its owner lists them
//!   in `spec.deviceAccess`, and never a container's image or resources.

use serde_json::{Map, Value};

use crate::crd::{DeviceAccess, Resources, Toleration, Variant};

mod check;

pub(crate) use check::validate_containers;
pub(super) use check::{device_access_problems, known_containers, placement_problems};
#[cfg(test)]
pub(super) use check::{is_label_key, is_quantity};

/// Merges `v`'s placement and containers into `pod`, the pod spec of its Deployment (R37):
///
/// - `nodeSelector`: the variant's entries over the base's, its value winning for a key both
///   have;
/// - `tolerations`: appended after the base's, except one the base (or an earlier entry of the
///   variant) already has; an empty operator counts as `Equal`, as Kubernetes reads it;
/// - `containers`: in the container of that name (of `containers`, not `initContainers`), the
///   image replaced, and each resource named in `limits` or `requests` set, the others kept.
///   A name the base does not have changes nothing here: the variant is Invalid
///   ([`known_containers`]).
///
/// A variant that sets none of them leaves `pod` as it is, so its Deployment is byte for byte
/// what it was before these fields existed.
pub(super) fn merge(pod: &mut Map<String, Value>, v: &Variant) {
    if !v.node_selector.is_empty()
        && let Some(selector) = object_in(pod, "nodeSelector")
    {
        for (key, value) in &v.node_selector {
            selector.insert(key.clone(), value.as_str().into());
        }
    }
    if !v.tolerations.is_empty() {
        let slot = pod.entry("tolerations").or_insert(Value::Null);
        if !slot.is_array() {
            *slot = Value::Array(Vec::new());
        }
        if let Value::Array(items) = slot {
            for t in &v.tolerations {
                if !items.iter().any(|item| same_toleration(item, t)) {
                    items.push(toleration_json(t));
                }
            }
        }
    }
    if v.containers.is_empty() {
        return;
    }
    let Some(Value::Array(containers)) = pod.get_mut("containers") else {
        return;
    };
    for wanted in &v.containers {
        let named = |c: &&mut Map<String, Value>| {
            c.get("name").and_then(Value::as_str) == Some(wanted.name.as_str())
        };
        let Some(c) = containers
            .iter_mut()
            .filter_map(Value::as_object_mut)
            .find(named)
        else {
            continue;
        };
        if let Some(image) = &wanted.image {
            c.insert("image".into(), image.as_str().into());
        }
        if let Some(resources) = &wanted.resources
            && let Some(into) = object_in(c, "resources")
        {
            merge_resources(into, resources);
        }
    }
}

/// The object at `key` of `map`, made (replacing a null or any non-object) where missing.
/// Always `Some`; an `Option` only to avoid a panic path.
fn object_in<'a>(map: &'a mut Map<String, Value>, key: &str) -> Option<&'a mut Map<String, Value>> {
    let slot = map.entry(key).or_insert(Value::Null);
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    slot.as_object_mut()
}

/// Sets each quantity of `resources` in a container's `resources`, by resource name.
fn merge_resources(into: &mut Map<String, Value>, resources: &Resources) {
    for (field, quantities) in [
        ("limits", &resources.limits),
        ("requests", &resources.requests),
    ] {
        if quantities.is_empty() {
            continue;
        }
        let Some(map) = object_in(into, field) else {
            continue;
        };
        for (name, quantity) in quantities {
            map.insert(name.clone(), quantity.0.as_str().into());
        }
    }
}

/// A toleration as Kubernetes writes it: its empty fields left out.
fn toleration_json(t: &Toleration) -> Value {
    let mut map = Map::new();
    for (field, value) in [
        ("key", &t.key),
        ("operator", &t.operator),
        ("value", &t.value),
        ("effect", &t.effect),
    ] {
        if !value.is_empty() {
            map.insert(field.into(), value.as_str().into());
        }
    }
    if let Some(seconds) = t.toleration_seconds {
        map.insert("tolerationSeconds".into(), seconds.into());
    }
    Value::Object(map)
}

/// Whether the base's toleration `item` (as written) is `t`: the same key, operator (empty
/// being `Equal`), value, effect and seconds.
fn same_toleration(item: &Value, t: &Toleration) -> bool {
    let text = |field: &str| item.get(field).and_then(Value::as_str).unwrap_or_default();
    let operator = |op: &str| if op.is_empty() { "Equal" } else { op }.to_owned();
    text("key") == t.key
        && operator(text("operator")) == operator(&t.operator)
        && text("value") == t.value
        && text("effect") == t.effect
        && item.get("tolerationSeconds").and_then(Value::as_i64) == t.toleration_seconds
}

/// Whether a Mutation's token may ask for `v`'s placement and containers (R37). Err is the
/// message of a 403, naming the field:
///
/// - a `nodeSelector` key only when the owner lists it in `spec.deviceAccess.nodeSelector`
///   (any value);
/// - a toleration only when its key is listed in `spec.deviceAccess.tolerations`; never one
///   without a key, which tolerates every taint;
/// - `containers` never: which image runs, and with what resources, is the owner's.
pub(super) fn device_may_place(access: Option<&DeviceAccess>, v: &Variant) -> Result<(), String> {
    if let Some(c) = v.containers.first() {
        return Err(format!(
            "containers ({:?}): a Mutation's token may never set a container's image or \
             resources; only the admin token and the Mutation's own spec may",
            c.name
        ));
    }
    let allowed =
        |list: Option<&Vec<String>>, key: &str| list.is_some_and(|l| l.iter().any(|k| k == key));
    for key in v.node_selector.keys() {
        if !allowed(access.map(|a| &a.node_selector), key) {
            return Err(format!(
                "nodeSelector {key:?}: not in spec.deviceAccess.nodeSelector, the node label \
                 keys a Mutation's token may set"
            ));
        }
    }
    for (i, t) in v.tolerations.iter().enumerate() {
        if t.key.is_empty() {
            return Err(format!(
                "tolerations[{i}]: a toleration without a key tolerates every taint; a \
                 Mutation's token may never send one"
            ));
        }
        if !allowed(access.map(|a| &a.tolerations), &t.key) {
            return Err(format!(
                "tolerations[{i}] (key {:?}): not in spec.deviceAccess.tolerations, the taint \
                 keys a Mutation's token may tolerate",
                t.key
            ));
        }
    }
    Ok(())
}
