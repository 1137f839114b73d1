//! Tests of the baseline controls that changed between versions of the Pod Security Standards
//! (R33): which version a namespace is held to, and each changed control
//! before and after its version (the safe sysctls, SELinux types, seccomp annotations and
//! fields, the `host` of probes and lifecycle hooks, `procMount` in a user namespace).

use serde_json::{Value, json};

use super::*;

const AT: &str = "deployment.spec.template";

fn at(minor: u32) -> Policy {
    Policy::At(Version(minor))
}

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

/// The fields of the findings of `t` as of `policy`.
fn fields(t: &Value, policy: Policy) -> Vec<String> {
    baseline_findings(t, AT, policy)
        .into_iter()
        .map(|f| f.field)
        .collect()
}

fn sysctl(name: &str) -> Value {
    template(
        json!({ "securityContext": { "sysctls": [{ "name": name, "value": "1" }] } }),
        json!({}),
    )
}

#[test]
fn the_api_servers_version_is_read_from_its_minor() {
    assert_eq!(Version::of_server("1", "34"), Some(Version(34)));
    // Some distributions add a "+".
    assert_eq!(Version::of_server("1", "33+"), Some(Version(33)));
    for (major, minor) in [("2", "0"), ("1", ""), ("1", "+"), ("", "34")] {
        assert_eq!(Version::of_server(major, minor), None, "{major}.{minor}");
    }
    assert_eq!(Version(34).to_string(), "v1.34");
}

#[test]
fn the_version_label_is_latest_or_v1_minor() {
    assert_eq!(Version::of_label("latest"), Some(None));
    assert_eq!(Version::of_label("v1.33"), Some(Some(Version(33))));
    assert_eq!(Version::of_label("v1.0"), Some(Some(Version(0))));
    for odd in ["1.33", "v1.033", "v2.1", "v1.", "v1.3x", "Latest", ""] {
        assert_eq!(Version::of_label(odd), None, "{odd}");
    }
}

#[test]
fn a_namespace_is_held_to_its_pinned_version_at_most_the_servers() {
    let server = Some(Version(34));
    // What Pod Security admission does: the pinned version, clamped to the server's own;
    // latest, no label (or one the server would have refused) is the server's.
    for (label, policy) in [
        (None, at(34)),
        (Some("latest"), at(34)),
        (Some("v1.33"), at(33)),
        (Some("v1.25"), at(25)),
        (Some("v1.40"), at(34)),
        (Some("bogus"), at(34)),
    ] {
        assert_eq!(Policy::enforced(label, server), policy, "{label:?}");
    }
    // The server's version unknown: a pinned version as pinned, else the strictest.
    assert_eq!(Policy::enforced(Some("v1.33"), None), at(33));
    assert_eq!(Policy::enforced(Some("latest"), None), Policy::Strictest);
    assert_eq!(Policy::enforced(None, None), Policy::Strictest);
    // As a namespace read says it; an unreadable one pins nothing.
    let read = NamespaceLabel::Read {
        level: Some("baseline".into()),
        version: Some("v1.33".into()),
    };
    assert_eq!(read.policy(server), at(33));
    assert_eq!(
        NamespaceLabel::Unreadable("403".into()).policy(server),
        at(34)
    );
}

#[test]
fn tcp_rmem_and_tcp_wmem_are_safe_from_1_32() {
    for name in ["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"] {
        let t = sysctl(name);
        let found = baseline_findings(&t, AT, at(31));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            found[0].to_string(),
            format!(
                "{AT}.spec.securityContext.sysctls[{name}]: \"{name}\", which baseline allows \
                 only from v1.32"
            )
        );
        for minor in [32, 33, 34, 35, 40] {
            assert_eq!(
                fields(&t, at(minor)),
                Vec::<String>::new(),
                "{name} at {minor}"
            );
        }
    }
}

#[test]
fn every_safe_sysctl_is_allowed_from_its_version_only() {
    for (name, since) in SAFE_SYSCTLS {
        let t = sysctl(name);
        assert_eq!(fields(&t, at(since)).len(), 0, "{name} at {since}");
        if since > 0 {
            assert_eq!(fields(&t, at(since - 1)).len(), 1, "{name} before {since}");
        }
        // The strictest allows only what every version does.
        assert_eq!(fields(&t, Policy::Strictest).len(), usize::from(since > 0));
    }
    let unsafe_one = sysctl("kernel.msgmax");
    let found = baseline_findings(&unsafe_one, AT, at(34));
    assert_eq!(
        found[0].problem,
        "\"kernel.msgmax\", not one of the safe sysctls baseline allows"
    );
}

#[test]
fn container_engine_t_is_allowed_from_1_31() {
    let t = template(
        json!({}),
        json!({ "securityContext": { "seLinuxOptions": { "type": "container_engine_t" } } }),
    );
    assert_eq!(fields(&t, at(31)), Vec::<String>::new());
    let found = baseline_findings(&t, AT, at(30));
    assert_eq!(
        found[0].problem,
        "\"container_engine_t\"; baseline allows container_t, container_init_t, \
         container_kvm_t or unset"
    );
    assert_eq!(fields(&t, Policy::Strictest).len(), 1);
}

