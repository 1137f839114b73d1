//! The checks of a variant's `nodeSelector`, `tolerations` and `containers` (R8, R37): what
//! Kubernetes would refuse in a pod spec, the hard maxima of the CRD's schema, and container
//! names the base does not have. The messages name the field, so the HTTP API returns them as
//! they are (400) and the status carries them (Invalid).

use std::collections::BTreeSet;

use serde_json::Value;

use super::super::names::is_dns1123_subdomain;
use crate::crd::{
    DeviceAccess, Quantity, Variant,
    limits::{
        MAX_CONTAINERS, MAX_IMAGE, MAX_LABEL_KEY, MAX_NODE_SELECTOR, MAX_RESOURCES, MAX_TOLERATIONS,
    },
};

/// What a label key is, for messages.
const KEY_RULE: &str = "must be a label key: an optional DNS subdomain prefix and '/', then \
    at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit";
/// What a label value is, for messages.
const VALUE_RULE: &str = "must be a label value: empty, or at most 63 letters, digits, '-', \
    '_' and '.', starting and ending with a letter or digit";

/// Whether `s` is the name part of a label key, or a non-empty label value:
/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, at most 63 characters.
fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_alphanumeric();
    (1..=63).contains(&b.len())
        && b.iter()
            .all(|c| alnum(c) || matches!(c, b'-' | b'_' | b'.'))
        && b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
}

/// Whether `s` is a label key (Kubernetes' "qualified name"): `[prefix/]name`, the prefix a
/// DNS-1123 subdomain. Node labels, taint keys and resource names are all of this form.
pub(in crate::variant) fn is_label_key(s: &str) -> bool {
    match s.split_once('/') {
        Some((prefix, name)) => {
            !prefix.is_empty() && is_dns1123_subdomain(prefix) && is_label_name(name)
        }
        None => is_label_name(s),
    }
}

/// Whether `s` is a label value: empty, or as the name part of a key.
fn is_label_value(s: &str) -> bool {
    s.is_empty() || is_label_name(s)
}

/// The length of the number at the start of `b` (`1`, `1.5`, `1.`, `.5`), if there is one.
fn number_len(b: &[u8]) -> Option<usize> {
    let digits = |from: usize| b[from..].iter().take_while(|c| c.is_ascii_digit()).count();
    let whole = digits(0);
    if b.get(whole) != Some(&b'.') {
        return (whole > 0).then_some(whole);
    }
    let fraction = digits(whole + 1);
    (whole + fraction > 0).then_some(whole + 1 + fraction)
}

/// Whether `s` is a Kubernetes quantity (the CRD schema's `QUANTITY_PATTERN`):
/// a signed number and a suffix, binary (`Ki` .. `Ei`), decimal (`n`, `u`, `m`, `k`, `M` ..
/// `E`) or an exponent (`e3`, `E-2`).
pub(in crate::variant) fn is_quantity(s: &str) -> bool {
    let unsigned = |b: &[u8]| match b.first() {
        Some(b'+' | b'-') => b.get(1..).unwrap_or_default().to_vec(),
        _ => b.to_vec(),
    };
    let b = unsigned(s.as_bytes());
    let Some(n) = number_len(&b) else {
        return false;
    };
    match &b[n..] {
        [] | [b'n' | b'u' | b'm' | b'k' | b'M' | b'G' | b'T' | b'P' | b'E'] => true,
        [b'K' | b'M' | b'G' | b'T' | b'P' | b'E', b'i'] => true,
        [b'e' | b'E', exponent @ ..] => {
            let exponent = unsigned(exponent);
            number_len(&exponent) == Some(exponent.len())
        }
        _ => false,
    }
}

