//! What a base does with the env a token could set (R32, R41), pure: which names reach a
//! field the kubelet expands into something that runs or picks a file, directly or through
//! other env entries (the expansion closure), and which of the base's own entries a token's
//! name would replace.
//!
//! The kubelet replaces `$(NAME)` with the container's env value of NAME in `command`, `args`,
//! the `exec` commands of its three probes and two lifecycle hooks, a volume mount's
//! `subPathExpr`, and env values themselves (an entry may be built from the ones before it).
//! A name a token sets therefore reaches a command line when any of those fields names it, or
//! names an env entry whose value names it, and so on. The values of the entries a token may
//! not set ([`super::families`]) are such fields too: a base `JAVA_TOOL_OPTIONS` of
//! `-Dtitle=$(TITLE)` would take a device's `TITLE` into the JVM's options. Order is ignored
//! (the kubelet expands an entry only from the ones before it): the closure is what could
//! reach, never less.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::Value;

use super::families::{denied, env_key};

/// The fields of a container the kubelet expands `$(NAME)` in, by their path in it.
const EXPANDED: &[&[&str]] = &[
    &["command"],
    &["args"],
    &["livenessProbe", "exec", "command"],
    &["readinessProbe", "exec", "command"],
    &["startupProbe", "exec", "command"],
    &["lifecycle", "postStart", "exec", "command"],
    &["lifecycle", "preStop", "exec", "command"],
];

/// How a name reaches an expanded field of one container of the base.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reach {
    /// The env name a token could set.
    pub name: String,
    /// The container whose field it reaches.
    pub container: String,
    /// The env entries it passes through on its way, nearest first.
    pub through: Vec<String>,
    /// The field it ends in: `command`, `readinessProbe.exec.command`, `env JAVA_OPTS (...)`.
    pub into: String,
}

impl Reach {
    /// In words, for a refusal: `the base's container "app" passes $(TITLE) to env SNAP_ARGS,
    /// which reaches its command`.
    pub fn describe(&self) -> String {
        let mut said = format!(
            "the base's container {:?} passes $({}) ",
            self.container, self.name
        );
        match self.through.split_first() {
            None => said.push_str(&format!("to its {}", self.into)),
            Some((first, rest)) => {
                said.push_str(&format!("to env {first}"));
                for entry in rest {
                    said.push_str(&format!(", then env {entry}"));
                }
                said.push_str(&format!(", which reaches its {}", self.into));
            }
        }
        said
    }
}

/// The containers of the base's pod that run (`containers`, `initContainers`, whose
/// sidecars are init containers too), with their names.
fn containers(base: &Value) -> impl Iterator<Item = (&str, &Value)> {
    let pod = base.pointer("/spec/template/spec");
    ["containers", "initContainers"]
        .into_iter()
        .filter_map(move |list| pod.and_then(|p| p.get(list)).and_then(Value::as_array))
        .flatten()
        .map(|c| (c.get("name").and_then(Value::as_str).unwrap_or_default(), c))
}

/// The env entries of container `c` that have a literal `value`.
fn literal_entries(c: &Value) -> Vec<(&str, &str)> {
    c.get("env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let name = e.get("name").and_then(Value::as_str)?;
            Some((name, e.get("value").and_then(Value::as_str)?))
        })
        .collect()
}

/// Every name of the base that reaches an expanded field, with the shortest way it does, by
/// container (R41): the closure of the expanded fields over the env entries.
pub fn reaching(base: &Value) -> Vec<Reach> {
    let mut found = Vec::new();
    for (container, c) in containers(base) {
        let entries = literal_entries(c);
        let mut fields = VecDeque::new();
        let seed = |queue: &mut VecDeque<Reach>, word: &str, into: &str| {
            for name in references(word) {
                queue.push_back(Reach {
                    name: name.to_owned(),
                    container: container.to_owned(),
                    through: Vec::new(),
                    into: into.to_owned(),
                });
            }
        };
        for path in EXPANDED {
            let field = path.iter().try_fold(c, |at, key| at.get(key));
            let words = field.and_then(Value::as_array).into_iter().flatten();
            for word in words.filter_map(Value::as_str) {
                seed(&mut fields, word, &path.join("."));
            }
        }
        let mounts = c.get("volumeMounts").and_then(Value::as_array);
        for mount in mounts.into_iter().flatten() {
            let at = mount
                .get("mountPath")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if let Some(word) = mount.get("subPathExpr").and_then(Value::as_str) {
                seed(
                    &mut fields,
                    word,
                    &format!("volume mount {at:?} (subPathExpr)"),
                );
            }
        }
        // The start-up variables' values come second, so that a name that reaches a command
        // line is told that way.
        let mut startup = VecDeque::new();
        for (entry, value) in &entries {
            if let Some(family) = denied(entry) {
                seed(
                    &mut startup,
                    value,
                    &format!("env {entry}, one of {family}"),
                );
            }
        }
        let mut seen = BTreeSet::new();
        for queue in [fields, startup] {
            follow(queue, &entries, &mut seen, &mut found);
        }
    }
    found
}

