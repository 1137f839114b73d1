//! Test fixtures of the custom resources, shared by the unit tests of every module.

use std::collections::BTreeMap;

use serde_json::json;

use super::spec::{
    MutantDeployment, MutantDeploymentSpec, Mutation, MutationSpec, Variant, VariantState,
    VariantStatus,
};

/// A variant's status line, of Deployment `web-<label>`, asking for one replica.
pub(crate) fn variant_status(label: &str, state: VariantState, ready: i32) -> VariantStatus {
    VariantStatus {
        label: label.into(),
        state,
        message: None,
        deployment: format!("web-{label}"),
        replicas: 1,
        ready_replicas: ready,
        service: None,
        sleep: None,
        screen: None,
    }
}

/// Variant `label` with `env`, asking for `instances`.
pub(crate) fn variant(label: &str, env: &[(&str, &str)], instances: i32) -> Variant {
    Variant {
        label: label.into(),
        env: env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        instances,
        ..Variant::default()
    }
}

/// The minimal base both owner fixtures run.
fn minimal_base() -> serde_json::Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment"})
}

/// MutantDeployment `name` in namespace `default`, of a minimal base, with `variants`.
pub(crate) fn mutant_deployment(name: &str, variants: Vec<Variant>) -> MutantDeployment {
    let mut md = MutantDeployment::new(
        name,
        MutantDeploymentSpec {
            deployment: (&minimal_base()).into(),
            mutations: variants,
            service: None,
            rollout: None,
            screen: None,
        },
    );
    md.metadata.namespace = Some("default".into());
    md
}

/// Mutation `name` in namespace `default`, of a minimal base, with `variants`.
pub(crate) fn mutation(name: &str, variants: Vec<Variant>) -> Mutation {
    let mut m = Mutation::new(
        name,
        MutationSpec {
            deployment: (&minimal_base()).into(),
            variants,
            device_access: None,
            service: None,
            devices: None,
            rollout: None,
            screen: None,
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
