//! Mutations with the status the operator writes, built from its own types (its summary and
//! Ready condition included), for the tests of the Lua that reads that status: the Argo CD
//! health check and the Karmada resource interpreter. A module of its own (not part of
//! `common`), like files.rs.
#![allow(dead_code, reason = "each test that includes this uses part of it")]
#![allow(clippy::unwrap_used, reason = "a failed step must fail the test")]

use mutantops::{
    crd::{
        Condition, DeviceState, DeviceStatus, DeviceSummary, Mutation, MutationSpec, OwnerStatus,
        Reported, RolloutPhase, RolloutStatus, Variant, VariantState, VariantStatus,
    },
    variant::{ready_condition, summary},
};
use serde_json::{Value, json};

/// A base Deployment as a Mutation's spec holds it.
pub fn base() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": "web" },
        "spec": {
            "selector": { "matchLabels": { "app": "web" } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": { "containers": [{ "name": "web", "image": "nginx:1.27" }] }
            }
        }
    })
}

/// One variant's status as the operator reports it: replicas ready only when Ready.
pub fn variant(label: &str, state: VariantState, message: Option<&str>) -> VariantStatus {
    VariantStatus {
        label: label.to_owned(),
        state,
        message: message.map(str::to_owned),
        deployment: format!("web-{label}"),
        replicas: 2,
        ready_replicas: if state == VariantState::Ready { 2 } else { 0 },
        service: None,
        sleep: None,
        screen: None,
    }
}

/// A Mutation named web (namespace default, generation 3) with one spec variant per status
/// entry and, if `variants` is given, the status the operator would write for them (summary
/// and Ready condition included, observedGeneration 3).
pub fn mutation(variants: Option<Vec<VariantStatus>>, base_error: Option<&str>) -> Mutation {
    let spec_variants = variants
        .iter()
        .flatten()
        .map(|v| Variant {
            label: v.label.clone(),
            env: [("FEATURE".to_owned(), v.label.clone())]
                .into_iter()
                .collect(),
            instances: v.replicas,
            ..Variant::default()
        })
        .collect();
    let mut m = Mutation::new(
        "web",
        MutationSpec {
            deployment: (&base()).into(),
            variants: spec_variants,
            device_access: None,
            service: None,
            devices: None,
            rollout: None,
            screen: None,
        },
    );
    m.metadata.namespace = Some("default".to_owned());
    m.metadata.generation = Some(3);
    m.status = variants.map(|variants| OwnerStatus {
        observed_generation: Some(3),
        secret: Some("web-secret".to_owned()),
        summary: summary(&variants),
        message: base_error.map(|e| format!("invalid base deployment: {e}")),
        conditions: vec![ready_condition(
            &variants,
            base_error,
            Some(3),
            None,
            "2025-01-01T00:00:00Z",
        )],
        variants,
        ..OwnerStatus::default()
    });
    m
}

/// A Mutation with variant alpha Ready and beta in `beta`.
pub fn pair(beta: VariantState) -> Mutation {
    let alpha = variant("alpha", VariantState::Ready, None);
    mutation(Some(vec![alpha, variant("beta", beta, None)]), None)
}

/// `m` with a rollout of revision 5e1f0c2a9b at step 2 in `phase`, beta failed.
pub fn with_rollout(mut m: Mutation, phase: RolloutPhase, message: Option<&str>) -> Mutation {
    m.status.as_mut().unwrap().rollout = Some(Box::new(RolloutStatus {
        revision: "5e1f0c2a9b".to_owned(),
        step: 2,
        phase,
        message: message.map(str::to_owned),
        failed: vec!["beta".to_owned()],
        ..RolloutStatus::default()
    }));
    m
}

/// `m` with condition SiteSilent, as the operator writes it (R42).
pub fn silent(mut m: Mutation) -> Mutation {
    m.status.as_mut().unwrap().conditions.push(Condition {
        type_: "SiteSilent".to_owned(),
        status: "True".to_owned(),
        reason: "DevicesSilentTogether".to_owned(),
        message: "3 of 3 devices went silent together".to_owned(),
        last_transition_time: "2025-01-02T03:04:05Z".to_owned(),
        observed_generation: None,
    });
    m
}

/// `m` with `online`, `late` and `gone` devices listed, and the summary of that list.
pub fn with_devices(mut m: Mutation, online: usize, late: usize, gone: usize) -> Mutation {
    let states = [
        (DeviceState::Online, online),
        (DeviceState::Late, late),
        (DeviceState::Gone, gone),
    ];
    let devices: Vec<DeviceStatus> = states
        .iter()
        .flat_map(|(state, n)| std::iter::repeat_n(*state, *n))
        .enumerate()
        .map(|(i, state)| DeviceStatus {
            id: format!("board-{i}"),
            variant: "alpha".to_owned(),
            enrolled_at: "2025-01-01T00:00:00Z".to_owned(),
            last_seen: "2025-01-01T00:00:00Z".to_owned(),
            state,
            reported: Reported::default(),
            poll: None,
        })
        .collect();
    let count = |s| i32::try_from(devices.iter().filter(|d| d.state == s).count()).unwrap();
    let status = m.status.as_mut().unwrap();
    status.device_summary = Some(Box::new(DeviceSummary {
        total: i32::try_from(devices.len()).unwrap(),
        online: count(DeviceState::Online),
        late: count(DeviceState::Late),
        gone: count(DeviceState::Gone),
    }));
    status.devices = devices;
    m
}
