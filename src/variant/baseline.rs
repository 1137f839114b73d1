//! The Pod Security Standards' "baseline" level, read off a pod template (R33): every field
//! by which a pod template breaks it, each named by its path, and whether a pod template names
//! the operator's own ServiceAccount.
//!
//! The controls are those of the Kubernetes Pod Security Standards (baseline), as the
//! built-in PodSecurity admission checks them at a version ([`Policy`]): host namespaces,
//! privileged containers, added capabilities beyond the default set, hostPath volumes, host
//! ports, `/proc` mount type, seccomp, AppArmor (fields and the older annotations), SELinux,
//! sysctls outside the safe set, Windows HostProcess, and the `host` of probes and lifecycle
//! hooks. What changed between versions is in `policy`. Every container list is checked
//! alike: `initContainers`, `containers` and `ephemeralContainers`.
//!
//! The template is read as raw JSON, as it will be sent, so a field unknown to the compiled
//! k8s-openapi version is still seen. A value of an unexpected JSON type counts as unset: the
//! API server refuses to decode such a template, so nothing runs with it (R10: the API's dry
//! runs, and the base probe of a refused apply).

use std::fmt;

use serde_json::Value;

use super::policy::Policy;

/// The capabilities a container may add under baseline (the container runtimes' default set).
pub const ALLOWED_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// The annotation prefix of the older, per-container AppArmor setting.
const APPARMOR_ANNOTATION: &str = "container.apparmor.security.beta.kubernetes.io/";

/// The annotation of the pod's seccomp profile before v1.19.
const SECCOMP_POD_ANNOTATION: &str = "seccomp.security.alpha.kubernetes.io/pod";

/// The annotation prefix of a container's seccomp profile before v1.19.
const SECCOMP_ANNOTATION: &str = "container.seccomp.security.alpha.kubernetes.io/";

/// The probes of a container, and its lifecycle hooks: where a `host` is checked.
const PROBES: [&str; 5] = [
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle.postStart",
    "lifecycle.preStop",
];

/// The container lists of a pod spec, each checked alike.
const CONTAINER_LISTS: [&str; 3] = ["initContainers", "containers", "ephemeralContainers"];

/// What a message shows of a value written by the user, at most.
const SHOWN: usize = 64;

/// One field of a pod template that is not allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// Its path, e.g. `deployment.spec.template.spec.containers[app].securityContext.privileged`.
    pub field: String,
    /// What it holds and what is allowed instead.
    pub problem: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.problem)
    }
}

/// Every way the pod template `template` (a PodTemplateSpec as JSON, found at path `at`, e.g.
/// `deployment.spec.template`) breaks the "baseline" level of the Pod Security Standards as
/// of `policy`, in the order of the template. Empty for a template that meets it.
pub fn baseline_findings(template: &Value, at: &str, policy: Policy) -> Vec<Finding> {
    let mut out = Vec::new();
    let pod = template.get("spec").unwrap_or(&Value::Null);
    let spec = format!("{at}.spec");
    for field in ["hostNetwork", "hostPID", "hostIPC"] {
        if is_true(pod.get(field)) {
            out.push(unset_or_false(format!("{spec}.{field}")));
        }
    }
    if let Some(sc) = pod.get("securityContext") {
        let here = format!("{spec}.securityContext");
        shared_controls(sc, &here, policy, &mut out);
        for (i, sysctl) in items(sc.get("sysctls")) {
            let name = sysctl.get("name").and_then(Value::as_str).unwrap_or("");
            if !policy.allows_sysctl(name) {
                let problem = match Policy::sysctl_safe_from(name) {
                    Some(since) => format!(
                        "{}, which baseline allows only from {since}",
                        shown_str(name)
                    ),
                    None => format!(
                        "{}, not one of the safe sysctls baseline allows",
                        shown_str(name)
                    ),
                };
                out.push(Finding {
                    field: format!("{here}.sysctls[{}]", key(sysctl, i)),
                    problem,
                });
            }
        }
    }
    for (i, volume) in items(pod.get("volumes")) {
        if volume.get("hostPath").is_some_and(|v| !v.is_null()) {
            out.push(Finding {
                field: format!("{spec}.volumes[{}].hostPath", key(volume, i)),
                problem: "a hostPath volume, which baseline does not allow".to_owned(),
            });
        }
    }
    // A pod in a user namespace may set any procMount from v1.35.
    let any_proc_mount = policy.relaxes_proc_mount_in_user_namespace()
        && pod.get("hostUsers").and_then(Value::as_bool) == Some(false);
    for list in CONTAINER_LISTS {
        for (i, container) in items(pod.get(list)) {
            let here = format!("{spec}.{list}[{}]", key(container, i));
            container_controls(container, &here, policy, any_proc_mount, &mut out);
        }
    }
    if policy.checks_seccomp_annotations() {
        seccomp_annotations(template, at, &mut out);
    }
    let annotations = template.pointer("/metadata/annotations");
    for (name, value) in annotations.and_then(Value::as_object).into_iter().flatten() {
        let Some(container) = name.strip_prefix(APPARMOR_ANNOTATION) else {
            continue;
        };
        let profile = value.as_str().unwrap_or("");
        if !(profile.is_empty()
            || profile == "runtime/default"
            || profile.starts_with("localhost/"))
        {
            out.push(Finding {
                field: format!(
                    "{at}.metadata.annotations[{APPARMOR_ANNOTATION}{}]",
                    shown(container)
                ),
                problem: format!(
                    "{}; baseline allows runtime/default, localhost/* or unset",
                    shown_str(profile)
                ),
            });
        }
    }
    out
}

