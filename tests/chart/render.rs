//! What the chart's tests share: running helm and kubectl, and reading what they render.

use std::{
    collections::BTreeMap,
    process::{Command, Output, Stdio},
};

use serde_json::Value;

use super::files::repo;

pub const CHART: &str = "deploy/chart/mutantops";
/// Labels the chart adds for Helm that operator.yml does not carry.
pub const HELM_LABELS: [&str; 4] = [
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
];

/// The documents of a YAML stream, without empty ones (serde_saphyr leaves them out).
pub fn parse(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple(text).unwrap_or_else(|e| panic!("{e}:\n{text}"))
}

/// A process's stdout and stderr.
pub fn text(output: &Output) -> String {
    let [out, err] = [&output.stdout, &output.stderr].map(|b| String::from_utf8_lossy(b));
    format!("{out}{err}")
}

/// Runs `scripts/helm ARGS` in the repository; its stdout, or a panic with its output.
pub fn helm(args: &[&str]) -> String {
    let output = Command::new(repo().join("scripts/helm"))
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap_or_else(|e| panic!("cannot run scripts/helm: {e}"));
    assert!(
        output.status.success(),
        "`scripts/helm {}` failed ({}):\n{}",
        args.join(" "),
        output.status,
        text(&output)
    );
    String::from_utf8(output.stdout).expect("helm's output is UTF-8")
}

/// `helm template RELEASE CHART --namespace NAMESPACE EXTRA...`, parsed.
pub fn render(release: &str, namespace: &str, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["template", release, CHART, "--namespace", namespace];
    args.extend_from_slice(extra);
    let docs = parse(&helm(&args));
    let named = |d: &Value| d["kind"].is_string() && d["metadata"]["name"].is_string();
    assert!(docs.iter().all(named), "an object without kind or name");
    docs
}

/// Runs kubectl (`$KUBECTL`, else the PATH's) with the words of `line`, `input` on stdin.
pub fn kubectl(line: &str, input: &str) -> Output {
    use std::io::Write as _;
    let program = std::env::var("KUBECTL")
        .ok()
        .filter(|k| !k.is_empty())
        .unwrap_or_else(|| "kubectl".to_string());
    let mut child = Command::new(&program)
        .args(line.split_whitespace())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}; set KUBECTL or put it on the PATH"));
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    drop(stdin);
    child.wait_with_output().unwrap()
}

/// `--set` for each of `values`.
pub fn set<'a>(values: &[&'a str]) -> Vec<&'a str> {
    values.iter().flat_map(|v| ["--set", v]).collect()
}

/// (kind, name) of an object.
pub fn key(object: &Value) -> (String, String) {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (text(&object["kind"]), text(&object["metadata"]["name"]))
}

pub fn by_key(docs: &[Value]) -> BTreeMap<(String, String), &Value> {
    let map: BTreeMap<_, _> = docs.iter().map(|d| (key(d), d)).collect();
    assert_eq!(map.len(), docs.len(), "an object is there twice");
    map
}

pub fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| key(d) == (kind.to_string(), name.to_string()))
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

pub fn seq(value: &Value) -> &[Value] {
    value.as_array().map_or(&[], Vec::as_slice)
}

pub fn container(deployment: &Value) -> &Value {
    seq(&deployment["spec"]["template"]["spec"]["containers"])
        .iter()
        .find(|c| c["name"].as_str() == Some("operator"))
        .expect("container operator")
}

pub fn has_env(deployment: &Value, name: &str) -> bool {
    seq(&container(deployment)["env"])
        .iter()
        .any(|e| e["name"] == name)
}

/// `rendered` without the Helm labels that `original` lacks (on the object and on its pods).
pub fn without_helm_labels(rendered: &Value, original: &Value) -> Value {
    let mut rendered = rendered.clone();
    for path in [&["metadata"][..], &["spec", "template", "metadata"]] {
        let theirs = path.iter().fold(original, |v, step| &v[*step]);
        let ours = path
            .iter()
            .try_fold(&mut rendered, |v, step| v.get_mut(*step));
        let labels = ours.and_then(|v| v.get_mut("labels"));
        if let Some(labels) = labels.and_then(Value::as_object_mut) {
            for label in HELM_LABELS {
                if theirs["labels"].get(label).is_none() {
                    labels.remove(label);
                }
            }
        }
    }
    rendered
}

pub fn json(value: &Value) -> String {
    serde_json::to_string(value).unwrap()
}

/// Every place where `actual` differs from `expected`, as `path: ...` lines.
pub fn differences(path: &str, expected: &Value, actual: &Value, out: &mut Vec<String>) {
    match (expected, actual) {
        (Value::Object(a), Value::Object(b)) => {
            let theirs = b.keys().filter(|k| !a.contains_key(*k));
            for k in a.keys().chain(theirs) {
                let here = format!("{path}.{k}");
                match (a.get(k), b.get(k)) {
                    (Some(x), Some(y)) => differences(&here, x, y, out),
                    (x, y) => out.push(format!(
                        "{here}: operator.yml has {}, the chart renders {}",
                        x.map_or_else(|| "nothing".to_string(), json),
                        y.map_or_else(|| "nothing".to_string(), json)
                    )),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                differences(&format!("{path}[{i}]"), x, y, out);
            }
        }
        (a, b) if a != b => out.push(format!(
            "{path}: operator.yml has {}, the chart renders {}",
            json(a),
            json(b)
        )),
        _ => {}
    }
}
