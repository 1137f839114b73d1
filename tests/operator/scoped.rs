//! R33, R28: docs/security.md's namespace-scoped install. The operator runs with a token of a
//! ServiceAccount that holds only the Role of its "Namespace-scoped install" and the leader
//! Lease's Role of deploy/operator.yml, both in the one namespace it serves: it reconciles,
//! reads that namespace's Pod Security label through the Role (Kubernetes authorises a GET of
//! a namespace by a RoleBinding in it), and refuses a base that breaks baseline as not opted
//! in, saying why, once the Role no longer lets it read the namespace.

use k8s_openapi::api::{core::v1::Namespace, rbac::v1::Role};
use serde_json::json;

use super::*;

/// The documents of deploy/operator.yml named `name`.
fn deploy_objects(name: &str) -> Vec<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/operator.yml");
    let text = std::fs::read_to_string(path).unwrap();
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap()
        .into_iter()
        .filter(|doc| doc["metadata"]["name"] == name)
        .collect()
}

/// Runs `kubectl` with `args` and `input` as the file `-f` names; panics on failure.
fn kubectl_with(args: &[&str], input: &str) -> String {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let file = dir.join(format!("scoped-{}.yaml", common::random_suffix()));
    std::fs::write(&file, input).unwrap();
    let mut all = args.to_vec();
    all.extend_from_slice(&["-f", file.to_str().unwrap()]);
    let out = kubectl(&all);
    let _ = std::fs::remove_file(&file);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "kubectl {all:?}: {text}");
    text
}

/// `base(name)` with a privileged container.
fn privileged(name: &str) -> Value {
    let mut b = base(name);
    b["spec"]["template"]["spec"]["containers"][0]["securityContext"] =
        json!({ "privileged": true });
    b
}

/// R33: the operator installed for one namespace, with only Roles: plain owners converge; a
/// privileged base is refused while the namespace has no label (read through the Role), made
/// once it is labelled privileged; and, the Role's `get` on namespaces taken away, a new one
/// is refused with a message saying the namespace could not be read.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_namespace_scoped_install_reads_its_own_namespace_label() {
    let ns = TestNamespace::new("pss-scoped").await;
    common::install_crds(&ns.client).await;
    let name = ns.name.clone();

    // docs/security.md's Role and binding, and deploy/'s leader Lease Role, in this namespace.
    let role = markdown_block("docs/security.md", "<!-- namespace-scoped-role -->", "yaml")
        .replace("displays", &name);
    let mut manifests = role.clone();
    for mut object in deploy_objects("mutantops-leader-election") {
        object["metadata"]["namespace"] = json!(name);
        if let Some(subjects) = object["subjects"].as_array_mut() {
            for s in subjects {
                s["namespace"] = json!(name);
            }
        }
        manifests.push_str(&format!(
            "---\n{}",
            serde_saphyr::to_string(&object).unwrap()
        ));
    }
    kubectl(&["-n", &name, "create", "serviceaccount", "mutantops"]);
    kubectl_with(&["apply"], &manifests);
    let token = kubectl(&["-n", &name, "create", "token", "mutantops", "--duration=1h"]);
    assert!(token.status.success(), "TokenRequest");
    let token = String::from_utf8(token.stdout).unwrap();
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("scoped-{}", common::random_suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    super::rbac::kubeconfig_with_token(token.trim(), &kubeconfig);
    let operator = Operator::start_with(
        &name,
        &[
            ("KUBECONFIG", kubeconfig.to_str().unwrap()),
            ("POD_NAMESPACE", name.as_str()),
            ("POD_SERVICE_ACCOUNT", "mutantops"),
        ],
    );
    let f = Fixture { operator, ns };

    let one = json!([{ "label": "a", "instances": 1 }]);
    f.apply::<Mutation>(&mutation("plain", base("web"), one.clone()))
        .await;
    f.wait_status::<Mutation>("plain", "1/1 and its Secret", |s| {
        s.summary == "1/1 variants ready" && s.secret.is_some()
    })
    .await;

    // The namespace was read: it has no label.
    f.apply::<Mutation>(&mutation("priv", privileged("priv"), one.clone()))
        .await;
    let status = f
        .wait_status::<Mutation>("priv", "refused", |s| {
            s.variants.len() == 1 && s.variants[0].state == VariantState::Invalid
        })
        .await;
    let message = status.variants[0].message.clone().unwrap_or_default();
    assert!(
        message.contains(&format!(
            "namespace {name:?} has no pod-security.kubernetes.io/enforce label"
        )),
        "{message}"
    );
    let namespaces: Api<Namespace> = Api::all(f.ns.client.clone());
    let label = json!({ "metadata": { "labels": {
        "pod-security.kubernetes.io/enforce": "privileged" } } });
    namespaces
        .patch(&name, &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    // Labelling is no event of the Mutation's: it is tried again within a minute.
    wait_for(
        "priv made once labelled",
        Duration::from_secs(100),
        || async {
            let m = f.mutations().get("priv").await.map_err(|e| e.to_string())?;
            match m.status {
                Some(s) if s.summary == "1/1 variants ready" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let log = f.operator.log_text();
    assert!(
        !log.contains("forbidden") && !log.contains("Forbidden"),
        "RBAC denied something:\n{log}"
    );

    // Without get on namespaces, labelled or not, it cannot tell: refused, and said so.
    let roles: Api<Role> = f.ns.api();
    let mut role = roles.get("mutantops").await.unwrap();
    if let Some(rules) = role.rules.as_mut() {
        rules.retain(|r| !r.resources.iter().flatten().any(|r| r == "namespaces"));
    }
    role.metadata.managed_fields = None;
    roles
        .replace("mutantops", &Default::default(), &role)
        .await
        .unwrap();
    f.apply::<Mutation>(&mutation("priv2", privileged("priv2"), one))
        .await;
    let status = f
        .wait_status::<Mutation>("priv2", "refused as unreadable", |s| {
            s.variants.len() == 1 && s.variants[0].state == VariantState::Invalid
        })
        .await;
    let message = status.variants[0].message.clone().unwrap_or_default();
    assert!(
        message.contains(&format!("could not read namespace {name:?}")),
        "{message}"
    );
    assert!(f.deployments().get_opt("priv2-a").await.unwrap().is_none());
    let _ = std::fs::remove_dir_all(&dir);
}
