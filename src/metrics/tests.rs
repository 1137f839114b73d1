use std::time::Duration;

use kube::runtime::{reflector, watcher};

use super::{CacheView, Metrics, process};
use crate::crd::{
    MutantDeployment, Mutation, OwnerKind, OwnerStatus, Variant, VariantState, fixtures,
};

fn lines(text: &str) -> Vec<&str> {
    text.lines().collect()
}

#[track_caller]
fn assert_line(text: &str, line: &str) {
    assert!(
        text.lines().any(|l| l == line),
        "missing line {line:?} in:\n{text}"
    );
}

/// [`assert_line`] for each of `lines`.
fn assert_lines(text: &str, lines: &[&str]) {
    for line in lines {
        assert_line(text, line);
    }
}

/// One instance of each label.
fn variants(labels: &[&str]) -> Vec<Variant> {
    labels
        .iter()
        .map(|l| fixtures::variant(l, &[], 1))
        .collect()
}

fn mutant_deployment(name: &str, labels: &[&str]) -> MutantDeployment {
    fixtures::mutant_deployment(name, variants(labels))
}

fn mutation(name: &str, labels: &[&str], states: &[VariantState]) -> Mutation {
    let mut m = fixtures::mutation(name, variants(labels));
    m.status = Some(OwnerStatus {
        variants: labels
            .iter()
            .zip(states)
            .map(|(l, s)| fixtures::variant_status(l, *s, 0))
            .collect(),
        ..Default::default()
    });
    m
}

#[test]
fn is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Metrics>();
}

