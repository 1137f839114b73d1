//! The step machine's requests as the API server sees them ([`drive`] with the Deployments'
//! and the Services' [`Writes`]), against a scripted server: which requests go out, in which
//! order, and what each answer comes to (R9, R10, R35, R36).

use std::sync::Arc;

use kube::Api;
use serde_json::{Value, json};

use super::super::{
    deployments::DeploymentWrites,
    services::ServiceWrites,
    tests::scripted::{Server, status},
};
use super::*;
use crate::{
    crd::{OwnerKind, ServiceSpec, fixtures::variant},
    variant::{Base, DeploymentWire, ObservedDeployment, ObservedService, Planned},
};

fn owner() -> Owner {
    Owner {
        kind: OwnerKind::Mutation,
        name: "snap".into(),
        namespace: "team".into(),
        uid: "uid-1".into(),
    }
}

fn base() -> Base {
    let base = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "web:1",
                    "ports": [{"name": "http", "containerPort": 80}]}]}
            }
        }
    });
    Base::parse(&base).unwrap_or_else(|e| panic!("base should parse: {e}"))
}

/// `object` as the API server answers it: with a uid, a resourceVersion, and the operator's
/// `Update` entry when `posted` (created with a POST, never applied).
fn served(object: &Value, posted: bool) -> Value {
    let mut v = object.clone();
    v["metadata"]["uid"] = json!("server-uid");
    v["metadata"]["resourceVersion"] = json!("7");
    let operation = if posted { "Update" } else { "Apply" };
    v["metadata"]["managedFields"] = json!([{"manager": FIELD_MANAGER, "operation": operation}]);
    v
}

fn decoded<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
}

const SERVICES: &str = "/api/v1/namespaces/team/services";
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/team/deployments";
const JSON: &str = "[application/json]";

/// That `server` was asked two things: an apply of `web-a` in `collection`, then a dry run.
fn applied_then_dry_run(server: &Server, collection: &str) {
    let asked = server.asked();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(
        asked[0].starts_with(&format!("PATCH {collection}/web-a?")),
        "{asked:?}"
    );
    assert!(
        asked[1].ends_with(&format!("&dryRun=All {JSON}")),
        "{asked:?}"
    );
}

