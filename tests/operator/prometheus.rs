//! R25: a real Prometheus (Debian package `prometheus`; `$PROMETHEUS` names another binary)
//! scrapes the operator with deploy/prometheus/rules.yaml loaded, as a user's would: the
//! target is up with no scrape error and was read as OpenMetrics, every family the library
//! renders arrives, a reconcile moves the counters Prometheus stores, and the rules load,
//! evaluate without error and stay quiet while the operator is healthy. The relabelling of
//! deploy/prometheus/README.md's plain-Prometheus configuration is run against the pods of
//! deploy/operator.yml's template. Without a `prometheus` binary the tests fail, naming the
//! package; they never pass silently.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

use super::*;

/// The job the rules select (deploy/prometheus/rules.yaml) and this scrape config names.
const JOB: &str = "mutantops";

/// A `prometheus` server in a directory of its own under `CARGO_TARGET_TMPDIR`, scraping one
/// operator every second. Dropping it kills the process; when a test fails, its config and
/// the tail of its log are printed (and the directory is kept), else the directory is removed.
struct Prometheus {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Prometheus {
    /// Starts Prometheus against the operator's metrics listener on `metrics_port` and waits
    /// until it is ready; tries another port if its own was taken in between.
    async fn start(metrics_port: u16) -> Prometheus {
        Self::start_with(json!({
            "global": { "scrape_interval": "1s", "evaluation_interval": "1s" },
            "rule_files": [rules_file()],
            "scrape_configs": [{
                "job_name": JOB,
                "scrape_interval": "1s",
                "scrape_timeout": "1s",
                "static_configs": [{ "targets": [format!("127.0.0.1:{metrics_port}")] }],
            }],
        }))
        .await
    }

    /// Starts Prometheus with `config` (JSON is YAML: no quoting of paths to get wrong).
    async fn start_with(config: Value) -> Prometheus {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("prometheus")
            .join(common::random_suffix());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("prometheus.yml"), config.to_string()).unwrap();
        let mut attempt = 1;
        loop {
            let mut prometheus = Self::spawn(&dir);
            match prometheus.wait_ready().await {
                Ok(()) => return prometheus,
                Err(log) if attempt < 5 && log.contains("address already in use") => attempt += 1,
                Err(log) => panic!("prometheus did not become ready:\n{log}"),
            }
        }
    }