/// Appends to `problems` what is wrong with `v`'s `nodeSelector`, `tolerations` and
/// `containers`, without looking at the base: keys and values that are not label keys and
/// values, tolerations Kubernetes would refuse, a container named twice, an empty or
/// whitespace-holding image, resource names and quantities, and the hard maxima.
pub(in crate::variant) fn placement_problems(v: &Variant, problems: &mut Vec<String>) {
    if v.node_selector.len() > MAX_NODE_SELECTOR {
        problems.push(format!(
            "nodeSelector: {} entries, at most {MAX_NODE_SELECTOR} allowed",
            v.node_selector.len()
        ));
    }
    for (key, value) in &v.node_selector {
        if key.len() > MAX_LABEL_KEY || !is_label_key(key) {
            problems.push(format!("nodeSelector key {:?}: {KEY_RULE}", cut(key)));
        } else if !is_label_value(value) {
            problems.push(format!(
                "nodeSelector {key:?}: value {:?} {VALUE_RULE}",
                cut(value)
            ));
        }
    }
    if v.tolerations.len() > MAX_TOLERATIONS {
        problems.push(format!(
            "tolerations: {} entries, at most {MAX_TOLERATIONS} allowed",
            v.tolerations.len()
        ));
    }
    for (i, t) in v.tolerations.iter().enumerate() {
        let at = format!("tolerations[{i}]");
        if !t.key.is_empty() && !is_label_key(&t.key) {
            problems.push(format!("{at}.key {:?}: {KEY_RULE}", cut(&t.key)));
        }
        match t.operator.as_str() {
            "" | "Equal" if t.key.is_empty() => problems.push(format!(
                "{at}: a toleration without a key must have operator Exists"
            )),
            "" | "Equal" if !is_label_value(&t.value) => {
                problems.push(format!("{at}.value {:?}: {VALUE_RULE}", cut(&t.value)))
            }
            "Exists" if !t.value.is_empty() => {
                problems.push(format!("{at}.value: must be empty with operator Exists"))
            }
            "" | "Equal" | "Exists" => {}
            other => problems.push(format!(
                "{at}.operator {:?}: must be Equal or Exists",
                cut(other)
            )),
        }
        if !matches!(
            t.effect.as_str(),
            "" | "NoSchedule" | "PreferNoSchedule" | "NoExecute"
        ) {
            problems.push(format!(
                "{at}.effect {:?}: must be NoSchedule, PreferNoSchedule or NoExecute",
                cut(&t.effect)
            ));
        } else if t.toleration_seconds.is_some() && t.effect != "NoExecute" {
            problems.push(format!(
                "{at}.tolerationSeconds: only with effect NoExecute"
            ));
        }
    }
    if v.containers.len() > MAX_CONTAINERS {
        problems.push(format!(
            "containers: {} entries, at most {MAX_CONTAINERS} allowed",
            v.containers.len()
        ));
    }
    let mut seen = BTreeSet::new();
    for c in &v.containers {
        let at = format!("containers {:?}", cut(&c.name));
        if !seen.insert(c.name.as_str()) {
            problems.push(format!("{at}: named twice"));
        }
        if let Some(image) = &c.image {
            if image.is_empty()
                || image
                    .chars()
                    .any(|ch| ch.is_whitespace() || ch.is_control())
            {
                problems.push(format!(
                    "{at}: image {:?} must not be empty or hold spaces",
                    cut(image)
                ));
            } else if image.chars().count() > MAX_IMAGE {
                problems.push(format!(
                    "{at}: image of {} characters, at most {MAX_IMAGE} allowed",
                    image.chars().count()
                ));
            }
        }
        let resources = c
            .resources
            .iter()
            .flat_map(|r| [("limits", &r.limits), ("requests", &r.requests)]);
        for (field, quantities) in resources {
            if quantities.len() > MAX_RESOURCES {
                problems.push(format!(
                    "{at}: resources.{field}: {} entries, at most {MAX_RESOURCES} allowed",
                    quantities.len()
                ));
            }
            for (name, Quantity(quantity)) in quantities {
                if !is_label_key(name) || name.len() > MAX_LABEL_KEY {
                    problems.push(format!(
                        "{at}: resources.{field} name {:?}: {KEY_RULE}",
                        cut(name)
                    ));
                } else if !is_quantity(quantity) || quantity.starts_with('-') {
                    problems.push(format!(
                        "{at}: resources.{field}.{name} {:?}: must be a quantity that is not \
                         negative, such as 100m, 0.5, 64Mi or 1G",
                        cut(quantity)
                    ));
                }
            }
        }
    }
}

/// At most 64 characters of `s`, for a message about a value that may be long.
fn cut(s: &str) -> String {
    if s.chars().count() > 64 {
        format!("{}...", s.chars().take(64).collect::<String>())
    } else {
        s.to_owned()
    }
}

/// Checks that each container `v` changes is a container of `base` (a base Deployment as
/// JSON: its pod template's `containers`) (R37). Err names the first that is not, with the
/// base's container names.
pub(in crate::variant) fn known_containers(base: &Value, v: &Variant) -> Result<(), String> {
    let names: Vec<&str> = base
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("name").and_then(Value::as_str))
        .collect();
    match v
        .containers
        .iter()
        .find(|c| !names.contains(&c.name.as_str()))
    {
        None => Ok(()),
        Some(c) => Err(format!(
            "containers {:?}: the base has no container of that name (it has {})",
            cut(&c.name),
            names.join(", ")
        )),
    }
}

/// [`known_containers`] for each of `variants`, as the HTTP API checks what it is sent: Err
/// names the first variant and container the base does not have.
pub(crate) fn validate_containers(base: &Value, variants: &[Variant]) -> Result<(), String> {
    variants.iter().try_for_each(|v| {
        known_containers(base, v).map_err(|e| format!("variant {:?}: {e}", v.label))
    })
}

/// Appends to `problems` what is wrong with the node label keys and taint keys of a
/// `spec.deviceAccess` sent to the API, as the CRD schema would refuse them and more: each a
/// label key, at most 64 of each.
pub(in crate::variant) fn device_access_problems(
    access: &DeviceAccess,
    problems: &mut Vec<String>,
) {
    for (field, keys) in [
        ("nodeSelector", &access.node_selector),
        ("tolerations", &access.tolerations),
    ] {
        // the schema's maxItems, the same as a variant's own maxima
        let max = if field == "nodeSelector" {
            MAX_NODE_SELECTOR
        } else {
            MAX_TOLERATIONS
        };
        if keys.len() > max {
            problems.push(format!("deviceAccess.{field}: more than {max} keys"));
        }
        for key in keys {
            if key.len() > MAX_LABEL_KEY || !is_label_key(key) {
                problems.push(format!("deviceAccess.{field} {:?}: {KEY_RULE}", cut(key)));
            }
        }
    }
}
