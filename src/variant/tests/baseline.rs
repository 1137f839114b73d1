//! Tests of the Pod Security "baseline" controls read off a pod template (R33): one per
//! control, each in every place it applies, and templates that meet baseline.

use serde_json::{Value, json};

use super::*;

const AT: &str = "deployment.spec.template";

/// The policy of the test cluster's API server (1.34), which these tests were checked against.
const V1_34: Policy = Policy::At(Version(34));

/// A pod template with one container `app`, `pod` merged into its spec and `container` into
/// the container.
fn template(pod: Value, container: Value) -> Value {
    let mut c = json!({ "name": "app", "image": "registry.example/app:1" });
    merge(&mut c, container);
    let mut spec = json!({ "containers": [c] });
    merge(&mut spec, pod);
    json!({ "metadata": { "labels": { "app": "web" } }, "spec": spec })
}

fn merge(into: &mut Value, from: Value) {
    if let (Some(into), Value::Object(from)) = (into.as_object_mut(), from) {
        into.extend(from);
    }
}

/// The fields of the findings of `t`.
fn fields(t: &Value) -> Vec<String> {
    baseline_findings(t, AT, V1_34)
        .into_iter()
        .map(|f| f.field)
        .collect()
}

/// The one finding of `t`.
fn only(t: &Value) -> Finding {
    let mut found = baseline_findings(t, AT, V1_34);
    assert_eq!(found.len(), 1, "{found:?}");
    found.remove(0)
}

#[test]
fn a_plain_template_meets_baseline() {
    assert_eq!(
        fields(&template(json!({}), json!({}))),
        Vec::<String>::new()
    );
    // Everything baseline allows, set explicitly.
    let allowed = template(
        json!({
            "hostNetwork": false, "hostPID": false, "hostIPC": false,
            "securityContext": {
                "runAsNonRoot": true,
                "seccompProfile": { "type": "RuntimeDefault" },
                "appArmorProfile": { "type": "Localhost", "localhostProfile": "k8s-app" },
                "seLinuxOptions": { "type": "container_t", "level": "s0:c123,c456" },
                "sysctls": SAFE_SYSCTLS.iter().map(|(s, _)| json!({ "name": s, "value": "1" }))
                    .collect::<Vec<_>>(),
                "windowsOptions": { "hostProcess": false }
            },
            "volumes": [{ "name": "data", "emptyDir": {} }, { "name": "cm", "configMap": {
                "name": "cm" } }, { "name": "none", "hostPath": null }],
            "initContainers": [{ "name": "init", "image": "busybox",
                "securityContext": { "privileged": false } }]
        }),
        json!({
            "ports": [{ "containerPort": 80, "hostPort": 0 }, { "containerPort": 81 }],
            "securityContext": {
                "privileged": false,
                "allowPrivilegeEscalation": false,
                "procMount": "Default",
                "capabilities": { "add": ALLOWED_CAPABILITIES, "drop": ["ALL"] },
                "seccompProfile": { "type": "Localhost", "localhostProfile": "p.json" },
                "appArmorProfile": { "type": "RuntimeDefault" },
                "seLinuxOptions": { "type": "container_init_t" }
            }
        }),
    );
    assert_eq!(fields(&allowed), Vec::<String>::new());
    let mut annotated = allowed.clone();
    annotated["metadata"]["annotations"] = json!({
        "container.apparmor.security.beta.kubernetes.io/app": "runtime/default",
        "container.apparmor.security.beta.kubernetes.io/init": "localhost/k8s-app",
        "team": "unconfined"
    });
    assert_eq!(fields(&annotated), Vec::<String>::new());
}

#[test]
fn host_namespaces_are_refused() {
    for field in ["hostNetwork", "hostPID", "hostIPC"] {
        let f = only(&template(json!({ field: true }), json!({})));
        assert_eq!(f.field, format!("{AT}.spec.{field}"));
        assert_eq!(f.problem, "true; baseline allows false or unset");
    }
}

#[test]
fn privileged_containers_are_refused_in_every_container_list() {
    let privileged = json!({ "securityContext": { "privileged": true } });
    let f = only(&template(json!({}), privileged.clone()));
    assert_eq!(
        f.to_string(),
        "deployment.spec.template.spec.containers[app].securityContext.privileged: true; \
         baseline allows false or unset"
    );
    for list in ["initContainers", "ephemeralContainers"] {
        let mut other = json!({ "name": "debug", "image": "busybox" });
        merge(&mut other, privileged.clone());
        let f = only(&template(json!({ list: [other] }), json!({})));
        assert_eq!(
            f.field,
            format!("{AT}.spec.{list}[debug].securityContext.privileged")
        );
    }
}

