//! What a variant may change of where and with what its pods run (R37): the types of a
//! variant's `tolerations` and `containers` (its `nodeSelector` is a plain map), and their
//! schemas with the hard maxima of [`limits`](super::limits).
//!
//! They are decoded as the API server stores them and ignore unknown fields, like
//! [`DeviceAccess`](super::DeviceAccess), so that an object written under a newer CRD cannot
//! stop this operator's watch; the HTTP API has request types of its own that refuse them.
//! Merging them over the base is `variant::placement`'s work.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::limits::{MAX_LABEL_KEY, MAX_RESOURCES};
use super::strmap::StrMap;

/// A toleration, as Kubernetes writes one in a pod spec: the variant's pods may be scheduled
/// onto (and stay on) nodes with a matching taint. Empty fields are left out, as Kubernetes
/// leaves them out.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Toleration {
    /// The taint key tolerated. Empty, with operator Exists, tolerates every taint.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 317))]
    pub key: String,

    /// Equal (the default: the taint's value must be `value`) or Exists (any value).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("enum" = ["Equal", "Exists"]))]
    pub operator: String,

    /// The taint value matched by Equal; empty with Exists.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 63))]
    pub value: String,

    /// The taint effect matched: NoSchedule, PreferNoSchedule or NoExecute; empty: every
    /// effect.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("enum" = ["NoSchedule", "PreferNoSchedule", "NoExecute"]))]
    pub effect: String,

    /// With effect NoExecute: how many seconds a pod stays on a node after the taint appears;
    /// absent: for ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
}

/// What a variant changes in one container of the base: its image, its resources, env of its
/// own, or any of them.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerOverride {
    /// Name of a container of the base's pod template (`containers`, not `initContainers`).
    /// A name the base does not have makes the variant Invalid.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,

    /// The image the container runs in this variant instead of the base's. At most 1024
    /// characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub image: Option<String>,

    /// Requests and limits merged over the container's own: a resource named here replaces
    /// the base's value of that resource, the others are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,

    /// Environment variables added to this container only, after the variant's `env` (which
    /// goes into every container): a name here replaces one of the same name. A device's env
    /// that the owner allows only for this container (`deviceAccess.env` naming
    /// `<container>/<NAME>`) lands here. The bounds of `env` (a name too long makes the
    /// variant Invalid).
    #[serde(default, skip_serializing_if = "StrMap::is_empty")]
    #[schemars(schema_with = "super::limits::container_env_schema")]
    pub env: StrMap,
}

/// Compute resources of a container, as in a pod spec: resource name (`cpu`, `memory`,
/// `ephemeral-storage`, ...) to quantity.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    /// The most the container may use, by resource name. At most 32 entries.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "quantities")]
    pub limits: BTreeMap<String, Quantity>,

    /// What the scheduler reserves for the container, by resource name. At most 32 entries.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "quantities")]
    pub requests: BTreeMap<String, Quantity>,
}

/// A Kubernetes quantity (`100m`, `64Mi`, `1`), held as written. YAML and JSON may give it as
/// a number; it is kept as the number's text and always written as a string.
#[derive(Serialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
#[serde(transparent)]
pub struct Quantity(pub String);

