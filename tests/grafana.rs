//! deploy/grafana/mutantops.json, the Grafana dashboard of the operator's metrics (R25): every
//! panel has a title and queries the dashboard's `datasource` variable, and every metric a
//! query uses is one the operator exports, as the library itself renders them, so a renamed
//! or removed family fails here rather than leaving an empty panel.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a failed step must fail the test"
)]

#[path = "common/files.rs"]
mod files;

use std::collections::{BTreeMap, BTreeSet};

use files::metric_names;

use serde_json::Value;

/// What every panel and query must name as its data source.
const DATASOURCE: &str = "${datasource}";

fn dashboard() -> Value {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/mutantops.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every panel, including those nested in rows.
fn panels(dashboard: &Value) -> Vec<&Value> {
    fn walk<'a>(list: &'a Value, out: &mut Vec<&'a Value>) {
        for panel in list.as_array().into_iter().flatten() {
            out.push(panel);
            walk(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// The families of the operator's exposition (OpenMetrics, as Prometheus asks for it) by
/// name, with their type, as the library renders them; and every sample name.
fn exported() -> (BTreeMap<String, String>, BTreeSet<String>) {
    let text = files::exposition();
    let mut families = BTreeMap::new();
    let mut samples = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split(' ');
            if let (Some(name), Some(kind)) = (words.next(), words.next()) {
                families.insert(name.to_string(), kind.to_string());
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            samples.insert(line.split(['{', ' ']).next().unwrap().to_string());
        }
    }
    assert!(
        families.contains_key("mutant_operator_build_info"),
        "the library's exposition:\n{text}"
    );
    (families, samples)
}

/// The family a sample name belongs to: a histogram's `_bucket`, `_sum` and `_count` and a
/// counter's `_total` name the family without the suffix.
fn family_of<'a>(name: &'a str, families: &BTreeMap<String, String>) -> Option<&'a str> {
    if families.contains_key(name) {
        return Some(name);
    }
    let suffixes: [(&str, &[&str]); 2] = [
        ("histogram", &["_bucket", "_sum", "_count"]),
        ("counter", &["_total"]),
    ];
    suffixes.iter().find_map(|(kind, suffixes)| {
        suffixes.iter().find_map(|suffix| {
            let base = name.strip_suffix(suffix)?;
            (families.get(base).map(String::as_str) == Some(*kind)).then_some(base)
        })
    })
}

fn datasource_uid(value: &Value) -> Option<&str> {
    value["uid"].as_str().or_else(|| value.as_str())
}

/// The dashboard is a current one (schemaVersion 39) with a Prometheus data source variable.
#[test]
fn the_dashboard_has_a_datasource_variable() {
    let dashboard = dashboard();
    assert_eq!(dashboard["schemaVersion"].as_u64(), Some(39));
    assert_eq!(dashboard["uid"].as_str(), Some("mutantops"));
    assert!(dashboard["title"].as_str().is_some_and(|t| !t.is_empty()));
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    let datasource = variables
        .iter()
        .find(|v| v["name"].as_str() == Some("datasource"))
        .expect("a variable named datasource");
    assert_eq!(datasource["type"].as_str(), Some("datasource"));
    assert_eq!(datasource["query"].as_str(), Some("prometheus"));
    for variable in variables {
        if variable.get("datasource").is_some() {
            assert_eq!(
                datasource_uid(&variable["datasource"]),
                Some(DATASOURCE),
                "variable {}",
                variable["name"]
            );
        }
    }
}

/// Every panel has a title, and it and each of its queries use `${datasource}`; ids are unique.
#[test]
fn every_panel_has_a_title_and_the_datasource() {
    let dashboard = dashboard();
    let panels = panels(&dashboard);
    assert!(panels.len() >= 8, "{} panels", panels.len());
    let mut ids = BTreeSet::new();
    for panel in &panels {
        let title = panel["title"].as_str().unwrap_or_default();
        assert!(!title.is_empty(), "a panel without a title: {panel}");
        assert!(ids.insert(panel["id"].as_u64()), "{title}: duplicate id");
        if panel["type"].as_str() == Some("row") {
            continue;
        }
        assert_eq!(
            datasource_uid(&panel["datasource"]),
            Some(DATASOURCE),
            "{title}"
        );
        let targets = panel["targets"].as_array().expect("queries");
        assert!(!targets.is_empty(), "{title} has queries");
        for target in targets {
            if target.get("datasource").is_some() {
                assert_eq!(
                    datasource_uid(&target["datasource"]),
                    Some(DATASOURCE),
                    "{title}"
                );
            }
            assert!(
                target["expr"].as_str().is_some_and(|e| !e.is_empty()),
                "{title}: {target}"
            );
        }
    }
}

/// Every metric a query uses is exported by the operator, and the panels the dashboard
/// promises are there.
#[test]
fn every_query_uses_exported_metrics() {
    let (families, samples) = exported();
    let dashboard = dashboard();
    let mut used: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for panel in panels(&dashboard) {
        let title = panel["title"].as_str().unwrap_or_default();
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap_or_default();
            for name in metric_names(expr) {
                used.entry(name).or_default().push(title.to_string());
            }
            // A quantile is taken over a histogram's buckets.
            if expr.contains("histogram_quantile") {
                let buckets: Vec<String> = metric_names(expr)
                    .into_iter()
                    .filter(|n| n.ends_with("_bucket"))
                    .collect();
                assert!(!buckets.is_empty(), "{title}: {expr}");
                for bucket in buckets {
                    let family = family_of(&bucket, &families);
                    assert!(
                        family.is_some_and(|f| families[f] == "histogram"),
                        "{title}: {bucket} is not a histogram's buckets"
                    );
                }
            }
        }
    }
    let mut unknown = Vec::new();
    for (name, titles) in &used {
        let exported = family_of(name, &families).is_some() && samples.contains(name);
        if !exported {
            unknown.push((name, titles));
        }
    }
    assert!(
        unknown.is_empty(),
        "the dashboard queries metrics the operator does not export: {unknown:?}\n\
         exported families: {families:#?}"
    );
    let used_families: BTreeSet<&str> = used
        .keys()
        .filter_map(|name| family_of(name, &families))
        .collect();
    for family in [
        "mutant_operator_reconciliations",
        "mutant_operator_reconcile_errors",
        "mutant_operator_reconcile_duration_seconds",
        "mutant_operator_mutation_variants",
        "mutant_operator_managed_objects",
        "mutant_operator_leader",
        "mutant_operator_build_info",
        "process_resident_memory_bytes",
        "mutantops_devices",
        "mutantops_device_last_seen_timestamp_seconds",
        "mutantops_device_battery_volts",
        "mutantops_device_rssi_dbm",
    ] {
        assert!(
            used_families.contains(family),
            "no panel shows {family}: {used_families:?}"
        );
    }
}

/// The name extraction itself: label values and other names are left out.
#[test]
fn metric_names_are_read_from_expressions() {
    let expr = r#"histogram_quantile(0.95, sum by (le) (rate(mutant_operator_reconcile_duration_seconds_bucket{job="mutant_operator_x"}[5m]))) / process_open_fds + up"#;
    assert_eq!(
        metric_names(expr).into_iter().collect::<Vec<_>>(),
        [
            "mutant_operator_reconcile_duration_seconds_bucket",
            "process_open_fds"
        ]
    );
    let families = BTreeMap::from([
        ("a".to_string(), "histogram".to_string()),
        ("b".to_string(), "counter".to_string()),
    ]);
    assert_eq!(family_of("a_bucket", &families), Some("a"));
    assert_eq!(family_of("b_total", &families), Some("b"));
    assert_eq!(family_of("b_bucket", &families), None);
}
