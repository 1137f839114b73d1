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

/// The caches and the API of one Mutation `ns/m` with a sleeping variant `d` and one device
/// `d` (token [`DEVICE_TOKEN`]); its own token is 64 `a`s.
fn one_mutation_with_a_device() -> (crate::cache::Caches, Arc<ApiState>) {
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
    (caches, state)
}

/// The request `GET path` with `token` through the pipeline's gates, as `api::dispatch` takes
/// it: its context (the Mutation looked up) and its caller.
async fn through_the_gates<'p>(
    state: &Arc<ApiState>,
    path: &'p str,
    token: &str,
) -> (Ctx<'p>, Caller) {
    let mut headers = HeaderMap::new();
    let bearer = format!("Bearer {token}");
    headers.insert(AUTHORIZATION, HeaderValue::from_str(&bearer).unwrap());
    let Resolved::Found(route, params) = crate::api::routes::resolve(&Method::GET, path) else {
        panic!("{path} is a route");
    };
    let mut ctx = Ctx::new(state, route, params).unwrap();
    ready(state).unwrap();
    ctx.served_by(state).unwrap();
    let caller = authenticate(state, &mut ctx, &headers, None).await.unwrap();
    admit(state, &ctx, &caller).unwrap();
    heard(state, &mut ctx, &caller, &Method::GET, &headers).unwrap();
    validated(state, &mut ctx, &caller, &Method::GET, &headers)
        .await
        .unwrap();
    assert!(body_limit(state, &ctx, &caller) > 0);
    (ctx, caller)
}

// R52: a device's poll resolves its Mutation once: the context's look-up serves the
// authentication, the rights, the heartbeat, the body limit and the handler alike
#[tokio::test]
async fn a_poll_looks_its_mutation_up_once() {
    let (caches, state) = one_mutation_with_a_device();
    caches.lookups.store(0, Ordering::Relaxed);
    let path = "/api/v1/namespaces/ns/mutations/m/devices/d/poll";
    let (ctx, caller) = through_the_gates(&state, path, DEVICE_TOKEN).await;
    assert!(
        matches!(&caller, Caller::Device { id, .. } if id == "d"),
        "{caller:?}"
    );
    let answer = poll::poll(&state, &caller, ctx.mutation.zip(ctx.parsed), ctx.heard)
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    assert_eq!(
        caches.lookups.load(Ordering::Relaxed),
        1,
        "one look-up of the Mutation for the whole poll"
    );
}

// R52: a read answers from the Mutation the request looked up: a variant's GET (by the
// device that uses it, R39) looks it up once
#[tokio::test]
async fn a_variant_get_looks_its_mutation_up_once() {
    let (caches, state) = one_mutation_with_a_device();
    caches.lookups.store(0, Ordering::Relaxed);
    let path = "/api/v1/namespaces/ns/mutations/m/variants/d";
    let (ctx, caller) = through_the_gates(&state, path, DEVICE_TOKEN).await;
    assert!(matches!(&caller, Caller::Device { .. }), "{caller:?}");
    let at = crate::api::variants::At {
        ns: "ns",
        name: "m",
        label: "d",
    };
    let answer = crate::api::variants::get(&state, &caller, at, ctx.mutation.clone())
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    assert_eq!(
        caches.lookups.load(Ordering::Relaxed),
        1,
        "one look-up of the Mutation for the whole GET"
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