#[test]
fn every_series_exists_at_zero() {
    let text = Metrics::new().encode();
    for kind in ["MutantDeployment", "Mutation"] {
        for outcome in ["ok", "error"] {
            assert_line(
                &text,
                &format!(
                    "mutant_operator_reconciliations_total{{kind=\"{kind}\",outcome=\"{outcome}\"}} 0"
                ),
            );
            assert_line(
                &text,
                &format!(
                    "mutant_operator_reconcile_duration_seconds_count{{kind=\"{kind}\",outcome=\"{outcome}\"}} 0"
                ),
            );
        }
        for error in ["invalid", "api", "client"] {
            assert_line(
                &text,
                &format!(
                    "mutant_operator_reconcile_errors_total{{kind=\"{kind}\",error=\"{error}\"}} 0"
                ),
            );
        }
        for error in ["queue", "object_not_found", "runner"] {
            assert_line(
                &text,
                &format!(
                    "mutant_operator_controller_errors_total{{kind=\"{kind}\",error=\"{error}\"}} 0"
                ),
            );
        }
        assert_line(
            &text,
            &format!("mutant_operator_managed_objects{{kind=\"{kind}\"}} 0"),
        );
        assert_line(
            &text,
            &format!("mutant_operator_variants{{kind=\"{kind}\"}} 0"),
        );
    }
    for state in ["Progressing", "Ready", "Invalid", "Conflict"] {
        assert_line(
            &text,
            &format!("mutant_operator_mutation_variants{{state=\"{state}\"}} 0"),
        );
    }
    assert_line(
        &text,
        &format!(
            "mutant_operator_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        ),
    );
    assert_line(&text, "mutant_operator_leader 0");
    assert_eq!(lines(&text).last(), Some(&"# EOF"));
    assert!(text.ends_with("# EOF\n"));
    assert_eq!(text.matches("# EOF").count(), 1);
}

#[test]
fn types_and_units() {
    let text = Metrics::new().encode();
    assert_lines(
        &text,
        &[
            "# TYPE mutant_operator_reconciliations counter",
            "# TYPE mutant_operator_reconcile_duration_seconds histogram",
            "# UNIT mutant_operator_reconcile_duration_seconds seconds",
            "# TYPE mutant_operator_reconcile_errors counter",
            "# TYPE mutant_operator_controller_errors counter",
            "# TYPE mutant_operator_managed_objects gauge",
            "# TYPE mutant_operator_variants gauge",
            "# TYPE mutant_operator_mutation_variants gauge",
            "# TYPE mutant_operator_build_info gauge",
            "# TYPE mutant_operator_leader gauge",
        ],
    );
    // No doubled suffix.
    assert!(!text.contains("_total_total"), "{text}");
}

#[test]
fn counters_and_histogram_follow_calls() {
    let metrics = Metrics::new();
    metrics.reconciled(OwnerKind::Mutation, Duration::from_millis(20), None);
    metrics.reconciled(OwnerKind::Mutation, Duration::from_millis(30), None);
    metrics.reconciled(
        OwnerKind::MutantDeployment,
        Duration::from_secs(3),
        Some("api"),
    );
    metrics.reconciled(
        OwnerKind::MutantDeployment,
        Duration::from_secs(20),
        Some("invalid"),
    );
    metrics.controller_error(OwnerKind::Mutation, "queue");
    metrics.controller_error(OwnerKind::Mutation, "queue");
    metrics.controller_error(OwnerKind::MutantDeployment, "runner");
    let text = metrics.encode();

    // The counters: (family, kind, second label, its value, count).
    let (mu, md) = ("Mutation", "MutantDeployment");
    let counters = [
        ("reconciliations", mu, "outcome", "ok", 2),
        ("reconciliations", mu, "outcome", "error", 0),
        ("reconciliations", md, "outcome", "ok", 0),
        ("reconciliations", md, "outcome", "error", 2),
        ("reconcile_errors", md, "error", "api", 1),
        ("reconcile_errors", md, "error", "invalid", 1),
        ("reconcile_errors", md, "error", "client", 0),
        ("reconcile_errors", mu, "error", "api", 0),
        ("controller_errors", mu, "error", "queue", 2),
        ("controller_errors", md, "error", "runner", 1),
        ("controller_errors", md, "error", "queue", 0),
    ];
    for (family, kind, label, value, count) in counters {
        assert_line(
            &text,
            &format!(
                "mutant_operator_{family}_total{{kind=\"{kind}\",{label}=\"{value}\"}} {count}"
            ),
        );
    }
    // The histograms: 20 ms and 30 ms; 3 s and 20 s, the second only in +Inf.
    type Buckets<'a> = &'a [(&'a str, u64)];
    let histograms: [(&str, &str, u64, &str, Buckets); 2] = [
        (
            "Mutation",
            "ok",
            2,
            "0.05",
            &[
                ("0.01", 0),
                ("0.025", 1),
                ("0.05", 2),
                ("10.0", 2),
                ("+Inf", 2),
            ],
        ),
        (
            "MutantDeployment",
            "error",
            2,
            "23.0",
            &[("2.5", 0), ("5.0", 1), ("10.0", 1), ("+Inf", 2)],
        ),
    ];
    let series = "mutant_operator_reconcile_duration_seconds";
    for (kind, outcome, count, sum, buckets) in histograms {
        let labels = format!("kind=\"{kind}\",outcome=\"{outcome}\"");
        assert_line(&text, &format!("{series}_count{{{labels}}} {count}"));
        assert_line(&text, &format!("{series}_sum{{{labels}}} {sum}"));
        for (le, n) in buckets {
            assert_line(
                &text,
                &format!("{series}_bucket{{le=\"{le}\",{labels}}} {n}"),
            );
        }
    }
    // 13 bounds plus +Inf for each of the 4 series.
    let buckets = text
        .lines()
        .filter(|l| l.starts_with("mutant_operator_reconcile_duration_seconds_bucket"))
        .count();
    assert_eq!(buckets, 4 * 14);
    assert_eq!(lines(&text).last(), Some(&"# EOF"));
}

#[test]
fn leader_gauge() {
    let metrics = Metrics::new();
    metrics.set_leader(false);
    assert_line(&metrics.encode(), "mutant_operator_leader 0");
    metrics.set_leader(true);
    assert_line(&metrics.encode(), "mutant_operator_leader 1");
}

#[test]
fn gauges_follow_the_caches() {
    let metrics = Metrics::new();
    let (md_store, mut md_writer) = reflector::store::<MutantDeployment>();
    let (m_store, mut m_writer) = reflector::store::<Mutation>();
    metrics.set_cache_view(CacheView {
        mutant_deployments: md_store,
        mutations: m_store,
    });

    let text = metrics.encode();
    assert_line(
        &text,
        r#"mutant_operator_managed_objects{kind="MutantDeployment"} 0"#,
    );
    assert_line(
        &text,
        r#"mutant_operator_mutation_variants{state="Ready"} 0"#,
    );

    md_writer.apply_watcher_event(&watcher::Event::Apply(mutant_deployment("a", &["x", "y"])));
    md_writer.apply_watcher_event(&watcher::Event::Apply(mutant_deployment("b", &["z"])));
    md_writer.apply_watcher_event(&watcher::Event::Apply(mutant_deployment("c", &[])));
    m_writer.apply_watcher_event(&watcher::Event::Apply(mutation(
        "m1",
        &["p", "q", "r"],
        &[
            VariantState::Ready,
            VariantState::Ready,
            VariantState::Conflict,
        ],
    )));
    m_writer.apply_watcher_event(&watcher::Event::Apply(mutation(
        "m2",
        &["s", "t"],
        &[VariantState::Progressing],
    )));

    let text = metrics.encode();
    assert_lines(
        &text,
        &[
            r#"mutant_operator_managed_objects{kind="MutantDeployment"} 3"#,
            r#"mutant_operator_managed_objects{kind="Mutation"} 2"#,
            r#"mutant_operator_variants{kind="MutantDeployment"} 3"#,
            r#"mutant_operator_variants{kind="Mutation"} 5"#,
            r#"mutant_operator_mutation_variants{state="Progressing"} 1"#,
            r#"mutant_operator_mutation_variants{state="Ready"} 2"#,
            r#"mutant_operator_mutation_variants{state="Invalid"} 0"#,
            r#"mutant_operator_mutation_variants{state="Conflict"} 1"#,
        ],
    );

    // A deletion shows at the next scrape.
    m_writer.apply_watcher_event(&watcher::Event::Delete(mutation(
        "m1",
        &["p", "q", "r"],
        &[],
    )));
    let text = metrics.encode();
    assert_lines(
        &text,
        &[
            r#"mutant_operator_managed_objects{kind="Mutation"} 1"#,
            r#"mutant_operator_variants{kind="Mutation"} 2"#,
            r#"mutant_operator_mutation_variants{state="Ready"} 0"#,
            r#"mutant_operator_mutation_variants{state="Progressing"} 1"#,
            r#"mutant_operator_mutation_variants{state="Conflict"} 0"#,
        ],
    );
}

#[cfg(target_os = "linux")]
#[test]
fn process_series_on_linux() {
    let text = Metrics::new().encode();
    for name in [
        "process_cpu_seconds_total ",
        "process_resident_memory_bytes ",
        "process_virtual_memory_bytes ",
        "process_open_fds ",
        "process_max_fds ",
        "process_start_time_seconds ",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(name)),
            "missing {name:?} in:\n{text}"
        );
    }
    assert_line(&text, "# TYPE process_cpu_seconds counter");
    let value = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or(-1.0)
    };
    assert!(value("process_resident_memory_bytes ") > 0.0);
    assert!(value("process_open_fds ") >= 3.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default();
    let start = value("process_start_time_seconds ");
    assert!(
        start > now - 3600.0 && start <= now + 1.0,
        "{start} vs {now}"
    );
}

#[test]
fn parses_proc_stat() {
    // The command name holds spaces and a parenthesis.
    let stat = "1234 (my (odd) cmd) S 1 1234 1234 0 -1 4194560 500 0 0 0 \
                250 70 0 0 20 0 4 0 98765 12345678 900 18446744073709551615";
    assert_eq!(
        process::parse_stat(stat),
        Some(process::Stat {
            utime: 250,
            stime: 70,
            starttime: 98765,
        })
    );
    assert_eq!(process::parse_stat("garbage"), None);
    assert_eq!(process::parse_stat("1 (x) S 1 2"), None);
}

#[test]
fn parses_proc_status_limits_and_btime() {
    let status =
        "Name:\tmutantops\nVmPeak:\t  20000 kB\nVmSize:\t   18000 kB\nVmRSS:\t    5120 kB\n";
    assert_eq!(process::status_kb(status, "VmRSS"), Some(5120));
    assert_eq!(process::status_kb(status, "VmSize"), Some(18000));
    assert_eq!(process::status_kb(status, "VmSwap"), None);

    let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                  Max cpu time              unlimited            unlimited            seconds   \n\
                  Max open files            1024                 1048576              files     \n";
    assert_eq!(process::max_open_files(limits), Some(1024));
    assert_eq!(
        process::max_open_files("Max open files unlimited unlimited files"),
        None
    );

    let stat = "cpu  1 2 3\nintr 5\nbtime 1700000000\nprocesses 9\n";
    assert_eq!(process::boot_time(stat), Some(1_700_000_000));
    assert_eq!(process::boot_time("cpu 1 2 3\n"), None);
}

#[test]
fn help_texts_end_with_one_period() {
    let text = Metrics::new().encode();
    for line in text.lines().filter(|l| l.starts_with("# HELP ")) {
        assert!(
            line.ends_with('.') && !line.ends_with(".."),
            "bad help: {line}"
        );
    }
}

#[test]
fn prometheus_text_format() {
    let metrics = Metrics::new();
    metrics.reconciled(OwnerKind::Mutation, Duration::from_millis(20), None);
    metrics.set_leader(true);
    let text = metrics.encode_text();
    assert_lines(
        &text,
        &[
            "# TYPE mutant_operator_reconciliations_total counter",
            r#"mutant_operator_reconciliations_total{kind="Mutation",outcome="ok"} 1"#,
            "# TYPE mutant_operator_reconcile_duration_seconds histogram",
            r#"mutant_operator_reconcile_duration_seconds_count{kind="Mutation",outcome="ok"} 1"#,
            "# TYPE mutant_operator_mutation_variants gauge",
            r#"mutant_operator_mutation_variants{state="Conflict"} 0"#,
            "mutant_operator_leader 1",
        ],
    );
    assert!(!text.contains("# EOF"));
    assert!(!text.contains("# UNIT"));
}

// R25: text unless OpenMetrics is asked for, as the Go client library negotiates, so
// `curl -s /metrics | promtool check metrics` (curl sends `Accept: */*`) passes.
#[test]
fn negotiates_the_format() {
    let metrics = Metrics::new();
    let prometheus = "application/openmetrics-text;version=1.0.0;q=0.5,\
                      application/openmetrics-text;version=0.0.1;q=0.4,\
                      text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
    let prometheus_3 = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,\
                        application/openmetrics-text;version=0.0.1;q=0.5,\
                        text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,\
                        text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
    for accept in [
        prometheus,
        prometheus_3,
        "application/openmetrics-text",
        "text/plain;q=0.5, Application/OpenMetrics-Text; version=1.0.0",
        "application/openmetrics-text, text/plain",
    ] {
        let (content_type, body) = metrics.encode_for(Some(accept));
        assert_eq!(content_type, super::CONTENT_TYPE, "{accept:?}");
        assert!(body.ends_with("# EOF\n"), "{accept:?}");
    }
    for accept in [
        None,
        Some("*/*"),
        Some("application/json"),
        Some("text/plain"),
        Some("text/plain; version=0.0.4, */*;q=0.1"),
        Some("Text/Plain, application/openmetrics-text; q=0"),
        Some("application/openmetrics-text;q=0.2, text/plain;q=0.3"),
        Some("text/plain, application/openmetrics-text"),
        Some("application/openmetrics-text;q=oops"),
    ] {
        let (content_type, body) = metrics.encode_for(accept);
        assert_eq!(content_type, super::TEXT_CONTENT_TYPE, "{accept:?}");
        assert!(!body.contains("# EOF"), "{accept:?}");
        assert_line(
            &body,
            "# TYPE mutant_operator_reconciliations_total counter",
        );
    }
}

/// A Mutation with spec.devices and these (id, state, battery mV, RSSI) devices.
fn fleet(name: &str, devices: &[(&str, &str, Option<u32>, Option<i32>)]) -> Mutation {
    let devices: Vec<serde_json::Value> = devices
        .iter()
        .map(|(id, state, mv, rssi)| {
            serde_json::json!({"id": id, "variant": "v", "enrolledAt": "2026-12-01T00:00:00Z",
                "lastSeen": "2026-12-03T00:00:00Z", "state": state,
                "reported": {"batteryMillivolts": mv, "rssi": rssi}})
        })
        .collect();
    serde_json::from_value(serde_json::json!({
        "apiVersion": "neiam.org/v1", "kind": "Mutation",
        "metadata": {"name": name, "namespace": "displays", "uid": name},
        "spec": {"deployment": {}, "devices": {}},
        "status": {"summary": "", "devices": devices}
    }))
    .unwrap_or_else(|e| panic!("{e}"))
}

// R39, R40, R25: devices by state for every Mutation with spec.devices, every
// state listed; per-device series up to the cap, and only the counts above it
#[test]
fn device_gauges_follow_the_statuses_and_the_cap() {
    let metrics = Metrics::new();
    let (md_store, _md_writer) = reflector::store::<MutantDeployment>();
    let (m_store, mut m_writer) = reflector::store::<Mutation>();
    metrics.set_stores(md_store, m_store);
    m_writer.apply_watcher_event(&watcher::Event::Apply(fleet(
        "fleet",
        &[
            ("lilygo-1", "Online", Some(3910), Some(-61)),
            ("lilygo-2", "Late", None, None),
        ],
    )));
    m_writer.apply_watcher_event(&watcher::Event::Apply(mutation("plain", &["a"], &[])));
    let text = metrics.encode();
    assert_lines(
        &text,
        &[
            r#"mutantops_devices{namespace="displays",mutation="fleet",state="Online"} 1"#,
            r#"mutantops_devices{namespace="displays",mutation="fleet",state="Late"} 1"#,
            r#"mutantops_devices{namespace="displays",mutation="fleet",state="Gone"} 0"#,
            r#"mutantops_device_series_capped{namespace="displays",mutation="fleet"} 0"#,
            r#"mutantops_device_last_seen_timestamp_seconds{namespace="displays",mutation="fleet",device="lilygo-1"} 1796256000"#,
            r#"mutantops_device_last_seen_timestamp_seconds{namespace="displays",mutation="fleet",device="lilygo-2"} 1796256000"#,
            r#"mutantops_device_battery_volts{namespace="displays",mutation="fleet",device="lilygo-1"} 3.91"#,
            r#"mutantops_device_rssi_dbm{namespace="displays",mutation="fleet",device="lilygo-1"} -61"#,
        ],
    );
    assert!(!text.contains(r#"mutation="plain""#), "{text}");
    assert!(
        !text.contains(r#"battery_volts{namespace="displays",mutation="fleet",device="lilygo-2""#)
    );
    // above the cap: that Mutation's counts only; another Mutation within it keeps its
    // series (a Mutation's fake devices blind no other's alerts)
    m_writer.apply_watcher_event(&watcher::Event::Apply(fleet(
        "small",
        &[("epaper-1", "Online", Some(3300), None)],
    )));
    metrics.set_max_devices(1);
    let text = metrics.encode();
    assert_line(
        &text,
        r#"mutantops_device_series_capped{namespace="displays",mutation="fleet"} 1"#,
    );
    assert_line(
        &text,
        r#"mutantops_device_series_capped{namespace="displays",mutation="small"} 0"#,
    );
    assert_line(
        &text,
        r#"mutantops_devices{namespace="displays",mutation="fleet",state="Online"} 1"#,
    );
    assert!(!text.contains("lilygo"), "{text}");
    assert_line(
        &text,
        r#"mutantops_device_battery_volts{namespace="displays",mutation="small",device="epaper-1"} 3.3"#,
    );
}
