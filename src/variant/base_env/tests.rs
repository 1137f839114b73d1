//! R41: the expansion closure of a base, and what a token's name would replace (R32).

use serde_json::{Value, json};

use super::*;

fn base(containers: Value) -> Value {
    json!({"spec": {"template": {"spec": {"containers": containers}}}})
}

// R41: a name reaches a command line directly, through env entries (any depth, in any
// order), through the exec of a probe or a hook, a sub-path, and a start-up variable's value
#[test]
fn every_expanded_field_and_every_chain_is_followed() {
    let b = base(json!([{
        "name": "app",
        "command": ["sh", "-c", "exec snap $(SNAP_LINE)"],
        "env": [
            {"name": "TITLE", "value": "hello"},
            {"name": "SNAP_LINE", "value": "--title=$(TITLE) $(DEEP)"},
            {"name": "DEEP", "value": "$(DEEPER)"},
            {"name": "JAVA_TOOL_OPTIONS", "value": "-Dcolour=$(COLOUR)"},
            {"name": "PLAIN", "value": "$(NOT_REACHING)"}
        ],
        "readinessProbe": {"exec": {"command": ["sh", "-c", "test -n $(PROBE_ARG)"]}},
        "lifecycle": {"preStop": {"exec": {"command": ["$(STOP)"]}}},
        "volumeMounts": [{"name": "d", "mountPath": "/data", "subPathExpr": "$(SUB)"}]
    }]));
    let reaches = reaching(&b);
    let find = |name: &str| reaches.iter().find(|r| r.name == name).map(Reach::describe);
    let said = find("TITLE").unwrap_or_default();
    assert!(
        said.contains("$(TITLE) to env SNAP_LINE, which reaches its command"),
        "{said}"
    );
    let said = find("DEEPER").unwrap_or_default();
    assert!(said.contains("to env DEEP, then env SNAP_LINE"), "{said}");
    for (name, into) in [
        ("PROBE_ARG", "readinessProbe.exec.command"),
        ("STOP", "lifecycle.preStop.exec.command"),
        ("SUB", "subPathExpr"),
        ("COLOUR", "env JAVA_TOOL_OPTIONS"),
    ] {
        let said = find(name).unwrap_or_default();
        assert!(
            said.contains(into) && said.contains("\"app\""),
            "{name}: {said}"
        );
    }
    assert_eq!(find("NOT_REACHING"), None);
    assert_eq!(find("PLAIN"), None);
}

// R41: init containers (and so sidecars) are read too; `$$(X)` and an unclosed `$(` are no
// references
#[test]
fn init_containers_and_escapes() {
    let mut b = base(json!([{"name": "app", "args": ["$$(ESCAPED)", "$(UNCLOSED"]}]));
    b["spec"]["template"]["spec"]["initContainers"] =
        json!([{"name": "sidecar", "restartPolicy": "Always", "args": ["--mode=$(MODE)"]}]);
    let names: Vec<(String, String)> = reaching(&b)
        .into_iter()
        .map(|r| (r.name, r.container))
        .collect();
    assert_eq!(names, [("MODE".to_owned(), "sidecar".to_owned())]);
    assert_eq!(references("a $(B) $$(C) $(D"), ["B"]);
}

// R32: a token's name replaces a literal entry of the base (compared loosely) or may replace
// a key of an envFrom source; a name the base does not have replaces nothing
#[test]
fn what_a_name_would_replace() {
    let b = base(json!([{
        "name": "app",
        "env": [{"name": "TITLE", "value": "lobby"},
                {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
        "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "cfg_"}]
    }]));
    let replaced = Replaced::of(&b);
    let said = replaced.replaces("title").unwrap_or_default();
    assert!(
        said.contains("\"TITLE\"") && said.contains("\"app\""),
        "{said}"
    );
    let said = replaced.replaces("CFG_COLOUR").unwrap_or_default();
    assert!(
        said.contains("ConfigMap \"settings\"") && said.contains("envFrom"),
        "{said}"
    );
    assert_eq!(replaced.replaces("COLOUR"), None);
    assert_eq!(
        replaced.replaces("SECRET"),
        None,
        "valueFrom is judged apart"
    );
    let unprefixed = base(json!([{"name": "app", "envFrom": [{"secretRef": {"name": "db"}}]}]));
    let said = Replaced::of(&unprefixed)
        .replaces("ANYTHING")
        .unwrap_or_default();
    assert!(said.contains("every key of Secret \"db\""), "{said}");
}

mod property;
