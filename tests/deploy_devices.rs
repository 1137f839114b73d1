//! deploy/devices/: the two kustomize components that expose the API to devices on k3s
//! (traefik: an Ingress with TLS at Traefik; loadbalancer: a ServiceLB Service and HTTPS in
//! the operator itself), rendered on top of deploy/ by `kubectl kustomize` as a user's
//! kustomization would, and checked on the parsed objects. Needs kubectl: `$KUBECTL`, or
//! `kubectl` on the PATH; without one the test fails (it never passes silently).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a failed step must fail the test"
)]

use std::{
    collections::BTreeMap,
    path::{Component, Path, PathBuf},
    process::Command,
};

use serde_json::Value;

const TLS_SECRET: &str = "mutantops-api-tls";
const TLS_DIR: &str = "/etc/mutantops/tls";
const TLS_ENV: [&str; 2] = ["MUTANT_API_TLS_CERT_FILE", "MUTANT_API_TLS_KEY_FILE"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .canonicalize()
        .expect("the crate directory")
}

/// `to` relative to the directory `from` (kustomize refuses absolute paths to other roots).
fn relative(from: &Path, to: &Path) -> PathBuf {
    let from: Vec<Component<'_>> = from.components().collect();
    let to: Vec<Component<'_>> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..from.len() {
        out.push("..");
    }
    for part in &to[common..] {
        out.push(part);
    }
    out
}

/// The kubectl to run: `$KUBECTL` when set (and not empty), else `kubectl` on the PATH.
fn kubectl() -> String {
    std::env::var("KUBECTL")
        .ok()
        .filter(|k| !k.is_empty())
        .unwrap_or_else(|| "kubectl".to_string())
}

/// Renders a kustomization (written under `CARGO_TARGET_TMPDIR/deploy_devices/<case>/`) that
/// has deploy/ as its resource and the named components of deploy/devices/.
fn render(case: &str, components: &[&str]) -> Vec<Value> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("deploy_devices")
        .join(case);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let dir = dir.canonicalize().unwrap();
    let path_to = |target: PathBuf| -> Value {
        Value::String(relative(&dir, &target).to_string_lossy().into_owned())
    };
    let mut kustomization = serde_json::Map::new();
    kustomization.insert(
        "apiVersion".to_string(),
        "kustomize.config.k8s.io/v1beta1".into(),
    );
    kustomization.insert("kind".to_string(), "Kustomization".into());
    kustomization.insert(
        "resources".to_string(),
        Value::Array(vec![path_to(repo().join("deploy"))]),
    );
    if !components.is_empty() {
        kustomization.insert(
            "components".to_string(),
            components
                .iter()
                .map(|c| path_to(repo().join("deploy/devices").join(c)))
                .collect(),
        );
    }
    let file = dir.join("kustomization.yaml");
    std::fs::write(&file, serde_saphyr::to_string(&kustomization).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()));

    let program = kubectl();
    let output = Command::new(&program)
        .arg("kustomize")
        .arg(&dir)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run `{program} kustomize`: {e}. This test needs kubectl: set KUBECTL to \
                 a kubectl binary or put kubectl on the PATH"
            )
        });
    assert!(
        output.status.success(),
        "`{program} kustomize {}` failed ({}):\n{}",
        dir.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).expect("kustomize output is UTF-8");
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{e}:\n{text}"));
    // serde_saphyr leaves empty documents out: counted apart, so one still fails here.
    assert_eq!(
        docs.len(),
        document_count(&text),
        "an empty document:\n{text}"
    );
    for doc in &docs {
        assert!(
            doc["kind"].as_str().is_some() && doc["metadata"]["name"].as_str().is_some(),
            "rendered object without kind or name: {doc:?}"
        );
    }
    docs
}

/// How many documents the YAML stream `text` holds, empty and `null` ones included:
/// `serde_saphyr::from_multiple` leaves those out.
fn document_count(text: &str) -> usize {
    use serde_saphyr::granit_parser::{Event, Parser};
    Parser::new_from_str(text)
        .map(|event| event.unwrap_or_else(|e| panic!("{e}:\n{text}")))
        .filter(|(event, _)| matches!(event, Event::DocumentStart(..)))
        .count()
}

/// (kind, namespace, name) of an object.
fn key(object: &Value) -> (String, String, String) {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (
        text(&object["kind"]),
        text(&object["metadata"]["namespace"]),
        text(&object["metadata"]["name"]),
    )
}