#[test]
fn seccomp_is_read_from_annotations_before_1_19_and_from_fields_after() {
    let field = template(
        json!({ "securityContext": { "seccompProfile": { "type": "Unconfined" } } }),
        json!({}),
    );
    let mut annotated = template(json!({}), json!({}));
    annotated["metadata"]["annotations"] = json!({
        "seccomp.security.alpha.kubernetes.io/pod": "unconfined",
        "container.seccomp.security.alpha.kubernetes.io/app": "localhost/profile.json",
        "container.seccomp.security.alpha.kubernetes.io/gone": "unconfined"
    });
    assert_eq!(fields(&field, at(18)), Vec::<String>::new());
    assert_eq!(
        fields(&annotated, at(18)),
        [format!(
            "{AT}.metadata.annotations[seccomp.security.alpha.kubernetes.io/pod]"
        )]
    );
    assert_eq!(fields(&field, at(19)).len(), 1);
    assert_eq!(fields(&annotated, at(19)), Vec::<String>::new());
    assert_eq!(fields(&field, Policy::Strictest).len(), 1);
    assert_eq!(fields(&annotated, Policy::Strictest).len(), 1);
}

#[test]
fn a_host_in_probes_and_lifecycle_hooks_is_refused_from_1_34() {
    let handlers = [
        "livenessProbe",
        "readinessProbe",
        "startupProbe",
        "lifecycle.postStart",
        "lifecycle.preStop",
    ];
    for handler in handlers {
        for action in ["httpGet", "tcpSocket"] {
            let mut probe = json!({ action: { "host": "10.0.0.1", "port": 80 } });
            if let Some((outer, inner)) = handler.split_once('.') {
                probe = json!({ outer: { inner: probe } });
            } else {
                probe = json!({ handler: probe });
            }
            let t = template(json!({}), probe);
            let field = format!("{AT}.spec.containers[app].{handler}.{action}.host");
            assert_eq!(fields(&t, at(33)), Vec::<String>::new(), "{field}");
            assert_eq!(fields(&t, at(34)), [field.as_str()]);
            assert_eq!(fields(&t, at(35)), [field.as_str()]);
            assert_eq!(fields(&t, Policy::Strictest), [field]);
        }
    }
    // An empty host is the pod's own: allowed.
    let empty = template(
        json!({}),
        json!({ "readinessProbe": { "httpGet": { "host": "", "port": 80 } } }),
    );
    assert_eq!(fields(&empty, at(34)), Vec::<String>::new());
    // A sidecar (an init container that keeps running) is checked as well.
    let sidecar = json!({ "name": "proxy", "image": "busybox", "restartPolicy": "Always",
        "startupProbe": { "tcpSocket": { "host": "db.internal", "port": 5432 } } });
    let t = template(json!({ "initContainers": [sidecar] }), json!({}));
    let found = baseline_findings(&t, AT, at(34));
    assert_eq!(
        found[0].to_string(),
        format!(
            "{AT}.spec.initContainers[proxy].startupProbe.tcpSocket.host: \"db.internal\"; \
             baseline allows it only empty or unset (from v1.34)"
        )
    );
}

#[test]
fn any_proc_mount_is_allowed_in_a_user_namespace_from_1_35() {
    let unmasked = json!({ "securityContext": { "procMount": "Unmasked" } });
    let in_user_ns = template(json!({ "hostUsers": false }), unmasked.clone());
    let field = format!("{AT}.spec.containers[app].securityContext.procMount");
    assert_eq!(fields(&in_user_ns, at(34)), [field.as_str()]);
    assert_eq!(fields(&in_user_ns, at(35)), Vec::<String>::new());
    assert_eq!(fields(&in_user_ns, Policy::Strictest), [field.as_str()]);
    for host_users in [json!({ "hostUsers": true }), json!({})] {
        let t = template(host_users, unmasked.clone());
        assert_eq!(fields(&t, at(35)), [field.as_str()]);
    }
}

#[test]
fn the_strictest_policy_finds_what_any_version_finds() {
    let t = template(
        json!({
            "hostUsers": false,
            "securityContext": {
                "sysctls": [{ "name": "net.ipv4.tcp_rmem", "value": "4096 87380 6291456" }],
                "seLinuxOptions": { "type": "container_engine_t" }
            }
        }),
        json!({
            "readinessProbe": { "httpGet": { "host": "10.0.0.1", "port": 80 } },
            "securityContext": { "procMount": "Unmasked",
                "seccompProfile": { "type": "Unconfined" } }
        }),
    );
    let strictest = fields(&t, Policy::Strictest);
    for minor in 0..=40 {
        for field in fields(&t, at(minor)) {
            assert!(strictest.contains(&field), "{field} at {minor}");
        }
    }
    assert_eq!(strictest.len(), 5, "{strictest:?}");
}

#[test]
fn the_refusal_names_the_version_and_the_pinned_label() {
    let t = template(
        json!({}),
        json!({ "livenessProbe": { "tcpSocket": { "host": "10.0.0.1", "port": 80 } } }),
    );
    let deployment = json!({ "spec": { "template": t } });
    let label = NamespaceLabel::Read {
        level: Some("baseline".into()),
        version: Some("latest".into()),
    };
    let unknown = PodSecurity::default();
    let review = Review::of(
        [&deployment],
        "team",
        &unknown,
        label.policy(Some(Version(34))),
    );
    assert!(!review.baseline.is_empty());
    let message = review.refusal("team", Some(&label)).unwrap_or_default();
    assert!(
        message.starts_with(
            "the pod template breaks Pod Security \"baseline:v1.34\" \
             (pod-security.kubernetes.io/enforce-version=\"latest\"): \
             deployment.spec.template.spec.containers[app].livenessProbe.tcpSocket.host"
        ),
        "{message}"
    );
    // Pinned to 1.33, the same template is made.
    let pinned = NamespaceLabel::Read {
        level: Some("baseline".into()),
        version: Some("v1.33".into()),
    };
    let review = Review::of(
        [&deployment],
        "team",
        &unknown,
        pinned.policy(Some(Version(34))),
    );
    assert_eq!(review.refusal("team", Some(&pinned)), None);
}