/// Variant `a`'s Service as built, and as an older spec had it (a NodePort).
fn service_and_older(o: &Owner) -> (Value, Value) {
    let desired = variant::build_service(&base(), o, "a", &ServiceSpec::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let mut older = desired.clone();
    older["spec"]["type"] = json!("NodePort");
    (desired, older)
}

// R9, R36: a Service the cache does not know is POSTed; a taken name is looked up, and one of
// this owner's made by a POST is handed over to server-side apply, then applied.
#[tokio::test]
async fn a_taken_services_name_is_looked_up_handed_over_and_applied() {
    let o = owner();
    let (desired, older) = service_and_older(&o);
    let (server, client) = Server::new(vec![
        status(409, "AlreadyExists", json!([])),
        (200, served(&older, true)),
        (200, json!({})),
        (200, served(&desired, false)),
    ]);
    let api: Api<ObservedService> = Api::namespaced(client.clone(), "team");
    let writes = ServiceWrites {
        api: &api,
        owner: &o,
        name: "web-a",
        desired: &desired,
    };
    let driven = drive(&client, &writes, None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(driven.done, Done::Reported);
    assert!(!driven.created, "the POST found the name taken");
    assert_eq!(
        server.asked(),
        [
            format!("POST {SERVICES}?fieldManager={FIELD_MANAGER}&fieldValidation=Strict {JSON}"),
            format!("GET {SERVICES}/web-a []"),
            format!(
                "PATCH {SERVICES}/web-a?fieldManager={FIELD_MANAGER} [application/json-patch+json]"
            ),
            format!(
                "PATCH {SERVICES}/web-a?&force=true&fieldManager={FIELD_MANAGER} \
                 [application/apply-patch+yaml]"
            ),
        ]
    );
    assert!(server.all_answered());
    let current = driven
        .current
        .unwrap_or_else(|| panic!("the applied Service"));
    assert_eq!(current.created_entry(), None);
}

// R9, R36: someone else's Service of that name is looked up and left alone: no write.
#[tokio::test]
async fn someone_elses_service_is_left_alone() {
    let o = owner();
    let desired = variant::build_service(&base(), &o, "a", &ServiceSpec::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let mut theirs = served(&desired, false);
    theirs["metadata"]["ownerReferences"] = Value::Null;
    let (server, client) = Server::new(vec![(200, theirs.clone())]);
    let api: Api<ObservedService> = Api::namespaced(client.clone(), "team");
    let writes = ServiceWrites {
        api: &api,
        owner: &o,
        name: "web-a",
        desired: &desired,
    };
    let cached = Arc::new(decoded::<ObservedService>(theirs));
    let driven = drive(&client, &writes, Some(cached))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let Done::Conflict(message) = driven.done else {
        panic!("a Conflict, not {:?}", driven.done)
    };
    assert!(message.contains("Service \"web-a\""), "{message}");
    assert_eq!(server.asked(), [format!("GET {SERVICES}/web-a []")]);
}

// R10, R36: an apply answered 500 naming nothing is dry-run as a create; the dry run names
// the field, and the Service is the variant's alone: no probe of the base.
#[tokio::test]
async fn a_services_500_is_dry_run_and_its_refusal_is_its_own() {
    let o = owner();
    let (desired, older) = service_and_older(&o);
    let field = json!([{"field": "spec.ports[0].port", "message": "bad"}]);
    let (server, client) = Server::new(vec![
        status(500, "InternalError", json!([])),
        status(422, "Invalid", field),
    ]);
    let api: Api<ObservedService> = Api::namespaced(client.clone(), "team");
    let writes = ServiceWrites {
        api: &api,
        owner: &o,
        name: "web-a",
        desired: &desired,
    };
    let cached = Arc::new(decoded::<ObservedService>(served(&older, false)));
    let driven = drive(&client, &writes, Some(cached))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        driven.done,
        Done::Refused {
            message: "the server says Invalid".into(),
            denied: false
        }
    );
    applied_then_dry_run(&server, SERVICES);
}

/// The variant `a` of the base, planned.
fn planned(o: &Owner) -> Planned {
    variant::plan(&base(), o, &[variant("a", &[("MODE", "x")], 2)])
        .pop()
        .unwrap_or_else(|| panic!("one variant planned"))
}

// A POST's 5xx is the server's failure, returned for the reconcile to retry: no dry run, no
// probe, nothing reported of the variant.
#[tokio::test]
async fn a_deployments_failed_post_is_retried_not_probed() {
    let o = owner();
    let p = planned(&o);
    let (server, client) = Server::new(vec![status(503, "ServiceUnavailable", json!([]))]);
    let api: Api<DeploymentWire> = Api::namespaced(client.clone(), "team");
    let (b, o2) = (base(), o.clone());
    let writes = DeploymentWrites {
        api: &api,
        owner: &o2,
        base: &b,
        planned: &p,
    };
    let Err(err) = drive(&client, &writes, None).await else {
        panic!("a 503 of the POST is a failure")
    };
    assert!(format!("{err:?}").contains("ServiceUnavailable"), "{err:?}");
    assert_eq!(
        server.asked(),
        [format!(
            "POST {DEPLOYMENTS}?fieldManager={FIELD_MANAGER}&fieldValidation=Strict {JSON}"
        )]
    );
}

// R10: a Deployment the server refuses as malformed has the base alone dry-run: refused too,
// the base is at fault; accepted, only this variant is.
#[tokio::test]
async fn a_malformed_deployment_asks_whether_the_base_is_at_fault() {
    let o = owner();
    let p = planned(&o);
    let Planned::Apply { object, .. } = &p else {
        panic!("the variant is valid")
    };
    let mut older = object.clone();
    older["spec"]["replicas"] = json!(5);
    let field = || json!([{"field": "spec.template", "message": "bad"}]);
    for (probe, done) in [
        (
            (201, json!({})),
            Done::Refused {
                message: "the server says Invalid".into(),
                denied: false,
            },
        ),
        (
            status(422, "Invalid", field()),
            Done::BaseRejected("the server says Invalid".into()),
        ),
    ] {
        let (server, client) = Server::new(vec![status(422, "Invalid", field()), probe]);
        let api: Api<DeploymentWire> = Api::namespaced(client.clone(), "team");
        let b = base();
        let writes = DeploymentWrites {
            api: &api,
            owner: &o,
            base: &b,
            planned: &p,
        };
        let cached = Arc::new(decoded::<DeploymentWire>(served(&older, false)).into_observed());
        let driven = drive::<DeploymentWrites<'_>>(&client, &writes, Some(cached))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(driven.done, done);
        applied_then_dry_run(&server, DEPLOYMENTS);
        let _: Option<Arc<ObservedDeployment>> = driven.current;
    }
}
