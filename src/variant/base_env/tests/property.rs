//! R41: random bases and names never let a token's value reach an expanded field, judged by a
//! model of the kubelet's expansion written apart from the closure.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::variant::{base_env::reaching, families::denied, tests::kubelet_expand};
use crate::{crd::Variant, variant::access::device_may_add};

/// What a device sends; it must never show up in an expanded field.
const MARK: &str = "INJECTED";
/// The names random bases and requests are made of.
const NAMES: &[&str] = &["A", "B", "C", "D", "E", "JAVA_OPTS", "TITLE"];

/// xorshift64: a reproducible stream of numbers without a dependency.
struct Random(u64);

impl Random {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        usize::try_from(self.0 % n as u64).unwrap_or(0)
    }

    fn name(&mut self) -> &'static str {
        NAMES[self.below(NAMES.len())]
    }

    /// A string with 0 to 2 references, escaped ones among them.
    fn text(&mut self) -> String {
        let mut text = String::from("x");
        for _ in 0..self.below(3) {
            let name = self.name();
            text.push_str(if self.below(5) == 0 { " $$(" } else { " $(" });
            text.push_str(name);
            text.push(')');
        }
        text
    }
}

/// A random container: env entries, a command, args, a probe, a hook, a sub-path.
fn container(r: &mut Random) -> Value {
    let env: Vec<Value> = (0..r.below(5))
        .map(|_| json!({"name": r.name(), "value": r.text()}))
        .collect();
    let words = |r: &mut Random| -> Vec<String> { (0..r.below(3)).map(|_| r.text()).collect() };
    json!({
        "name": "app",
        "env": env,
        "command": words(r),
        "args": words(r),
        "livenessProbe": {"exec": {"command": words(r)}},
        "lifecycle": {"postStart": {"exec": {"command": words(r)}}},
        "volumeMounts": [{"name": "v", "mountPath": "/v", "subPathExpr": r.text()}]
    })
}

/// Every expanded field of `c` once `name` is set to [`MARK`] as a Mutation writes it
/// (replacing an entry of that name, else appended), expanded in order as the kubelet does.
fn expanded_with(c: &Value, name: &str) -> Vec<String> {
    let mut entries: Vec<(String, String)> = c["env"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                e["name"].as_str().unwrap_or_default().to_owned(),
                e["value"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let literal = MARK.replace('$', "$$");
    match entries.iter_mut().find(|(n, _)| n == name) {
        Some(entry) => entry.1 = literal,
        None => entries.push((name.to_owned(), literal)),
    }
    let mut vars = BTreeMap::new();
    let mut fields = Vec::new();
    for (n, v) in entries {
        let value = kubelet_expand(&v, |n| vars.get(n).map(String::as_str));
        if n != name && denied(&n).is_some() {
            fields.push(value.clone());
        }
        vars.insert(n, value);
    }
    for path in [
        "/command",
        "/args",
        "/livenessProbe/exec/command",
        "/lifecycle/postStart/exec/command",
    ] {
        for word in c
            .pointer(path)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            fields.push(kubelet_expand(word.as_str().unwrap_or_default(), |n| {
                vars.get(n).map(String::as_str)
            }));
        }
    }
    let sub_path = c["volumeMounts"][0]["subPathExpr"].as_str();
    fields.push(kubelet_expand(sub_path.unwrap_or_default(), |n| {
        vars.get(n).map(String::as_str)
    }));
    fields
}

// R41: for 3000 random bases, a name outside the closure never carries a value into an
// expanded field, and a token's request that is allowed never does either
#[test]
fn no_value_a_token_may_set_reaches_an_expanded_field() {
    let mut r = Random(0x9e37_79b9_7f4a_7c15);
    let mut reached = 0;
    for _ in 0..3000 {
        let c = container(&mut r);
        let base = json!({"spec": {"template": {"spec": {"containers": [c.clone()]}}}});
        let closure = reaching(&base);
        for name in NAMES {
            let leaks = expanded_with(&c, name).iter().any(|f| f.contains(MARK));
            let in_closure = closure.iter().any(|reach| reach.name == *name);
            assert!(!leaks || in_closure, "{name} leaks from {c}");
            reached += usize::from(leaks);
            let variant = Variant {
                label: "board".into(),
                env: [(*name, MARK)].into_iter().collect(),
                by_token: Some(true),
                ..Variant::default()
            };
            if device_may_add(&base, None, &variant, 0, false).is_ok() {
                assert!(!leaks, "a token's {name} leaks from {c}");
            }
        }
    }
    // the bases are hostile enough to matter: many names do reach
    assert!(reached > 1000, "{reached}");
}
