//! What the operator refuses to make (R33): a Deployment whose pod template breaks Pod
//! Security "baseline" ([`baseline_findings`]), unless its namespace opts in the Kubernetes way
//! (label `pod-security.kubernetes.io/enforce: privileged`), and, whatever the labels say, one
//! that runs as the operator's own ServiceAccount ([`own_account_finding`]) or references one
//! of its own Secrets ([`own_secret_findings`]; R33).
//!
//! Baseline is the one the namespace is held to (R33): at the version its
//! `pod-security.kubernetes.io/enforce-version` label pins, else the API server's own, as
//! Pod Security admission would evaluate it ([`Policy::enforced`]), so the operator never
//! refuses what the API server would let the namespace run at baseline, and never makes what
//! it would refuse there.
//!
//! A [`Review`] collects the findings of the Deployments an owner would make. The caller first
//! reviews them under [`Policy::Strictest`]; only when that finds something does it read the
//! namespace's labels (a GET, never a watch or a cache) and review them again under the
//! namespace's policy; [`Review::refusal`] then gives the message of the refusal, naming the
//! fields and saying how to opt in, or `None` when the Deployments may be made; [`hold_back`]
//! turns the planned variants Invalid with it.

use serde_json::Value;

use super::baseline::{Finding, ServiceAccountRef, baseline_findings, own_account_finding};
use super::build::Planned;
use super::own_secrets::{OwnSecrets, own_secret_findings};
use super::policy::{ENFORCE_VERSION_LABEL, Policy, Version};

/// The namespace label by which Kubernetes' Pod Security admission is told what to enforce.
pub const ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";

/// The value of [`ENFORCE_LABEL`] that lets a namespace hold what baseline forbids.
pub const PRIVILEGED: &str = "privileged";

/// The Ready condition's reason (and the owner Event's) when the operator refuses to make the
/// owner's Deployments: the base is valid, but not allowed in its namespace.
pub const BASE_NOT_ALLOWED: &str = "BaseNotAllowed";

/// How many findings a message lists; it says how many more there are.
const LISTED: usize = 5;

/// What the operator knows, from its start, to decide on the Deployments it would make.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodSecurity {
    /// The operator's own ServiceAccount, when known: nothing it makes runs as it.
    pub own_account: Option<ServiceAccountRef>,
    /// The operator's own Secrets, when its namespace is known: nothing it makes references
    /// them.
    pub own_secrets: Option<OwnSecrets>,
    /// The API server's version (`GET /version`, read once at start), when known: the policy
    /// of a namespace that pins none, and the newest one that pins any.
    pub server: Option<Version>,
}

/// What the operator learned of a namespace's opt-in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamespaceLabel {
    /// The namespace was read: the values of its [`ENFORCE_LABEL`] and
    /// [`ENFORCE_VERSION_LABEL`], if any.
    Read {
        /// The level it enforces.
        level: Option<String>,
        /// The version of the standards it pins.
        version: Option<String>,
    },
    /// The namespace could not be read, for the reason given (the operator may not: a
    /// namespace-scoped install without `get` on namespaces). It counts as not opted in,
    /// pinning no version.
    Unreadable(String),
}

impl NamespaceLabel {
    /// The policy Pod Security admission holds the namespace to, on an API server of version
    /// `server`.
    pub fn policy(&self, server: Option<Version>) -> Policy {
        let pinned = match self {
            NamespaceLabel::Read { version, .. } => version.as_deref(),
            NamespaceLabel::Unreadable(_) => None,
        };
        Policy::enforced(pinned, server)
    }
}

/// The findings of the Deployments an owner would make in one namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Review {
    /// The policy they were checked against.
    pub policy: Policy,
    /// Every way their pod templates break baseline, without repeats.
    pub baseline: Vec<Finding>,
    /// Where a pod template would run as the operator's own ServiceAccount.
    pub own_account: Option<Finding>,
    /// Where the pod templates reference the operator's own Secrets, without repeats.
    pub own_secrets: Vec<Finding>,
}

