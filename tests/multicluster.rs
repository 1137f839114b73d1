//! R54: what `deploy/` ships for multi-cluster engines, tested without a cluster.
//!
//! The Lua of the Karmada customization is read from
//! `deploy/karmada/resourceinterpretercustomization.yaml` and run in a Lua 5.1 interpreter set
//! up as Karmada's VM (gopher-lua, Lua 5.1: no `io`, and `loadstring`, `setmetatable`... fail),
//! against Mutations built from the operator's own types, handed over and read back as Karmada
//! converts them: JSON null is nil, an empty table comes back as `[]`, and a field holding `[]`
//! is dropped. Its health is checked against the Argo CD check (R18) on the same objects; then
//! the replicas, what a site reflects, three sites' statuses summed exactly into a status that
//! reads back as the operator's own type, and the retention. The Mutation of the OCM
//! ManifestWork and of the Fleet bundle must read as the operator's type and match the example
//! they copy, and every OCM feedback path must find one value in a status built from the types.
//!
//! Needs Debian package `lua5.1` (or `LUA=/path/to/lua`); without it the Lua tests fail, saying
//! so.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a failed step must fail the test"
)]

#[path = "common/files.rs"]
mod files;
#[path = "common/karmada.rs"]
mod karmada;
#[path = "common/lua.rs"]
mod lua;
#[path = "common/status.rs"]
mod status;

use std::collections::BTreeSet;

use files::read;
use karmada::{
    KUBE, as_stored, customization, item, karmada, lost, on_site, reads_as_owner_status,
    script_literal, through_lua,
};
use lua::{lua_literal, run_lua51};
use mutantops::crd::{DeviceSummary, Mutation, RolloutPhase, VariantState};
use serde_json::{Value, json};
use status::{mutation, pair, silent, variant, with_devices, with_rollout};

/// The example the OCM and Fleet Mutations copy, variants left out.
const EXAMPLE: &str = "deploy/examples/screens/browser-snap-screens.yaml";
const RUNTIME_VARIANTS: &str = "mutantops.neiam.org/runtime-variants";

fn yaml(path: &str) -> Value {
    serde_saphyr::from_str(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn json_of(m: &Mutation) -> Value {
    serde_json::to_value(m).unwrap()
}

/// What Argo CD's check (deploy/argocd/health.lua) says of `m`.
fn argo(m: &Value) -> String {
    let script = read("deploy/argocd/health.lua");
    let literal = lua_literal(m);
    run_lua51(&format!(
        "obj = {literal}\nlocal hs = (function()\n{script}\nend)()\nio.write(hs.status)"
    ))
}

/// The hub's Mutation (generation 7), and what AggregateStatus made of it and `items`.
fn aggregate(previous: Option<Value>, items: Vec<Value>) -> (Value, Value) {
    let mut hub = json_of(&mutation(None, None));
    hub["metadata"]["generation"] = json!(7);
    hub["metadata"]["creationTimestamp"] = json!("2024-12-01T00:00:00Z");
    if let Some(status) = previous {
        hub["status"] = status;
    }
    let args = [hub.clone(), Value::Array(items)];
    let out = karmada("statusAggregation", "AggregateStatus", &args, 1).remove(0);
    (hub, out)
}

// ---- Karmada ----

#[test]
fn the_customization_targets_mutations_with_what_karmada_calls() {
    let doc = customization();
    assert_eq!(doc["apiVersion"], "config.karmada.io/v1alpha1");
    assert_eq!(doc["kind"], "ResourceInterpreterCustomization");
    assert!(doc["metadata"].get("namespace").is_none(), "cluster-scoped");
    assert_eq!(
        doc["spec"]["target"],
        json!({ "apiVersion": "neiam.org/v1", "kind": "Mutation" })
    );
    let functions = [
        ("healthInterpretation", "InterpretHealth"),
        ("replicaResource", "GetReplicas"),
        ("statusReflection", "ReflectStatus"),
        ("statusAggregation", "AggregateStatus"),
        ("retention", "Retain"),
    ];
    let customizations = doc["spec"]["customizations"].as_object().unwrap();
    let names: BTreeSet<&str> = customizations.keys().map(String::as_str).collect();
    let expected: BTreeSet<&str> = functions.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, expected);
    for (name, function) in functions {
        let keys: Vec<&String> = customizations[name].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["luaScript"], "{name}");
        let source = script_literal(name);
        let out = run_lua51(&format!(
            "{KUBE}\nassert(loadstring({source}))()\nio.write(type({function}))"
        ));
        assert_eq!(out, "function", "{name} defines {function}");
    }
}