    fn spawn(dir: &Path) -> Prometheus {
        let program = std::env::var("PROMETHEUS")
            .ok()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "prometheus".to_string());
        let port = common::free_port();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(&program)
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn();
        let child = match child {
            Ok(child) => child,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => panic!(
                "{program} not found: install Debian package prometheus (`apt-get install -y \
                 prometheus`), or set PROMETHEUS to a prometheus binary"
            ),
            Err(err) => panic!("running {program}: {err}"),
        };
        Prometheus {
            child,
            port,
            dir: dir.to_path_buf(),
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// Waits up to [`CONVERGE`] for `/-/ready`; the log if the process exits or time runs out.
    async fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + CONVERGE;
        while tokio::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("exited ({status}):\n{}", self.log_text()));
            }
            if let Ok(reply) = self.get("/-/ready").await
                && reply.status == 200
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(format!(
            "not ready after {CONVERGE:?}:\n{}",
            self.log_text()
        ))
    }

    /// One GET over HTTP/1.0 (so the body is never chunked), or why there was no answer.
    async fn get(&self, path: &str) -> Result<common::http::Reply, String> {
        tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .map_err(|e| format!("connecting to prometheus: {e}"))?;
        let raw = format!(
            "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{}\r\n\r\n",
            self.port
        );
        let text = common::http::exchange(self.port, raw.as_bytes()).await;
        common::http::parse(&text).ok_or_else(|| format!("not an HTTP response: {text:?}"))
    }

    /// The `data` of a successful API answer.
    async fn api(&self, path: &str) -> Result<Value, String> {
        let reply = self.get(path).await?;
        let body: Value = serde_json::from_str(&reply.body)
            .map_err(|e| format!("{path}: {e}: {:?}", reply.body))?;
        if reply.status != 200 || body["status"] != "success" {
            return Err(format!("{path}: {} {body}", reply.status));
        }
        Ok(body["data"].clone())
    }

    /// An instant query's series, as (labels, value).
    async fn query(&self, promql: &str) -> Result<Vec<(Value, f64)>, String> {
        let data = self
            .api(&format!("/api/v1/query?query={}", encode(promql)))
            .await?;
        data["result"]
            .as_array()
            .ok_or_else(|| format!("{promql}: {data}"))?
            .iter()
            .map(|series| {
                let value = series["value"][1]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| format!("{promql}: {series}"))?;
                Ok((series["metric"].clone(), value))
            })
            .collect()
    }

    /// The value of a query that gives exactly one series.
    async fn value(&self, promql: &str) -> Result<f64, String> {
        match self.query(promql).await?.as_slice() {
            [(_, value)] => Ok(*value),
            other => Err(format!("{promql}: {other:?}")),
        }
    }

    /// Waits until `promql` gives one series whose value satisfies `check`.
    async fn wait_value(&self, promql: &str, check: impl Fn(f64) -> bool) -> f64 {
        wait_for(promql, CONVERGE, || async {
            let value = self.value(promql).await?;
            if check(value) {
                Ok(value)
            } else {
                Err(format!("{value}"))
            }
        })
        .await
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let config =
                std::fs::read_to_string(self.dir.join("prometheus.yml")).unwrap_or_default();
            let text = self.log_text();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(60)..];
            eprintln!(
                "--- prometheus in {} ---\nconfig: {config}\nlast lines of its log:\n{}",
                self.dir.display(),
                tail.join("\n")
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Percent-encodes a query parameter (everything but RFC 3986's unreserved characters).
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn rules_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus/rules.yaml")
}

/// The alert names of deploy/prometheus/rules.yaml.
fn alerts_in_rules_file() -> BTreeSet<String> {
    let text = std::fs::read_to_string(rules_file()).unwrap();
    let rules: Value = serde_saphyr::from_str(&text).unwrap();
    rules["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["alert"].as_str().unwrap().to_string())
        .collect()
}

/// R25: Prometheus scrapes the operator (OpenMetrics, no error), stores every family the
/// library renders, sees the counters move with a reconcile and the cache gauges follow the
/// cluster, and evaluates the rules of deploy/prometheus/rules.yaml, none of which fires.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn prometheus_scrapes_the_operator_and_loads_the_rules() {
    let f = Fixture::new("prometheus").await;
    let metrics_port = f.operator.metrics_port;
    let prometheus = Prometheus::start(metrics_port).await;

    prometheus
        .wait_value(&format!("up{{job=\"{JOB}\"}}"), |v| v == 1.0)
        .await;
    let target = wait_for("the target to be healthy", CONVERGE, || async {
        let data = prometheus.api("/api/v1/targets?state=active").await?;
        let targets: Vec<&Value> = data["activeTargets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| t["labels"]["job"] == JOB)
            .collect();
        match targets.as_slice() {
            [t] if t["health"] == "up" && t["lastError"] == "" => Ok((*t).clone()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(
        target["scrapeUrl"].as_str(),
        Some(format!("http://127.0.0.1:{metrics_port}/metrics").as_str())
    );

    // Units reach Prometheus only through OpenMetrics (`# UNIT`): the histogram's metadata
    // carrying one shows the scrape was parsed as OpenMetrics, not as the text format.
    let metadata = prometheus
        .api(&format!(
            "/api/v1/targets/metadata?match_target={}&metric=mutant_operator_reconcile_duration_seconds",
            encode(&format!("{{job=\"{JOB}\"}}"))
        ))
        .await
        .unwrap();
    assert_eq!(metadata[0]["type"], "histogram", "{metadata}");
    assert_eq!(metadata[0]["unit"], "seconds", "{metadata}");

    // Every sample name the library renders is stored.
    let expected: BTreeSet<String> = mutantops::metrics::Metrics::new()
        .encode()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect();
    let stored: BTreeSet<String> = prometheus
        .query(&format!("count by (__name__) ({{job=\"{JOB}\"}})"))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|(labels, _)| labels["__name__"].as_str().map(str::to_string))
        .collect();
    let missing: Vec<&String> = expected.difference(&stored).collect();
    assert!(
        missing.is_empty(),
        "not in Prometheus: {missing:?}\nstored: {stored:?}"
    );

    let build_info = prometheus
        .query(&format!("mutant_operator_build_info{{job=\"{JOB}\"}}"))
        .await
        .unwrap();
    assert_eq!(build_info.len(), 1, "{build_info:?}");
    assert_eq!(build_info[0].0["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(build_info[0].1, 1.0);
    assert_eq!(
        prometheus
            .query(&format!(
                "mutant_operator_reconciliations_total{{job=\"{JOB}\"}}"
            ))
            .await
            .unwrap()
            .len(),
        4,
        "two kinds, two outcomes"
    );
    // The only replica becomes the leader.
    prometheus
        .wait_value(&format!("mutant_operator_leader{{job=\"{JOB}\"}}"), |v| {
            v == 1.0
        })
        .await;

    // A reconcile moves the counter Prometheus stores; the cache gauges follow the cluster.
    let reconciles =
        format!("sum(mutant_operator_reconciliations_total{{job=\"{JOB}\",kind=\"Mutation\"}})");
    let before = prometheus.value(&reconciles).await.unwrap();
    let variants = json!([{ "label": "a", "instances": 1 }, { "label": "b", "instances": 0 }]);
    f.apply::<Mutation>(&mutation("scraped", base("scraped"), variants))
        .await;
    prometheus.wait_value(&reconciles, |v| v > before).await;
    prometheus
        .wait_value(
            &format!("mutant_operator_managed_objects{{job=\"{JOB}\",kind=\"Mutation\"}}"),
            |v| v == 1.0,
        )
        .await;
    prometheus
        .wait_value(
            &format!("mutant_operator_variants{{job=\"{JOB}\",kind=\"Mutation\"}}"),
            |v| v == 2.0,
        )
        .await;

    // The rules file's group is loaded, each rule evaluates without error, and none fires
    // (MutantOpsDown and MutantOpsNoLeader may be pending until the first scrapes are in).
    let alerts = alerts_in_rules_file();
    wait_for("the rules to evaluate, all inactive", CONVERGE, || async {
        let data = prometheus.api("/api/v1/rules?type=alert").await?;
        let groups = data["groups"].as_array().cloned().unwrap_or_default();
        let group = groups
            .iter()
            .find(|g| g["name"] == "mutantops")
            .ok_or_else(|| format!("no group mutantops: {data}"))?;
        if !group["file"]
            .as_str()
            .unwrap_or("")
            .ends_with("deploy/prometheus/rules.yaml")
        {
            return Err(format!("from another file: {}", group["file"]));
        }
        let rules = group["rules"].as_array().cloned().unwrap_or_default();
        let names: BTreeSet<String> = rules
            .iter()
            .filter_map(|r| r["name"].as_str().map(str::to_string))
            .collect();
        if names != alerts {
            return Err(format!("rules {names:?}, file has {alerts:?}"));
        }
        let unsettled: Vec<String> = rules
            .iter()
            .filter(|r| r["health"] != "ok" || r["state"] != "inactive")
            .map(|r| {
                format!(
                    "{} health {} state {} {}",
                    r["name"], r["health"], r["state"], r["lastError"]
                )
            })
            .collect();
        if unsettled.is_empty() {
            Ok(())
        } else {
            Err(unsettled.join("; "))
        }
    })
    .await;
}

/// The first YAML block under "## Plain Prometheus" in deploy/prometheus/README.md: the
/// configuration a user of a plain Prometheus in the cluster copies.
fn readme_scrape_config() -> Value {
    let block = markdown_block("deploy/prometheus/README.md", "## Plain Prometheus", "yaml");
    serde_saphyr::from_str(&block).unwrap_or_else(|e| panic!("{e}:\n{block}"))
}

/// The pod template of deploy/operator.yml's Deployment.
fn operator_pod_template() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/operator.yml");
    let text = std::fs::read_to_string(path).unwrap();
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap()
        .into_iter()
        .find(|doc| doc["kind"] == "Deployment")
        .map(|deployment| deployment["spec"]["template"].clone())
        .expect("deploy/operator.yml has a Deployment")
}

/// Prometheus's label name for a Kubernetes label or annotation key (`[^a-zA-Z0-9_]` -> `_`).
fn sanitize(key: &str) -> String {
    key.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// What Prometheus's Kubernetes pod discovery yields for a pod made from `template`: one
/// target per container port, with the `__meta_kubernetes_*` labels its documentation lists.
fn pod_targets(template: &Value, namespace: &str, pod: &str, ip: &str) -> Vec<Value> {
    let mut common = serde_json::Map::new();
    common.insert("__meta_kubernetes_namespace".into(), json!(namespace));
    common.insert("__meta_kubernetes_pod_name".into(), json!(pod));
    for (kind, map) in [
        ("label", &template["metadata"]["labels"]),
        ("annotation", &template["metadata"]["annotations"]),
    ] {
        for (key, value) in map.as_object().into_iter().flatten() {
            let name = format!("__meta_kubernetes_pod_{kind}_{}", sanitize(key));
            common.insert(name, value.clone());
        }
    }
    let mut targets = Vec::new();
    for container in template["spec"]["containers"].as_array().unwrap() {
        for port in container["ports"].as_array().into_iter().flatten() {
            let number = port["containerPort"].as_u64().unwrap();
            let mut labels = common.clone();
            labels.insert(
                "__meta_kubernetes_pod_container_name".into(),
                container["name"].clone(),
            );
            labels.insert(
                "__meta_kubernetes_pod_container_port_name".into(),
                port["name"].clone(),
            );
            labels.insert(
                "__meta_kubernetes_pod_container_port_number".into(),
                json!(number.to_string()),
            );
            targets.push(json!({ "targets": [format!("{ip}:{number}")], "labels": labels }));
        }
    }
    targets
}

/// R25: the relabelling of the plain-Prometheus configuration in deploy/prometheus/README.md
/// keeps exactly the operator's metrics port, under job="mutantops" with namespace and pod
/// labels, for pods made from deploy/operator.yml's pod template, and drops a pod that is not
/// annotated for scraping. Debian's Prometheus is built without Kubernetes discovery, so the
/// README's `kubernetes_sd_configs` is swapped for a file of the targets that discovery yields
/// for such pods ([`pod_targets`]); the relabel rules are the README's, run by a real
/// Prometheus, and the labels, annotations and ports are operator.yml's. The scrapes of these
/// made-up addresses fail; the target list is what is checked.
#[tokio::test]
#[ignore = "runs prometheus: scripts/test runs them"]
async fn the_plain_prometheus_config_keeps_only_the_metrics_port() {
    let template = operator_pod_template();
    let mut unannotated = template.clone();
    unannotated["metadata"]["annotations"] = json!({});
    let mut targets = pod_targets(&template, "mutants", "mutantops-0", "10.0.0.1");
    targets.extend(pod_targets(
        &unannotated,
        "mutants",
        "mutantops-1",
        "10.0.0.2",
    ));
    assert!(targets.len() >= 4, "two ports per pod: {targets:?}");

    let mut config = readme_scrape_config();
    config["rule_files"] = json!([rules_file()]);
    config["global"] = json!({ "scrape_interval": "1s", "evaluation_interval": "1s" });
    let job = &mut config["scrape_configs"][0];
    assert_eq!(job["job_name"], JOB);
    let sd = job
        .as_object_mut()
        .unwrap()
        .remove("kubernetes_sd_configs")
        .expect("the README's job uses kubernetes_sd_configs");
    assert_eq!(sd[0]["role"], "pod");
    assert_eq!(sd[0]["namespaces"]["names"], json!(["mutants"]));
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("sd-{}", common::random_suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("pods.json");
    std::fs::write(&file, Value::from(targets).to_string()).unwrap();
    job["file_sd_configs"] = json!([{ "files": [file], "refresh_interval": "1s" }]);
    let prometheus = Prometheus::start_with(config).await;

    let target = wait_for("one target of job mutantops", CONVERGE, || async {
        let data = prometheus.api("/api/v1/targets?state=any").await?;
        let active: Vec<&Value> = data["activeTargets"]
            .as_array()
            .into_iter()
            .flatten()
            .collect();
        let dropped = data["droppedTargets"].as_array().map_or(0, Vec::len);
        match active.as_slice() {
            [t] if dropped >= 3 => Ok((*t).clone()),
            other => Err(format!("active {other:?}, {dropped} dropped")),
        }
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(target["labels"]["job"], JOB, "{target}");
    assert_eq!(
        target["scrapeUrl"], "http://10.0.0.1:9568/metrics",
        "{target}"
    );
    assert_eq!(target["labels"]["namespace"], "mutants", "{target}");
    assert_eq!(target["labels"]["pod"], "mutantops-0", "{target}");
}
