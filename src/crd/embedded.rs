//! [`EmbeddedJson`]: a JSON value held as compact text, the form of an owner's base Deployment
//! in memory.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Value, value::RawValue};

use super::compact::CompactText;

/// Any JSON value, held as its compact text: decoded from whatever JSON was given (a
/// malformed base is still decoded, and reported by the reconcile), written out as is, and
/// parsed only where it is read ([`EmbeddedJson::value`]). Made from a `Value`, its keys are
/// sorted; decoded, they keep the order given.
#[derive(Clone, Debug)]
pub struct EmbeddedJson(Box<RawValue>);

impl EmbeddedJson {
    /// The value as a tree, for reading it.
    pub fn value(&self) -> Value {
        // The text was written by serde_json from a Value: it parses.
        serde_json::from_str(self.0.get()).unwrap_or(Value::Null)
    }

    /// The compact text.
    pub fn text(&self) -> &str {
        self.0.get()
    }
}

impl From<&Value> for EmbeddedJson {
    fn from(value: &Value) -> Self {
        let text = value.to_string();
        // A Value always serializes to valid JSON; `null` is the unreachable fallback.
        EmbeddedJson(RawValue::from_string(text).unwrap_or_else(|_| RawValue::NULL.to_owned()))
    }
}

impl PartialEq for EmbeddedJson {
    /// Compares the values (the texts keep their keys in the order given).
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get() || self.value() == other.value()
    }
}

impl Serialize for EmbeddedJson {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for EmbeddedJson {
    /// Written straight out as compact text as it is read ([`super::compact`]: no `Value` tree
    /// in between), from any deserializer (watch events are buffered by their tag).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let CompactText(text) = CompactText::deserialize(deserializer)?;
        RawValue::from_string(text)
            .map(EmbeddedJson)
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::crd::MutationSpec;

    // R1, R10: the base is kept as written, whatever it holds, as compact text.
    #[test]
    fn an_embedded_base_is_kept_as_compact_text() {
        let spaced: MutationSpec = serde_json::from_str(
            r#"{"deployment": { "kind": "Deployment", "apiVersion": "apps/v1",
                 "metadata": {"name": "web"} }, "variants": []}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            spaced.deployment.text(),
            r#"{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"web"}}"#
        );
        let reordered = EmbeddedJson::from(&json!({
            "metadata": {"name": "web"}, "apiVersion": "apps/v1", "kind": "Deployment"
        }));
        assert_eq!(spaced.deployment, reordered);
        assert_eq!(reordered.value()["metadata"]["name"], "web");
        // written out as is, inside the owner
        let written = serde_json::to_string(&spaced).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            written.starts_with(r#"{"deployment":{"kind":"Deployment","#),
            "{written}"
        );
        // through a buffering deserializer too (a watch event read by its tag first)
        let from_value: MutationSpec =
            serde_json::from_value(json!({"deployment": 7})).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(from_value.deployment.value(), json!(7));
        assert_eq!(
            serde_json::to_value(&from_value).unwrap_or_default()["deployment"],
            json!(7)
        );
    }
}