/// R18: Karmada's health is true exactly when Argo CD says Healthy: a held rollout
/// (Suspended), a status not there yet or of an older generation, a variant or a step under
/// way (Progressing) and condition SiteSilent (Degraded) are all false.
#[test]
fn health_is_true_exactly_when_argo_cd_says_healthy() {
    let mut older = pair(VariantState::Ready);
    older.metadata.generation = Some(4);
    let invalid_base = mutation(
        Some(vec![variant("alpha", VariantState::Invalid, Some("no"))]),
        Some("spec.template is missing"),
    );
    let cases = [
        ("ready", pair(VariantState::Ready), true),
        ("idle", pair(VariantState::Idle), true),
        ("no variants", mutation(Some(vec![]), None), true),
        ("no status", mutation(None, None), false),
        ("an older generation", older, false),
        ("progressing", pair(VariantState::Progressing), false),
        ("invalid", pair(VariantState::Invalid), false),
        ("conflict", pair(VariantState::Conflict), false),
        ("an invalid base", invalid_base, false),
        ("site silent", silent(pair(VariantState::Ready)), false),
        ("site silent, idle", silent(pair(VariantState::Idle)), false),
    ];
    let rollouts = [
        (RolloutPhase::Paused, false),
        (RolloutPhase::Progressing, false),
        (RolloutPhase::Degraded, false),
        (RolloutPhase::Complete, true),
    ]
    .map(|(phase, healthy)| {
        let m = with_rollout(pair(VariantState::Ready), phase, Some("at pause step 2"));
        (phase.as_str(), m, healthy)
    });
    let mut said = BTreeSet::new();
    for (case, m, healthy) in cases.into_iter().chain(rollouts) {
        let value = json_of(&m);
        let argo = argo(&value);
        let karmada = karmada("healthInterpretation", "InterpretHealth", &[value], 1).remove(0);
        assert_eq!(karmada, Value::Bool(healthy), "{case} (Argo CD: {argo})");
        assert_eq!(healthy, argo == "Healthy", "{case}: Argo CD says {argo}");
        said.insert(argo);
    }
    let all = ["Degraded", "Healthy", "Progressing", "Suspended"];
    assert_eq!(
        said,
        BTreeSet::from(all.map(str::to_owned)),
        "every state of Argo CD's met"
    );
}

#[test]
fn replicas_are_the_variants_instances_and_requirements_the_bases_pod() {
    let mut m = json_of(&pair(VariantState::Ready));
    m["spec"]["variants"] = json!([
        { "label": "a", "instances": 3 }, { "label": "b", "instances": 0 }, { "label": "c" }
    ]);
    let got = karmada("replicaResource", "GetReplicas", &[m.clone()], 2);
    let requirement = json!({
        "resourceRequest": { "cpu": "100m" }, "nodeClaim": { "nodeSelector": { "app": "web" } }
    });
    assert_eq!(got, [json!(4), requirement], "3 + 0 + 1 (left out)");
    // A template the library cannot read gives no requirement, the replicas all the same.
    m["spec"]["deployment"]["spec"]["template"]["spec"]["containers"][0]["image"] = json!("broken");
    let got = karmada("replicaResource", "GetReplicas", &[m.clone()], 2);
    assert_eq!(got, [json!(4), Value::Null]);
    m["spec"]["variants"] = json!([]);
    m["spec"]["deployment"]["spec"]
        .as_object_mut()
        .unwrap()
        .remove("template");
    let got = karmada("replicaResource", "GetReplicas", &[m], 2);
    assert_eq!(got, [json!(0), Value::Null]);
}

