//! docs/api.md's curl walk-through, run as written, and PATCH keeping the running pods.

use std::collections::BTreeSet;

use k8s_openapi::api::{apps::v1::ReplicaSet, core::v1::Pod};
use kube::api::ListParams;
use serde_json::json;

use super::*;

/// R19–R23: docs/api.md's walk-through (create web with the admin token; add beta with web's
/// own token; PATCH to 4; DELETE; list) works as written, with real curl, jq and kubectl.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn the_api_walkthrough_works_as_written() {
    let f = Fixture::with_api("api-walk").await;
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let kubectl_dir = std::path::Path::new(&kubectl)
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let path = format!(
        "{kubectl_dir}:{}",
        std::env::var("PATH").unwrap_or_default()
    );
    let output = tokio::process::Command::new("bash")
        .args([
            "-euo",
            "pipefail",
            "-c",
            &markdown_block("docs/api.md", "<!-- api-walkthrough -->", "sh"),
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("API", format!("http://127.0.0.1:{}", f.operator.api_port))
        .env("NAMESPACE", &f.ns.name)
        .env("TOKEN", ADMIN)
        .env("PATH", path)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the walk-through failed:\n{stdout}\n{stderr}"
    );

    // Every curl printed one JSON document (DELETE prints nothing): create, add, patch, two lists.
    let docs: Vec<Value> = serde_json::Deserializer::from_str(&stdout)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("output is not JSON documents ({e}):\n{stdout}"));
    assert_eq!(docs.len(), 5, "{stdout}");
    assert_eq!(docs[0]["name"], "web");
    assert_eq!(docs[0]["secret"], "web-secret");
    assert_eq!(
        docs[1],
        json!({"label": "beta", "env": {"FEATURE_X": "on"}, "instances": 2,
                               "readOnly": false, "status": null})
    );
    assert_eq!(docs[2]["instances"], 4);
    assert_eq!(docs[3], json!([]), "beta was deleted");
    assert_eq!(docs[4].as_array().unwrap().len(), 1);
    assert_eq!(docs[4][0]["name"], "web");
    f.wait_gone("web-beta").await;
}

/// R21: PATCH {instances} changes only the replica count: same ReplicaSet, same pods. The
/// token scales a variant it added itself (R32: the token's variants are its to change).
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn patch_scales_in_place() {
    let f = Fixture::with_api("api-scale").await;
    let create = json!({"name": "web", "deployment": base("web"), "variants": []});
    let reply = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    assert_eq!(reply.status, 201, "{reply:?}");
    let token = f.token("web").await;
    let beta = json!({"label": "beta", "env": {"FEATURE_X": "on"}, "instances": 2});
    let added = f.add_variant("web", &token, &beta).await;
    assert_eq!(added.status, 201, "{added:?}");
    f.wait_deployment("web-beta", "2 ready", |d| ready(d, 2))
        .await;
    let pods: Api<Pod> = f.ns.api();
    let selector = ListParams::default().labels("mutantops.neiam.org/variant=beta");
    let uids = |list: Vec<Pod>| {
        list.iter()
            .map(|p| p.uid().unwrap())
            .collect::<BTreeSet<_>>()
    };
    let before = uids(pods.list(&selector).await.unwrap().items);
    let sets_before = f.ns.names::<ReplicaSet>().await;

    let reply = f
        .call(
            "PATCH",
            "/mutations/web/variants/beta",
            Some(&token),
            Some(&json!({"instances": 4})),
        )
        .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.json()["instances"], 4);
    f.wait_deployment("web-beta", "4 ready", |d| ready(d, 4))
        .await;

    let after = uids(pods.list(&selector).await.unwrap().items);
    assert_eq!(after.len(), 4);
    assert!(
        before.is_subset(&after),
        "the running pods are kept: {before:?} {after:?}"
    );
    let sets_after = f.ns.names::<ReplicaSet>().await;
    assert_eq!(sets_before, sets_after, "no new ReplicaSet");
}
