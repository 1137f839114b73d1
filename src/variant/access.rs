//! What a Mutation's own token may ask of its variants (R32). That token is on every
//! device of the Mutation, so it is held to what a device needs: settings of the app, never
//! what changes which code runs or what it can read.
//!
//! - env: by default no name of the `families` (what changes how a process loads, starts,
//!   connects or whom it trusts), no variable the base sets itself or may take from `envFrom`,
//!   no name the base expands into a command line (`base_env`), no shadow of a `valueFrom`
//!   entry; the owner's `spec.deviceAccess.env` allows by name;
//! - [`DeviceLimits`]: the bounds (instances, variants, env entries, value length), from the
//!   defaults and `spec.deviceAccess`;
//! - [`device_may_add`] and [`device_may_scale`]: the checks of a token's request, each refusal
//!   naming the variable or the bound; a variant's node labels, tolerations and containers are
//!   checked by `placement::device_may_place` (R37);
//! - [`literal_env_value`]: how a Mutation's env value is written into a Deployment so that
//!   the kubelet passes it on as sent (no `$(VAR)` expansion).
//!
//! The admin token is held only to the hard maxima of every variant (`validate_variant`).

use std::collections::BTreeSet;

use serde_json::Value;

pub use super::families::env_key;
use super::{
    base_env::{Replaced, reaching},
    families::denied,
};
use crate::crd::{
    DeviceAccess, Variant,
    limits::{DEVICE_MAX_ENV, DEVICE_MAX_INSTANCES, DEVICE_MAX_VALUE, DEVICE_MAX_VARIANTS},
};

/// One entry of `deviceAccess.env`: `NAME` (every container: `None`) or `container/NAME`
/// (that container only).
pub fn env_entry(entry: &str) -> (Option<&str>, &str) {
    match entry.split_once('/') {
        Some((container, name)) => (Some(container), name),
        None => (None, entry),
    }
}

/// Where the owner's `deviceAccess.env` lets a token's env `name` go: `None` when it is not
/// listed; `Some(empty)` for every container; else the containers it names.
pub fn env_targets<'a>(names: &'a [String], name: &str) -> Option<Vec<&'a str>> {
    let key = env_key(name);
    let mut containers = Vec::new();
    let mut listed = false;
    for entry in names {
        let (container, entry_name) = env_entry(entry);
        if env_key(entry_name) != key {
            continue;
        }
        match container {
            None => return Some(Vec::new()),
            Some(c) => {
                listed = true;
                if !containers.contains(&c) {
                    containers.push(c);
                }
            }
        }
    }
    listed.then_some(containers)
}

/// The variant a token's request is stored as: each env name the owner allows only for some
/// containers (`deviceAccess.env` `<container>/NAME`) moves from `env` into those containers'
/// own env, so its value reaches no other container.
pub fn route_device_env(access: Option<&DeviceAccess>, variant: &Variant) -> Variant {
    let Some(names) = access.and_then(|a| a.env.as_ref()) else {
        return variant.clone();
    };
    let mut routed = variant.clone();
    let mut everywhere = std::collections::BTreeMap::new();
    for (name, value) in variant.env.iter() {
        let containers = env_targets(names, name).unwrap_or_default();
        if containers.is_empty() {
            everywhere.insert(name.to_owned(), value.to_owned());
            continue;
        }
        for container in containers {
            let slot = match routed.containers.iter().position(|c| c.name == container) {
                Some(i) => i,
                None => {
                    routed.containers.push(crate::crd::ContainerOverride {
                        name: container.to_owned(),
                        image: None,
                        resources: None,
                        env: Default::default(),
                    });
                    routed.containers.len() - 1
                }
            };
            routed.containers[slot]
                .env
                .insert(name.to_owned(), value.to_owned());
        }
    }
    routed.env = everywhere.into();
    routed
}

/// How a Mutation's env value is written into its Deployment: every `$` doubled. The kubelet
/// expands `$(VAR)` in env values and turns `$$` into `$`, so the container sees exactly the
/// value sent, and a value cannot copy another variable (a Secret's, say) into itself.
pub fn literal_env_value(value: &str) -> String {
    value.replace('$', "$$")
}

/// The bounds a Mutation's token is held to: the defaults, or what the owner set in
/// `spec.deviceAccess`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Most instances of a variant.
    pub instances: i32,
    /// Most variants of the Mutation.
    pub variants: usize,
    /// Most env entries of a variant.
    pub env: usize,
    /// Longest env value, in bytes of UTF-8.
    pub value_length: usize,
}

