//! R33, R28: namespace editors get Mutations and MutantDeployments as they
//! get Deployments. deploy/operator.yml's ClusterRoles `mutantops-edit` and `mutantops-view`
//! carry the aggregation labels of the built-in `edit`, `admin` and `view`, and the
//! clusterrole-aggregation controller of the test control plane's kube-controller-manager
//! (run with `--controllers='*'`) folds their rules in: users bound in one namespace, acting
//! through impersonation, may then do with the owners there exactly what they may do with
//! Deployments.

use std::collections::BTreeSet;

use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use kube::{Client, api::PostParams};
use serde_json::json;

use super::*;

/// deploy/operator.yml's ClusterRole `name`.
fn deploy_role(name: &str) -> ClusterRole {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/operator.yml");
    let text = std::fs::read_to_string(path).unwrap();
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap()
        .into_iter()
        .find(|doc| doc["kind"] == "ClusterRole" && doc["metadata"]["name"] == name)
        .map(common::from_json)
        .unwrap_or_else(|| panic!("deploy/operator.yml has no ClusterRole {name}"))
}

/// The verbs `role` grants on `resource` of API group `group`.
fn verbs(role: &ClusterRole, group: &str, resource: &str) -> BTreeSet<String> {
    role.rules
        .iter()
        .flatten()
        .filter(|r| r.api_groups.iter().flatten().any(|g| g == group))
        .filter(|r| r.resources.iter().flatten().any(|g| g == resource))
        .flat_map(|r| r.verbs.iter().cloned())
        .collect()
}

/// A client of the test cluster acting as `user` (impersonation, as `kubectl --as` does).
async fn client_as(user: &str) -> Client {
    let mut config = kube::Config::infer().await.unwrap();
    config.auth_info.impersonate = Some(user.to_string());
    Client::try_from(config).unwrap()
}

/// Binds ClusterRole `role` to `user` in the namespace of `ns`.
async fn bind(ns: &TestNamespace, role: &str, user: &str) {
    let binding: RoleBinding = common::from_json(json!({
        "metadata": { "name": format!("{role}-{user}") },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": role },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user }]
    }));
    ns.api::<RoleBinding>()
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}

/// A Mutation named `name` of a plain base, for `create`.
fn new_mutation(name: &str) -> Mutation {
    common::from_json(mutation(name, base("web"), json!([])))
}

/// Whether `result` is the API server's 403.
fn forbidden<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> bool {
    matches!(result, Err(kube::Error::Api(s)) if s.code == 403)
}

/// R33: the aggregated roles grant on the owners what the built-in `edit` and `view` grant on
/// Deployments; once folded in, a user bound to `edit` in one namespace creates, lists and
/// deletes Mutations there and may not create one in another namespace, a user bound to
/// `view` lists them but may not create one, and a user bound to `admin` creates
/// MutantDeployments.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn namespace_editors_get_the_owners_as_they_get_deployments() {
    let ns = TestNamespace::new("pss-editors").await;
    let elsewhere = TestNamespace::new("pss-editors-other").await;
    common::install_crds(&ns.client).await;

    // What deploy/ grants is what the built-in roles grant on Deployments.
    let roles: Api<ClusterRole> = Api::all(ns.client.clone());
    let (edit, view) = (deploy_role("mutantops-edit"), deploy_role("mutantops-view"));
    let builtin_edit = roles.get("edit").await.unwrap();
    let builtin_view = roles.get("view").await.unwrap();
    let for_deployments = verbs(&builtin_edit, "apps", "deployments");
    assert!(for_deployments.contains("create"), "{for_deployments:?}");
    for resource in ["mutations", "mutantdeployments"] {
        assert_eq!(verbs(&edit, "neiam.org", resource), for_deployments);
        assert_eq!(
            verbs(&view, "neiam.org", resource),
            verbs(&builtin_view, "apps", "deployments")
        );
    }

    // Installed under names of this test's own (other tests install deploy/ too), labels kept.
    let mut guards = Vec::new();
    for mut role in [edit, view] {
        let name = format!("{}-{}", ns.name, role.metadata.name.unwrap_or_default());
        guards.push(common::RemoveOnDrop::<ClusterRole>::new(&name));
        role.metadata.name = Some(name);
        roles.create(&PostParams::default(), &role).await.unwrap();
    }

    let suffix = common::random_suffix();
    let (editor, viewer, admin) = (
        format!("editor-{suffix}"),
        format!("viewer-{suffix}"),
        format!("admin-{suffix}"),
    );
    bind(&ns, "edit", &editor).await;
    bind(&ns, "view", &viewer).await;
    bind(&ns, "admin", &admin).await;

    // The editor: the rules are folded into `edit` within moments.
    let as_editor = client_as(&editor).await;
    let mutations: Api<Mutation> = Api::namespaced(as_editor.clone(), &ns.name);
    wait_for("the editor to create a Mutation", CONVERGE, || async {
        mutations
            .create(&PostParams::default(), &new_mutation("by-editor"))
            .await
            .map_err(|e| e.to_string())
    })
    .await;
    let listed = mutations.list(&Default::default()).await.unwrap();
    assert_eq!(common::names(&listed.items), ["by-editor"]);
    mutations
        .delete("by-editor", &Default::default())
        .await
        .unwrap();
    let there: Api<Mutation> = Api::namespaced(as_editor, &elsewhere.name);
    let other = there
        .create(&PostParams::default(), &new_mutation("by-editor"))
        .await;
    assert!(forbidden(other), "another namespace");

    // The viewer lists, and may not create.
    let as_viewer: Api<Mutation> = Api::namespaced(client_as(&viewer).await, &ns.name);
    wait_for("the viewer to list Mutations", CONVERGE, || async {
        as_viewer
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())
    })
    .await;
    let created = as_viewer
        .create(&PostParams::default(), &new_mutation("by-viewer"))
        .await;
    assert!(forbidden(created), "a viewer creates nothing");

    // The namespace's admin creates a MutantDeployment.
    let as_admin: Api<MutantDeployment> = Api::namespaced(client_as(&admin).await, &ns.name);
    let md: MutantDeployment =
        common::from_json(mutant_deployment("by-admin", base("web"), json!([])));
    wait_for(
        "the admin to create a MutantDeployment",
        CONVERGE,
        || async {
            as_admin
                .create(&PostParams::default(), &md)
                .await
                .map_err(|e| e.to_string())
        },
    )
    .await;
    drop(guards);
}