/// The controls of one container's `securityContext`, `ports`, probes and lifecycle hooks, the
/// container at `at`; `any_proc_mount` when its pod may set any `procMount`.
fn container_controls(
    container: &Value,
    at: &str,
    policy: Policy,
    any_proc_mount: bool,
    out: &mut Vec<Finding>,
) {
    for (i, port) in items(container.get("ports")) {
        if let Some(host_port) = port.get("hostPort").and_then(Value::as_i64)
            && host_port != 0
        {
            out.push(Finding {
                field: format!("{at}.ports[{i}].hostPort"),
                problem: format!("{host_port}; baseline allows 0 or unset"),
            });
        }
    }
    if policy.checks_probe_hosts() {
        probe_hosts(container, at, out);
    }
    let Some(sc) = container.get("securityContext") else {
        return;
    };
    let here = format!("{at}.securityContext");
    if is_true(sc.get("privileged")) {
        out.push(unset_or_false(format!("{here}.privileged")));
    }
    let added: Vec<String> = sc
        .pointer("/capabilities/add")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| c.as_str().unwrap_or(""))
        .filter(|c| !ALLOWED_CAPABILITIES.contains(c))
        .map(shown)
        .collect();
    if !added.is_empty() {
        out.push(Finding {
            field: format!("{here}.capabilities.add"),
            problem: format!(
                "adds {}, beyond the capabilities baseline allows",
                added.join(", ")
            ),
        });
    }
    if let Some(mount) = sc.get("procMount").and_then(Value::as_str)
        && mount != "Default"
        && !any_proc_mount
    {
        out.push(Finding {
            field: format!("{here}.procMount"),
            problem: format!("{}; baseline allows Default or unset", shown_str(mount)),
        });
    }
    shared_controls(sc, &here, policy, out);
}

/// The `host` of each probe and lifecycle hook of the container at `at` (`httpGet.host`,
/// `tcpSocket.host`), which baseline allows only empty from v1.34: the kubelet would connect
/// to another host for the pod.
fn probe_hosts(container: &Value, at: &str, out: &mut Vec<Finding>) {
    for probe in PROBES {
        let handler = container.pointer(&format!("/{}", probe.replace('.', "/")));
        for action in ["httpGet", "tcpSocket"] {
            let host = handler.and_then(|h| h.pointer(&format!("/{action}/host")));
            if let Some(host) = host.and_then(Value::as_str)
                && !host.is_empty()
            {
                out.push(Finding {
                    field: format!("{at}.{probe}.{action}.host"),
                    problem: format!(
                        "{}; baseline allows it only empty or unset (from v1.34)",
                        shown_str(host)
                    ),
                });
            }
        }
    }
}

/// The seccomp annotations of the template at `at`, checked before v1.19: the pod's and those
/// of its containers allow `runtime/default`, `docker/default` or `localhost/*`.
fn seccomp_annotations(template: &Value, at: &str, out: &mut Vec<Finding>) {
    let pod = template.get("spec").unwrap_or(&Value::Null);
    let names = CONTAINER_LISTS.iter().flat_map(|list| {
        items(pod.get(*list)).filter_map(|(_, c)| c.get("name").and_then(Value::as_str))
    });
    let keys = std::iter::once(SECCOMP_POD_ANNOTATION.to_owned())
        .chain(names.map(|name| format!("{SECCOMP_ANNOTATION}{name}")));
    let annotations = template.pointer("/metadata/annotations");
    for key in keys {
        let Some(value) = annotations.and_then(|a| a.get(&key)) else {
            continue;
        };
        let profile = value.as_str().unwrap_or("");
        if !matches!(profile, "runtime/default" | "docker/default")
            && !profile.starts_with("localhost/")
        {
            out.push(Finding {
                field: format!("{at}.metadata.annotations[{}]", shown(&key)),
                problem: format!(
                    "{}; baseline (before v1.19) allows runtime/default, docker/default or \
                     localhost/*",
                    shown_str(profile)
                ),
            });
        }
    }
}

