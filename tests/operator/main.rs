//! Integration tests of the operator against the real control plane: each test runs the real
//! `mutantops` binary scoped to a namespace of its own and checks what its controllers do to
//! real Deployments, Secrets and statuses, and what its HTTP API answers to a real HTTP
//! client. Each test cites the rule (R#) it checks.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a failed step must fail the test"
)]

#[path = "../common/mod.rs"]
mod common;

mod abuse;
mod api_argo;
mod api_auth;
mod api_badinput;
mod api_concurrency;
mod api_device;
mod api_input;
mod api_load;
mod api_walkthrough;
mod audit;
mod baseline;
mod baseline_server;
mod conflicts;
mod connect;
mod connections;
mod cutoff;
mod deadline;
mod devices;
mod devices_liveness;
mod editors;
mod enroll_burst;
mod examples;
mod fairness;
mod handover;
mod invalid;
mod kubectl;
mod leader;
mod lease_requests;
mod lifecycle;
mod memory;
mod metrics;
mod metrics_cap;
mod namespaces;
mod oversized;
mod placement;
mod poison;
mod prometheus;
mod prometheus_operator;
mod rbac;
mod refused;
mod replicas;
mod rights_devices;
mod rights_env;
mod rollout;
mod scoped;
mod screens;
mod secret;
mod services;
mod sleep;
mod sleep_dst;
mod sleep_pinned;
mod sleep_site;
mod slots;
mod small_devices;
mod stalling;
mod steady;
mod store;
mod tls;
mod totals;
mod unconfirmed;
mod watch_silence;
mod writes;

use std::time::Duration;

pub use audit::{
    assert_steady, audit_events, audit_log, log_size, operator_requests, quiet_offset, reconciles,
};

use common::{Operator, TestNamespace, base, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
};
use mutantops::crd::{MutantDeployment, Mutation, OwnerStatus, VariantState};
use serde_json::{Value, json};

/// The admin token the API tests give the operator.
pub const ADMIN: &str = "admin-token-for-tests-0123456789abcdef";

/// How long convergence may take in these tests.
pub const CONVERGE: Duration = Duration::from_secs(60);

/// A namespace with the CRDs installed and an operator reconciling it.
pub struct Fixture {
    pub operator: Operator,
    pub ns: TestNamespace,
}

impl Fixture {
    pub async fn new(prefix: &str) -> Fixture {
        Self::with_env(prefix, &[]).await
    }

    /// With extra environment variables for the operator.
    pub async fn with_env(prefix: &str, env: &[(&str, &str)]) -> Fixture {
        let ns = TestNamespace::new(prefix).await;
        common::install_crds(&ns.client).await;
        let operator = Operator::start_with(&ns.name, env);
        Fixture { operator, ns }
    }

    /// With the HTTP API's admin token set to `ADMIN`, and waits until the API answers.
    pub async fn with_api(prefix: &str) -> Fixture {
        let f = Self::with_env(prefix, &[("MUTANT_API_TOKEN", ADMIN)]).await;
        wait_api(f.operator.api_port, &f.ns.name).await;
        f
    }

