//! Which version of the Pod Security Standards a namespace is held to, and what "baseline"
//! allows at each version (R33).
//!
//! Kubernetes' Pod Security admission evaluates a pod against the version the namespace
//! pins (label `pod-security.kubernetes.io/enforce-version`: `latest` or `v1.<minor>`), or
//! `latest` when it pins none; `latest`, and any pinned version newer than the API server, is
//! the API server's own. The controls that changed between versions are here, each with the
//! version it changed at: the safe sysctls and SELinux types grew, seccomp moved from
//! annotations to fields (1.19), probes and lifecycle hooks lost their `host` (1.34), and a
//! pod in a user namespace (`hostUsers: false`) may set any `procMount` (1.35).

use std::fmt;

/// The namespace label that pins the version of the standards its enforced level follows.
pub const ENFORCE_VERSION_LABEL: &str = "pod-security.kubernetes.io/enforce-version";

/// The sysctls a pod may set under baseline (the ones Kubernetes counts as safe: namespaced,
/// isolated between pods), each with the minor version that first allows it.
pub const SAFE_SYSCTLS: [(&str, u32); 12] = [
    ("kernel.shm_rmid_forced", 0),
    ("net.ipv4.ip_local_port_range", 0),
    ("net.ipv4.ip_unprivileged_port_start", 0),
    ("net.ipv4.tcp_syncookies", 0),
    ("net.ipv4.ping_group_range", 0),
    ("net.ipv4.ip_local_reserved_ports", 27),
    ("net.ipv4.tcp_keepalive_time", 29),
    ("net.ipv4.tcp_fin_timeout", 29),
    ("net.ipv4.tcp_keepalive_intvl", 29),
    ("net.ipv4.tcp_keepalive_probes", 29),
    ("net.ipv4.tcp_rmem", 32),
    ("net.ipv4.tcp_wmem", 32),
];

/// The SELinux types a pod or container may ask for under baseline, each with the minor
/// version that first allows it.
pub const SELINUX_TYPES: [(&str, u32); 4] = [
    ("container_t", 0),
    ("container_init_t", 0),
    ("container_kvm_t", 0),
    ("container_engine_t", 31),
];

/// From this minor version, seccomp is read from the fields; before it, from the annotations.
const SECCOMP_FIELDS: u32 = 19;
/// From this minor version, probes and lifecycle hooks may not name a `host`.
const PROBE_HOSTS: u32 = 34;
/// From this minor version, a pod with `hostUsers: false` may set any `procMount`.
const USER_NAMESPACE_PROC_MOUNT: u32 = 35;
/// A version of the Pod Security Standards, `v1.<minor>` (the Kubernetes minor that shipped
/// it). A version newer than the last one above is checked as that one: no later version had
/// changed baseline when this was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(pub u32);

impl Version {
    /// The version an API server reports in `GET /version` (`major` "1", `minor` such as
    /// "34" or "34+"); `None` for anything else.
    pub fn of_server(major: &str, minor: &str) -> Option<Version> {
        let digits = minor.trim_end_matches(|c: char| !c.is_ascii_digit());
        (major == "1" && !digits.is_empty())
            .then(|| digits.parse().ok().map(Version))
            .flatten()
    }

    /// A value of [`ENFORCE_VERSION_LABEL`]: `Some(None)` for `latest`, `Some(Some(v))` for
    /// `v1.<minor>`, `None` for anything else (which the API server refuses on a namespace).
    pub fn of_label(value: &str) -> Option<Option<Version>> {
        if value == "latest" {
            return Some(None);
        }
        let minor = value.strip_prefix("v1.")?;
        let plain = !minor.is_empty()
            && minor.chars().all(|c| c.is_ascii_digit())
            && (minor == "0" || !minor.starts_with('0'));
        if !plain {
            return None;
        }
        minor.parse().ok().map(|m| Some(Version(m)))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v1.{}", self.0)
    }
}

/// What baseline is checked against: the standards at one version, or, before the namespace
/// is read (and when the API server's version is not known), the strictest of every version,
/// which finds whatever any version would.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Baseline as of this version.
    At(Version),
    /// What baseline forbids at any version.
    Strictest,
}

impl Policy {
    /// The policy Pod Security admission applies in a namespace whose
    /// [`ENFORCE_VERSION_LABEL`] is `label`, on an API server of version `server`: the pinned
    /// version, unless it is newer than the server (admission clamps it to its own); the
    /// server's for `latest`, no label, or a value the server would not have accepted. An
    /// unknown server version with nothing pinned is [`Policy::Strictest`].
    pub fn enforced(label: Option<&str>, server: Option<Version>) -> Policy {
        let pinned = label.and_then(Version::of_label).flatten();
        match (pinned, server) {
            (Some(pinned), Some(server)) => Policy::At(pinned.min(server)),
            (Some(pinned), None) => Policy::At(pinned),
            (None, Some(server)) => Policy::At(server),
            (None, None) => Policy::Strictest,
        }
    }

    /// Whether baseline allows sysctl `name`.
    pub fn allows_sysctl(self, name: &str) -> bool {
        self.allows(&SAFE_SYSCTLS, name)
    }

    /// The version from which baseline allows sysctl `name`, if any does.
    pub fn sysctl_safe_from(name: &str) -> Option<Version> {
        SAFE_SYSCTLS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, since)| Version(*since))
    }

    /// Whether baseline allows SELinux type `kind` (empty is unset, allowed).
    pub fn allows_selinux_type(self, kind: &str) -> bool {
        kind.is_empty() || self.allows(&SELINUX_TYPES, kind)
    }

    /// The SELinux types baseline allows, for a message.
    pub fn selinux_types(self) -> Vec<&'static str> {
        SELINUX_TYPES
            .iter()
            .filter(|(kind, _)| self.allows(&SELINUX_TYPES, kind))
            .map(|(kind, _)| *kind)
            .collect()
    }

    /// Whether the seccomp fields (`seccompProfile.type`) are checked (from v1.19).
    pub fn checks_seccomp_fields(self) -> bool {
        self.from(SECCOMP_FIELDS)
    }

    /// Whether the seccomp annotations are checked (before v1.19).
    pub fn checks_seccomp_annotations(self) -> bool {
        match self {
            Policy::At(Version(minor)) => minor < SECCOMP_FIELDS,
            Policy::Strictest => true,
        }
    }

    /// Whether probes and lifecycle hooks may not name a `host` (from v1.34).
    pub fn checks_probe_hosts(self) -> bool {
        self.from(PROBE_HOSTS)
    }

    /// Whether a pod in a user namespace may set any `procMount` (from v1.35).
    pub fn relaxes_proc_mount_in_user_namespace(self) -> bool {
        match self {
            Policy::At(Version(minor)) => minor >= USER_NAMESPACE_PROC_MOUNT,
            Policy::Strictest => false,
        }
    }

    /// Whether a control that applies from minor version `minor` applies.
    fn from(self, minor: u32) -> bool {
        match self {
            Policy::At(Version(at)) => at >= minor,
            Policy::Strictest => true,
        }
    }

    /// Whether `name` is in `list` at this policy (the strictest: since v1.0).
    fn allows(self, list: &[(&str, u32)], name: &str) -> bool {
        list.iter().any(|(n, since)| {
            *n == name
                && match self {
                    Policy::At(Version(at)) => *since <= at,
                    Policy::Strictest => *since == 0,
                }
        })
    }
}

impl fmt::Display for Policy {
    /// As Pod Security admission names it in its refusals: `baseline:v1.34`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::At(version) => write!(f, "baseline:{version}"),
            Policy::Strictest => f.write_str("baseline"),
        }
    }
}