/// A site reflects its counts, conditions, device counts and rollout and the variants that
/// are not Ready or Idle (at most 20, Invalid and Conflict first); never its devices, its
/// Secret's name or its Services (R54).
#[test]
fn a_site_reflects_what_the_hub_needs_and_nothing_of_its_own() {
    let states = [(VariantState::Ready, 3), (VariantState::Idle, 1)]
        .into_iter()
        .chain([(VariantState::Progressing, 22), (VariantState::Invalid, 1)])
        .chain([(VariantState::Conflict, 1)]);
    let variants = states
        .flat_map(|(state, n)| std::iter::repeat_n(state, n))
        .enumerate()
        .map(|(i, state)| variant(&format!("v{i:02}"), state, Some("why")))
        .collect();
    let mut m = mutation(Some(variants), None);
    let status = m.status.as_mut().unwrap();
    status.variant_labels = "v00,v01".to_owned();
    status.variant_services = "web-v00 80:30080/TCP".to_owned();
    let m = with_devices(with_rollout(silent(m), RolloutPhase::Paused, None), 2, 1, 0);
    let site = on_site(&m, 7);
    let got = karmada(
        "statusReflection",
        "ReflectStatus",
        std::slice::from_ref(&site),
        1,
    )
    .remove(0);
    let keys: Vec<&String> = got.as_object().unwrap().keys().collect();
    let expected = "conditions deviceSummary generation observedGeneration \
                    resourceTemplateGeneration rollout summary variantCounts variants";
    assert_eq!(
        keys,
        expected.split_whitespace().collect::<Vec<_>>(),
        "{got:#}"
    );
    for key in "conditions deviceSummary rollout summary observedGeneration".split(' ') {
        assert_eq!(got[key], site["status"][key], "{key}");
    }
    assert_eq!(
        (&got["generation"], &got["resourceTemplateGeneration"]),
        (&json!(3), &json!(7))
    );
    let counts = json!({ "total": 28, "ready": 3, "idle": 1, "progressing": 22, "invalid": 1,
                         "conflict": 1 });
    assert_eq!(got["variantCounts"], counts);
    let listed = got["variants"].as_array().unwrap();
    let states: Vec<&str> = listed
        .iter()
        .map(|v| v["state"].as_str().unwrap())
        .collect();
    assert_eq!(states.len(), 20);
    assert_eq!(states[..3], ["Invalid", "Conflict", "Progressing"]);
    let fields: Vec<&str> = "deployment label message readyReplicas replicas state"
        .split(' ')
        .collect();
    for v in listed {
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys, fields, "{v}");
    }
    // Nothing yet: the generations alone.
    let new = on_site(&mutation(None, None), 7);
    let got = karmada("statusReflection", "ReflectStatus", &[new], 1).remove(0);
    assert_eq!(
        got,
        json!({ "generation": 3, "resourceTemplateGeneration": 7 })
    );
}