fn by_key(docs: &[Value]) -> BTreeMap<(String, String, String), &Value> {
    let map: BTreeMap<_, _> = docs.iter().map(|d| (key(d), d)).collect();
    assert_eq!(map.len(), docs.len(), "an object is rendered twice");
    map
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(kind) && d["metadata"]["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

fn seq(value: &Value) -> &[Value] {
    value.as_array().map_or(&[], Vec::as_slice)
}

/// The Deployment of deploy/operator.yml as written.
fn operator_yml_deployment() -> Value {
    let path = repo().join("deploy/operator.yml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap()
        .into_iter()
        .find(|d| d["kind"].as_str() == Some("Deployment"))
        .expect("operator.yml has a Deployment")
}

fn operator_container(deployment: &Value) -> &Value {
    seq(&deployment["spec"]["template"]["spec"]["containers"])
        .iter()
        .find(|c| c["name"].as_str() == Some("operator"))
        .expect("container operator")
}

/// The objects `docs` has beyond `base`, and a check that every object of `base` other than
/// those in `changed` is rendered unchanged.
fn added<'a>(base: &[Value], docs: &'a [Value], changed: &[&str]) -> Vec<&'a Value> {
    let base = by_key(base);
    let docs = by_key(docs);
    for (k, object) in &base {
        let rendered = docs
            .get(k)
            .unwrap_or_else(|| panic!("{k:?} is no longer rendered"));
        if !changed.contains(&k.2.as_str()) {
            assert_eq!(rendered, object, "the component changed {k:?}");
        }
    }
    docs.iter()
        .filter(|(k, _)| !base.contains_key(*k))
        .map(|(_, v)| *v)
        .collect()
}

/// Without a component: deploy/ renders operator.yml's Deployment as written, and the API
/// stays plain HTTP (no TLS variable, no TLS volume), with no Ingress or LAN Service.
#[test]
#[ignore = "needs kubectl: scripts/test runs it (KUBECTL from scripts/cluster env)"]
fn without_a_component_the_api_has_no_tls() {
    let docs = render("none", &[]);
    let deployment = find(&docs, "Deployment", "mutantops-operator");
    assert_eq!(deployment, &operator_yml_deployment());
    let container = operator_container(deployment);
    for env in seq(&container["env"]) {
        let name = env["name"].as_str().unwrap();
        assert!(!name.starts_with("MUTANT_API_TLS"), "{env:?}");
    }
    let text = serde_saphyr::to_string(deployment).unwrap();
    assert!(!text.contains(TLS_SECRET), "{text}");
    assert!(docs.iter().all(|d| d["kind"].as_str() != Some("Ingress")));
    assert!(
        docs.iter()
            .all(|d| d["spec"]["type"].as_str() != Some("LoadBalancer"))
    );
}

/// traefik: one Ingress, on Traefik's websecure entrypoint with TLS from mutantops-api-tls,
/// routing /api/ (only) to mutantops-api:http; the operator trusts k3s' pod range, where
/// Traefik's pods are, to name each request's client (R34); nothing else of deploy/ changes.
#[test]
#[ignore = "needs kubectl: scripts/test runs it (KUBECTL from scripts/cluster env)"]
fn traefik_component() {
    let base = render("base-for-traefik", &[]);
    let docs = render("traefik", &["traefik"]);
    let added = added(&base, &docs, &["mutantops-operator"]);
    let deployment = find(&docs, "Deployment", "mutantops-operator");
    let original = operator_yml_deployment();
    let container = operator_container(deployment);
    let original_container = operator_container(&original);
    let env = seq(&container["env"]);
    let trusted: Vec<&Value> = env
        .iter()
        .filter(|e| e["name"].as_str() == Some("MUTANT_API_TRUSTED_PROXIES"))
        .collect();
    assert_eq!(trusted.len(), 1, "{env:?}");
    assert_eq!(trusted[0]["value"].as_str(), Some("10.42.0.0/16"));
    for entry in seq(&original_container["env"]) {
        assert!(env.contains(entry), "env {entry:?} lost: {env:?}");
    }
    assert_eq!(env.len(), seq(&original_container["env"]).len() + 1);
    let mut without_env = deployment.clone();
    let mut original_without_env = original.clone();
    for d in [&mut without_env, &mut original_without_env] {
        let containers = d["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .unwrap();
        for c in containers.iter_mut() {
            if c["name"].as_str() == Some("operator") {
                c.as_object_mut().unwrap().remove("env");
            }
        }
    }
    assert_eq!(
        without_env, original_without_env,
        "the Deployment changed beyond the operator's env"
    );
    assert_eq!(added.len(), 1, "{added:?}");
    let ingress = added[0];
    assert_eq!(ingress["apiVersion"].as_str(), Some("networking.k8s.io/v1"));
    assert_eq!(
        key(ingress),
        ("Ingress".into(), "mutants".into(), "mutantops-api".into())
    );
    let annotations = &ingress["metadata"]["annotations"];
    assert_eq!(
        annotations["traefik.ingress.kubernetes.io/router.entrypoints"].as_str(),
        Some("websecure"),
        "only the websecure entrypoint: {annotations:?}"
    );
    assert_eq!(
        annotations["traefik.ingress.kubernetes.io/router.tls"].as_str(),
        Some("true")
    );
    let spec = &ingress["spec"];
    assert_eq!(spec["ingressClassName"].as_str(), Some("traefik"));
    assert!(spec.get("defaultBackend").is_none(), "{spec:?}");
    let tls = seq(&spec["tls"]);
    assert_eq!(tls.len(), 1, "{tls:?}");
    assert_eq!(tls[0]["secretName"].as_str(), Some(TLS_SECRET));
    let tls_hosts: Vec<&str> = seq(&tls[0]["hosts"])
        .iter()
        .map(|h| h.as_str().unwrap())
        .collect();
    let rules = seq(&spec["rules"]);
    assert_eq!(rules.len(), 1, "{rules:?}");
    let host = rules[0]["host"].as_str().expect("the rule names a host");
    assert_eq!(host, "mutantops.example.lan");
    assert!(tls_hosts.contains(&host), "{host} not in {tls_hosts:?}");
    let paths = seq(&rules[0]["http"]["paths"]);
    assert_eq!(paths.len(), 1, "only /api/ is routed: {paths:?}");
    assert_eq!(paths[0]["path"].as_str(), Some("/api/"));
    assert_eq!(paths[0]["pathType"].as_str(), Some("Prefix"));
    let backend = &paths[0]["backend"]["service"];
    assert_eq!(backend["name"].as_str(), Some("mutantops-api"));
    assert_eq!(backend["port"]["name"].as_str(), Some("http"));
    // The backend exists: Service mutantops-api (same namespace) has port http to api.
    let service = find(&docs, "Service", "mutantops-api");
    assert_eq!(service["metadata"]["namespace"].as_str(), Some("mutants"));
    let http = seq(&service["spec"]["ports"])
        .iter()
        .find(|p| p["name"].as_str() == Some("http"))
        .expect("port http");
    assert_eq!(http["targetPort"].as_str(), Some("api"));
}

/// loadbalancer: Service mutantops-api-lan (LoadBalancer, 8443 to api) and the Deployment
/// patched with the TLS Secret volume, its read-only mount and the two TLS variables, keeping
/// everything operator.yml has.
#[test]
#[ignore = "needs kubectl: scripts/test runs it (KUBECTL from scripts/cluster env)"]
fn loadbalancer_component() {
    let base = render("base-for-loadbalancer", &[]);
    let docs = render("loadbalancer", &["loadbalancer"]);
    let added = added(&base, &docs, &["mutantops-operator"]);
    assert_eq!(added.len(), 1, "{added:?}");

    let service = added[0];
    assert_eq!(
        key(service),
        (
            "Service".into(),
            "mutants".into(),
            "mutantops-api-lan".into()
        )
    );
    let spec = &service["spec"];
    assert_eq!(spec["type"].as_str(), Some("LoadBalancer"));
    assert!(spec.get("externalTrafficPolicy").is_none(), "{spec:?}");
    let mut selector = serde_json::Map::new();
    selector.insert("app.kubernetes.io/name".to_string(), "mutantops".into());
    assert_eq!(spec["selector"], Value::Object(selector));
    let ports = seq(&spec["ports"]);
    assert_eq!(ports.len(), 1, "{ports:?}");
    assert_eq!(ports[0]["port"].as_u64(), Some(8443));
    assert_eq!(ports[0]["targetPort"].as_str(), Some("api"));
    assert_eq!(ports[0]["protocol"].as_str(), Some("TCP"));

    let deployment = find(&docs, "Deployment", "mutantops-operator");
    let original = operator_yml_deployment();
    // The selector matches the operator's pods, whose container has port api.
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    assert_eq!(
        pod_labels["app.kubernetes.io/name"].as_str(),
        Some("mutantops")
    );
    let container = operator_container(deployment);
    assert!(
        seq(&container["ports"])
            .iter()
            .any(|p| p["name"].as_str() == Some("api")),
        "{container:?}"
    );

    // The mount: read-only, the whole directory (no subPath, so a renewed Secret shows).
    let mounts = seq(&container["volumeMounts"]);
    let mount = mounts
        .iter()
        .find(|m| m["mountPath"].as_str() == Some(TLS_DIR))
        .unwrap_or_else(|| panic!("no mount at {TLS_DIR}: {mounts:?}"));
    assert_eq!(mount["readOnly"].as_bool(), Some(true), "{mount:?}");
    assert!(mount.get("subPath").is_none(), "{mount:?}");
    assert!(mount.get("subPathExpr").is_none(), "{mount:?}");
    // The volume behind it: Secret mutantops-api-tls, all keys (tls.crt and tls.key).
    let pod = &deployment["spec"]["template"]["spec"];
    let volume_name = mount["name"].as_str().unwrap();
    let volume = seq(&pod["volumes"])
        .iter()
        .find(|v| v["name"].as_str() == Some(volume_name))
        .unwrap_or_else(|| panic!("no volume {volume_name}: {pod:?}"));
    assert_eq!(volume["secret"]["secretName"].as_str(), Some(TLS_SECRET));
    assert!(volume["secret"].get("items").is_none(), "{volume:?}");
    assert_ne!(volume["secret"]["optional"].as_bool(), Some(true));
    // The variables: each once, pointing at the Secret's keys in the mounted directory.
    let env = seq(&container["env"]);
    for (name, file) in TLS_ENV.iter().zip(["tls.crt", "tls.key"]) {
        let entries: Vec<&Value> = env
            .iter()
            .filter(|e| e["name"].as_str() == Some(name))
            .collect();
        assert_eq!(entries.len(), 1, "{name}: {env:?}");
        assert_eq!(
            entries[0]["value"].as_str(),
            Some(format!("{TLS_DIR}/{file}").as_str()),
            "{name}"
        );
    }

    // Everything of operator.yml is still there: every env entry and volume (and mount) as
    // written, and every other field of the container, pod and Deployment unchanged.
    let original_pod = &original["spec"]["template"]["spec"];
    let original_container = operator_container(&original);
    for entry in seq(&original_container["env"]) {
        assert!(env.contains(entry), "env {entry:?} lost: {env:?}");
    }
    assert_eq!(
        env.len(),
        seq(&original_container["env"]).len() + TLS_ENV.len()
    );
    for original_mount in seq(&original_container["volumeMounts"]) {
        assert!(mounts.contains(original_mount), "{original_mount:?} lost");
    }
    for original_volume in seq(&original_pod["volumes"]) {
        assert!(
            seq(&pod["volumes"]).contains(original_volume),
            "{original_volume:?} lost"
        );
    }
    let without = |value: &Value, fields: &[&str]| {
        let mut value = value.clone();
        let map = value.as_object_mut().unwrap();
        for field in fields {
            map.remove(*field);
        }
        value
    };
    assert_eq!(
        without(container, &["env", "volumeMounts"]),
        without(original_container, &["env", "volumeMounts"]),
        "the container changed beyond env and volumeMounts"
    );
    assert_eq!(
        container["securityContext"]["readOnlyRootFilesystem"].as_bool(),
        Some(true)
    );
    assert_eq!(
        without(pod, &["containers", "volumes"]),
        without(original_pod, &["containers", "volumes"]),
        "the pod changed beyond its containers and volumes"
    );
    let without_pod_spec = |deployment: &Value| {
        let mut deployment = deployment.clone();
        deployment["spec"]["template"]
            .as_object_mut()
            .unwrap()
            .remove("spec");
        deployment
    };
    assert_eq!(
        without_pod_spec(deployment),
        without_pod_spec(&original),
        "the Deployment changed beyond its pod spec"
    );
}
