//! Smoke tests of the local control plane itself: they prove that the API server, the
//! controllers that mutantops relies on (Deployment, ReplicaSet, garbage collector), the
//! scheduler and the kwok node are real and working. They stay as regression tests of
//! `scripts/cluster`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a failed step must fail the test"
)]

mod common;

use std::{collections::BTreeSet, time::Duration};

use common::{TestNamespace, from_json, wait_for};
use k8s_openapi::api::{
    apps::v1::{Deployment, ReplicaSet},
    core::v1::{ConfigMap, Pod},
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

fn deployment(name: &str, replicas: i32) -> Deployment {
    from_json(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": name },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": { "containers": [{ "name": "web", "image": "nginx:1.27" }] }
            }
        }
    }))
}

fn is_ready(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    let running = status.and_then(|s| s.phase.as_deref()) == Some("Running");
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    running && ready
}

/// Waits until `app`'s Deployment reports `replicas` ready pods, all Running and Ready on a
/// node, and returns the pods' UIDs.
async fn ready_pods(ns: &TestNamespace, app: &str, replicas: usize) -> BTreeSet<String> {
    let pods: Api<Pod> = ns.api();
    let deployments: Api<Deployment> = ns.api();
    let selector = ListParams::default().labels(&format!("app={app}"));
    wait_for(&format!("{replicas} ready pods of {app}"), WAIT, || async {
        let list = pods.list(&selector).await.map_err(|e| e.to_string())?;
        let live: Vec<&Pod> = list
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        let ready: Vec<&&Pod> = live.iter().filter(|p| is_ready(p)).collect();
        let on_node = ready.iter().all(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some()
        });
        let dep = deployments.get(app).await.map_err(|e| e.to_string())?;
        let dep_ready = dep.status.and_then(|s| s.ready_replicas).unwrap_or(0);
        if live.len() == replicas
            && ready.len() == replicas
            && on_node
            && dep_ready == replicas as i32
        {
            Ok(ready.iter().map(|p| p.uid().unwrap()).collect())
        } else {
            Err(format!(
                "{} pods, {} ready, all on a node: {on_node}, deployment readyReplicas {dep_ready}",
                live.len(),
                ready.len()
            ))
        }
    })
    .await
}

/// A fresh namespace `<prefix>-…` with Deployment `web` of two replicas, once its pods are
/// ready; and their uids.
async fn web_of_two(prefix: &str) -> (TestNamespace, BTreeSet<String>) {
    let ns = TestNamespace::new(prefix).await;
    ns.api::<Deployment>()
        .create(&PostParams::default(), &deployment("web", 2))
        .await
        .unwrap();
    let uids = ready_pods(&ns, "web", 2).await;
    (ns, uids)
}

/// A Deployment gets a ReplicaSet and pods that become Running and Ready on the kwok node:
/// the Deployment and ReplicaSet controllers, the scheduler and kwok all work.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn deployment_gets_ready_pods_on_the_kwok_node() {
    let (ns, uids) = web_of_two("smoke-pods").await;
    assert_eq!(uids.len(), 2);

    let sets = ns
        .api::<ReplicaSet>()
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(sets.items.len(), 1, "one ReplicaSet for one Deployment");
    let owner = &sets.items[0].owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Deployment", "web")
    );

    let pods = ns.api::<Pod>().list(&ListParams::default()).await.unwrap();
    for pod in &pods.items {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap();
        assert!(
            node.starts_with("kwok-"),
            "pod {} runs on {node}",
            pod.name_any()
        );
    }
}

/// Scaling a Deployment keeps its pods and its ReplicaSet: only the count changes.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn scaling_keeps_the_same_pods() {
    let (ns, before) = web_of_two("smoke-scale").await;
    let deployments: Api<Deployment> = ns.api();
    let sets_before = ns.names::<ReplicaSet>().await;

    let scale = json!({ "spec": { "replicas": 3 } });
    deployments
        .patch_scale("web", &PatchParams::default(), &Patch::Merge(&scale))
        .await
        .unwrap();
    let after = ready_pods(&ns, "web", 3).await;

    assert!(
        before.is_subset(&after),
        "pods {before:?} must survive the scale, got {after:?}"
    );
    let sets_after = ns.names::<ReplicaSet>().await;
    assert_eq!(
        sets_before, sets_after,
        "scaling must not create a ReplicaSet"
    );
}

