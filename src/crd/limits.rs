//! The bounds of a variant and of a Mutation's device tokens (R32): the hard maxima
//! every writer is held to (the CRD schema carries them, so the API server refuses what the
//! HTTP API refuses), the defaults of what a Mutation's own token may ask, and
//! [`DeviceAccess`], the spec field by which a Mutation's owner changes those.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Most variants one owner may declare (both kinds; `maxItems` in the schema).
pub const MAX_VARIANTS: usize = 500;
/// Most instances one variant may ask for (`maximum` in the schema).
pub const MAX_INSTANCES: i32 = 1000;
/// Most env entries one variant may have (`maxProperties` in the schema).
pub const MAX_ENV: usize = 256;
/// Longest env name, in characters (a validation rule in the schema).
pub const MAX_ENV_NAME: usize = 128;
/// Longest entry of `deviceAccess.env`: `<container>/NAME`, a container's name of at most 63
/// characters, '/', and an env name. The schema writes it as a literal (an attribute cannot
/// name a constant); its test holds the two together.
#[cfg(test)]
pub const MAX_DEVICE_ENV_ENTRY: usize = 63 + 1 + MAX_ENV_NAME;
/// Longest env value, in characters (`maxLength` in the schema, which counts characters).
pub const MAX_ENV_VALUE: usize = 32 * 1024;
/// Most entries of a variant's `nodeSelector` (`maxProperties`; R37).
pub const MAX_NODE_SELECTOR: usize = 64;
/// Most tolerations a variant adds (`maxItems`).
pub const MAX_TOLERATIONS: usize = 64;
/// Most containers a variant changes (`maxItems`).
pub const MAX_CONTAINERS: usize = 64;
/// Longest image a variant gives a container, in characters (`maxLength`).
pub const MAX_IMAGE: usize = 1024;
/// Most resource names in a container's `limits`, and in its `requests` (`maxProperties`).
pub const MAX_RESOURCES: usize = 32;
/// Longest label key (node labels, taint keys, resource names): a DNS subdomain prefix of at
/// most 253 characters, '/', and a name of at most 63.
pub const MAX_LABEL_KEY: usize = 317;
/// Longest label value (node labels, taint values).
pub const MAX_LABEL_VALUE: usize = 63;

/// The largest Deployment the operator writes, as JSON (R32, R35): etcd refuses a
/// request of about 1.5 MiB, and the stored object carries managedFields and status besides.
/// A variant's env is copied into every container, so its size is the sum over them.
pub const MAX_OBJECT_BYTES: usize = 1024 * 1024;

/// Default of [`DeviceAccess::max_total_instances`] (R32).
pub const DEVICE_MAX_TOTAL_INSTANCES: i32 = 40;
/// Default of [`DeviceAccess::max_exposed_services`] (R32).
pub const DEVICE_MAX_EXPOSED_SERVICES: usize = 5;
/// Longest [`DeviceAccess::label_pattern`].
pub const MAX_LABEL_PATTERN: usize = 63;

/// What a Mutation's own token may ask when its owner says nothing else: sized for a fleet of
/// boards, each registering a variant or two.
pub const DEVICE_MAX_INSTANCES: i32 = 10;
/// Default of [`DeviceAccess::max_variants`].
pub const DEVICE_MAX_VARIANTS: usize = 20;
/// Default of [`DeviceAccess::max_env`].
pub const DEVICE_MAX_ENV: usize = 32;
/// Default of [`DeviceAccess::max_value_length`].
pub const DEVICE_MAX_VALUE: usize = 4 * 1024;

