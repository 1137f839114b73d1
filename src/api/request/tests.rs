//! A request's way through the API, without a cluster: what it looks up.

use std::sync::atomic::Ordering;

use hyper::header::{AUTHORIZATION, HeaderValue};
use k8s_openapi::{
    ByteString, api::core::v1::Secret, apimachinery::pkg::apis::meta::v1::OwnerReference,
};
use kube::{api::ObjectMeta, runtime::watcher};

use super::*;
use crate::{
    api::{auth::Auth, namespaces::Served, poll, routes::Resolved},
    crd::{DevicesSpec, SleepSpec, fixtures},
    http::ServerConfig,
    variant::devices::{DeviceRecord, Registry, token_hash},
};

const DEVICE_TOKEN: &str = "token-of-device-d";

/// Metadata of a Secret `name` in `ns` controlled by Mutation `m` of uid `uid`.
fn owned(name: &str, uid: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some("ns".into()),
        owner_references: Some(vec![OwnerReference {
            api_version: "neiam.org/v1".into(),
            kind: "Mutation".into(),
            name: "m".into(),
            uid: uid.into(),
            controller: Some(true),
            ..OwnerReference::default()
        }]),
        ..ObjectMeta::default()
    }
}

/// A client whose every request fails: nothing here may need the API server to answer.
fn no_server() -> kube::Client {
    let service = tower::service_fn(|_: hyper::Request<kube::client::Body>| async {
        Err::<hyper::Response<http_body_util::Full<hyper::body::Bytes>>, std::io::Error>(
            std::io::Error::other("no API server in this test"),
        )
    });
    kube::Client::new(service, "ns")
}

// R52: a device's poll resolves its Mutation once: the context's look-up serves the
// authentication, the rights, the heartbeat, the body limit and the handler alike
#[tokio::test]
async fn a_poll_looks_its_mutation_up_once() {
    let (caches, mut writers) = crate::cache::for_tests();
    writers.sync();
    let mut m = fixtures::mutation("m", vec![fixtures::variant("d", &[], 1)]);
    m.metadata.namespace = Some("ns".into());
    m.metadata.uid = Some("uid-m".into());
    m.spec.devices = Some(Box::new(DevicesSpec {
        sleep: Some(SleepSpec::default()),
        ..DevicesSpec::default()
    }));
    writers.mutation(watcher::Event::Apply(m));
    writers.secret(Secret {
        metadata: owned("m-secret", "uid-m"),
        data: Some([("token".to_string(), ByteString(b"a".repeat(64)))].into()),
        ..Secret::default()
    });
    let mut registry = Registry::default();
    let record = DeviceRecord {
        hash: token_hash(DEVICE_TOKEN),
        variant: "d".into(),
        enrolled_at: "2026-12-06T12:00:00Z".into(),
    };
    registry.devices.insert("d".into(), record);
    writers.secret(Secret {
        metadata: owned("m-devices", "uid-m"),
        data: Some(registry.to_data()),
        ..Secret::default()
    });
    let state = Arc::new(ApiState::new(
        no_server(),
        caches.clone(),
        Auth::Tokens(None),
        ServerConfig::default(),
        Served::Named(vec!["ns".into()]),
        crate::variant::PodSecurity::default(),
    ));
    let mut headers = HeaderMap::new();
    let bearer = format!("Bearer {DEVICE_TOKEN}");
    headers.insert(AUTHORIZATION, HeaderValue::from_str(&bearer).unwrap());
    let path = "/api/v1/namespaces/ns/mutations/m/devices/d/poll";
    let Resolved::Found(route, params) = crate::api::routes::resolve(&Method::GET, path) else {
        panic!("{path} is a route");
    };

    caches.lookups.store(0, Ordering::Relaxed);
    let mut ctx = Ctx::new(&state, route, params).unwrap();
    ready(&state).unwrap();
    ctx.served_by(&state).unwrap();
    let caller = authenticate(&state, &mut ctx, &headers, None)
        .await
        .unwrap();
    assert!(
        matches!(&caller, Caller::Device { id, .. } if id == "d"),
        "{caller:?}"
    );
    admit(&state, &ctx, &caller).unwrap();
    heard(&state, &ctx, &caller, &Method::GET, &headers).unwrap();
    validated(&state, &mut ctx, &caller, &Method::GET, &headers)
        .await
        .unwrap();
    let limit = body_limit(&state, &ctx, &caller);
    assert!(limit > 0);
    let answer = poll::poll(&state, &caller, ctx.mutation.zip(ctx.parsed))
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    assert_eq!(
        caches.lookups.load(Ordering::Relaxed),
        1,
        "one look-up of the Mutation for the whole poll"
    );
}

#[test]
fn path_names_are_checked() {
    // R24
    let p = |ns, name, label| Params {
        ns,
        name,
        label,
        id: None,
    };
    assert!(check_names(&p("Bad_NS", None, None)).is_err());
    assert!(check_names(&p("ns", Some("web%2F"), None)).is_err());
    assert!(check_names(&p("ns", Some("web"), Some("-x"))).is_err());
    assert!(check_names(&p("ns", Some("web"), Some("beta"))).is_ok());
    // R24: a Mutation's name is a DNS-1123 subdomain, dots allowed; labels are not.
    assert!(check_names(&p("ns", Some("web.v2"), Some("beta"))).is_ok());
    assert!(check_names(&p("ns", Some("web.v2"), Some("b.eta"))).is_err());
    assert!(check_names(&p("n.s", Some("web"), None)).is_err());
    assert!(check_names(&p("ns", Some("web..v2"), None)).is_err());
    let device = |id| Params {
        ns: "ns",
        name: Some("web"),
        label: None,
        id: Some(id),
    };
    assert!(check_names(&device("AA:BB")).is_err());
    assert!(check_names(&device("lilygo-47_a.b")).is_ok());
    let long = "a".repeat(254);
    assert!(check_names(&p("ns", Some(long.as_str()), None)).is_err());
}