/// Three sites' statuses make the hub's: device counts summed exactly, variant counts summed,
/// Ready only while every site is, SiteSilent while any is; it reads as the operator's status,
/// and the Argo CD check reads it as it reads a site's.
#[test]
fn three_sites_are_summed_exactly() {
    let east = with_devices(pair(VariantState::Idle), 4, 2, 1);
    let west = with_devices(pair(VariantState::Progressing), 10, 0, 0);
    let depot = with_devices(silent(pair(VariantState::Ready)), 0, 3, 0);
    let sites = [("lobby-east", east), ("lobby-west", west), ("depot", depot)];
    let items = sites.iter().map(|(s, m)| item(s, &on_site(m, 7))).collect();
    let (hub, out) = aggregate(None, items);
    let status = &out["status"];
    let mut sum = DeviceSummary::default();
    for (_, m) in &sites {
        let summary = *m.status.clone().unwrap().device_summary.unwrap();
        sum.total += summary.total;
        sum.online += summary.online;
        sum.late += summary.late;
        sum.gone += summary.gone;
    }
    assert_eq!(status["deviceSummary"], serde_json::to_value(&sum).unwrap());
    let exact = json!({ "total": 20, "online": 14, "late": 5, "gone": 1 });
    assert_eq!(status["deviceSummary"], exact);
    assert_eq!(status["summary"], "5/6 variants ready (1 idle)");
    assert_eq!(status["observedGeneration"], 7, "every site acted on it");
    let listed = json!([{ "label": "lobby-west/beta", "state": "Progressing",
        "deployment": "lobby-west/web-beta", "replicas": 2, "readyReplicas": 0 }]);
    assert_eq!(status["variants"], listed);
    assert_eq!(
        status["conditions"][0],
        json!({ "type": "Ready", "status": "False", "reason": "SitesNotReady",
                "message": "2/3 sites ready: lobby-west: 1/2 variants ready",
                "lastTransitionTime": "2025-01-01T00:00:00Z", "observedGeneration": 7 })
    );
    let quiet = &status["conditions"][1];
    assert_eq!(
        (&quiet["type"], &quiet["status"]),
        (&json!("SiteSilent"), &json!("True"))
    );
    assert_eq!(
        quiet["message"],
        "depot: 3 of 3 devices went silent together"
    );
    assert_eq!(quiet["lastTransitionTime"], "2025-01-02T03:04:05Z");
    assert_eq!(status["conditions"].as_array().unwrap().len(), 2);
    reads_as_owner_status(status);
    let mut rest = out.clone();
    rest.as_object_mut().unwrap().remove("status");
    assert_eq!(
        rest,
        through_lua(&hub),
        "the rest is handed back as it came"
    );
    assert_eq!(
        argo(&as_stored(&out)),
        "Degraded",
        "Argo CD on the hub: SiteSilent"
    );
}

/// The hub keeps its observedGeneration until every site runs the template's generation, a
/// condition keeps its transition time while its status stays, and the worst rollout stands
/// for all.
#[test]
fn the_hub_waits_for_its_sites_and_keeps_what_did_not_change() {
    let previous = json!({ "observedGeneration": 6, "summary": "", "conditions": [
        { "type": "Ready", "status": "False", "reason": "SitesNotReady", "message": "",
          "lastTransitionTime": "2024-12-31T00:00:00Z" }] });
    let ready = pair(VariantState::Ready);
    let paused = with_rollout(ready.clone(), RolloutPhase::Paused, Some("at step 2"));
    let moving = with_rollout(ready, RolloutPhase::Progressing, None);
    let unapplied = json!({ "clusterName": "lobby-west", "applied": false,
                            "appliedMessage": "quota exceeded" });
    let behind = vec![item("lobby-east", &on_site(&paused, 6)), unapplied];
    let (_, out) = aggregate(Some(previous.clone()), behind);
    let status = &out["status"];
    assert_eq!(status["observedGeneration"], 6);
    let ready = &status["conditions"][0];
    let said = "1/2 sites ready: lobby-west: not applied: quota exceeded";
    assert_eq!(
        (&ready["status"], &ready["message"]),
        (&json!("False"), &json!(said))
    );
    assert_eq!(ready["lastTransitionTime"], "2024-12-31T00:00:00Z");
    assert!(
        status.get("deviceSummary").is_none(),
        "no site counts devices"
    );
    assert_eq!(status["rollout"]["phase"], "Paused");
    assert_eq!(status["rollout"]["message"], "lobby-east: at step 2");
    assert_eq!(status["rollout"]["failed"], json!(["lobby-east/beta"]));
    reads_as_owner_status(status);

    let caught_up = vec![
        item("lobby-east", &on_site(&moving, 7)),
        item("lobby-west", &on_site(&paused, 7)),
    ];
    let (_, out) = aggregate(Some(previous), caught_up);
    let status = &out["status"];
    assert_eq!(status["observedGeneration"], 7);
    assert_eq!(
        status["rollout"]["phase"], "Paused",
        "it outranks Progressing"
    );
    assert_eq!(status["rollout"]["message"], "lobby-west: at step 2");
    let ready = &status["conditions"][0];
    assert_eq!(
        (&ready["status"], &ready["reason"]),
        (&json!("True"), &json!("AllSitesReady"))
    );
    assert_eq!(ready["message"], "2/2 sites ready");
    assert_eq!(
        ready["lastTransitionTime"], "2025-01-01T00:00:00Z",
        "changed: the sites'"
    );
    assert_eq!(
        argo(&as_stored(&out)),
        "Suspended",
        "a site's held rollout holds the hub"
    );
    reads_as_owner_status(status);
}