#[test]
fn added_capabilities_beyond_the_default_set_are_refused() {
    let t = template(
        json!({}),
        json!({ "securityContext": { "capabilities": {
            "add": ["NET_BIND_SERVICE", "SYS_ADMIN", "NET_ADMIN", "CAP_CHOWN"] } } }),
    );
    let f = only(&t);
    assert_eq!(
        f.field,
        format!("{AT}.spec.containers[app].securityContext.capabilities.add")
    );
    // Compared as written: "CAP_CHOWN" is not in the list, and is refused.
    assert!(
        f.problem.contains("SYS_ADMIN, NET_ADMIN, CAP_CHOWN"),
        "{}",
        f.problem
    );
    assert!(!f.problem.contains("NET_BIND_SERVICE"), "{}", f.problem);
    // Dropping anything is fine.
    let drop = json!({ "securityContext": { "capabilities": { "drop": ["ALL"] } } });
    assert!(fields(&template(json!({}), drop)).is_empty());
}

#[test]
fn host_path_volumes_are_refused() {
    let t = template(
        json!({ "volumes": [
            { "name": "data", "emptyDir": {} },
            { "name": "root", "hostPath": { "path": "/" } }
        ] }),
        json!({}),
    );
    let f = only(&t);
    assert_eq!(f.field, format!("{AT}.spec.volumes[root].hostPath"));
}

#[test]
fn host_ports_are_refused_on_any_port() {
    let t = template(
        json!({}),
        json!({ "ports": [{ "containerPort": 80 }, { "containerPort": 8443, "hostPort": 443 }] }),
    );
    let f = only(&t);
    assert_eq!(
        f.field,
        format!("{AT}.spec.containers[app].ports[1].hostPort")
    );
    assert!(f.problem.starts_with("443;"), "{}", f.problem);
    let init = json!({ "name": "init", "image": "i", "ports": [{ "containerPort": 1,
        "hostPort": 1 }] });
    let f = only(&template(json!({ "initContainers": [init] }), json!({})));
    assert_eq!(
        f.field,
        format!("{AT}.spec.initContainers[init].ports[0].hostPort")
    );
}

#[test]
fn a_proc_mount_other_than_default_is_refused() {
    let t = template(
        json!({}),
        json!({ "securityContext": { "procMount": "Unmasked" } }),
    );
    let f = only(&t);
    assert_eq!(
        f.to_string(),
        "deployment.spec.template.spec.containers[app].securityContext.procMount: \
         \"Unmasked\"; baseline allows Default or unset"
    );
}

#[test]
fn unconfined_seccomp_is_refused_on_the_pod_and_the_container() {
    let unconfined = json!({ "seccompProfile": { "type": "Unconfined" } });
    let f = only(&template(
        json!({ "securityContext": unconfined.clone() }),
        json!({}),
    ));
    assert_eq!(
        f.field,
        format!("{AT}.spec.securityContext.seccompProfile.type")
    );
    let f = only(&template(
        json!({}),
        json!({ "securityContext": unconfined }),
    ));
    assert_eq!(
        f.field,
        format!("{AT}.spec.containers[app].securityContext.seccompProfile.type")
    );
}

#[test]
fn unconfined_apparmor_is_refused_in_fields_and_annotations() {
    let unconfined = json!({ "appArmorProfile": { "type": "Unconfined" } });
    let f = only(&template(
        json!({ "securityContext": unconfined.clone() }),
        json!({}),
    ));
    assert_eq!(
        f.field,
        format!("{AT}.spec.securityContext.appArmorProfile.type")
    );
    let f = only(&template(
        json!({}),
        json!({ "securityContext": unconfined }),
    ));
    assert_eq!(
        f.field,
        format!("{AT}.spec.containers[app].securityContext.appArmorProfile.type")
    );
    let mut t = template(json!({}), json!({}));
    t["metadata"]["annotations"] =
        json!({ "container.apparmor.security.beta.kubernetes.io/app": "unconfined" });
    let f = only(&t);
    assert_eq!(
        f.field,
        format!("{AT}.metadata.annotations[container.apparmor.security.beta.kubernetes.io/app]")
    );
    assert!(f.problem.starts_with("\"unconfined\";"), "{}", f.problem);
}

#[test]
fn selinux_types_outside_the_container_ones_and_any_user_or_role_are_refused() {
    for (where_, pod, container) in [
        (
            "spec.securityContext",
            json!({ "securityContext": { "seLinuxOptions": { "type": "spc_t" } } }),
            json!({}),
        ),
        (
            "spec.containers[app].securityContext",
            json!({}),
            json!({ "securityContext": { "seLinuxOptions": { "type": "spc_t" } } }),
        ),
    ] {
        let f = only(&template(pod, container));
        assert_eq!(f.field, format!("{AT}.{where_}.seLinuxOptions.type"));
        assert!(f.problem.contains("container_engine_t"), "{}", f.problem);
    }
    let t = template(
        json!({ "securityContext": { "seLinuxOptions": {
            "type": "container_kvm_t", "user": "system_u", "role": "system_r" } } }),
        json!({}),
    );
    assert_eq!(
        fields(&t),
        [
            format!("{AT}.spec.securityContext.seLinuxOptions.user"),
            format!("{AT}.spec.securityContext.seLinuxOptions.role"),
        ]
    );
}