/// Deleting an owner deletes the objects whose ownerReferences name it: the garbage collector
/// runs.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn garbage_collector_deletes_dependents() {
    let ns = TestNamespace::new("smoke-gc").await;
    let maps: Api<ConfigMap> = ns.api();
    let owner = maps
        .create(
            &PostParams::default(),
            &from_json(json!({ "metadata": { "name": "owner" } })),
        )
        .await
        .unwrap();
    let dependent: ConfigMap = from_json(json!({
        "metadata": {
            "name": "dependent",
            "ownerReferences": [{
                "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                "uid": owner.uid().unwrap(), "controller": true, "blockOwnerDeletion": true
            }]
        }
    }));
    maps.create(&PostParams::default(), &dependent)
        .await
        .unwrap();

    maps.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    wait_for(
        "the garbage collector to delete the dependent",
        WAIT,
        || async {
            match maps.get_opt("dependent").await {
                Ok(None) => Ok(()),
                Ok(Some(cm)) => Err(format!(
                    "still there, deletionTimestamp {:?}",
                    cm.metadata.deletion_timestamp
                )),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await;
}

/// Server-side apply reports a conflict when a second field manager sets a field another
/// manager owns, and `force` takes the field over: the API server really implements SSA.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn server_side_apply_reports_conflicts() {
    let ns = TestNamespace::new("smoke-ssa").await;
    let maps: Api<ConfigMap> = ns.api();
    let with = |value: &str| {
        json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "shared" },
                "data": { "key": value } })
    };
    maps.patch(
        "shared",
        &PatchParams::apply("manager-a"),
        &Patch::Apply(with("a")),
    )
    .await
    .unwrap();

    let err = maps
        .patch(
            "shared",
            &PatchParams::apply("manager-b"),
            &Patch::Apply(with("b")),
        )
        .await
        .expect_err("a second manager changing an owned field must conflict");
    match err {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 409, "{status:?}");
            assert!(status.message.contains("manager-a"), "{}", status.message);
        }
        other => panic!("expected a 409 from the API server, got {other}"),
    }
    assert_eq!(maps.get("shared").await.unwrap().data.unwrap()["key"], "a");

    let forced = maps
        .patch(
            "shared",
            &PatchParams::apply("manager-b").force(),
            &Patch::Apply(with("b")),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.unwrap()["key"], "b");
}

/// The harness itself: an integration test started without a reachable cluster fails and names
/// the command that starts one; it never passes silently. Needs no cluster: it runs one of the
/// tests above in a child process of this same test binary, against an address where nothing
/// listens.
#[test]
fn without_a_cluster_an_integration_test_fails_and_says_how_to_start_one() {
    let binary = std::env::current_exe().unwrap();
    let dir = std::env::temp_dir().join(format!("mutantops-harness-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    // Port 1 on loopback: nothing listens there, so the connection is refused at once.
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: none\n  cluster:\n    server: https://127.0.0.1:1\n\
         contexts:\n- name: none\n  context:\n    cluster: none\n    user: none\n\
         current-context: none\nusers:\n- name: none\n  user:\n    token: none\n",
    )
    .unwrap();

    let output = std::process::Command::new(&binary)
        .args([
            "--include-ignored",
            "--exact",
            "garbage_collector_deletes_dependents",
        ])
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !output.status.success(),
        "must fail without a cluster:\n{text}"
    );
    assert!(
        text.contains("1 failed"),
        "the test must have run and failed:\n{text}"
    );
    assert!(
        text.contains("scripts/cluster up"),
        "must say how to start a cluster:\n{text}"
    );
}