/// R17 across sites: with `runtime-variants`, each site keeps the variants its API made; the
/// hub's only seed a new site. Without it, the hub's variants win.
#[test]
fn retention_keeps_a_sites_variants_only_when_its_api_manages_them() {
    let hub = json_of(&pair(VariantState::Ready));
    let mut site = hub.clone();
    site["spec"]["variants"] = json!([{ "label": "board-7", "env": {}, "instances": 1 }]);
    let retained = karmada("retention", "Retain", &[hub.clone(), site.clone()], 1).remove(0);
    assert_eq!(retained, through_lua(&hub), "the hub's variants win");
    let mut handed = hub.clone();
    handed["metadata"]["annotations"] = json!({ RUNTIME_VARIANTS: "true" });
    let retained = karmada("retention", "Retain", &[handed.clone(), site.clone()], 1).remove(0);
    let mut expected = handed.clone();
    expected["spec"]["variants"] = site["spec"]["variants"].clone();
    assert_eq!(retained, through_lua(&expected));
    site["spec"].as_object_mut().unwrap().remove("variants");
    let retained = karmada("retention", "Retain", &[handed, site], 1).remove(0);
    assert!(
        retained["spec"].get("variants").is_none(),
        "a site without variants keeps none"
    );
}

// ---- OCM and Fleet ----

/// The example's spec without its variants, handed to the sites' API, as `m` must be.
fn handed_to_sites(m: &Value, file: &str) {
    let typed: Mutation = serde_json::from_value(m.clone())
        .unwrap_or_else(|e| panic!("{file}: not a Mutation ({e})"));
    let mut problems = Vec::new();
    lost(m, &json_of(&typed), file, &mut problems);
    assert!(
        problems.is_empty(),
        "{file}: the type drops or changes {problems:?}"
    );
    assert_eq!(
        (&m["apiVersion"], &m["kind"]),
        (&json!("neiam.org/v1"), &json!("Mutation"))
    );
    assert_eq!(
        m["metadata"]["annotations"][RUNTIME_VARIANTS], "true",
        "{file}"
    );
    assert!(
        m["spec"].get("variants").is_none(),
        "{file}: the sites make the variants"
    );
    let example = yaml(EXAMPLE);
    let mut spec = example["spec"].clone();
    spec.as_object_mut().unwrap().remove("variants");
    assert_eq!(
        m["spec"], spec,
        "{file}: the spec of {EXAMPLE}, variants left out"
    );
    assert_eq!(m["metadata"]["name"], example["metadata"]["name"], "{file}");
}

/// The value at an OCM feedback path in `object`, for the forms used (`.a.b`,
/// `.a[?(@.k=="v")].b`); any other form fails, so that no path goes unchecked.
fn resolve<'a>(path: &str, object: &'a Value) -> Option<&'a Value> {
    let (mut rest, mut at) = (path, object);
    while !rest.is_empty() {
        if let Some(filter) = rest.strip_prefix("[?(@.") {
            let (key, after) = filter.split_once("==\"").expect(path);
            let (wanted, after) = after.split_once("\")]").expect(path);
            at = at.as_array()?.iter().find(|item| item[key] == wanted)?;
            rest = after;
        } else {
            let field = rest
                .strip_prefix('.')
                .unwrap_or_else(|| panic!("path form: {path}"));
            let end = field.find(['.', '[']).unwrap_or(field.len());
            assert!(end > 0, "path form: {path}");
            at = at.get(&field[..end])?;
            rest = &field[end..];
        }
    }
    Some(at)
}