#[test]
fn sysctls_outside_the_safe_set_are_refused() {
    let t = template(
        json!({ "securityContext": { "sysctls": [
            { "name": "net.ipv4.tcp_syncookies", "value": "1" },
            { "name": "kernel.msgmax", "value": "65536" },
            { "name": "net.core.somaxconn", "value": "1024" }
        ] } }),
        json!({}),
    );
    assert_eq!(
        fields(&t),
        [
            format!("{AT}.spec.securityContext.sysctls[kernel.msgmax]"),
            format!("{AT}.spec.securityContext.sysctls[net.core.somaxconn]"),
        ]
    );
}

#[test]
fn windows_host_process_is_refused_on_the_pod_and_the_container() {
    let host = json!({ "windowsOptions": { "hostProcess": true } });
    let t = template(
        json!({ "securityContext": host.clone() }),
        json!({ "securityContext": host }),
    );
    assert_eq!(
        fields(&t),
        [
            format!("{AT}.spec.securityContext.windowsOptions.hostProcess"),
            format!("{AT}.spec.containers[app].securityContext.windowsOptions.hostProcess"),
        ]
    );
}

#[test]
fn every_finding_is_listed_in_template_order() {
    let t = template(
        json!({ "hostNetwork": true, "volumes": [{ "name": "h", "hostPath": { "path": "/" } }] }),
        json!({ "securityContext": { "privileged": true } }),
    );
    assert_eq!(
        fields(&t),
        [
            format!("{AT}.spec.hostNetwork"),
            format!("{AT}.spec.volumes[h].hostPath"),
            format!("{AT}.spec.containers[app].securityContext.privileged"),
        ]
    );
}

#[test]
fn odd_names_and_values_are_shown_short_and_escaped() {
    let long = "x".repeat(500);
    let t = template(
        json!({ "volumes": [{ "name": "a\nb", "hostPath": { "path": "/" } }] }),
        json!({ "securityContext": { "procMount": long, "capabilities": { "add": ["\"; rm"] } } }),
    );
    let found = baseline_findings(&t, AT, V1_34);
    let text: Vec<String> = found.iter().map(Finding::to_string).collect();
    // A name that is not plain is replaced by its index; values are cut and quoted.
    assert_eq!(found[0].field, format!("{AT}.spec.volumes[0].hostPath"));
    assert!(text.iter().all(|t| t.len() < 300), "{text:?}");
    assert!(text.iter().all(|t| !t.contains('\n')), "{text:?}");
    assert!(
        text.iter().any(|t| t.contains(r#"adds "\"; rm""#)),
        "{text:?}"
    );
}

fn own() -> ServiceAccountRef {
    ServiceAccountRef {
        namespace: "mutants".into(),
        name: "mutantops".into(),
    }
}

#[test]
fn the_operators_own_service_account_is_found_in_its_namespace_only() {
    let named = template(json!({ "serviceAccountName": "mutantops" }), json!({}));
    let f = own_account_finding(&named, AT, "mutants", &own());
    assert_eq!(
        f.map(|f| f.field),
        Some(format!("{AT}.spec.serviceAccountName"))
    );
    // The deprecated field names it as well.
    let old = template(json!({ "serviceAccount": "mutantops" }), json!({}));
    let f = own_account_finding(&old, AT, "mutants", &own());
    assert_eq!(
        f.map(|f| f.field),
        Some(format!("{AT}.spec.serviceAccount"))
    );
    // A ServiceAccount name is local to its namespace: elsewhere it is another account.
    assert_eq!(own_account_finding(&named, AT, "team", &own()), None);
    // Other accounts, and none (the namespace's default), are fine.
    let other = template(json!({ "serviceAccountName": "web" }), json!({}));
    assert_eq!(own_account_finding(&other, AT, "mutants", &own()), None);
    let plain = template(json!({}), json!({}));
    assert_eq!(own_account_finding(&plain, AT, "mutants", &own()), None);
}

#[test]
fn an_operator_running_as_default_is_found_when_no_account_is_named() {
    let default = ServiceAccountRef {
        namespace: "mutants".into(),
        name: "default".into(),
    };
    let plain = template(json!({}), json!({}));
    let f = own_account_finding(&plain, AT, "mutants", &default);
    assert!(
        f.as_ref()
            .is_some_and(|f| f.problem.starts_with("unset, so the pods would run as")),
        "{f:?}"
    );
    let other = template(json!({ "serviceAccountName": "web" }), json!({}));
    assert_eq!(own_account_finding(&other, AT, "mutants", &default), None);
}