/// What a token's request body may hold besides its variant's env: the label, the
/// instances, the placement fields and the JSON around them.
pub const BODY_ALLOWANCE: usize = 64 * 1024;

/// What one env entry of a token's variant may take in its request body beyond its value: the
/// longest name and the JSON around both.
const ENV_ENTRY_OVERHEAD: usize = crate::crd::limits::MAX_ENV_NAME + 16;

impl DeviceLimits {
    /// The limits of a Mutation with `access` (its `spec.deviceAccess`).
    pub fn of(access: Option<&DeviceAccess>) -> DeviceLimits {
        let size = |field: Option<i32>, default: usize| {
            field.map_or(default, |n| usize::try_from(n).unwrap_or(0))
        };
        let field = |of: fn(&DeviceAccess) -> Option<i32>| access.and_then(of);
        DeviceLimits {
            instances: field(|a| a.max_instances)
                .unwrap_or(DEVICE_MAX_INSTANCES)
                .max(0),
            variants: size(field(|a| a.max_variants), DEVICE_MAX_VARIANTS),
            env: size(field(|a| a.max_env), DEVICE_MAX_ENV),
            value_length: size(field(|a| a.max_value_length), DEVICE_MAX_VALUE),
        }
    }

    /// The largest request body a Mutation's or a device's token may send (R44):
    /// the largest variant it may add, as JSON without escapes in its values, with
    /// [`BODY_ALLOWANCE`] for the rest. 197 KiB by default.
    pub fn body_bytes(self) -> usize {
        let entry = ENV_ENTRY_OVERHEAD.saturating_add(self.value_length);
        BODY_ALLOWANCE.saturating_add(self.env.saturating_mul(entry))
    }
}

/// Where a bound comes from, for messages: the owner's field, or the default.
fn bound_source(field: &str, set: bool) -> String {
    if set {
        format!("spec.deviceAccess.{field}")
    } else {
        format!("the default; the owner may change it in spec.deviceAccess.{field}")
    }
}

