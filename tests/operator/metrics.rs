//! R25, R26: the metrics listener: every family of docs/operations.md's tables with its labels and
//! sensible values, gauges equal to what is in the cluster, the exposition format accepted by
//! promtool, and the probes.

use std::collections::BTreeMap;

use serde_json::json;

use super::*;

/// Sample lines of an OpenMetrics text, as "name{labels}" → value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

fn value(samples: &BTreeMap<String, f64>, series: &str) -> f64 {
    *samples
        .get(series)
        .unwrap_or_else(|| panic!("no series {series} in:\n{samples:#?}"))
}

/// Applies Mutation `m` over `base(base_name)` with the one variant `label` (1 instance), and
/// waits until it is ready.
async fn apply_one_variant(f: &Fixture, base_name: &str, label: &str) {
    let one = json!([{ "label": label, "instances": 1 }]);
    f.apply::<Mutation>(&mutation("m", base(base_name), one))
        .await;
    f.wait_status::<Mutation>("m", "1/1", |s| s.summary == "1/1 variants ready")
        .await;
}

/// Asserts that a command succeeded and said nothing, on stdout or stderr.
fn assert_silent_success(output: &std::process::Output, what: &str) {
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success() && said.trim().is_empty(),
        "{what}: {said}"
    );
}

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn metrics_follow_the_cluster_and_the_format_is_valid() {
    let f = Fixture::new("metrics").await;
    let port = f.operator.metrics_port;
    let two = json!([{ "label": "a", "instances": 1 }, { "label": "Bad", "instances": 1 }]);
    f.apply::<MutantDeployment>(&mutant_deployment("d", base("md"), two))
        .await;
    let three = json!([{ "label": "x", "instances": 1 }, { "label": "y", "instances": 0 },
                       { "label": "x", "instances": 2 }]);
    f.apply::<Mutation>(&mutation("m", base("mu"), three)).await;
    f.wait_status::<MutantDeployment>("d", "1/2", |s| s.summary == "1/2 variants ready")
        .await;
    f.wait_status::<Mutation>("m", "2/3", |s| s.summary == "2/3 variants ready")
        .await;

    // What Prometheus sends gets OpenMetrics. The gauges come from the watch caches, which
    // follow the statuses just read from the API server within moments: wait for what they
    // must show, never read them once, then check the rest on that answer.
    let accept =
        "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
    let reply = wait_for("the gauges to follow the statuses", CONVERGE, || async {
        let reply = common::http::Request::new("GET", "/metrics", None, None)
            .headers(&[("Accept", accept)])
            .send(port)
            .await;
        let s = samples(&reply.body);
        let states = (
            s.get("mutant_operator_mutation_variants{state=\"Ready\"}")
                .copied(),
            s.get("mutant_operator_mutation_variants{state=\"Conflict\"}")
                .copied(),
        );
        (states == (Some(2.0), Some(1.0)))
            .then_some(reply)
            .ok_or(format!("Ready, Conflict: {states:?}"))
    })
    .await;
    assert_eq!(reply.status, 200);
    assert!(
        reply
            .header("content-type")
            .unwrap()
            .starts_with("application/openmetrics-text")
    );
    assert!(reply.body.ends_with("# EOF\n"));
    let s = samples(&reply.body);

    for kind in ["MutantDeployment", "Mutation"] {
        let series =
            |name: &str, label: &str| format!("mutant_operator_{name}{{kind=\"{kind}\",{label}}}");
        let ok = value(&s, &series("reconciliations_total", "outcome=\"ok\""));
        assert!(ok >= 1.0, "{kind} reconciles counted: {ok}");
        let count = value(
            &s,
            &series("reconcile_duration_seconds_count", "outcome=\"ok\""),
        );
        assert_eq!(count, ok, "one duration per reconcile");
        // These are there, whatever their value.
        let mut present = vec![series("reconciliations_total", "outcome=\"error\"")];
        for error in ["invalid", "api", "client"] {
            present.push(series(
                "reconcile_errors_total",
                &format!("error=\"{error}\""),
            ));
        }
        for error in ["queue", "object_not_found", "runner"] {
            present.push(series(
                "controller_errors_total",
                &format!("error=\"{error}\""),
            ));
        }
        for series in &present {
            value(&s, series);
        }
        // Gauges from the caches: one owner of each kind in this (scoped) operator.
        let managed = format!("mutant_operator_managed_objects{{kind=\"{kind}\"}}");
        assert_eq!(value(&s, &managed), 1.0);
    }
    let build_info = format!(
        "mutant_operator_build_info{{version=\"{}\"}}",
        env!("CARGO_PKG_VERSION")
    );
    let gauges = [
        ("mutant_operator_variants{kind=\"MutantDeployment\"}", 2.0),
        ("mutant_operator_variants{kind=\"Mutation\"}", 3.0),
        // Mutation variants by reported state: x and y Ready, the repeated x a Conflict.
        ("mutant_operator_mutation_variants{state=\"Ready\"}", 2.0),
        ("mutant_operator_mutation_variants{state=\"Conflict\"}", 1.0),
        ("mutant_operator_mutation_variants{state=\"Invalid\"}", 0.0),
        (
            "mutant_operator_mutation_variants{state=\"Progressing\"}",
            0.0,
        ),
        (&build_info, 1.0),
    ];
    for (series, expected) in gauges {
        assert_eq!(value(&s, series), expected, "{series}");
    }
    for process in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
    ] {
        assert!(value(&s, process) > 0.0, "{process}");
    }

    // The exposition format passes promtool (Debian's prometheus package; scripts/test
    // installs it).
    let promtool = std::env::var("PROMTOOL").unwrap_or_else(|_| "promtool".into());
    let mut child = std::process::Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{promtool} is needed (apt-get install prometheus): {e}"));
    // promtool reads the classic text format, which any client that does not ask for
    // OpenMetrics gets: no Accept header, or curl's `*/*` (R25: `curl -s .../metrics |
    // promtool check metrics`, as Prometheus documents it).
    let plain = common::http::request(port, "GET", "/metrics", None, None).await;
    assert!(
        plain
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/plain; version=0.0.4")),
        "{:?}",
        plain.headers
    );
    let text = common::http::Request::new("GET", "/metrics", None, None)
        .headers(&[("Accept", "*/*")])
        .send(port)
        .await;
    let content_type = text.header("content-type").unwrap();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    // Both formats carry the same series (buckets aside: their `le` is written differently).
    let series = |m: &BTreeMap<String, f64>| -> Vec<String> {
        m.keys()
            .filter(|k| !k.contains("_bucket{"))
            .cloned()
            .collect()
    };
    assert_eq!(series(&samples(&text.body)), series(&s));
    {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.body.as_bytes())
            .unwrap();
    }
    assert_silent_success(&child.wait_with_output().unwrap(), "promtool check metrics");
    // And literally as Prometheus documents it.
    let piped = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -o pipefail; curl -s http://127.0.0.1:{port}/metrics | {promtool} check metrics"
        ))
        .output()
        .unwrap();
    assert_silent_success(&piped, "curl -s .../metrics | promtool check metrics");

    // Counters move: a spec change means more reconciles.
    let ok = "mutant_operator_reconciliations_total{kind=\"Mutation\",outcome=\"ok\"}";
    let before = value(&s, ok);
    apply_one_variant(&f, "mu", "x").await;
    // The gauges come from the watch caches, which follow the status just read from the API
    // server within moments: wait for what they must converge to, never read them once (on
    // k3s's kine/SQLite the Conflict gauge was still 1.0 at the first read).
    let variants = "mutant_operator_variants{kind=\"Mutation\"}";
    let conflict = "mutant_operator_mutation_variants{state=\"Conflict\"}";
    wait_for("the metrics to follow the status", CONVERGE, || async {
        let after = samples(
            &common::http::request(port, "GET", "/metrics", None, None)
                .await
                .body,
        );
        let seen = (
            value(&after, ok),
            value(&after, variants),
            value(&after, conflict),
        );
        (seen.0 > before && seen.1 == 1.0 && seen.2 == 0.0)
            .then_some(())
            .ok_or(format!("reconciled ok, variants, conflicts: {seen:?}"))
    })
    .await;

    // R26: probes on the same listener; the API's port does not serve them.
    let probes = [
        ("GET", "/healthz", None, 200),
        ("GET", "/readyz", None, 200),
        ("GET", "/nope", None, 404),
        ("POST", "/metrics", Some(""), 405),
    ];
    for (method, path, body, status) in probes {
        let reply = common::http::request(port, method, path, None, body).await;
        assert_eq!(reply.status, status, "{method} {path}: {reply:?}");
    }
    let api = common::http::request(f.operator.api_port, "GET", "/metrics", None, None).await;
    assert_eq!(api.status, 404, "the API listener does not serve metrics");
}

/// MUTANT_LOG_FORMAT=json writes one JSON object per line, with the reconciled object named.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn json_logs_are_one_object_per_line() {
    let f = Fixture::with_env("logs-json", &[("MUTANT_LOG_FORMAT", "json")]).await;
    apply_one_variant(&f, "web", "a").await;
    let log = f.operator.log_text();
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        lines
            .iter()
            .all(|l| l["level"].is_string() && l["timestamp"].is_string())
    );
    assert!(
        lines.iter().any(|l| l["message"] == "reconciled"
            && l["object"]
                .as_str()
                .is_some_and(|o| o.contains("Mutation") && o.contains("/m."))),
        "{log}"
    );
}