#[test]
fn the_manifestwork_feeds_back_values_the_status_has() {
    let file = "deploy/ocm/manifestwork.yaml";
    let work = yaml(file);
    assert_eq!(work["apiVersion"], "work.open-cluster-management.io/v1");
    assert_eq!(work["kind"], "ManifestWork");
    let manifests = work["spec"]["workload"]["manifests"].as_array().unwrap();
    assert_eq!(
        manifests.len(),
        1,
        "the Mutation alone goes to the site (R54)"
    );
    let m = &manifests[0];
    handed_to_sites(m, file);
    let configs = work["spec"]["manifestConfigs"].as_array().unwrap();
    assert_eq!(configs.len(), 1);
    let names = &m["metadata"];
    let id = json!({ "group": "neiam.org", "resource": "mutations",
                     "name": names["name"], "namespace": names["namespace"] });
    assert_eq!(configs[0]["resourceIdentifier"], id);
    assert_eq!(configs[0]["updateStrategy"]["type"], "ServerSideApply");
    let rules = configs[0]["feedbackRules"].as_array().unwrap();
    assert_eq!((rules.len(), &rules[0]["type"]), (1, &json!("JSONPaths")));
    // Everything a status can hold, built from the types.
    let held = with_rollout(pair(VariantState::Ready), RolloutPhase::Paused, None);
    let mut full = with_devices(silent(held), 3, 1, 1);
    full.status.as_mut().unwrap().message = Some("a Secret in the way".to_owned());
    let full = json_of(&full);
    assert!(resolve(".status.deviceSummary.none", &full).is_none());
    assert!(resolve(r#".status.conditions[?(@.type=="None")].status"#, &full).is_none());
    let mut names = BTreeSet::new();
    for path in rules[0]["jsonPaths"].as_array().unwrap() {
        let (name, path) = (
            path["name"].as_str().unwrap(),
            path["path"].as_str().unwrap(),
        );
        assert!(names.insert(name), "{name} twice");
        let value = resolve(path, &full).unwrap_or_else(|| panic!("{name}: nothing at {path}"));
        let single = value.is_string() || value.is_boolean() || value.is_i64();
        assert!(
            single,
            "{name}: {path} is {value}, not one integer, string or boolean"
        );
    }
    let needed = "devicesTotal devicesOnline devicesLate devicesGone ready siteSilent summary \
                  generation observedGeneration";
    for needed in needed.split_whitespace() {
        assert!(names.contains(needed), "no feedback {needed}");
    }
}

#[test]
fn the_fleet_bundle_is_the_mutation_handed_to_its_sites() {
    let fleet = yaml("deploy/fleet/fleet.yaml");
    // Fields of fleet.yaml (Fleet's schemas/fleet.yaml.json) a bundle like this one may set.
    let known = "defaultNamespace namespace labels diff ignore correctDrift dependsOn \
                 targetCustomizations rolloutStrategy kustomize helm yaml";
    for key in fleet.as_object().unwrap().keys() {
        assert!(
            known.split_whitespace().any(|k| k == key),
            "fleet.yaml: {key} is not a fleet.yaml field"
        );
    }
    let namespace = fleet["defaultNamespace"].as_str().unwrap();
    let mut mutations = Vec::new();
    for entry in std::fs::read_dir(files::repo().join("deploy/fleet")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        match name.as_str() {
            "fleet.yaml" | "README.md" => {}
            name if name.ends_with(".yaml") => mutations.push(format!("deploy/fleet/{name}")),
            name => panic!("deploy/fleet/{name}: Fleet would deploy what it can read of it"),
        }
    }
    assert_eq!(mutations.len(), 1, "{mutations:?}");
    let m = yaml(&mutations[0]);
    handed_to_sites(&m, &mutations[0]);
    assert!(
        m["metadata"].get("namespace").is_none(),
        "defaultNamespace places it"
    );
    let patches = fleet["diff"]["comparePatches"].as_array().unwrap();
    let patch = json!({ "apiVersion": "neiam.org/v1", "kind": "Mutation",
        "name": m["metadata"]["name"], "namespace": namespace, "jsonPointers": ["/spec/variants"] });
    assert_eq!(patches, &[patch], "the sites' variants are not drift");
}
