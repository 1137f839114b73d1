//! R41, R32: what a Mutation's token may set is derived from the base, on the control plane:
//! a name that reaches a command line through another env entry or a probe's `exec`, names of
//! the start-up families that no list spells out, the base's own literal and `envFrom`
//! variables. Each was a 201 before the rule was derived from the base.

use serde_json::json;

use super::{api_device::set_device_access, *};

/// Creates Mutation `web` of base `b` with no variants; its token.
async fn mutation_of(f: &Fixture, b: Value) -> String {
    let create = json!({"name": "web", "deployment": b, "variants": []});
    let created = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    f.token("web").await
}

/// R41: `TITLE` reaches the command line through `SNAP_ARGS`, and `PROBE_ARG` through the
/// readiness probe's `exec`: both 403 naming the way; a base changed later to pass a token's
/// name through an entry holds that variant back as Invalid.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_name_reaching_a_command_through_env_or_a_probe_is_refused() {
    let f = Fixture::with_api("rights-closure").await;
    let mut b = base("web");
    let app = &mut b["spec"]["template"]["spec"]["containers"][0];
    app["command"] = json!(["sh", "-c", "exec snap $(SNAP_ARGS)"]);
    app["env"] = json!([{"name": "TITLE", "value": "hello"},
                        {"name": "SNAP_ARGS", "value": "--title=$(TITLE)"}]);
    app["readinessProbe"] = json!({"exec": {"command": ["sh", "-c", "test -n $(PROBE_ARG)"]}});
    let token = mutation_of(&f, b.clone()).await;

    let inj = json!({"label": "inj", "instances": 0, "env": {"TITLE": "x; echo INJECTED; id"}});
    let r = f.add_variant("web", &token, &inj).await;
    r.assert_refused(
        403,
        &["\"TITLE\"", "to env SNAP_ARGS", "reaches its command"],
    );
    let probe = json!({"label": "probe", "instances": 0, "env": {"PROBE_ARG": "x; id"}});
    let r = f.add_variant("web", &token, &probe).await;
    r.assert_refused(403, &["\"PROBE_ARG\"", "readinessProbe.exec.command"]);
    assert_eq!(f.spec_labels("web").await, Vec::<String>::new());

    // The owner lists TITLE: the token may set it (its command treats it as data).
    set_device_access(&f, "web", json!({"env": ["TITLE", "SCREEN"]})).await;
    assert_eq!(f.add_variant("web", &token, &inj).await.status, 201);
    let fine = json!({"label": "fine", "instances": 0, "env": {"SCREEN": "portrait"}});
    assert_eq!(f.add_variant("web", &token, &fine).await.status, 201);
    f.wait_deployment("web-fine", "created", |_| true).await;

    // The base passes SCREEN through SNAP_ARGS later, and the owner unlists it: the token's
    // variant is held back, naming the way.
    b["spec"]["template"]["spec"]["containers"][0]["env"][1]["value"] =
        json!("--title=$(TITLE) --screen=$(SCREEN)");
    let spec = json!({"spec": {"deployment": b, "deviceAccess": {"env": ["TITLE"]}}});
    f.mutations()
        .patch("web", &PatchParams::default(), &Patch::Merge(spec))
        .await
        .unwrap();
    f.wait_status::<Mutation>("web", "the token's variant held back", |s| {
        s.variants.iter().any(|v| {
            v.label == "fine"
                && v.state == VariantState::Invalid
                && v.message
                    .as_deref()
                    .is_some_and(|m| m.contains("$(SCREEN) to env SNAP_ARGS"))
        })
    })
    .await;
}

/// R32: names of the start-up families that no list of the code spells out are refused,
/// each naming its family; the owner's list opens one.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn start_up_families_are_refused_by_pattern() {
    let f = Fixture::with_api("rights-families").await;
    let token = mutation_of(&f, base("web")).await;
    for (name, family) in [
        ("JAVA_OPTS_APPEND", "launcher"),
        ("KAFKA_OPTS", "launcher"),
        ("KAFKA_HEAP_OPTS", "launcher"),
        ("LS_JAVA_OPTS", "launcher"),
        ("SOLR_OPTS", "launcher"),
        ("HADOOP_OPTS", "launcher"),
        ("SPARK_SUBMIT_OPTS", "launcher"),
        ("JAVA_OPTIONS", "launcher"),
        ("ANT_OPTS", "launcher"),
        ("PIP_INDEX_URL", "package"),
        ("UV_INDEX_URL", "package"),
        ("YARN_REGISTRY", "package"),
        ("BUNDLE_GEMFILE", "package"),
        ("grpc_proxy", "proxies"),
        ("GODEBUG", "debug"),
    ] {
        let body =
            json!({"label": "x", "instances": 0, "env": {name: "-XX:OnOutOfMemoryError=id"}});
        let r = f.add_variant("web", &token, &body).await;
        r.assert_refused(
            403,
            &[&format!("{name:?}"), family, "spec.deviceAccess.env"],
        );
    }
    assert_eq!(f.spec_labels("web").await, Vec::<String>::new());
    set_device_access(&f, "web", json!({"env": ["KAFKA_HEAP_OPTS"]})).await;
    let heap = json!({"label": "heap", "instances": 0, "env": {"KAFKA_HEAP_OPTS": "-Xmx64m"}});
    assert_eq!(f.add_variant("web", &token, &heap).await.status, 201);
}

/// R32: the base's literal variables and what its `envFrom` may hold are the owner's: a
/// token replaces them only once the owner lists them; a name the base does not have is the
/// token's, as in the walk-through.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn the_bases_own_variables_are_the_owners_to_open() {
    let f = Fixture::with_api("rights-base-env").await;
    let mut b = base("web");
    let app = &mut b["spec"]["template"]["spec"]["containers"][0];
    app["env"] = json!([{"name": "UPSTREAM", "value": "http://api.internal"}]);
    app["envFrom"] = json!([{"configMapRef": {"name": "settings", "optional": true},
                             "prefix": "CFG_"}]);
    let token = mutation_of(&f, b).await;
    let add = async |label: &str, env: Value| {
        let body = json!({"label": label, "instances": 0, "env": env});
        f.add_variant("web", &token, &body).await
    };
    add("a", json!({"upstream": "http://evil"}))
        .await
        .assert_refused(403, &["\"upstream\"", "\"UPSTREAM\"", "\"app\""]);
    add("b", json!({"CFG_COLOUR": "red"})).await.assert_refused(
        403,
        &["\"CFG_COLOUR\"", "ConfigMap \"settings\"", "envFrom"],
    );
    assert_eq!(add("c", json!({"FEATURE_X": "on"})).await.status, 201);
    set_device_access(&f, "web", json!({"env": ["UPSTREAM", "FEATURE_X"]})).await;
    assert_eq!(
        add("d", json!({"UPSTREAM": "http://other"})).await.status,
        201
    );
    assert_eq!(f.spec_labels("web").await, ["c", "d"]);
}
