//! R24, R32, R35, R36: an API answer that is 400 (or the server's 403) whenever
//! the write would fail at the API server. A variant whose env, copied into each of the base's
//! containers, makes a Deployment larger than etcd stores used to get 201 (the dry run does not
//! reach etcd) and then never be made; an added variant's Service was neither built nor
//! dry-run, so a base named `web.v2` (no Service name) or a quota of 0 NodePorts gave 201 and
//! then an Invalid variant.

use k8s_openapi::api::core::v1::ResourceQuota;
use kube::api::PostParams;

use super::*;

/// A base of `containers` containers, serving port 80 from the first.
fn wide_base(name: &str, containers: usize) -> Value {
    let mut b = base(name);
    let list: Vec<Value> = (0..containers)
        .map(|i| {
            json!({"name": format!("c{i}"), "image": "registry.example/app:1",
                        "ports": if i == 0 { json!([{"name": "http", "containerPort": 80}]) }
                                 else { json!([]) }})
        })
        .collect();
    b["spec"]["template"]["spec"]["containers"] = json!(list);
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_deployment_too_large_to_store_is_refused_up_front() {
    let f = Fixture::with_api("oversized").await;
    let create = json!({"name": "web", "deployment": wide_base("web", 4), "variants": []});
    let created = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    // 64 values of 8000 bytes: 512 kB sent, 2 MB once in each of the four containers.
    let env: serde_json::Map<String, Value> = (0..64)
        .map(|i| (format!("FILL_{i}"), json!("f".repeat(8000))))
        .collect();
    let big = json!({"label": "big", "env": env, "instances": 0});
    f.add_variant("web", ADMIN, &big)
        .await
        .assert_refused(400, &["\"big\"", "bytes of JSON", "containers"]);
    assert!(f.spec_labels("web").await.is_empty());
    // A quarter of it fits.
    let env: serde_json::Map<String, Value> = (0..16)
        .map(|i| (format!("FILL_{i}"), json!("f".repeat(8000))))
        .collect();
    let fits = json!({"label": "fits", "env": env, "instances": 0});
    assert_eq!(f.add_variant("web", ADMIN, &fits).await.status, 201);
    f.wait_deployment("web-fits", "created", |_| true).await;

    // Applied with kubectl (a MutantDeployment from git): the variant is Invalid with the
    // size, and the rest converges.
    let env: serde_json::Map<String, Value> = (0..64)
        .map(|i| (format!("FILL_{i}"), json!("f".repeat(8000))))
        .collect();
    let md = mutant_deployment(
        "wide",
        wide_base("wide", 4),
        json!([{"label": "big", "env": env, "instances": 0}, {"label": "small", "instances": 0}]),
    );
    f.apply::<MutantDeployment>(&md).await;
    let status = f
        .wait_status::<MutantDeployment>("wide", "big Invalid, small made", |s| {
            let state = |l: &str| s.variants.iter().find(|v| v.label == l).map(|v| v.state);
            state("big") == Some(VariantState::Invalid)
                && state("small").is_some_and(|st| st != VariantState::Invalid)
        })
        .await;
    let big = status.variants.iter().find(|v| v.label == "big").unwrap();
    assert!(
        big.message
            .as_deref()
            .unwrap_or_default()
            .contains("bytes of JSON"),
        "{big:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn an_added_variants_service_is_built_and_dry_run() {
    let f = Fixture::with_api("dryservice").await;
    // A base whose name makes no Service name (a dot).
    let dotted = json!({"name": "dotted", "deployment": wide_base("web.v2", 1),
                        "variants": [], "service": {"type": "ClusterIP"},
                        "deviceAccess": {"service": true}});
    let created = f
        .call("POST", "/mutations", Some(ADMIN), Some(&dotted))
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    let token = f.token("dotted").await;
    f.add_variant("dotted", &token, &json!({"label": "a", "instances": 0}))
        .await
        .assert_refused(400, &["\"a\"", "Service", "DNS-1035"]);
    assert!(f.spec_labels("dotted").await.is_empty());

    // A quota of no NodePorts: the Service's dry run says 403, and so does the API.
    let quotas: Api<ResourceQuota> = f.ns.api();
    let quota = serde_json::from_value(json!({
        "metadata": {"name": "no-node-ports"},
        "spec": {"hard": {"services.nodeports": "0"}}
    }))
    .unwrap();
    quotas.create(&PostParams::default(), &quota).await.unwrap();
    let exposed = json!({"name": "exposed", "deployment": wide_base("exposed", 1),
                         "variants": [], "service": {"type": "NodePort"},
                         "deviceAccess": {"service": true}});
    let created = f
        .call("POST", "/mutations", Some(ADMIN), Some(&exposed))
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    // Once the quota controller has counted what is used, the quota refuses by its count.
    wait_for("the quota's status", CONVERGE, || async {
        let quota = quotas
            .get("no-node-ports")
            .await
            .map_err(|e| e.to_string())?;
        quota
            .status
            .and_then(|s| s.hard)
            .filter(|hard| hard.contains_key("services.nodeports"))
            .map(|_| ())
            .ok_or("not yet".to_string())
    })
    .await;
    f.add_variant("exposed", ADMIN, &json!({"label": "a", "instances": 0}))
        .await
        .assert_refused(403, &["\"a\"", "its Service", "quota"]);
    assert!(f.spec_labels("exposed").await.is_empty());
}