/// Follows each reach of `queue` back through the entries whose value names it, adding to
/// `found` every name not `seen` yet, nearest first.
fn follow(
    mut queue: VecDeque<Reach>,
    entries: &[(&str, &str)],
    seen: &mut BTreeSet<String>,
    found: &mut Vec<Reach>,
) {
    while let Some(reach) = queue.pop_front() {
        if !seen.insert(reach.name.clone()) {
            continue;
        }
        for (entry, value) in entries.iter().filter(|(n, _)| *n == reach.name) {
            for name in references(value) {
                let mut through = vec![(*entry).to_owned()];
                through.extend(reach.through.iter().cloned());
                queue.push_back(Reach {
                    name: name.to_owned(),
                    through,
                    ..reach.clone()
                });
            }
        }
        found.push(reach);
    }
}

/// Where a base's container gets variables the operator cannot see: its `envFrom` sources.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvFrom {
    /// The container.
    pub container: String,
    /// `ConfigMap "settings"` or `Secret "db"`.
    pub source: String,
    /// The prefix the source's keys are given, as [`env_key`] reads it ("" for none).
    pub prefix: String,
}

/// What a token's env name would replace in the base's `containers` (where a variant's env
/// goes): the entries with a literal value, by [`env_key`], with their name and container;
/// and the `envFrom` sources.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replaced {
    /// Entries with a literal value: key -> (name, container).
    pub literal: BTreeMap<String, (String, String)>,
    /// The `envFrom` sources.
    pub env_from: Vec<EnvFrom>,
}

impl Replaced {
    /// Of base `base`.
    pub fn of(base: &Value) -> Replaced {
        let mut replaced = Replaced::default();
        let list = base
            .pointer("/spec/template/spec/containers")
            .and_then(Value::as_array);
        for c in list.into_iter().flatten() {
            let container = c.get("name").and_then(Value::as_str).unwrap_or_default();
            for (name, _) in literal_entries(c) {
                replaced
                    .literal
                    .entry(env_key(name))
                    .or_insert_with(|| (name.to_owned(), container.to_owned()));
            }
            for from in c
                .get("envFrom")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let named = |kind: &str, field: &str| {
                    let name = from.get(field)?.get("name").and_then(Value::as_str);
                    Some(format!("{kind} {:?}", name.unwrap_or_default()))
                };
                let source = named("ConfigMap", "configMapRef")
                    .or_else(|| named("Secret", "secretRef"))
                    .unwrap_or_else(|| "a source".to_owned());
                replaced.env_from.push(EnvFrom {
                    container: container.to_owned(),
                    source,
                    prefix: env_key(from.get("prefix").and_then(Value::as_str).unwrap_or("")),
                });
            }
        }
        replaced
    }

    /// Why a token's `name` would replace something of the base, in words; `None` when it
    /// adds a variable the base does not have.
    pub fn replaces(&self, name: &str) -> Option<String> {
        let key = env_key(name);
        if let Some((base_name, container)) = self.literal.get(&key) {
            return Some(format!(
                "the base's container {container:?} sets {base_name:?} to a value of its own"
            ));
        }
        let from = self.env_from.iter().find(|f| key.starts_with(&f.prefix))?;
        let keys = if from.prefix.is_empty() {
            "every key".to_owned()
        } else {
            format!("every key, prefixed {:?},", from.prefix)
        };
        Some(format!(
            "the base's container {:?} takes {keys} of {} as a variable (envFrom), which the \
             operator does not read, so {name:?} may be one of them",
            from.container, from.source
        ))
    }
}

/// The `$(NAME)` references of one expanded string, as the kubelet reads them: `$$` is a
/// literal `$`, and a `$(` without its `)` is left as it is.
pub fn references(word: &str) -> Vec<&str> {
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

#[cfg(test)]
mod tests;