    /// Sends an API request to this fixture's operator.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> common::http::Reply {
        let body = body.map(|b| b.to_string());
        let path = format!("/api/v1/namespaces/{}{path}", self.ns.name);
        common::http::request(
            self.operator.api_port,
            method,
            &path,
            token,
            body.as_deref(),
        )
        .await
    }

    /// Adds `variant` to Mutation `name` through the API, with `token`.
    pub async fn add_variant(
        &self,
        name: &str,
        token: &str,
        variant: &Value,
    ) -> common::http::Reply {
        let path = format!("/mutations/{name}/variants");
        self.call("POST", &path, Some(token), Some(variant)).await
    }

    /// The labels of Mutation `name`'s spec, as the API server has them.
    pub async fn spec_labels(&self, name: &str) -> Vec<String> {
        let m = self.mutations().get(name).await.unwrap();
        m.spec.variants.iter().map(|v| v.label.clone()).collect()
    }

    /// The token of Mutation `name`, once the operator has made its Secret.
    pub async fn token(&self, name: &str) -> String {
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = self.ns.api();
        let secret_name = format!("{name}-secret");
        wait_for(&format!("Secret {secret_name}"), CONVERGE, || async {
            match secrets
                .get_opt(&secret_name)
                .await
                .map_err(|e| e.to_string())?
            {
                Some(s) => Ok(String::from_utf8(s.data.unwrap()["token"].0.clone()).unwrap()),
                None => Err("absent".to_string()),
            }
        })
        .await
    }

    pub fn deployments(&self) -> Api<Deployment> {
        self.ns.api()
    }

    pub fn mutations(&self) -> Api<Mutation> {
        self.ns.api()
    }

    pub fn mutant_deployments(&self) -> Api<MutantDeployment> {
        self.ns.api()
    }

    /// Server-side applies a manifest (YAML or JSON) as the test's own field manager.
    pub async fn apply<K>(&self, manifest: &Value)
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let name = manifest["metadata"]["name"].as_str().unwrap().to_string();
        let api: Api<K> = self.ns.api();
        api.patch(
            &name,
            &PatchParams::apply("test-author").force(),
            &Patch::Apply(manifest),
        )
        .await
        .unwrap_or_else(|e| panic!("applying {name}: {e}"));
    }

    /// Waits until the owner's status satisfies `check`, and returns it.
    pub async fn wait_status<K>(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&OwnerStatus) -> bool,
    ) -> OwnerStatus
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + HasStatus,
    {
        let api: Api<K> = self.ns.api();
        wait_for(&format!("{name}: {what}"), CONVERGE, || async {
            let obj = api.get(name).await.map_err(|e| e.to_string())?;
            match obj.owner_status() {
                Some(status) if check(status) => Ok(status.clone()),
                other => Err(format!("{other:?}")),
            }
        })
        .await
    }

    /// Waits until Deployment `name` exists and satisfies `check`.
    pub async fn wait_deployment(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&Deployment) -> bool,
    ) -> Deployment {
        let api = self.deployments();
        wait_for(&format!("Deployment {name}: {what}"), CONVERGE, || async {
            match api.get_opt(name).await.map_err(|e| e.to_string())? {
                Some(d) if check(&d) => Ok(d),
                Some(d) => Err(format!(
                    "spec {:?} status {:?}",
                    d.spec.map(|s| s.replicas),
                    d.status
                )),
                None => Err("absent".to_string()),
            }
        })
        .await
    }

    /// Waits until Deployment `name` is gone.
    pub async fn wait_gone(&self, name: &str) {
        let api = self.deployments();
        wait_for(
            &format!("Deployment {name} to be deleted"),
            CONVERGE,
            || async {
                match api.get_opt(name).await.map_err(|e| e.to_string())? {
                    None => Ok(()),
                    Some(d) => Err(format!(
                        "still there (deletionTimestamp {:?})",
                        d.metadata.deletion_timestamp
                    )),
                }
            },
        )
        .await
    }
}

/// Waits until the HTTP API on `port` lists the Mutations of `namespace` to the admin token
/// (200 once the operator's caches have synced).
pub async fn wait_api(port: u16, namespace: &str) {
    let path = format!("/api/v1/namespaces/{namespace}/mutations");
    wait_for("the HTTP API to serve", CONVERGE, || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| e.to_string())?;
        let reply = common::http::request(port, "GET", &path, Some(ADMIN), None).await;
        if reply.status == 200 {
            Ok(())
        } else {
            Err(format!("{reply:?}"))
        }
    })
    .await;
}

/// Both owner kinds expose their status the same way.
pub trait HasStatus {
    fn owner_status(&self) -> Option<&OwnerStatus>;
}

impl HasStatus for Mutation {
    fn owner_status(&self) -> Option<&OwnerStatus> {
        self.status.as_ref()
    }
}

impl HasStatus for MutantDeployment {
    fn owner_status(&self) -> Option<&OwnerStatus> {
        self.status.as_ref()
    }
}

/// A Mutation manifest.
pub fn mutation(name: &str, base: Value, variants: Value) -> Value {
    json!({ "apiVersion": "neiam.org/v1", "kind": "Mutation", "metadata": { "name": name },
            "spec": { "deployment": base, "variants": variants } })
}

/// A MutantDeployment manifest.
pub fn mutant_deployment(name: &str, base: Value, mutations: Value) -> Value {
    json!({ "apiVersion": "neiam.org/v1", "kind": "MutantDeployment", "metadata": { "name": name },
            "spec": { "deployment": base, "mutations": mutations } })
}

/// The env of the first container of a Deployment, as (name, value) pairs.
pub fn env_of(d: &Deployment) -> Vec<(String, String)> {
    let spec = d
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .unwrap();
    spec.containers[0]
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect()
}

/// Whether a Deployment's status says all `replicas` are ready and up to date.
pub fn ready(d: &Deployment, replicas: i32) -> bool {
    let status = d.status.clone().unwrap_or_default();
    d.spec.as_ref().and_then(|s| s.replicas) == Some(replicas)
        && status.ready_replicas.unwrap_or(0) == replicas
        && status.updated_replicas.unwrap_or(0) == replicas
        && status.observed_generation >= d.metadata.generation
}

/// The states of a status's variants, by label.
pub fn states(status: &OwnerStatus) -> Vec<(String, VariantState)> {
    status
        .variants
        .iter()
        .map(|v| (v.label.clone(), v.state))
        .collect()
}

/// The controller ownerReference's (kind, name, uid) of an object.
pub fn controller_of<K: ResourceExt>(obj: &K) -> Option<(String, String, String)> {
    obj.owner_references()
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| (r.kind.clone(), r.name.clone(), r.uid.clone()))
}

