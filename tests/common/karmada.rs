//! Karmada's Lua VM, as the tests of `deploy/karmada/` need it: the scripts read from the
//! customization file, run in Lua 5.1 with what Karmada's VM takes away taken away and a
//! stand-in for its `kube` library, given their arguments and read back as Karmada converts
//! them. A module of its own (not part of `common`) that needs `lua.rs` beside it as `mod lua`.
#![allow(dead_code, reason = "each test that includes this uses part of it")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a failed step must fail the test"
)]

use mutantops::crd::{Mutation, OwnerStatus};
use serde_json::{Value, json};

use super::lua::{TO_JSON, lua_literal, lua_string, run_lua51};

/// The customization, from the repository's root.
pub const CUSTOMIZATION: &str = "deploy/karmada/resourceinterpretercustomization.yaml";

/// The customization file, parsed.
pub fn customization() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(CUSTOMIZATION);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{CUSTOMIZATION}: {e}"));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{CUSTOMIZATION}: {e}"))
}

/// The Lua of customization `name`, as Karmada reads it from the file.
pub fn script(name: &str) -> String {
    let doc = customization();
    let lua = doc["spec"]["customizations"][name]["luaScript"].as_str();
    lua.unwrap_or_else(|| panic!("{CUSTOMIZATION}: no {name}.luaScript"))
        .to_owned()
}

/// What Karmada's VM takes away from the scripts (its `setLib`): these fail when called, and
/// there is no `io` or `debug`.
pub const SANDBOX: &str = r#"
for _, name in ipairs({ "collectgarbage", "dofile", "getfenv", "getmetatable", "load",
    "loadfile", "loadstring", "rawequal", "rawget", "rawset", "setfenv", "setmetatable",
    "module", "newproxy" }) do
  _G[name] = function() error(name .. " is not supported in karmada") end
end
io, debug = nil, nil
"#;

/// A stand-in for Karmada's `kube` library: the requirement of a pod template names its app,
/// and a template whose first image is "broken" fails.
pub const KUBE: &str = r#"
package.preload["kube"] = function()
  return { accuratePodRequirements = function(template)
    if template.spec.containers[1].image == "broken" then error("not a pod template") end
    return { resourceRequest = { cpu = "100m" },
             nodeClaim = { nodeSelector = { app = template.metadata.labels.app } } }
  end }
end
"#;

/// `script` as a Lua string literal.
pub fn script_literal(name: &str) -> String {
    let mut source = String::new();
    lua_string(&script(name), &mut source);
    source
}

/// Runs `function` of customization `name` on `args` as Karmada's VM does, and returns its
/// first `returns` results as Karmada reads them back.
pub fn karmada(name: &str, function: &str, args: &[Value], returns: usize) -> Vec<Value> {
    let args: Vec<String> = args.iter().map(lua_literal).collect();
    let chunk = format!(
        "{TO_JSON}\nlocal loadstring, write = loadstring, io.write\n{KUBE}\n{SANDBOX}\n\
         assert(loadstring({source}, \"=luaScript\"))()\n\
         local results = {{ {function}({args}) }}\n\
         for i = 1, {returns} do write(to_json(results[i]), \"\\n\") end\n",
        source = script_literal(name),
        args = args.join(", "),
    );
    let out = run_lua51(&chunk);
    let values: Vec<Value> = out
        .lines()
        .map(|line| {
            let mut value = serde_json::from_str(line).unwrap();
            without_empty_lists(&mut value);
            value
        })
        .collect();
    assert_eq!(values.len(), returns, "{out}");
    values
}

/// Drops every field and element that holds `[]`, as Karmada's conversion of a script's
/// result does (an empty table cannot tell a list from an object); the root stays.
pub fn without_empty_lists(value: &mut Value) {
    let empty = |v: &Value| v.as_array().is_some_and(Vec::is_empty);
    match value {
        Value::Object(fields) => {
            fields.retain(|_, f| !empty(f));
            fields.values_mut().for_each(without_empty_lists);
        }
        Value::Array(items) => {
            items.retain(|i| !empty(i));
            items.iter_mut().for_each(without_empty_lists);
        }
        _ => {}
    }
}

/// `value` handed to a script and back unchanged, as Karmada converts it: a null is nil (no
/// field), an empty object or list an empty table, which comes back as `[]` and is dropped.
pub fn through_lua(value: &Value) -> Value {
    fn as_tables(v: &mut Value) {
        match v {
            Value::Object(fields) if fields.is_empty() => *v = Value::Array(Vec::new()),
            Value::Object(fields) => {
                fields.retain(|_, f| !f.is_null());
                fields.values_mut().for_each(as_tables);
            }
            Value::Array(items) => items.iter_mut().for_each(as_tables),
            _ => {}
        }
    }
    let mut out = value.clone();
    as_tables(&mut out);
    without_empty_lists(&mut out);
    out
}

/// Where `original` holds something `kept` lacks or holds otherwise (nulls aside).
pub fn lost(original: &Value, kept: &Value, at: &str, out: &mut Vec<String>) {
    match (original, kept) {
        (Value::Object(fields), _) => {
            for (key, field) in fields.iter().filter(|(_, f)| !f.is_null()) {
                match kept.get(key) {
                    Some(other) => lost(field, other, &format!("{at}.{key}"), out),
                    None => out.push(format!("{at}.{key}")),
                }
            }
        }
        (Value::Array(items), Value::Array(others)) if items.len() == others.len() => {
            for (i, (item, other)) in items.iter().zip(others).enumerate() {
                lost(item, other, &format!("{at}[{i}]"), out);
            }
        }
        _ if original != kept => out.push(format!("{at}: {original} became {kept}")),
        _ => {}
    }
}

/// `m` as Karmada leaves it on a site: the template's generation in an annotation.
pub fn on_site(m: &Mutation, template_generation: i64) -> Value {
    let mut value = serde_json::to_value(m).unwrap();
    value["metadata"]["annotations"] = json!({
        "resourcetemplate.karmada.io/generation": template_generation.to_string()
    });
    value
}

/// Karmada's status item for a site: what ReflectStatus gave, and its health.
pub fn item(site: &str, m: &Value) -> Value {
    let one = std::slice::from_ref(m);
    let status = karmada("statusReflection", "ReflectStatus", one, 1).remove(0);
    let health = karmada("healthInterpretation", "InterpretHealth", one, 1).remove(0);
    let health = if health == true {
        "Healthy"
    } else {
        "Unhealthy"
    };
    json!({ "clusterName": site, "status": status, "applied": true, "health": health })
}

/// The aggregated `status` reads back as the operator's status type, losing nothing: each
/// field is one the CRD keeps, of its type, with what the type requires.
pub fn reads_as_owner_status(status: &Value) {
    let typed: OwnerStatus = serde_json::from_value(status.clone())
        .unwrap_or_else(|e| panic!("not an OwnerStatus ({e}): {status:#}"));
    let mut problems = Vec::new();
    lost(
        status,
        &serde_json::to_value(typed).unwrap(),
        "status",
        &mut problems,
    );
    assert!(problems.is_empty(), "dropped or changed: {problems:?}");
}

/// `object` as the hub's API server stores it: its status with the CRD's defaults (the
/// operator's type's), e.g. the `variants: []` that Karmada's conversion drops.
pub fn as_stored(object: &Value) -> Value {
    let typed: OwnerStatus = serde_json::from_value(object["status"].clone()).unwrap();
    let mut stored = object.clone();
    stored["status"] = serde_json::to_value(typed).unwrap();
    stored
}
