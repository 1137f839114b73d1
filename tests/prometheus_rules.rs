//! deploy/prometheus/: the alerting rules and what scrapes the operator for them (R25). The
//! PrometheusRule holds exactly the groups of rules.yaml, the PodMonitor selects the pods of
//! deploy/operator.yml on their metrics port and gives them the job the rules select, every
//! metric an alert uses is one the operator exports (rendered by the library itself, so a
//! renamed family fails here), and promtool accepts the rules and passes their unit tests.
//!
//! The promtool tests need promtool (Debian package `prometheus`; `$PROMTOOL` names another):
//! without it they fail, naming the package, and never pass silently.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a failed step must fail the test"
)]

#[path = "common/files.rs"]
mod files;

use files::{metric_names, repo};
use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    process::Command,
};

use serde_json::Value;

/// The job label every rule selects, and that the PodMonitor must produce.
const JOB: &str = "mutantops";

/// The alerts of rules.yaml.
const ALERTS: [&str; 8] = [
    "MutantDeviceBatteryLow",
    "MutantDeviceSilent",
    "MutantOpsDown",
    "MutantOpsNoLeader",
    "MutantOpsReconcileErrors",
    "MutantOpsVariantsConflict",
    "MutantOpsVariantsInvalid",
    "MutantRolloutStuck",
];

/// A file of `deploy/`.
fn read(file: &str) -> String {
    files::read(&format!("deploy/{file}"))
}

fn yaml(file: &str) -> Value {
    serde_saphyr::from_str(&read(file)).unwrap_or_else(|e| panic!("deploy/{file}: {e}"))
}

fn seq(value: &Value) -> &Vec<Value> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {value:?}"))
}

fn str_of<'a>(value: &'a Value, what: &str) -> &'a str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {value:?}"))
}

/// The rules of rules.yaml's single group `mutantops`.
fn rules() -> Vec<Value> {
    let file = yaml("prometheus/rules.yaml");
    let groups = seq(&file["groups"]);
    assert_eq!(groups.len(), 1, "one group: {groups:?}");
    assert_eq!(groups[0]["name"].as_str(), Some("mutantops"));
    seq(&groups[0]["rules"]).clone()
}

/// The sample names of the operator's exposition (OpenMetrics, as Prometheus asks for it),
/// rendered by the library: what a PromQL expression can select.
fn exported_names() -> BTreeSet<String> {
    let text = files::exposition();
    let names: BTreeSet<String> = text
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_string)
        .collect();
    assert!(
        names.contains("mutant_operator_build_info"),
        "the library's exposition:\n{text}"
    );
    names
}

/// The PrometheusRule holds exactly the groups of rules.yaml, so the two cannot drift.
#[test]
fn the_prometheusrule_holds_the_groups_of_rules_yaml() {
    let plain = yaml("prometheus/rules.yaml");
    let keys: Vec<&str> = plain
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["groups"], "rules.yaml holds only groups");
    let resource = yaml("prometheus/prometheusrule.yaml");
    assert_eq!(
        resource["apiVersion"].as_str(),
        Some("monitoring.coreos.com/v1")
    );
    assert_eq!(resource["kind"].as_str(), Some("PrometheusRule"));
    let metadata = &resource["metadata"];
    assert_eq!(metadata["namespace"].as_str(), Some("mutants"));
    assert_eq!(
        metadata["labels"]["app.kubernetes.io/name"].as_str(),
        Some("mutantops")
    );
    assert!(!seq(&plain["groups"]).is_empty());
    // Compared as YAML text, so a failure shows where they differ.
    assert_eq!(
        serde_saphyr::to_string(&resource["spec"]["groups"]).unwrap(),
        serde_saphyr::to_string(&plain["groups"]).unwrap(),
        "prometheusrule.yaml's spec.groups (left) differs from rules.yaml's groups (right): \
         copy the groups of rules.yaml into it"
    );
    assert_eq!(resource["spec"], {
        let mut spec = serde_json::Map::new();
        spec.insert("groups".to_string(), plain["groups"].clone());
        Value::Object(spec)
    });
}

