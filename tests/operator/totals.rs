//! R32, R36: what a Mutation's token may add in all. Defaults used to allow
//! 20 variants x 10 instances = 200 pods per Mutation with no bound on the sum, a NodePort or
//! LoadBalancer Service for every variant a board added, and any label, so that a board's label
//! `db` made Service `<base>-db`, answering that in-cluster name. Now the owner bounds the
//! total of instances (`maxTotalInstances`, default 40), the variants with such a Service
//! (`maxExposedServices`, default 5), says whether the token's variants get a Service at all
//! (`service`), and which labels they may use (`labelPattern`).

use k8s_openapi::api::core::v1::Service;

use super::{api_device::set_device_access, *};

/// A base serving port 80, named http.
fn serving_base(name: &str) -> Value {
    let mut b = base(name);
    b["spec"]["template"]["spec"]["containers"][0]["ports"] =
        json!([{ "name": "http", "containerPort": 80 }]);
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_token_is_held_to_totals_a_label_pattern_and_exposed_services() {
    let f = Fixture::with_api("totals").await;
    let create = json!({
        "name": "web", "deployment": serving_base("web"),
        "variants": [{"label": "main", "instances": 0}],
        "service": {"type": "NodePort"},
        "deviceAccess": {"labelPattern": "board-*", "maxTotalInstances": 3,
                         "maxExposedServices": 3},
    });
    let created = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    let token = f.token("web").await;
    let add = |label: &str, instances: i32| json!({"label": label, "instances": instances});

    // A label outside the owner's pattern: no Service web-db answering for a database.
    f.add_variant("web", &token, &add("db", 0))
        .await
        .assert_refused(403, &["\"db\"", "board-*", "labelPattern"]);
    // The total of instances, whichever variant asks.
    assert_eq!(
        f.add_variant("web", &token, &add("board-1", 2))
            .await
            .status,
        201
    );
    f.add_variant("web", &token, &add("board-2", 2))
        .await
        .assert_refused(
            403,
            &["4 instances in all", "at most 3", "maxTotalInstances"],
        );
    assert_eq!(
        f.add_variant("web", &token, &add("board-2", 1))
            .await
            .status,
        201
    );
    let scale = |to: i32| json!({"instances": to});
    f.call(
        "PATCH",
        "/mutations/web/variants/board-2",
        Some(&token),
        Some(&scale(2)),
    )
    .await
    .assert_refused(403, &["maxTotalInstances"]);
    // Scaling down is always allowed.
    let down = f
        .call(
            "PATCH",
            "/mutations/web/variants/board-1",
            Some(&token),
            Some(&scale(1)),
        )
        .await;
    assert_eq!(down.status, 200, "{down:?}");
    // Three variants have a NodePort Service: a fourth is refused.
    f.add_variant("web", &token, &add("board-3", 0))
        .await
        .assert_refused(403, &["3 variants", "NodePort", "maxExposedServices"]);
    // The admin, the owner, is held to none of it.
    assert_eq!(f.add_variant("web", ADMIN, &add("db", 0)).await.status, 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn the_owner_decides_whether_a_tokens_variants_get_a_service() {
    let f = Fixture::with_api("noservice").await;
    let create = json!({
        "name": "web", "deployment": serving_base("web"),
        "variants": [{"label": "main", "instances": 0}],
        "service": {"type": "NodePort"},
        "deviceAccess": {"service": false},
    });
    let created = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    let token = f.token("web").await;
    // More than maxExposedServices (5) of them: they open no port, so none is refused.
    for i in 0..6 {
        let variant = json!({"label": format!("board-{i}"), "instances": 0});
        let added = f.add_variant("web", &token, &variant).await;
        assert_eq!(added.status, 201, "{added:?}");
    }
    let m = f.mutations().get("web").await.unwrap();
    for v in &m.spec.variants {
        let want = (v.label != "main").then_some(false);
        assert_eq!(v.service, want, "{}", v.label);
    }
    // Their Deployments are made; only the owner's variant has a Service: the status of the
    // reconcile that saw all seven says so (Services are written before it).
    let status = f
        .wait_status::<Mutation>("web", "seven variants, main served", |s| {
            s.variants.len() == 7
                && s.variants
                    .iter()
                    .all(|v| (v.label == "main") == v.service.is_some())
        })
        .await;
    assert_eq!(status.variants.len(), 7);
    let services: Api<Service> = f.ns.api();
    let names: Vec<String> = services
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    assert_eq!(names, ["web-main"]);
}

/// R32, R36: by default a token's variant gets no Service: its label would name one,
/// `<base>-<label>`, that another app of the namespace may expect (`web-db`). The owner opts
/// in with a labelPattern (the names it hands out) or `deviceAccess.service: true`; the
/// owner's own variants are served as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn by_default_a_tokens_variant_claims_no_service_name() {
    let f = Fixture::with_api("claims").await;
    let create = json!({
        "name": "web", "deployment": serving_base("web"),
        "variants": [{"label": "main", "instances": 0}],
        "service": {"type": "ClusterIP"},
    });
    let created = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    let token = f.token("web").await;
    let add = |label: &str| json!({"label": label, "instances": 0});
    assert_eq!(f.add_variant("web", &token, &add("db")).await.status, 201);
    set_device_access(&f, "web", json!({"labelPattern": "board-*"})).await;
    assert_eq!(
        f.add_variant("web", &token, &add("board-1")).await.status,
        201
    );
    set_device_access(&f, "web", json!({"labelPattern": null, "service": true})).await;
    assert_eq!(
        f.add_variant("web", &token, &add("kiosk")).await.status,
        201
    );
    let m = f.mutations().get("web").await.unwrap();
    let stored: Vec<(&str, Option<bool>)> = m
        .spec
        .variants
        .iter()
        .map(|v| (v.label.as_str(), v.service))
        .collect();
    assert_eq!(
        stored,
        [
            ("main", None),
            ("db", Some(false)),
            ("board-1", None),
            ("kiosk", None)
        ]
    );
    f.wait_status::<Mutation>("web", "four variants, three served", |s| {
        s.variants.len() == 4
            && s.variants
                .iter()
                .all(|v| (v.label != "db") == v.service.is_some())
    })
    .await;
    let services: Api<Service> = f.ns.api();
    let mut names: Vec<String> = services
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    names.sort();
    assert_eq!(names, ["web-board-1", "web-kiosk", "web-main"]);
}
