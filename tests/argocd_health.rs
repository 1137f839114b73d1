//! R18: the Argo CD health check for Mutations, `deploy/argocd/health.lua`, run with a real
//! Lua 5.1 interpreter (Argo CD embeds gopher-lua, which is Lua 5.1) against Mutations built
//! from the operator's own types, so the status has exactly the shape the operator writes.
//! Also checks that `deploy/argocd/argocd-cm-patch.yaml` carries the same script.
//!
//! No cluster is needed, but the interpreter is: Debian package `lua5.1` (binary `lua5.1`), or
//! another Lua 5.1 named by `LUA`, e.g. `LUA=/usr/local/bin/lua cargo test --test argocd_health`.
//! Without one these tests fail, saying what to install; they never skip.
//!
//! Each Mutation is serialized with serde_json and written out as a Lua table literal, the way
//! Argo CD hands the object to the script: JSON null becomes nil, so `"message": null` is no
//! `message` key at all.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a failed step must fail the test"
)]

#[path = "common/lua.rs"]
mod lua;
#[path = "common/status.rs"]
mod status;

use std::path::Path;

use lua::{lua_value, run_lua, run_lua51};
use mutantops::crd::{
    Condition, Mutation, RolloutPhase, RolloutStatus, VariantService, VariantServicePort,
    VariantState,
};
use serde_json::{Value, json};
use status::{mutation, variant};

/// The ConfigMap key Argo CD reads the Mutation health check from.
const HEALTH_KEY: &str = "resource.customizations.health.neiam.org_Mutation";