/// Every alert is there once, selects job="mutantops", waits (`for`) before firing, and has a
/// severity, a summary and a description.
#[test]
fn every_alert_is_complete() {
    let rules = rules();
    let names: Vec<&str> = rules.iter().map(|r| str_of(&r["alert"], "alert")).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, ALERTS, "exactly these alerts, once each");
    for rule in &rules {
        let name = str_of(&rule["alert"], "alert");
        let expr = str_of(&rule["expr"], "expr");
        assert!(
            expr.contains(&format!("job=\"{JOB}\"")),
            "{name} selects job=\"{JOB}\": {expr}"
        );
        let wait = str_of(&rule["for"], "for");
        assert!(wait.ends_with('m'), "{name} waits minutes: {wait}");
        let severity = rule["labels"]["severity"].as_str();
        assert!(
            matches!(severity, Some("critical" | "warning")),
            "{name}: severity {severity:?}"
        );
        for annotation in ["summary", "description"] {
            let text = rule["annotations"][annotation].as_str().unwrap_or_default();
            assert!(text.len() > 20, "{name} has a {annotation}: {text:?}");
        }
        let description = str_of(&rule["annotations"]["description"], "description");
        assert!(
            description.contains("What to do:"),
            "{name}'s description says what to do"
        );
    }
}

