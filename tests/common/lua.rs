//! Lua 5.1 for the tests of the Lua that `deploy/` ships (the Argo CD health check, the Karmada
//! resource interpreter): the interpreter, JSON values written as Lua table literals the way
//! Argo CD and Karmada hand objects to their scripts (both embed gopher-lua, which is Lua 5.1),
//! and a Lua encoder that reads a script's result back as JSON. A module of its own (not part
//! of `common`), like files.rs.
//!
//! The interpreter is Debian package `lua5.1` (binary `lua5.1`), or another Lua 5.1 named by
//! `LUA`. Without one the tests that run Lua fail, saying what to install; they never skip.
#![allow(dead_code, reason = "each test that includes this uses part of it")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a failed step must fail the test"
)]

use std::{
    fmt::Write as _,
    io::Write as _,
    process::{Command, Stdio},
};

use serde_json::Value;

/// The interpreter: `$LUA` if set, else `lua5.1` from PATH.
pub fn lua_interpreter() -> String {
    std::env::var("LUA")
        .ok()
        .filter(|l| !l.trim().is_empty())
        .unwrap_or_else(|| "lua5.1".to_owned())
}

/// Runs a Lua chunk (fed on stdin) and returns what it printed. Fails, naming the package to
/// install, when there is no interpreter.
pub fn run_lua(chunk: &str) -> String {
    let lua = lua_interpreter();
    let mut child = Command::new(&lua)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run the Lua interpreter {lua:?} ({e}). These tests need Lua 5.1: \
                 install it with `apt-get install lua5.1` (Debian package lua5.1), or set \
                 LUA to a Lua 5.1 interpreter"
            )
        });
    child
        .stdin
        .take()
        .expect("stdin of the interpreter")
        .write_all(chunk.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{lua} failed ({}): {}\n--- chunk ---\n{chunk}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// [`run_lua`], checked to be Lua 5.1 as gopher-lua is: returns what the chunk printed.
pub fn run_lua51(chunk: &str) -> String {
    let out = run_lua(&format!("io.write(_VERSION, \"\\n\")\n{chunk}"));
    let (version, printed) = out.split_once('\n').unwrap_or((&out, ""));
    assert_eq!(
        version,
        "Lua 5.1",
        "{} is not a Lua 5.1 interpreter, as gopher-lua (Argo CD's, Karmada's) is: install \
         Debian package lua5.1 (`apt-get install lua5.1`) or point LUA at one",
        lua_interpreter()
    );
    printed.to_owned()
}

/// Appends `s` as a Lua string literal that reads back byte for byte, escaped as
/// `string.format("%q", s)` would (plus every control byte as a decimal escape).
pub fn lua_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c.is_ascii_control() => write!(out, "\\{:03}", u32::from(c)).unwrap(),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Appends `value` as a Lua expression: objects become `{["key"]=...}`, arrays 1-based
/// sequences, null nil. A nil field in a table constructor leaves the key out, which is what
/// gopher-lua's table holds for a JSON null; a null array element is left out too, as
/// gopher-lua's `LTable.Append` does.
pub fn lua_value(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("nil"),
        Value::Bool(b) => write!(out, "{b}").unwrap(),
        Value::Number(n) => write!(out, "{n}").unwrap(),
        Value::String(s) => lua_string(s, out),
        Value::Array(items) => {
            out.push('{');
            for item in items.iter().filter(|i| !i.is_null()) {
                lua_value(item, out);
                out.push(',');
            }
            out.push('}');
        }
        Value::Object(fields) => {
            out.push('{');
            for (key, field) in fields {
                out.push('[');
                lua_string(key, out);
                out.push_str("]=");
                lua_value(field, out);
                out.push(',');
            }
            out.push('}');
        }
    }
}

/// [`lua_value`] as a string of its own.
pub fn lua_literal(value: &Value) -> String {
    let mut out = String::new();
    lua_value(value, &mut out);
    out
}

/// Lua that defines `local function to_json(v)`: a value as JSON on one line, as Karmada's
/// encoder (gopher-json) writes it: a table with keys 1..n an array, any other table an
/// object with its keys sorted, an empty table `[]`, an integral number without a fraction.
/// A table that mixes the two kinds of key, or a value JSON has no form for, is an error.
pub const TO_JSON: &str = r#"
local function to_json(v)
  local kind = type(v)
  if v == nil then
    return "null"
  elseif kind == "boolean" then
    return tostring(v)
  elseif kind == "number" then
    if v == math.floor(v) and v > -2^53 and v < 2^53 then
      return string.format("%d", v)
    end
    return string.format("%.17g", v)
  elseif kind == "string" then
    local escaped = string.gsub(v, '[%c"\\]', function(c)
      return string.format("\\u%04x", string.byte(c))
    end)
    return '"' .. escaped .. '"'
  elseif kind == "table" then
    local keys = {}
    for k in pairs(v) do
      keys[#keys + 1] = k
    end
    if #keys == 0 then
      return "[]"
    end
    local parts = {}
    if #v == #keys then
      for i = 1, #v do
        parts[i] = to_json(v[i])
      end
      return "[" .. table.concat(parts, ",") .. "]"
    end
    for _, k in ipairs(keys) do
      if type(k) ~= "string" then
        error("a table mixes array and object keys: " .. tostring(k))
      end
    end
    table.sort(keys)
    for i, k in ipairs(keys) do
      parts[i] = to_json(k) .. ":" .. to_json(v[k])
    end
    return "{" .. table.concat(parts, ",") .. "}"
  end
  error("no JSON for a " .. kind)
end
"#;