/// The controller ownerReference's (kind, name, uid) that an object `owner` controls has.
pub fn controlled_by<K>(owner: &K) -> Option<(String, String, String)>
where
    K: kube::Resource<DynamicType = ()>,
{
    Some((
        K::kind(&()).into_owned(),
        owner.name_any(),
        owner.uid().unwrap(),
    ))
}

/// The labels of a Deployment's pod template.
pub fn template_labels(d: &Deployment) -> std::collections::BTreeMap<String, String> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .expect("a pod template with labels")
}

/// The first ```` ```lang ```` code block after `marker` in `file` (a Markdown file of the
/// repository), without its fences.
pub fn markdown_block(file: &str, marker: &str, lang: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let (_, after) = text
        .split_once(marker)
        .unwrap_or_else(|| panic!("{file} has no {marker}"));
    let (_, body) = after
        .split_once(&format!("```{lang}\n"))
        .unwrap_or_else(|| panic!("{file}: no {lang} block after {marker}"));
    let (block, _) = body.split_once("```").expect("the block ends");
    block.to_string()
}

/// Reads a file under deploy/examples/ as JSON.
pub fn example(file: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/examples")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_saphyr::from_str(&text).unwrap()
}

/// The kubectl to use: `$KUBECTL`, or `kubectl` on the PATH.
pub fn kubectl(args: &[&str]) -> std::process::Output {
    let program = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".to_string());
    std::process::Command::new(&program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"))
}

/// Waits until the namespace holds at least `count` Events with `reason`, and returns their
/// (related object name, note, number of times published) triples, sorted. R26: an Event is
/// published once per change, so that number must be 1.
pub async fn events(f: &Fixture, reason: &str, count: usize) -> Vec<(String, String, i32)> {
    use k8s_openapi::api::events::v1::Event;
    let api: Api<Event> = f.ns.api();
    wait_for(&format!("{count} {reason} Events"), CONVERGE, || async {
        let list = api
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?;
        let mut found: Vec<(String, String, i32)> = list
            .items
            .iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .map(|e| {
                let related = e
                    .related
                    .as_ref()
                    .and_then(|r| r.name.clone())
                    .unwrap_or_default();
                let times = e.series.as_ref().map_or(1, |s| s.count);
                (related, e.note.clone().unwrap_or_default(), times)
            })
            .collect();
        found.sort();
        if found.len() >= count {
            Ok(found)
        } else {
            Err(format!("{found:?}"))
        }
    })
    .await
}

/// The guards of an admission policy that [`deny_deployments`] installed.
pub type PolicyGuards = (
    common::RemoveOnDrop<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy>,
    common::RemoveOnDrop<
        k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding,
    >,
);

/// Installs ValidatingAdmissionPolicy `<namespace>-<suffix>` over the Deployments created or
/// updated in the fixture's namespace, with `validations` (its `spec.validations`), and its
/// binding; then waits until the server dry-run-refuses `probe` (a Deployment in that
/// namespace) with `code`. The guards remove both when the test ends, however it ends (the
/// binding first: drops run in reverse). A policy is cluster-scoped, so the binding's
/// namespace selector keeps it away from every other test.
pub async fn deny_deployments(
    f: &Fixture,
    suffix: &str,
    validations: Value,
    probe: Value,
    code: u16,
) -> PolicyGuards {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    use kube::api::PostParams;
    let name = format!("{}-{suffix}", f.ns.name);
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(f.ns.client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(f.ns.client.clone());
    let policy: ValidatingAdmissionPolicy = common::from_json(json!({
        "metadata": { "name": name },
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": { "resourceRules": [{
                "apiGroups": ["apps"], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]
            }] },
            "validations": validations
        }
    }));
    let binding: ValidatingAdmissionPolicyBinding = common::from_json(json!({
        "metadata": { "name": name },
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": { "namespaceSelector": {
                "matchLabels": { "kubernetes.io/metadata.name": f.ns.name }
            } }
        }
    }));
    // The guards are made before each object is: a failed create leaves nothing to remove.
    let policy_guard = common::RemoveOnDrop::<ValidatingAdmissionPolicy>::new(&name);
    policies
        .create(&PostParams::default(), &policy)
        .await
        .unwrap();
    let binding_guard = common::RemoveOnDrop::<ValidatingAdmissionPolicyBinding>::new(&name);
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    // The policy takes effect within a few seconds: until a dry run is refused.
    let mut probe = probe;
    probe["metadata"]["namespace"] = json!(f.ns.name);
    let probe: Deployment = common::from_json(probe);
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    wait_for("the policy to take effect", CONVERGE, || async {
        match f.deployments().create(&dry, &probe).await {
            Err(kube::Error::Api(s)) if s.code == code => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    (policy_guard, binding_guard)
}