/// Every metric an alert uses is one the operator exports, as the library renders it.
#[test]
fn alerts_use_only_metrics_the_operator_exports() {
    let exported = exported_names();
    let mut used_by: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for rule in rules() {
        let name = str_of(&rule["alert"], "alert").to_string();
        let expr = str_of(&rule["expr"], "expr");
        let used = metric_names(expr);
        // Only MutantOpsDown rests on `up` alone, which Prometheus itself writes.
        if name != "MutantOpsDown" {
            assert!(!used.is_empty(), "{name} uses an operator metric: {expr}");
        }
        for metric in used {
            used_by.entry(metric).or_default().push(name.clone());
        }
    }
    let unknown: Vec<_> = used_by
        .iter()
        .filter(|(metric, _)| !exported.contains(*metric))
        .collect();
    assert!(
        unknown.is_empty(),
        "alerts use metrics the operator does not export: {unknown:?}\nexported: {exported:#?}"
    );
    for expected in [
        "mutant_operator_leader",
        "mutant_operator_reconcile_errors_total",
        "mutant_operator_mutation_variants",
    ] {
        assert!(used_by.contains_key(expected), "{expected}: {used_by:?}");
    }
    assert_eq!(
        metric_names(r#"rate(a_b{x="mutant_operator_no"}[5m])"#).len(),
        0
    );
}

/// The states the variant alerts select are states the operator reports.
#[test]
fn the_variant_alerts_select_reported_states() {
    let text = files::exposition();
    for state in ["Conflict", "Invalid"] {
        let series = format!("mutant_operator_mutation_variants{{state=\"{state}\"}}");
        assert!(text.contains(&series), "{series} in:\n{text}");
        let alert = format!("MutantOpsVariants{state}");
        let rule = rules()
            .into_iter()
            .find(|r| r["alert"].as_str() == Some(alert.as_str()))
            .unwrap();
        let expr = str_of(&rule["expr"], "expr");
        assert!(expr.contains(&format!("state=\"{state}\"")), "{expr}");
    }
}

/// The PodMonitor scrapes the operator's pods as deploy/operator.yml runs them: its namespace,
/// pod labels, the container port serving MUTANT_METRICS_ADDR and the annotated path, and
/// takes the job from a pod label whose value is `mutantops`.
#[test]
fn the_podmonitor_selects_the_operator_pods() {
    let docs: Vec<Value> = serde_saphyr::from_multiple(&read("operator.yml")).unwrap();
    let deployment = docs
        .iter()
        .find(|d| d["kind"].as_str() == Some("Deployment"))
        .expect("operator.yml has the Deployment");
    let namespace = str_of(&deployment["metadata"]["namespace"], "namespace");
    let template = &deployment["spec"]["template"];
    let pod_labels = template["metadata"]["labels"].as_object().unwrap();
    let container = &seq(&template["spec"]["containers"])[0];

    let monitor = yaml("prometheus/podmonitor.yaml");
    assert_eq!(
        monitor["apiVersion"].as_str(),
        Some("monitoring.coreos.com/v1")
    );
    assert_eq!(monitor["kind"].as_str(), Some("PodMonitor"));
    assert_eq!(monitor["metadata"]["namespace"].as_str(), Some(namespace));
    let spec = &monitor["spec"];
    let names: Vec<&str> = seq(&spec["namespaceSelector"]["matchNames"])
        .iter()
        .map(|n| str_of(n, "namespace"))
        .collect();
    assert_eq!(names, [namespace]);
    let selector = spec["selector"]["matchLabels"].as_object().unwrap();
    assert!(!selector.is_empty());
    for (key, value) in selector {
        assert_eq!(pod_labels.get(key), Some(value), "pod label {key:?}");
    }
    let job_label = str_of(&spec["jobLabel"], "jobLabel");
    assert_eq!(
        pod_labels.get(job_label).and_then(Value::as_str),
        Some(JOB),
        "the pods' {job_label} label gives job=\"{JOB}\""
    );

    let endpoints = seq(&spec["podMetricsEndpoints"]);
    assert_eq!(endpoints.len(), 1, "{endpoints:?}");
    let port_name = str_of(&endpoints[0]["port"], "port");
    let port = seq(&container["ports"])
        .iter()
        .find(|p| p["name"].as_str() == Some(port_name))
        .unwrap_or_else(|| panic!("the container has no port {port_name}"));
    let port_number = port["containerPort"].as_u64().unwrap();
    let metrics_addr = seq(&container["env"])
        .iter()
        .find(|e| e["name"].as_str() == Some("MUTANT_METRICS_ADDR"))
        .and_then(|e| e["value"].as_str())
        .expect("operator.yml sets MUTANT_METRICS_ADDR");
    assert!(
        metrics_addr.ends_with(&format!(":{port_number}")),
        "port {port_name} ({port_number}) serves MUTANT_METRICS_ADDR {metrics_addr}"
    );
    let annotations = &template["metadata"]["annotations"];
    assert_eq!(
        endpoints[0]["path"].as_str(),
        annotations["prometheus.io/path"].as_str()
    );
    assert_eq!(endpoints[0]["path"].as_str(), Some("/metrics"));
}

/// The unit tests have, for every alert, a case where it fires and one where it must not.
#[test]
fn every_alert_has_unit_tests_both_ways() {
    let tests = yaml("prometheus/rules.test.yaml");
    assert_eq!(
        seq(&tests["rule_files"])
            .iter()
            .map(|f| str_of(f, "rule file"))
            .collect::<Vec<_>>(),
        ["rules.yaml"]
    );
    let (mut fires, mut quiet) = (BTreeSet::new(), BTreeSet::new());
    for case in seq(&tests["tests"]) {
        for check in seq(&case["alert_rule_test"]) {
            let name = str_of(&check["alertname"], "alertname");
            let expected = check["exp_alerts"].as_array().map_or(0, Vec::len);
            if expected == 0 {
                quiet.insert(name);
            } else {
                fires.insert(name);
            }
        }
    }
    for alert in ALERTS {
        assert!(fires.contains(alert), "no case where {alert} fires");
        assert!(quiet.contains(alert), "no case where {alert} stays quiet");
    }
}

/// Runs promtool (`$PROMTOOL`, else `promtool` on the PATH) in the crate directory; fails
/// with the package to install when there is none.
fn promtool(args: &[&str]) {
    let program = std::env::var("PROMTOOL")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "promtool".to_string());
    let output = match Command::new(&program)
        .args(args)
        .current_dir(repo())
        .output()
    {
        Ok(output) => output,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => panic!(
            "{program} not found: install Debian package prometheus (`apt-get install -y \
             prometheus`; scripts/test does it when run as root), or set PROMTOOL"
        ),
        Err(err) => panic!("running {program}: {err}"),
    };
    assert!(
        output.status.success(),
        "`{program} {}` failed ({}):\n{}{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
#[ignore = "needs promtool (Debian package prometheus): scripts/test runs it"]
fn promtool_checks_the_rules() {
    promtool(&["check", "rules", "deploy/prometheus/rules.yaml"]);
}

#[test]
#[ignore = "needs promtool (Debian package prometheus): scripts/test runs it"]
fn promtool_unit_tests_pass() {
    assert!(Path::new(&repo().join("deploy/prometheus/rules.test.yaml")).is_file());
    promtool(&["test", "rules", "deploy/prometheus/rules.test.yaml"]);
}
