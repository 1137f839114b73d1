//! R46, R10, R13: objects a user can store but nobody should (a base nested 200 levels
//! deep, a base of the wrong JSON types), made behind the operator's back as kubectl would,
//! and a base of 1.4 MiB leave every other owner reconciling and the API listing, also across
//! a restart; each bad object is reported in its own status. Before the client's depth guard
//! (`connect::depth`), the deep one stopped the Mutation watch for every namespace.

use kube::{Client, api::PostParams};
use serde_json::{Value, json};

use super::*;

/// A client with the operator's own guard against deep JSON: the test's plain client could not
/// decode the deep object either.
async fn guarded() -> Client {
    mutantops::connect::client("mutantops-tests")
        .await
        .unwrap_or_else(|e| panic!("{}\n{e}", common::NO_CLUSTER))
}

/// A base whose container carries `x`: arrays nested `levels` deep.
fn nested_base(name: &str, levels: usize) -> Value {
    let mut inner = json!([]);
    for _ in 1..levels {
        inner = json!([inner]);
    }
    let mut base = base(name);
    base["spec"]["template"]["spec"]["containers"][0]["x"] = inner;
    base
}

/// Waits until Mutation `name`'s status satisfies `check` (read through `api`).
async fn wait_mutation(
    api: &Api<Mutation>,
    name: &str,
    what: &str,
    check: impl Fn(&OwnerStatus) -> bool,
) -> OwnerStatus {
    wait_for(&format!("{name}: {what}"), CONVERGE, || async {
        let m = api.get(name).await.map_err(|e| e.to_string())?;
        match m.status {
            Some(status) if check(&status) => Ok(status),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

/// The names the API lists in the fixture's namespace.
async fn listed(f: &Fixture) -> Vec<String> {
    let reply = f.call("GET", "/mutations", Some(ADMIN), None).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let mut names = reply.each("name");
    names.sort();
    names
}

/// Adds variant `label` to Mutation `name` through the API and waits for it to be Ready.
async fn add_variant(f: &Fixture, mutations: &Api<Mutation>, name: &str, label: &str) {
    let body = json!({ "label": label, "instances": 0 });
    let path = format!("/mutations/{name}/variants");
    let reply = f.call("POST", &path, Some(ADMIN), Some(&body)).await;
    assert_eq!(reply.status, 201, "{reply:?}");
    wait_mutation(mutations, name, &format!("{label} ready"), |s| {
        s.variants
            .iter()
            .any(|v| v.label == label && v.state == VariantState::Ready)
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn poison_objects_leave_the_others_reconciling() {
    let mut f = Fixture::with_api("ctl-poison").await;
    let client = guarded().await;
    let mutations: Api<Mutation> = Api::namespaced(client.clone(), &f.ns.name);
    let variants = json!([{ "label": "a", "instances": 0 }]);
    f.apply::<Mutation>(&mutation("good", base("good"), variants.clone()))
        .await;
    wait_mutation(&mutations, "good", "ready", |s| {
        s.summary == "1/1 variants ready"
    })
    .await;

    // Behind the operator's back.
    let mut wrong = base("wrong");
    wrong["spec"]["replicas"] = json!("three");
    wrong["spec"]["template"]["spec"]["containers"][0]["env"] = json!({ "A": "1" });
    let mut huge = base("huge");
    huge["spec"]["template"]["spec"]["containers"][0]["env"] =
        json!([{ "name": "BIG", "value": "x".repeat(1_400 * 1024) }]);
    let poison = [
        ("deep", nested_base("deep", 200)),
        ("wrong", wrong),
        ("huge", huge),
    ];
    for (name, deployment) in &poison {
        let manifest: Mutation =
            common::from_json(mutation(name, deployment.clone(), variants.clone()));
        mutations
            .create(&PostParams::default(), &manifest)
            .await
            .unwrap_or_else(|e| panic!("creating {name}: {e}"));
    }

    // Each is reported in its own status.
    let deep = wait_mutation(&mutations, "deep", "reported", |s| s.message.is_some()).await;
    let message = deep.message.as_deref().unwrap_or_default();
    assert!(message.contains("deeper than 64 levels"), "{deep:?}");
    assert_eq!(deep.conditions[0].reason, "InvalidBase", "{deep:?}");
    // Mistyped fields are the API server's to name (R10): the apply it refuses has the base
    // probed alone, and the status carries the server's words for the field.
    let wrong = wait_mutation(&mutations, "wrong", "reported", |s| s.message.is_some()).await;
    let message = wrong.message.as_deref().unwrap_or_default();
    assert!(
        message.starts_with("invalid base deployment: ")
            && message.contains("spec.template.spec.containers.env"),
        "{wrong:?}"
    );
    assert_eq!(wrong.conditions[0].reason, "InvalidBase", "{wrong:?}");
    // 1.4 MiB is within what the API server stores: the huge base is valid, and runs.
    wait_mutation(&mutations, "huge", "ready", |s| {
        s.summary == "1/1 variants ready"
    })
    .await;
    let deep_md: MutantDeployment = common::from_json(mutant_deployment(
        "deep-md",
        nested_base("deepmd", 200),
        json!([{ "label": "a", "instances": 0 }]),
    ));
    let mutant_deployments: Api<MutantDeployment> = Api::namespaced(client.clone(), &f.ns.name);
    mutant_deployments
        .create(&PostParams::default(), &deep_md)
        .await
        .unwrap_or_else(|e| panic!("creating deep-md: {e}"));
    wait_for("deep-md: reported", CONVERGE, || async {
        let md = mutant_deployments
            .get("deep-md")
            .await
            .map_err(|e| e.to_string())?;
        match md.status.and_then(|s| s.message) {
            Some(m) if m.contains("deeper than 64 levels") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // The others reconcile, and the API lists everything.
    add_variant(&f, &mutations, "good", "b").await;
    let md_name = "md";
    f.apply::<MutantDeployment>(&mutant_deployment(
        md_name,
        base("mdweb"),
        json!([{ "label": "a", "instances": 0 }]),
    ))
    .await;
    f.wait_status::<MutantDeployment>(md_name, "ready", |s| s.summary == "1/1 variants ready")
        .await;
    assert_eq!(listed(&f).await, ["deep", "good", "huge", "wrong"]);

    // A restarted operator lists them all first: it still serves and reconciles.
    f.operator = common::Operator::start_with(&f.ns.name, &[("MUTANT_API_TOKEN", ADMIN)]);
    wait_for("the restarted operator to serve", CONVERGE, || async {
        match tokio::net::TcpStream::connect(("127.0.0.1", f.operator.api_port)).await {
            Err(e) => Err(e.to_string()),
            Ok(_) => {
                let reply = f.call("GET", "/mutations", Some(ADMIN), None).await;
                (reply.status == 200)
                    .then_some(())
                    .ok_or(format!("{reply:?}"))
            }
        }
    })
    .await;
    assert_eq!(listed(&f).await, ["deep", "good", "huge", "wrong"]);
    add_variant(&f, &mutations, "good", "c").await;
    let log = f.operator.log_text();
    assert!(!log.contains("panicked"), "{log}");
}
