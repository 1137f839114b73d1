//! R34: a write whose outcome is unknown says so. A device's POST of a
//! variant is cut off at its request's deadline while its write is with the API server: an
//! admission webhook of the test's own holds that one write (the Mutation's spec with the
//! variant, not a dry run) for longer than the deadline, then lets it through. The device is
//! answered 503 with `Retry-After` at the deadline, told that the change was sent and may or
//! may not have been made: read before retrying. Whether it was made is the API server's to
//! say (the operator gave up on the call, which may cancel it there); the read agrees with
//! the API server, and the retry leaves the variant there once.

use std::{
    convert::Infallible,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use base64::Engine as _;
use http_body_util::{BodyExt as _, Full};
use hyper::{Request, Response, body::Bytes, body::Incoming, service::service_fn};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::PostParams;
use tokio::net::TcpListener;
use tokio_rustls::{
    TlsAcceptor,
    rustls::{
        self,
        pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _},
    },
};

use super::*;

/// The default request deadline, and what a device's firmware waits at most.
const DEADLINE: Duration = Duration::from_secs(4);
const FIRMWARE_GIVES_UP: Duration = Duration::from_millis(4500);
/// How long the webhook holds the write of a spec holding variant [`HELD`].
const HOLD: Duration = Duration::from_secs(7);
/// The variant whose write is held.
const HELD: &str = "held";

/// What the webhook has seen.
#[derive(Default)]
struct Seen {
    /// Admission reviews answered.
    reviews: AtomicUsize,
    /// Writes held for [`HOLD`].
    held: AtomicUsize,
}

/// Answers an admission review: allowed, after [`HOLD`] when it is the first write (not a dry
/// run) of a Mutation whose spec holds variant [`HELD`].
async fn review(
    request: Request<Incoming>,
    seen: Arc<Seen>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let review: Value = serde_json::from_slice(&body).unwrap_or_default();
    let asked = &review["request"];
    let dry_run = asked["dryRun"].as_bool().unwrap_or(false);
    let holds = asked["object"]["spec"]["variants"]
        .as_array()
        .is_some_and(|vs| vs.iter().any(|v| v["label"] == HELD));
    // The first such write alone: the retry after it passes at once.
    if holds && !dry_run && seen.held.fetch_add(1, Ordering::SeqCst) == 0 {
        tokio::time::sleep(HOLD).await;
    }
    seen.reviews.fetch_add(1, Ordering::SeqCst);
    let answer = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "response": { "uid": asked["uid"], "allowed": true }
    });
    let mut response = Response::new(Full::new(Bytes::from(answer.to_string())));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

/// The webhook's HTTPS server on 127.0.0.1, with a certificate of `ca`; its port.
async fn serve(ca: &common::tls::TestCa, seen: Arc<Seen>) -> u16 {
    let (chain, key) = ca.server();
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, seen) = (acceptor.clone(), Arc::clone(&seen));
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = service_fn(move |r| review(r, Arc::clone(&seen)));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_write_the_api_server_confirms_after_the_deadline_is_answered_as_unknown() {
    // The deadline is left at its default.
    let f = Fixture::with_api("unconfirmed").await;
    f.apply::<Mutation>(&mutation("web", common::base("web"), json!([])))
        .await;
    let token = f.token("web").await;

    // The webhook, over the Mutations updated in this namespace alone.
    let ca = common::tls::TestCa::new("webhook");
    let seen = Arc::new(Seen::default());
    let port = serve(&ca, Arc::clone(&seen)).await;
    let name = format!("{}-held", f.ns.name);
    let _guard = common::RemoveOnDrop::<ValidatingWebhookConfiguration>::new(&name);
    let webhook: ValidatingWebhookConfiguration = common::from_json(json!({
        "metadata": { "name": name },
        "webhooks": [{
            "name": "held.mutantops.test",
            "clientConfig": {
                "url": format!("https://127.0.0.1:{port}/review"),
                "caBundle": base64::engine::general_purpose::STANDARD.encode(ca.pem())
            },
            "rules": [{ "apiGroups": ["neiam.org"], "apiVersions": ["v1"],
                        "operations": ["UPDATE"], "resources": ["mutations"] }],
            "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": f.ns.name } },
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 20,
            "failurePolicy": "Fail"
        }]
    }));
    Api::<ValidatingWebhookConfiguration>::all(f.ns.client.clone())
        .create(&PostParams::default(), &webhook)
        .await
        .unwrap();
    // The API server calls it within a few seconds: until a dry run of an update is reviewed.
    let probe = json!({ "metadata": { "annotations": { "probe": "1" } } });
    let dry = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    wait_for("the webhook to be called", CONVERGE, || async {
        f.mutations()
            .patch("web", &dry, &Patch::Merge(&probe))
            .await
            .map_err(|e| e.to_string())?;
        match seen.reviews.load(Ordering::SeqCst) {
            0 => Err("not called yet".to_string()),
            n => Ok(n),
        }
    })
    .await;

    // The device's POST: its write is with the API server when the deadline passes.
    let began = Instant::now();
    let added = f
        .add_variant("web", &token, &json!({"label": HELD, "instances": 0}))
        .await;
    let waited = began.elapsed();
    println!(
        "a device's POST of a held write: {} after {waited:?}",
        added.status
    );
    assert_eq!(added.status, 503, "{added:?}");
    assert_eq!(added.header("retry-after"), Some("1"), "{added:?}");
    assert!(
        added.body.contains("deadline of 4 s")
            && added.body.contains("may or may not have been made")
            && added.body.contains("read it before you retry"),
        "{added:?}"
    );
    assert_eq!(seen.held.load(Ordering::SeqCst), 1, "the write was held");
    assert!(
        waited >= DEADLINE - Duration::from_millis(300),
        "{waited:?}"
    );
    assert!(waited < FIRMWARE_GIVES_UP, "answered after {waited:?}");

    // What became of it is the API server's to say: the operator gave up on the call at the
    // deadline, which may have cancelled it there or not. Once the hold is over, the read the
    // answer asked for (through the API) agrees with the API server, and the retry it guides
    // leaves the variant there once: added when it was not made, refused as taken when it was.
    tokio::time::sleep(
        (began + HOLD + Duration::from_secs(1)).saturating_duration_since(Instant::now()),
    )
    .await;
    let made = f.spec_labels("web").await.iter().any(|l| l == HELD);
    let variant = format!("/mutations/web/variants/{HELD}");
    wait_for(
        "the API to read what the API server has",
        CONVERGE,
        || async {
            let read = f.call("GET", &variant, Some(&token), None).await;
            match (read.status, made) {
                (200, true) | (404, false) => Ok(()),
                _ => Err(format!("made: {made}, read: {read:?}")),
            }
        },
    )
    .await;
    println!("the held write was made at the API server: {made}");
    let again = f
        .add_variant("web", &token, &json!({"label": HELD, "instances": 0}))
        .await;
    let want = if made { 409 } else { 201 };
    assert_eq!(again.status, want, "made: {made}, the retry: {again:?}");
    assert_eq!(
        seen.held.load(Ordering::SeqCst),
        2,
        "the retry was reviewed"
    );
    let labels = f.spec_labels("web").await;
    assert_eq!(
        labels.iter().filter(|l| *l == HELD).count(),
        1,
        "{labels:?}"
    );
    f.wait_deployment(&format!("web-{HELD}"), "made", |_| true)
        .await;
    assert!(
        !f.operator.log_text().contains("panicked"),
        "the operator panicked"
    );
}