/// Reads a file under `deploy/argocd/`.
fn argocd_file(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/argocd")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// What the health check returned.
#[derive(Debug, PartialEq, Eq)]
struct Health {
    status: String,
    message: String,
}

/// Runs `deploy/argocd/health.lua` with `obj` set to `mutation` as Argo CD would, in a Lua 5.1
/// interpreter, and returns its `hs.status` and `hs.message`.
fn health(mutation: &Mutation) -> Health {
    let json = serde_json::to_value(mutation).unwrap();
    let mut table = String::new();
    lua_value(&json, &mut table);
    let chunk = format!(
        "obj = {table}\n\
         local hs = (function()\n{script}\nend)()\n\
         print(type(hs.status) .. \" \" .. type(hs.message))\n\
         print(hs.status)\n\
         print(hs.message)\n",
        script = argocd_file("health.lua"),
    );
    let out = run_lua51(&chunk);
    let mut lines = out.lines();
    assert_eq!(
        lines.next(),
        Some("string string"),
        "hs.status and hs.message must be strings; output:\n{out}"
    );
    let status = lines.next().unwrap_or_default().to_owned();
    let message = lines.collect::<Vec<_>>().join("\n");
    Health { status, message }
}

fn expect(status: &str, message: &str) -> Health {
    Health {
        status: status.to_owned(),
        message: message.to_owned(),
    }
}

/// [`mutation`] with variant alpha Ready and variant beta in `state`, with `message`.
fn alpha_ready_and_beta(state: VariantState, message: Option<&str>) -> Mutation {
    let alpha = variant("alpha", VariantState::Ready, None);
    mutation(Some(vec![alpha, variant("beta", state, message)]), None)
}

#[test]
fn no_status_waits_for_the_operator() {
    let m = mutation(None, None);
    assert!(
        serde_json::to_value(&m)
            .unwrap()
            .get("status")
            .is_none_or(Value::is_null),
        "a new Mutation has no status"
    );
    assert_eq!(
        health(&m),
        expect("Progressing", "Waiting for the operator")
    );
}

#[test]
fn all_variants_ready_is_healthy_with_the_summary() {
    let m = alpha_ready_and_beta(VariantState::Ready, None);
    assert_eq!(health(&m), expect("Healthy", "2/2 variants ready"));
}

/// R18: a status written for an older spec says nothing of the latest one, however ready
/// its variants were: Argo CD must not call a sync healthy before the operator has acted.
#[test]
fn a_status_of_an_older_generation_is_progressing() {
    let mut m = alpha_ready_and_beta(VariantState::Ready, None);
    m.metadata.generation = Some(4);
    assert_eq!(
        health(&m),
        expect(
            "Progressing",
            "Waiting for the operator to act on generation 4"
        )
    );
    // Without observedGeneration (an operator that never reported it) the same holds.
    if let Some(status) = m.status.as_mut() {
        status.observed_generation = None;
    }
    assert_eq!(health(&m).status, "Progressing");
    // Caught up: healthy again.
    if let Some(status) = m.status.as_mut() {
        status.observed_generation = Some(4);
    }
    assert_eq!(health(&m), expect("Healthy", "2/2 variants ready"));
}

#[test]
fn no_variants_is_healthy() {
    let m = mutation(Some(vec![]), None);
    assert_eq!(
        serde_json::to_value(&m).unwrap()["status"]["variants"],
        json!([]),
        "the operator writes an empty list, not null"
    );
    assert_eq!(health(&m), expect("Healthy", "0/0 variants ready"));
}

/// R42: an idle variant is as its owner wants it: the Mutation is Healthy
/// and the summary counts it.
#[test]
fn an_idle_variant_is_healthy() {
    let m = alpha_ready_and_beta(VariantState::Idle, Some("no device uses it"));
    assert_eq!(health(&m), expect("Healthy", "2/2 variants ready (1 idle)"));
    let m = alpha_ready_and_beta(
        VariantState::Idle,
        Some("quiet hours until 07:00 Europe/Berlin"),
    );
    assert_eq!(m.status.as_ref().unwrap().conditions[0].status, "True");
}

/// [`alpha_ready_and_beta`] with beta in `state`, and its rollout (R43) in `phase`.
fn rolling(state: VariantState, phase: RolloutPhase, message: Option<&str>) -> Mutation {
    let mut m = alpha_ready_and_beta(state, None);
    m.status.as_mut().unwrap().rollout = Some(Box::new(RolloutStatus {
        revision: "5e1f0c2a9b".to_owned(),
        previous_revision: Some("77aa01bc3d".to_owned()),
        step: 2,
        phase,
        message: message.map(str::to_owned),
        ..RolloutStatus::default()
    }));
    m
}

// R43: a rollout held at a pause step is Suspended, with how to resume it
#[test]
fn a_paused_rollout_is_suspended() {
    let said = "at pause step 2: resume it with annotation \
                mutantops.neiam.org/rollout-resume=5e1f0c2a9b/2/<a new word>";
    let m = rolling(VariantState::Ready, RolloutPhase::Paused, Some(said));
    assert_eq!(health(&m), expect("Suspended", &format!("rollout: {said}")));
}

// R43: a failed step is Degraded with its message; a variant's own problem comes first
#[test]
fn a_failed_rollout_is_degraded_after_a_variants_own_problem() {
    let said = "step 0 failed: beta not available with revision 5e1f0c2a9b within 300 s";
    let m = rolling(
        VariantState::Progressing,
        RolloutPhase::Degraded,
        Some(said),
    );
    assert_eq!(health(&m), expect("Degraded", &format!("rollout: {said}")));
    let m = rolling(VariantState::Invalid, RolloutPhase::Degraded, Some(said));
    assert_eq!(health(&m), expect("Degraded", "beta: Invalid"));
}

// R43: a rollout at a step is Progressing and says where; a complete one changes nothing
#[test]
fn a_running_rollout_is_progressing_and_a_complete_one_changes_nothing() {
    let m = rolling(VariantState::Progressing, RolloutPhase::Progressing, None);
    assert_eq!(
        health(&m),
        expect("Progressing", "rollout of revision 5e1f0c2a9b at step 2")
    );
    let m = rolling(VariantState::Ready, RolloutPhase::Complete, None);
    assert_eq!(health(&m), expect("Healthy", "2/2 variants ready"));
}

/// The condition the operator writes while most of a Mutation's devices went silent together
/// (R42: a power cut is not a departure).
fn site_silent() -> Condition {
    Condition {
        type_: "SiteSilent".to_owned(),
        status: "True".to_owned(),
        reason: "DevicesSilentTogether".to_owned(),
        message: "3 of 4 devices went silent together".to_owned(),
        last_transition_time: "2025-01-02T03:04:05Z".to_owned(),
        observed_generation: None,
    }
}

/// R42: a silent site is Degraded, naming the condition, over a held or running rollout and
/// variants under way; a variant's own problem and a failed step are named first.
#[test]
fn a_silent_site_is_degraded_after_the_mutations_own_problems() {
    let said = "SiteSilent: 3 of 4 devices went silent together";
    let silent = |mut m: Mutation| {
        m.status.as_mut().unwrap().conditions.push(site_silent());
        m
    };
    for m in [
        alpha_ready_and_beta(VariantState::Ready, None),
        alpha_ready_and_beta(VariantState::Idle, Some("no device uses it")),
        alpha_ready_and_beta(VariantState::Progressing, None),
        rolling(
            VariantState::Ready,
            RolloutPhase::Paused,
            Some("at pause step 2"),
        ),
        rolling(VariantState::Progressing, RolloutPhase::Progressing, None),
    ] {
        assert_eq!(health(&silent(m)), expect("Degraded", said));
    }
    let m = silent(alpha_ready_and_beta(
        VariantState::Conflict,
        Some("label repeats"),
    ));
    assert_eq!(health(&m), expect("Degraded", "beta: label repeats"));
    let m = silent(rolling(
        VariantState::Ready,
        RolloutPhase::Degraded,
        Some("step 0 failed"),
    ));
    assert_eq!(health(&m), expect("Degraded", "rollout: step 0 failed"));
    // Only while it is True.
    let mut m = silent(alpha_ready_and_beta(VariantState::Ready, None));
    m.status.as_mut().unwrap().conditions[1].status = "False".to_owned();
    assert_eq!(health(&m), expect("Healthy", "2/2 variants ready"));
}

#[test]
fn a_progressing_variant_is_progressing() {
    let m = alpha_ready_and_beta(VariantState::Progressing, None);
    assert_eq!(health(&m), expect("Progressing", "1/2 variants ready"));
}

#[test]
fn an_invalid_variant_is_degraded_with_its_message() {
    let message = "env name \"1BAD\" is not a C identifier";
    let m = alpha_ready_and_beta(VariantState::Invalid, Some(message));
    assert_eq!(health(&m), expect("Degraded", &format!("beta: {message}")));
}

#[test]
fn a_conflicting_variant_is_degraded_with_its_message() {
    let message = "Deployment \"web-beta\" exists and is not managed by this Mutation";
    let m = alpha_ready_and_beta(VariantState::Conflict, Some(message));
    assert_eq!(health(&m), expect("Degraded", &format!("beta: {message}")));
}

/// R36: a variant's Service goes through the same states, so the script (unchanged) reports a
/// Service that someone else owns as Degraded, and a served one as Healthy.
#[test]
fn variant_services_keep_the_meaning_of_the_states() {
    let message = "Service \"web-beta\" already exists and has no controller; it is left alone";
    let mut alpha = variant("alpha", VariantState::Ready, None);
    alpha.service = Some(Box::new(VariantService {
        name: "web-alpha".into(),
        type_: "NodePort".into(),
        dns: "web-alpha.default.svc".into(),
        cluster_ip: Some("10.43.0.7".into()),
        ports: vec![VariantServicePort {
            name: Some("http".into()),
            port: 80,
            protocol: "TCP".into(),
            node_port: Some(30080),
        }],
        ingress: vec![],
    }));
    let served = mutation(Some(vec![alpha.clone()]), None);
    assert_eq!(health(&served), expect("Healthy", "1/1 variants ready"));
    let m = mutation(
        Some(vec![
            alpha,
            variant("beta", VariantState::Conflict, Some(message)),
        ]),
        None,
    );
    assert_eq!(health(&m), expect("Degraded", &format!("beta: {message}")));
}

#[test]
fn a_variant_without_message_is_named_with_its_state() {
    let m = mutation(
        Some(vec![variant("beta", VariantState::Invalid, None)]),
        None,
    );
    assert_eq!(
        serde_json::to_value(&m).unwrap()["status"]["variants"][0]["message"],
        Value::Null,
        "the operator writes message: null"
    );
    assert_eq!(health(&m), expect("Degraded", "beta: Invalid"));

    let m = mutation(
        Some(vec![variant("gamma", VariantState::Conflict, None)]),
        None,
    );
    assert_eq!(health(&m), expect("Degraded", "gamma: Conflict"));
}

#[test]
fn degraded_wins_over_progressing_and_names_the_first_problem() {
    let m = mutation(
        Some(vec![
            variant("alpha", VariantState::Progressing, None),
            variant("beta", VariantState::Conflict, Some("label repeats")),
            variant(
                "gamma",
                VariantState::Invalid,
                Some("instances is negative"),
            ),
            variant("delta", VariantState::Progressing, None),
        ]),
        None,
    );
    assert_eq!(health(&m), expect("Degraded", "beta: label repeats"));
}

#[test]
fn an_invalid_base_is_degraded_through_its_variants() {
    // With an invalid base the operator marks every variant Invalid (controller::reconcile).
    let problem = "spec.template.spec.containers is missing";
    let message = format!("not applied while the base is invalid: {problem}");
    let m = mutation(
        Some(vec![
            variant("alpha", VariantState::Invalid, Some(&message)),
            variant("beta", VariantState::Invalid, Some(&message)),
        ]),
        Some(problem),
    );
    assert_eq!(health(&m), expect("Degraded", &format!("alpha: {message}")));
}

#[test]
fn strings_reach_lua_byte_for_byte() {
    let tricky = "quote \" backslash \\ newline\nreturn\r tab\t nul\0 bell\x07 ümlaut ✓ ]] [[ end";
    let mut table = String::new();
    lua_value(
        &json!({ "s": tricky, "n": null, "a": [1, null, 2.5, true] }),
        &mut table,
    );
    let out = run_lua(&format!(
        "local t = {table}\n\
         io.write(tostring(t.n), \" \", #t.a, \" \", t.a[1], \" \", t.a[2], \" \", tostring(t.a[3]), \"|\")\n\
         io.write(t.s)\n"
    ));
    let (summary, text) = out.split_once('|').unwrap();
    assert_eq!(
        summary, "nil 3 1 2.5 true",
        "null dropped, numbers and booleans kept"
    );
    assert_eq!(text, tricky, "the string reads back unchanged");
}

#[test]
fn the_argocd_cm_patch_carries_health_lua() {
    let script = argocd_file("health.lua");
    let patch: Value = serde_saphyr::from_str(&argocd_file("argocd-cm-patch.yaml"))
        .expect("argocd-cm-patch.yaml is YAML");
    assert_eq!(patch["apiVersion"].as_str(), Some("v1"));
    assert_eq!(patch["kind"].as_str(), Some("ConfigMap"));
    assert_eq!(patch["metadata"]["name"].as_str(), Some("argocd-cm"));
    assert_eq!(patch["metadata"]["namespace"].as_str(), Some("argocd"));
    let data = patch["data"].as_object().expect("data is a mapping");
    assert_eq!(
        data.keys().map(String::as_str).collect::<Vec<_>>(),
        [HEALTH_KEY],
        "data holds the health check and nothing else"
    );
    let embedded = patch["data"][HEALTH_KEY]
        .as_str()
        .unwrap_or_else(|| panic!("data.{HEALTH_KEY} is a string"));
    assert!(
        embedded == script,
        "the Lua in argocd-cm-patch.yaml differs from health.lua:\n--- yaml ---\n{embedded}\n\
         --- health.lua ---\n{script}"
    );
}