/// What the Mutation's own token (the one its devices hold) may ask of its variants. Absent,
/// or any field of it absent: the defaults. The admin token is bound only by the hard maxima.
/// Unknown fields are ignored when decoding (the API server prunes them anyway), so that an
/// object written under a newer CRD cannot stop this operator's watch; the HTTP API refuses
/// them in its requests.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeviceAccess {
    /// The only env names the token may set: `NAME` for every container, or
    /// `<container>/NAME` for that container only (the device's value then reaches no other).
    /// Absent: any name, except the variables that change how a process loads or starts
    /// (LD_*, BASH_ENV, NODE_OPTIONS, PYTHON*, PATH, proxies, ...: see docs/security.md), and
    /// with spec.devices none at all; such a name listed here is allowed. Never a
    /// name that the base sets with valueFrom. Names are compared without case and with '-'
    /// and '.' as '_'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 192)))]
    pub env: Option<Vec<String>>,

    /// Most instances the token may give a variant (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000))]
    pub max_instances: Option<i32>,

    /// Most variants the Mutation may have after the token adds one (default 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 500))]
    pub max_variants: Option<i32>,

    /// Most env entries of a variant the token adds (default 32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 256))]
    pub max_env: Option<i32>,

    /// Longest env value, in bytes of UTF-8, of a variant the token adds (default 4096).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 32768))]
    pub max_value_length: Option<i32>,

    /// Most instances of all the Mutation's variants together after the token adds or scales
    /// one (default 40); scaling down is always allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 500000))]
    pub max_total_instances: Option<i32>,

    /// When `spec.service.type` is NodePort or LoadBalancer (a port on every node, an address
    /// on the LAN): most variants with such a Service after the token adds one (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 500))]
    pub max_exposed_services: Option<i32>,

    /// Whether the variants a token adds get the owner's Service (`<base>-<label>`): by
    /// default only when `labelPattern` is set (the owner chose the names); true opts in
    /// whatever the labels, false opts out. A variant not served is stored with
    /// `service: false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<bool>,

    /// The labels the token may give a variant: `*` stands for any characters (`board-*`).
    /// Absent: any label. A variant's label names its Deployment and Service
    /// (`<base>-<label>`), so this keeps a board from claiming a name such as `<base>-db`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[-a-z0-9*]+$"))]
    pub label_pattern: Option<String>,

    /// The node label keys the token may set in a variant's nodeSelector, to any value.
    /// Absent or empty: none; the token's variants run where the base's pods run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 317)))]
    pub node_selector: Vec<String>,

    /// The taint keys the token may tolerate in a variant's tolerations. Absent or
    /// empty: none. A toleration without a key, which tolerates every taint, is never the
    /// token's to send.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 317)))]
    pub tolerations: Vec<String>,
}

/// The schema of a variant's `env`: a map of strings, with the hard maxima of its size, its
/// names and its values, so kubectl gets the answer the HTTP API gives.
pub(super) fn env_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let names = format!("self.all(name, size(name) <= {MAX_ENV_NAME})");
    let message = format!("env names must be at most {MAX_ENV_NAME} characters");
    schemars::json_schema!({
        "type": "object",
        "maxProperties": MAX_ENV,
        "additionalProperties": { "type": "string", "maxLength": MAX_ENV_VALUE },
        "x-kubernetes-validations": [{ "rule": names, "message": message }]
    })
}

/// The schema of a container's own `env` in a variant: [`env_schema`] without its rule on the
/// names' length, which the API server would have to run for each of up to 500 variants x 64
/// containers x 256 names and refuses as too costly; a name that is too long makes the variant
/// Invalid instead (`validate_variant`), and the HTTP API refuses it.
pub(super) fn container_env_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "maxProperties": MAX_ENV,
        "additionalProperties": { "type": "string", "maxLength": MAX_ENV_VALUE }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // R32: the numbers written into the schema attributes are the constants.
    #[test]
    fn the_schema_carries_the_constants() {
        let schema = serde_json::to_value(schemars::schema_for!(DeviceAccess))
            .unwrap_or_else(|e| panic!("{e}"));
        let max = |field: &str| schema["properties"][field]["maximum"].as_f64();
        assert_eq!(max("maxInstances"), Some(f64::from(MAX_INSTANCES)));
        assert_eq!(max("maxVariants"), Some(MAX_VARIANTS as f64));
        assert_eq!(max("maxEnv"), Some(MAX_ENV as f64));
        assert_eq!(max("maxValueLength"), Some(MAX_ENV_VALUE as f64));
        let names = &schema["properties"]["env"];
        assert_eq!(
            names["items"]["maxLength"].as_u64(),
            Some(MAX_DEVICE_ENV_ENTRY as u64)
        );
        let env = serde_json::to_value(env_schema(&mut schemars::SchemaGenerator::default()))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(env["maxProperties"].as_u64(), Some(MAX_ENV as u64));
        assert_eq!(
            env["additionalProperties"]["maxLength"].as_u64(),
            Some(MAX_ENV_VALUE as u64)
        );
        let rule = env["x-kubernetes-validations"][0]["rule"].as_str();
        assert_eq!(rule, Some("self.all(name, size(name) <= 128)"));
        // and the variant's own fields, in both kinds
        let spec = |schema: schemars::Schema| {
            serde_json::to_value(schema).unwrap_or_else(|e| panic!("{e}"))
        };
        let variant = spec(schemars::schema_for!(super::super::Variant));
        let instances = &variant["properties"]["instances"]["maximum"];
        assert_eq!(instances.as_f64(), Some(f64::from(MAX_INSTANCES)));
        let mutation = spec(schemars::schema_for!(super::super::MutationSpec));
        let md = spec(schemars::schema_for!(super::super::MutantDeploymentSpec));
        assert_eq!(
            mutation["properties"]["variants"]["maxItems"].as_u64(),
            Some(MAX_VARIANTS as u64)
        );
        assert_eq!(
            md["properties"]["mutations"]["maxItems"].as_u64(),
            Some(MAX_VARIANTS as u64)
        );
    }
}