/// The controls a pod's and a container's `securityContext` (`sc`, at `at`) share: seccomp
/// (from v1.19), AppArmor, SELinux and Windows HostProcess.
fn shared_controls(sc: &Value, at: &str, policy: Policy, out: &mut Vec<Finding>) {
    let seccomp = policy.checks_seccomp_fields().then_some("seccompProfile");
    for profile in seccomp.into_iter().chain(["appArmorProfile"]) {
        if let Some(kind) = sc
            .pointer(&format!("/{profile}/type"))
            .and_then(Value::as_str)
            && !matches!(kind, "RuntimeDefault" | "Localhost" | "")
        {
            out.push(Finding {
                field: format!("{at}.{profile}.type"),
                problem: format!(
                    "{}; baseline allows RuntimeDefault, Localhost or unset",
                    shown_str(kind)
                ),
            });
        }
    }
    let selinux = sc.get("seLinuxOptions").unwrap_or(&Value::Null);
    if let Some(kind) = selinux.get("type").and_then(Value::as_str)
        && !policy.allows_selinux_type(kind)
    {
        out.push(Finding {
            field: format!("{at}.seLinuxOptions.type"),
            problem: format!(
                "{}; baseline allows {} or unset",
                shown_str(kind),
                policy.selinux_types().join(", ")
            ),
        });
    }
    for field in ["user", "role"] {
        if let Some(value) = selinux.get(field).and_then(Value::as_str)
            && !value.is_empty()
        {
            out.push(Finding {
                field: format!("{at}.seLinuxOptions.{field}"),
                problem: format!("{}; baseline allows it only unset", shown_str(value)),
            });
        }
    }
    if is_true(sc.pointer("/windowsOptions/hostProcess")) {
        out.push(unset_or_false(format!("{at}.windowsOptions.hostProcess")));
    }
}

/// The operator's own ServiceAccount: a Deployment the operator makes never runs as it (R33).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceAccountRef {
    /// Its namespace (`POD_NAMESPACE`).
    pub namespace: String,
    /// Its name (`POD_SERVICE_ACCOUNT`).
    pub name: String,
}

/// Whether the pod template `template` (at path `at`), to run in `namespace`, would run as the
/// operator's own ServiceAccount `own`: it names it in `serviceAccountName` or the deprecated
/// `serviceAccount`, or names none while the operator's is its namespace's `default`. A
/// ServiceAccount name is local to its namespace, so only a template in the operator's own
/// namespace can.
pub fn own_account_finding(
    template: &Value,
    at: &str,
    namespace: &str,
    own: &ServiceAccountRef,
) -> Option<Finding> {
    if namespace != own.namespace {
        return None;
    }
    let spec = format!("{at}.spec");
    let named = |field: &str| {
        template
            .pointer(&format!("/spec/{field}"))
            .and_then(Value::as_str)
            .filter(|name| !name.is_empty())
    };
    let problem = format!(
        "{:?} is the operator's own ServiceAccount, which nothing the operator makes may run as",
        own.name
    );
    for field in ["serviceAccountName", "serviceAccount"] {
        if named(field) == Some(own.name.as_str()) {
            return Some(Finding {
                field: format!("{spec}.{field}"),
                problem,
            });
        }
    }
    let unnamed = named("serviceAccountName").is_none() && named("serviceAccount").is_none();
    (unnamed && own.name == "default").then(|| Finding {
        field: format!("{spec}.serviceAccountName"),
        problem: format!("unset, so the pods would run as {problem}"),
    })
}

/// The items of a JSON array, with their indexes; nothing for anything else.
fn items(list: Option<&Value>) -> impl Iterator<Item = (usize, &Value)> {
    list.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
}

/// How a list item is named in a path: its `name` when that is short and plain, else its index.
pub(super) fn key(item: &Value, index: usize) -> String {
    match item.get("name").and_then(Value::as_str) {
        Some(name) if is_plain(name) => name.to_owned(),
        _ => index.to_string(),
    }
}

/// At most [`SHOWN`] characters of letters, digits, `-`, `_`, `.` and `/`.
fn is_plain(s: &str) -> bool {
    !s.is_empty()
        && s.chars().count() <= SHOWN
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

/// A value written by the user, as a message shows it: as it is when plain, else quoted and
/// escaped (JSON), cut to [`SHOWN`] characters.
fn shown(s: &str) -> String {
    if is_plain(s) {
        return s.to_owned();
    }
    let cut: String = s.chars().take(SHOWN).collect();
    let more = if cut.len() < s.len() { "..." } else { "" };
    format!("{}{more}", Value::from(cut))
}

/// [`shown`], always quoted.
pub(super) fn shown_str(s: &str) -> String {
    let shown = shown(s);
    if shown.starts_with('"') {
        shown
    } else {
        format!("\"{shown}\"")
    }
}

fn is_true(v: Option<&Value>) -> bool {
    v.and_then(Value::as_bool) == Some(true)
}

/// A boolean field that baseline allows only false or unset, set to true.
fn unset_or_false(field: String) -> Finding {
    Finding {
        field,
        problem: "true; baseline allows false or unset".to_owned(),
    }
}