/// The syntax of a quantity, as Kubernetes' own CRD generators write it.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Quantity;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a quantity: a string such as \"100m\" or \"64Mi\", or a number")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Quantity, E> {
                Ok(Quantity(v.to_owned()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Quantity, E> {
                Ok(Quantity(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Quantity, E> {
                Ok(Quantity(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Quantity, E> {
                Ok(Quantity(v.to_string()))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl JsonSchema for Quantity {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Quantity".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": true
        })
    }

    fn inline_schema() -> bool {
        true
    }
}

/// The schema of `limits` and `requests`: resource names to quantities, at most
/// [`MAX_RESOURCES`] of them, names as long as a label key at most.
fn quantities(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let names = format!("self.all(name, size(name) <= {MAX_LABEL_KEY})");
    let message = format!("resource names must be at most {MAX_LABEL_KEY} characters");
    let quantity = generator.subschema_for::<Quantity>();
    schemars::json_schema!({
        "type": "object",
        "maxProperties": MAX_RESOURCES,
        "additionalProperties": quantity,
        "x-kubernetes-validations": [{ "rule": names, "message": message }]
    })
}

/// The schema of a variant's `nodeSelector`: label keys to label values, at most
/// [`MAX_NODE_SELECTOR`](super::limits::MAX_NODE_SELECTOR) of them.
pub(super) fn node_selector_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    use super::limits::{MAX_LABEL_VALUE, MAX_NODE_SELECTOR};
    let keys = format!("self.all(key, size(key) <= {MAX_LABEL_KEY})");
    let message = format!("nodeSelector keys must be at most {MAX_LABEL_KEY} characters");
    schemars::json_schema!({
        "type": "object",
        "maxProperties": MAX_NODE_SELECTOR,
        "additionalProperties": { "type": "string", "maxLength": MAX_LABEL_VALUE },
        "x-kubernetes-validations": [{ "rule": keys, "message": message }]
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{
        Variant,
        limits::{
            MAX_CONTAINERS, MAX_IMAGE, MAX_LABEL_KEY, MAX_LABEL_VALUE, MAX_NODE_SELECTOR,
            MAX_TOLERATIONS,
        },
    };
    use super::*;

    // R37: the numbers written into the schema attributes are the constants of `limits`.
    #[test]
    fn the_schema_carries_the_constants() {
        let schema =
            serde_json::to_value(schemars::schema_for!(Variant)).unwrap_or_else(|e| panic!("{e}"));
        let property = |name: &str| {
            let p = &schema["properties"][name];
            match p.get("$ref").and_then(|r| r.as_str()) {
                Some(r) => schema.pointer(r.trim_start_matches('#')).cloned(),
                None => Some(p.clone()),
            }
            .unwrap_or_default()
        };
        let definition = |name: &str| schema["$defs"][name].clone();
        let max = |v: &serde_json::Value, field: &str| v[field].as_u64();
        let selector = property("nodeSelector");
        assert_eq!(
            max(&selector, "maxProperties"),
            Some(MAX_NODE_SELECTOR as u64)
        );
        assert_eq!(
            max(&selector["additionalProperties"], "maxLength"),
            Some(MAX_LABEL_VALUE as u64)
        );
        assert_eq!(
            max(&property("tolerations"), "maxItems"),
            Some(MAX_TOLERATIONS as u64)
        );
        let containers = property("containers");
        assert_eq!(max(&containers, "maxItems"), Some(MAX_CONTAINERS as u64));
        assert_eq!(containers["x-kubernetes-list-map-keys"], json!(["name"]));
        let toleration = definition("Toleration");
        assert_eq!(
            max(&toleration["properties"]["key"], "maxLength"),
            Some(MAX_LABEL_KEY as u64)
        );
        assert_eq!(
            max(&toleration["properties"]["value"], "maxLength"),
            Some(MAX_LABEL_VALUE as u64)
        );
        let container = definition("ContainerOverride");
        assert_eq!(
            max(&container["properties"]["image"], "maxLength"),
            Some(MAX_IMAGE as u64)
        );
        let access = serde_json::to_value(schemars::schema_for!(super::super::DeviceAccess))
            .unwrap_or_else(|e| panic!("{e}"));
        for field in ["nodeSelector", "tolerations"] {
            let keys = &access["properties"][field];
            assert_eq!(max(keys, "maxItems"), Some(MAX_NODE_SELECTOR as u64));
            assert_eq!(max(&keys["items"], "maxLength"), Some(MAX_LABEL_KEY as u64));
        }
        assert_eq!(MAX_NODE_SELECTOR, MAX_TOLERATIONS);
    }

    // R37: quantities are taken as YAML and JSON give them, numbers too, and written as text;
    // a variant of only a label decodes to the default and writes no new field, so objects
    // and the API's patches stay as they were.
    #[test]
    fn quantities_and_absent_fields_decode_as_written() {
        let v: Variant = serde_json::from_value(json!({
            "label": "lilygo47",
            "containers": [{"name": "snap", "resources": {
                "limits": {"cpu": 1, "memory": "64Mi"}, "requests": {"cpu": 0.25}
            }}],
            "unknownLater": true
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let resources = v.containers[0].resources.clone().unwrap_or_default();
        assert_eq!(resources.limits["cpu"], Quantity("1".into()));
        assert_eq!(resources.requests["cpu"], Quantity("0.25".into()));
        assert_eq!(
            serde_json::to_value(&resources).unwrap_or_default(),
            json!({"limits": {"cpu": "1", "memory": "64Mi"}, "requests": {"cpu": "0.25"}})
        );
        assert!(serde_json::from_value::<Quantity>(json!(true)).is_err());
        let plain: Variant =
            serde_json::from_value(json!({"label": "a"})).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            plain,
            Variant {
                label: "a".into(),
                ..Variant::default()
            }
        );
        assert_eq!(
            serde_json::to_value(&plain).unwrap_or_default(),
            json!({"label": "a", "env": {}, "instances": 1})
        );
    }
}