/// The names of the base's env entries that take their value from elsewhere (`valueFrom`: a
/// Secret, a ConfigMap, a field, a resource), in any container a variant's env goes into.
pub fn value_from_names(base: &Value) -> BTreeSet<String> {
    base.pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("env").and_then(Value::as_array))
        .flatten()
        .filter(|e| e.get("valueFrom").is_some_and(|v| !v.is_null()))
        .filter_map(|e| e.get("name").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

/// Whether a Mutation's token may add `variant` to a Mutation of base `base` (as JSON) and
/// `access`, which has `variants` variants now (R32), with the placement it asks for (R37). Err
/// is the message of a 403, naming the variable, the field or the bound. The variant is
/// otherwise valid (`validate_variant`). With `devices_on` (the Mutation has `spec.devices`)
/// env is deny-by-default: only the names `access.env` lists (R41).
pub fn device_may_add(
    base: &Value,
    access: Option<&DeviceAccess>,
    variant: &Variant,
    variants: usize,
    devices_on: bool,
) -> Result<(), String> {
    let limits = DeviceLimits::of(access);
    let set = |f: fn(&DeviceAccess) -> bool| access.is_some_and(f);
    device_may_scale(access, variant.instances)?;
    super::placement::device_may_place(access, variant)?;
    if variants >= limits.variants {
        return Err(format!(
            "variants: the Mutation has {variants}; a Mutation's token may add one only while it \
             has fewer than {} ({})",
            limits.variants,
            bound_source("maxVariants", set(|a| a.max_variants.is_some()))
        ));
    }
    if variant.env.len() > limits.env {
        return Err(format!(
            "env: {} entries; a Mutation's token may set at most {} ({})",
            variant.env.len(),
            limits.env,
            bound_source("maxEnv", set(|a| a.max_env.is_some()))
        ));
    }
    let from_elsewhere: BTreeSet<String> =
        value_from_names(base).iter().map(|n| env_key(n)).collect();
    let (reaches, replaced) = (reaching(base), Replaced::of(base));
    let allowed = access.and_then(|a| a.env.as_ref());
    for (name, value) in &variant.env {
        // R41: a name whose value the base expands into a command line, a probe, a hook,
        // a sub-path or a start-up variable is the owner's to allow by name; no default lets
        // it through.
        let listed = allowed.is_some_and(|names| env_targets(names, name).is_some());
        if !listed && let Some(reach) = reaches.iter().find(|r| r.name == *name) {
            return Err(format!(
                "env {name:?}: {}, so a value would run as part of it; a Mutation's token may \
                 set it only when the owner lists it in spec.deviceAccess.env",
                reach.describe()
            ));
        }
        if let Some(base_name) = from_elsewhere.get(&env_key(name)) {
            return Err(format!(
                "env {name:?}: the base sets {base_name:?} with valueFrom (a Secret, ConfigMap or \
                 field), compared without case and with '-' and '.' as '_'; a Mutation's token \
                 may not shadow it"
            ));
        }
        match allowed {
            Some(names) if env_targets(names, name).is_none() => {
                return Err(format!(
                    "env {name:?}: not in spec.deviceAccess.env, the names a Mutation's token \
                     may set"
                ));
            }
            None if devices_on => {
                return Err(format!(
                    "env {name:?}: with spec.devices set, a device may set only the names \
                     spec.deviceAccess.env lists, and it lists none"
                ));
            }
            None => default_env(name, &replaced)?,
            _ => {}
        }
        // In bytes (R32): what is stored, and what the request body carries.
        let length = value.len();
        if length > limits.value_length {
            return Err(format!(
                "env {name:?}: value of {length} bytes (UTF-8); a Mutation's token may send at \
                 most {} ({})",
                limits.value_length,
                bound_source("maxValueLength", set(|a| a.max_value_length.is_some()))
            ));
        }
    }
    Ok(())
}

/// Without the owner's list, whether a token may set `name` (R32): not one of the families
/// of [`super::families`], and not a variable the base sets itself or may take from
/// `envFrom`. Err names the family or the base's entry.
fn default_env(name: &str, replaced: &Replaced) -> Result<(), String> {
    if let Some(family) = denied(name) {
        return Err(format!(
            "env {name:?}: one of {family}, which change how a process loads, starts or \
             connects, or whom it trusts; a Mutation's token may set it only when the owner \
             lists it in spec.deviceAccess.env"
        ));
    }
    if let Some(what) = replaced.replaces(name) {
        return Err(format!(
            "env {name:?}: {what}; a Mutation's token may replace a variable of the base only \
             when the owner lists it in spec.deviceAccess.env"
        ));
    }
    Ok(())
}

/// Whether a Mutation's token may give a variant `instances` (R32). Err is the message of a
/// 403, naming the bound.
pub fn device_may_scale(access: Option<&DeviceAccess>, instances: i32) -> Result<(), String> {
    let limits = DeviceLimits::of(access);
    if instances > limits.instances {
        let set = access.is_some_and(|a| a.max_instances.is_some());
        return Err(format!(
            "instances {instances}: a Mutation's token may ask for at most {} ({})",
            limits.instances,
            bound_source("maxInstances", set)
        ));
    }
    Ok(())
}

/// Checks `spec.deviceAccess` as the CRD schema does, for one sent to the HTTP API: the
/// bounds within the hard maxima, the names valid env names.
pub fn validate_device_access(access: &DeviceAccess) -> Result<(), String> {
    use crate::crd::limits::{MAX_ENV, MAX_ENV_NAME, MAX_ENV_VALUE, MAX_INSTANCES, MAX_VARIANTS};
    let mut problems = Vec::new();
    for (field, value, max) in [
        (
            "maxInstances",
            access.max_instances,
            i64::from(MAX_INSTANCES),
        ),
        ("maxVariants", access.max_variants, MAX_VARIANTS as i64),
        ("maxEnv", access.max_env, MAX_ENV as i64),
        (
            "maxValueLength",
            access.max_value_length,
            MAX_ENV_VALUE as i64,
        ),
    ] {
        if let Some(n) = value
            && !(0..=max).contains(&i64::from(n))
        {
            problems.push(format!(
                "deviceAccess.{field} {n}: must be between 0 and {max}"
            ));
        }
    }
    for entry in access.env.iter().flatten() {
        let (container, name) = env_entry(entry);
        if let Some(c) = container
            && super::names::validate_label(c).is_err()
        {
            problems.push(format!(
                "deviceAccess.env {entry:?}: the container's name {c:?} is not a container name"
            ));
        }
        if let Err(e) = super::names::validate_env_name(name) {
            problems.push(format!("deviceAccess.env: {e}"));
        } else if name.chars().count() > MAX_ENV_NAME {
            problems.push(format!(
                "deviceAccess.env: a name of {} characters, at most {MAX_ENV_NAME} allowed",
                name.chars().count()
            ));
        }
    }
    if access
        .env
        .as_ref()
        .is_some_and(|names| names.len() > MAX_ENV)
    {
        problems.push(format!("deviceAccess.env: more than {MAX_ENV} names"));
    }
    super::placement::device_access_problems(access, &mut problems);
    super::totals::problems(access, &mut problems);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}
