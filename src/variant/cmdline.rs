//! What a base passes to a command line (R41): the `$(NAME)` references of its
//! containers' `command` and `args`, which the kubelet replaces with env values, so a value
//! there would run as part of the command. Pure.

use std::collections::BTreeSet;

use serde_json::Value;

/// The names the base passes to a command line: every `$(NAME)` in the `command` and `args`
/// of its containers and init containers, which the kubelet replaces with the container's
/// env value of NAME (`$$` escapes a `$`), by container. A device's value of such a name would
/// become part of a command line (`sh -c "... $(TITLE)"` runs what the device sends).
pub fn command_line_names(base: &Value) -> BTreeSet<(String, String)> {
    let mut found = BTreeSet::new();
    let pod = base.pointer("/spec/template/spec");
    for list in ["containers", "initContainers"] {
        let containers = pod
            .and_then(|p| p.get(list))
            .and_then(Value::as_array)
            .into_iter()
            .flatten();
        for c in containers {
            let container = c.get("name").and_then(Value::as_str).unwrap_or_default();
            let words = ["command", "args"]
                .into_iter()
                .filter_map(|field| c.get(field).and_then(Value::as_array))
                .flatten()
                .filter_map(Value::as_str);
            for word in words {
                for name in references(word) {
                    found.insert((name.to_owned(), container.to_owned()));
                }
            }
        }
    }
    found
}

/// The `$(NAME)` references of one command-line word, as the kubelet reads them: `$$` is a
/// literal `$`, and a `$(` without its `)` is left as it is.
fn references(word: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let bytes = word.as_bytes();
    let mut i = 0;
    while i + 1 < bytes.len() {
        match (bytes[i], bytes[i + 1]) {
            (b'$', b'$') => i += 2,
            (b'$', b'(') => match word[i + 2..].find(')') {
                Some(end) => {
                    names.push(&word[i + 2..i + 2 + end]);
                    i += 3 + end;
                }
                None => break,
            },
            _ => i += 1,
        }
    }
    names
}