impl Review {
    /// Reviews `deployments` (each a Deployment as JSON, its pod template at
    /// `spec.template`), to be made in `namespace`, against baseline as of `policy`; `own`
    /// says what is the operator's (its ServiceAccount, its Secrets), when known. Findings
    /// repeated across the Deployments (every variant shares the base's template) are listed
    /// once.
    pub fn of<'a>(
        deployments: impl IntoIterator<Item = &'a Value>,
        namespace: &str,
        own: &PodSecurity,
        policy: Policy,
    ) -> Review {
        const AT: &str = "deployment.spec.template";
        let mut review = Review {
            policy,
            baseline: Vec::new(),
            own_account: None,
            own_secrets: Vec::new(),
        };
        let once = |found: Vec<Finding>, into: &mut Vec<Finding>| {
            for finding in found {
                if !into.contains(&finding) {
                    into.push(finding);
                }
            }
        };
        for deployment in deployments {
            let template = deployment.pointer("/spec/template").unwrap_or(&Value::Null);
            once(
                baseline_findings(template, AT, policy),
                &mut review.baseline,
            );
            if review.own_account.is_none() {
                review.own_account = own
                    .own_account
                    .as_ref()
                    .and_then(|own| own_account_finding(template, AT, namespace, own));
            }
            if let Some(secrets) = &own.own_secrets {
                once(
                    own_secret_findings(template, AT, namespace, secrets),
                    &mut review.own_secrets,
                );
            }
        }
        review
    }

    /// Whether the namespace's labels decide: there are baseline findings, and nothing that is
    /// refused whatever the labels say. Asked of a review under [`Policy::Strictest`], whose
    /// findings include those of every version.
    pub fn needs_namespace(&self) -> bool {
        self.own_account.is_none() && self.own_secrets.is_empty() && !self.baseline.is_empty()
    }

    /// Why the Deployments may not be made in namespace `namespace`, whose opt-in is `label`
    /// (read only when [`Review::needs_namespace`]; `None` otherwise): the operator's own
    /// ServiceAccount in any namespace and its own Secrets, whatever the labels say; baseline
    /// findings unless the namespace is labelled privileged. `None` when they may be made.
    pub fn refusal(&self, namespace: &str, label: Option<&NamespaceLabel>) -> Option<String> {
        if let Some(finding) = &self.own_account {
            return Some(format!("{finding}; refused in every namespace"));
        }
        if !self.own_secrets.is_empty() {
            return Some(format!(
                "{}; refused whatever the namespace's labels say",
                listed(&self.own_secrets).join("; ")
            ));
        }
        if self.baseline.is_empty() {
            return None;
        }
        let state = match label {
            Some(NamespaceLabel::Read {
                level: Some(level), ..
            }) if level == PRIVILEGED => return None,
            Some(NamespaceLabel::Read {
                level: Some(level), ..
            }) => format!("namespace {namespace:?} is labelled {ENFORCE_LABEL}={level:?}"),
            Some(NamespaceLabel::Read { level: None, .. }) | None => {
                format!("namespace {namespace:?} has no {ENFORCE_LABEL} label")
            }
            Some(NamespaceLabel::Unreadable(why)) => format!(
                "the operator could not read namespace {namespace:?} ({why}), so it counts as \
                 not labelled; an operator installed for one namespace needs get on it"
            ),
        };
        let pinned = match label {
            Some(NamespaceLabel::Read {
                version: Some(version),
                ..
            }) => format!(" ({ENFORCE_VERSION_LABEL}={version:?})"),
            _ => String::new(),
        };
        Some(format!(
            "the pod template breaks Pod Security \"{}\"{pinned}: {}; the operator makes such \
             a Deployment only in a namespace labelled {ENFORCE_LABEL}={PRIVILEGED}, and {state}",
            self.policy,
            listed(&self.baseline).join("; ")
        ))
    }
}

/// The first [`LISTED`] of `findings`, and how many more there are.
fn listed(findings: &[Finding]) -> Vec<String> {
    let mut listed: Vec<String> = findings
        .iter()
        .take(LISTED)
        .map(Finding::to_string)
        .collect();
    if findings.len() > LISTED {
        listed.push(format!("and {} more", findings.len() - LISTED));
    }
    listed
}

/// The planned variants when the operator refuses their Deployments for `problem` (from
/// [`Review::refusal`]): every one to apply becomes Invalid with it, so nothing is applied for
/// it, while its Deployment (if one runs) is not pruned either; Invalid and Conflict variants
/// keep their own reason.
pub fn hold_back(planned: Vec<Planned>, problem: &str) -> Vec<Planned> {
    planned
        .into_iter()
        .map(|p| match p {
            Planned::Apply { .. } => p.into_invalid(format!("not applied: {problem}")),
            other => other,
        })
        .collect()
}
