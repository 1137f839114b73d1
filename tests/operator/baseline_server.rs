//! R33: the operator's baseline decision agrees with the API server's own
//! Pod Security admission, pod for pod, at the version a namespace pins. For a table of pod
//! templates (each control, before and after the version it changed at), a namespace
//! enforcing `baseline` at each of several versions is asked, with a dry-run create of a Pod
//! of that template, whether it admits it; the operator's pure decision
//! ([`baseline_findings`] as of the policy it would derive from the same labels and the same
//! server's version) must say the same for every row. No operator runs: this compares the
//! function the operator decides with against the server.

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{ApiResource, DynamicObject, PostParams};
use mutantops::variant::{Policy, Version, baseline_findings};

use super::*;

/// The versions asked, as a namespace pins them: before seccomp fields (1.19), before and
/// after the sysctls of 1.27, 1.29 and 1.32, the SELinux type of 1.31, the probe hosts of
/// 1.34, and the server's own (`latest`).
const VERSIONS: [&str; 7] = [
    "v1.18", "v1.26", "v1.30", "v1.31", "v1.33", "v1.34", "latest",
];

/// One row: its name, what is merged into the pod spec, into its container `c`, and the pod's
/// annotations.
type Row = (&'static str, Value, Value, Value);

fn sysctl(name: &str) -> Value {
    json!({ "securityContext": { "sysctls": [{ "name": name, "value": "1" }] } })
}

fn container_sc(sc: Value) -> Value {
    json!({ "securityContext": sc })
}

fn rows() -> Vec<Row> {
    let none = || json!({});
    let tcp_mem = |name| json!({ "securityContext": { "sysctls": [{ "name": name, "value": "4096 87380 6291456" }] } });
    let host = |handler: &str, action: &str, host: &str| {
        let probe = json!({ action: { "host": host, "port": 8080 } });
        match handler.split_once('.') {
            Some((outer, inner)) => json!({ outer: { inner: probe } }),
            None => json!({ handler: probe }),
        }
    };
    vec![
        ("clean", none(), none(), none()),
        ("tcp_rmem", tcp_mem("net.ipv4.tcp_rmem"), none(), none()),
        ("tcp_wmem", tcp_mem("net.ipv4.tcp_wmem"), none(), none()),
        (
            "tcp_keepalive_time",
            sysctl("net.ipv4.tcp_keepalive_time"),
            none(),
            none(),
        ),
        (
            "ip_local_reserved_ports",
            sysctl("net.ipv4.ip_local_reserved_ports"),
            none(),
            none(),
        ),
        (
            "tcp_syncookies",
            sysctl("net.ipv4.tcp_syncookies"),
            none(),
            none(),
        ),
        ("kernel.msgmax", sysctl("kernel.msgmax"), none(), none()),
        ("somaxconn", sysctl("net.core.somaxconn"), none(), none()),
        (
            "readiness http host",
            none(),
            host("readinessProbe", "httpGet", "10.0.0.1"),
            none(),
        ),
        (
            "liveness tcp host",
            none(),
            host("livenessProbe", "tcpSocket", "10.0.0.1"),
            none(),
        ),
        (
            "startup empty host",
            none(),
            host("startupProbe", "httpGet", ""),
            none(),
        ),
        (
            "postStart http host",
            none(),
            host("lifecycle.postStart", "httpGet", "10.0.0.1"),
            none(),
        ),
        (
            "preStop http host",
            none(),
            host("lifecycle.preStop", "httpGet", "db.internal"),
            none(),
        ),
        (
            "sidecar probe host",
            json!({ "initContainers": [{ "name": "proxy", "image": "busybox",
                "restartPolicy": "Always",
                "readinessProbe": { "tcpSocket": { "host": "10.0.0.2", "port": 15000 } } }] }),
            none(),
            none(),
        ),
        (
            "privileged",
            none(),
            container_sc(json!({ "privileged": true })),
            none(),
        ),
        ("hostPID", json!({ "hostPID": true }), none(), none()),
        (
            "hostNetwork",
            json!({ "hostNetwork": true }),
            none(),
            none(),
        ),
        (
            "hostPath",
            json!({ "volumes": [{ "name": "root", "hostPath": { "path": "/" } }] }),
            none(),
            none(),
        ),
        (
            "hostPort",
            none(),
            json!({ "ports": [{ "containerPort": 8080, "hostPort": 8080 }] }),
            none(),
        ),
        (
            "NET_ADMIN",
            none(),
            container_sc(json!({ "capabilities": { "add": ["NET_ADMIN"] } })),
            none(),
        ),
        (
            "CHOWN",
            none(),
            container_sc(json!({ "capabilities": { "add": ["CHOWN"] } })),
            none(),
        ),
        (
            "procMount in a user namespace",
            json!({ "hostUsers": false }),
            container_sc(json!({ "procMount": "Unmasked" })),
            none(),
        ),
        (
            "seccomp Unconfined",
            json!({ "securityContext": { "seccompProfile": { "type": "Unconfined" } } }),
            none(),
            none(),
        ),
        (
            "seccomp RuntimeDefault",
            none(),
            container_sc(json!({ "seccompProfile": { "type": "RuntimeDefault" } })),
            none(),
        ),
        (
            "seccomp annotation",
            none(),
            none(),
            json!({ "seccomp.security.alpha.kubernetes.io/pod": "unconfined" }),
        ),
        (
            "AppArmor Unconfined",
            none(),
            container_sc(json!({ "appArmorProfile": { "type": "Unconfined" } })),
            none(),
        ),
        (
            "AppArmor annotation",
            none(),
            none(),
            json!({ "container.apparmor.security.beta.kubernetes.io/c": "unconfined" }),
        ),
        (
            "container_engine_t",
            none(),
            container_sc(json!({ "seLinuxOptions": { "type": "container_engine_t" } })),
            none(),
        ),
        (
            "spc_t",
            json!({ "securityContext": { "seLinuxOptions": { "type": "spc_t" } } }),
            none(),
            none(),
        ),
        (
            "SELinux user",
            none(),
            container_sc(json!({ "seLinuxOptions": { "user": "system_u" } })),
            none(),
        ),
    ]
}

/// The pod template of `row`.
fn template((_, pod, container, annotations): &Row) -> Value {
    let mut c = json!({ "name": "c", "image": "registry.example/app:1" });
    merge(&mut c, container);
    let mut spec = json!({ "containers": [c] });
    merge(&mut spec, pod);
    json!({ "metadata": { "labels": { "app": "pss" }, "annotations": annotations },
            "spec": spec })
}

fn merge(into: &mut Value, from: &Value) {
    if let (Some(into), Some(from)) = (into.as_object_mut(), from.as_object()) {
        into.extend(from.clone());
    }
}

/// Whether the API server admits a Pod of `template` in `ns` (a dry run, nothing stored):
/// `Ok(None)` if it does, `Ok(Some(message))` if Pod Security refuses it, `Err` for any other
/// answer (a row the server finds malformed is a broken test).
async fn admits(pods: &Api<DynamicObject>, name: &str, template: &Value) -> Result<(), String> {
    let mut pod = json!({ "apiVersion": "v1", "kind": "Pod", "metadata": template["metadata"],
                          "spec": template["spec"] });
    pod["metadata"]["name"] = json!(name);
    let object: DynamicObject = serde_json::from_value(pod).unwrap();
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    match pods.create(&dry_run, &object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains("violates PodSecurity") => {
            Err(s.message)
        }
        Err(other) => panic!("row {name:?}: the API server answered {other}"),
    }
}

/// R33: for every row and every version, the API server's Pod Security
/// admission (namespace labelled enforce=baseline, enforce-version=that version) and the
/// operator's decision at the policy it derives from the same labels agree.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn the_operators_baseline_agrees_with_the_api_servers_at_each_version() {
    let ns = TestNamespace::new("pss-agree").await;
    let info = ns.client.apiserver_version().await.unwrap();
    let server = Version::of_server(&info.major, &info.minor);
    assert!(server.is_some(), "{info:?}");
    let pods: Api<DynamicObject> =
        Api::namespaced_with(ns.client.clone(), &ns.name, &ApiResource::erase::<Pod>(&()));
    let namespaces: Api<Namespace> = Api::all(ns.client.clone());
    let privileged = template(&(
        "privileged",
        json!({}),
        container_sc(json!({ "privileged": true })),
        json!({}),
    ));
    let rows = rows();
    let mut disagreements = Vec::new();
    let mut refused = 0;
    for label in VERSIONS {
        let labels = json!({ "metadata": { "labels": {
            "pod-security.kubernetes.io/enforce": "baseline",
            "pod-security.kubernetes.io/enforce-version": label } } });
        namespaces
            .patch(&ns.name, &PatchParams::default(), &Patch::Merge(&labels))
            .await
            .unwrap();
        // Admission reads namespaces from a cache: wait until it enforces this version.
        let says = if label == "latest" {
            "\"baseline:latest\"".to_owned()
        } else {
            format!("\"baseline:{label}\"")
        };
        wait_for(&format!("admission enforcing {says}"), CONVERGE, || async {
            match admits(&pods, "sanity", &privileged).await {
                Err(message) if message.contains(&says) => Ok(()),
                other => Err(other),
            }
        })
        .await;
        let policy = Policy::enforced(Some(label), server);
        if label != "latest" {
            // The operator names the policy as the server does.
            assert_eq!(says, format!("\"{policy}\""));
        }
        for (i, row) in rows.iter().enumerate() {
            let t = template(row);
            let server_says = admits(&pods, &format!("row-{i}"), &t).await;
            let findings = baseline_findings(&t, "pod", policy);
            refused += usize::from(server_says.is_err());
            if server_says.is_ok() != findings.is_empty() {
                disagreements.push(format!(
                    "{label} {:?}: the server {}, the operator found {findings:?}",
                    row.0,
                    match &server_says {
                        Ok(()) => "admits it".to_owned(),
                        Err(message) => format!("refuses it ({message})"),
                    }
                ));
            }
        }
    }
    assert!(disagreements.is_empty(), "{disagreements:#?}");
    // Both answers occur: the comparison is not vacuous.
    let asked = VERSIONS.len() * rows.len();
    assert!(
        refused > asked / 3 && refused < asked,
        "{refused} of {asked} refused"
    );
}
