//! Test fixtures of the custom resources, shared by the unit tests of every module.

use std::collections::BTreeMap;

use serde_json::json;

use super::{Mutation, MutationSpec, Variant, VariantState, VariantStatus};

/// A variant's status line, of Deployment `web-<label>`, asking for one replica.
pub(crate) fn variant_status(label: &str, state: VariantState, ready: i32) -> VariantStatus {
    VariantStatus {
        label: label.into(),
        state,
        message: None,
        deployment: format!("web-{label}"),
        replicas: 1,
        ready_replicas: ready,
    }
}

/// Mutation `name` in namespace `default`, of a minimal base, with `variants`.
pub(crate) fn mutation(name: &str, variants: Vec<Variant>) -> Mutation {
    let mut m = Mutation::new(
        name,
        MutationSpec {
            deployment: (&json!({"apiVersion": "apps/v1", "kind": "Deployment"})).into(),
            variants,
        },
    );
    m.metadata.namespace = Some("default".into());
    m
}

/// `pairs` as the map of labels or annotations.
pub(crate) fn map(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}
