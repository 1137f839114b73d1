//! The metrics and probe listener (`MUTANT_METRICS_ADDR`, default `0.0.0.0:9568`), which the
//! API's Service does not name: `/metrics` (Prometheus text 0.0.4, or OpenMetrics for a
//! client that prefers it, as Prometheus does), `/healthz` (the process answers) and
//! `/readyz` (the caches are synced, the API server has answered within
//! `MUTANT_STALE_AFTER_SECONDS`, no watch has been silent for
//! `MUTANT_WATCH_STALE_AFTER_SECONDS` since its last full list, and the API knows which
//! namespaces it serves). Readiness is the replica's ability to serve, never how many clients
//! hold its listener (R34): a replica taken out of its Service because clients filled its
//! connections would let a few hosts take every replica out in turn; the loop logs when it
//! refuses connections at the cap instead. Served by the same hardened loop as the API.

use std::sync::Arc;

use hyper::{Method, Request, Response, StatusCode, body::Incoming};

use crate::{
    cache::{Caches, Serving},
    http::{self, Body, ServerConfig},
    metrics::Metrics,
    shutdown::Shutdown,
};

/// The most connections the metrics listener keeps open: the kubelet's probes and a few
/// scrapers (lowered when the descriptor limit is small: `http::descriptors`).
pub const METRICS_MAX_CONNECTIONS: usize = 64;

/// What the listener reads.
pub struct AdminState {
    /// The metrics registry.
    pub metrics: Arc<Metrics>,
    /// The caches whose sync `/readyz` reports.
    pub caches: Caches,
    /// Whether the API knows which namespaces it serves (the labelled ones listed:
    /// R33); `/readyz` says not ready until it does.
    pub api_listed: Option<tokio::sync::watch::Receiver<bool>>,
}

/// Serves one request of the metrics listener.
pub fn handle(
    state: &AdminState,
    method: &Method,
    path: &str,
    accept: Option<&str>,
) -> Response<Body> {
    let allowed: &[Method] = &[Method::GET, Method::HEAD];
    match path {
        "/metrics" | "/healthz" | "/readyz" if !allowed.contains(method) => {
            http::method_not_allowed(allowed)
        }
        "/metrics" => {
            let (content_type, body) = state.metrics.encode_for(accept);
            http::text(StatusCode::OK, content_type, body)
        }
        "/healthz" => http::text(StatusCode::OK, "text/plain; charset=utf-8", "ok\n".into()),
        "/readyz" => match state.caches.serving() {
            Serving::Yes if state.api_listed.as_ref().is_some_and(|l| !*l.borrow()) => http::text(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain; charset=utf-8",
                "not ready: the namespaces labelled for the API are not listed yet\n".into(),
            ),
            Serving::Yes => http::text(StatusCode::OK, "text/plain; charset=utf-8", "ok\n".into()),
            Serving::Starting => http::text(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain; charset=utf-8",
                "not ready: caches not synced\n".into(),
            ),
            Serving::Stale(cache) => http::text(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain; charset=utf-8",
                format!("not ready: {}\n", crate::cache::stale_message(cache)),
            ),
            Serving::CutOff(silent) => http::text(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain; charset=utf-8",
                format!(
                    "not ready: the Kubernetes API has not answered for {} s\n",
                    silent.as_secs()
                ),
            ),
        },
        _ => http::not_found(),
    }
}

/// Serves the metrics listener until `shutdown`.
pub async fn serve(
    state: Arc<AdminState>,
    listener: tokio::net::TcpListener,
    max_connections: usize,
    shutdown: Shutdown,
) -> crate::Result<()> {
    http::serve(
        "metrics",
        listener,
        // A cap of its own: probes and scrapes keep working whatever the API's clients do.
        ServerConfig {
            max_connections,
            ..ServerConfig::default()
        },
        // /metrics and the probes stay plain HTTP, whatever the API speaks
        None,
        shutdown,
        move |req: Request<Incoming>| {
            let state = state.clone();
            async move {
                let accept = req
                    .headers()
                    .get(hyper::header::ACCEPT)
                    .and_then(|v| v.to_str().ok());
                handle(&state, req.method(), req.uri().path(), accept)
            }
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(state: &AdminState, path: &str) -> (StatusCode, String) {
        let response = handle(state, &Method::GET, path, None);
        let status = response.status();
        let bytes = http_body_util::BodyExt::collect(response.into_body())
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        (status, String::from_utf8_lossy(&bytes).to_string())
    }

    #[tokio::test]
    async fn readyz_is_503_until_the_caches_sync() {
        // R26
        let (caches, mut writers) = crate::cache::for_tests();
        let metrics = Arc::new(Metrics::new());
        metrics.set_caches(caches.clone());
        let state = AdminState {
            metrics,
            caches,
            api_listed: None,
        };
        assert_eq!(get(&state, "/healthz").await.0, StatusCode::OK);
        assert_eq!(
            get(&state, "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        writers.sync();
        assert_eq!(
            get(&state, "/readyz").await,
            (StatusCode::OK, "ok\n".to_string())
        );
    }

    // R33: not ready until the API knows which namespaces it serves.
    #[tokio::test]
    async fn readyz_is_503_until_the_served_namespaces_are_listed() {
        let (caches, mut writers) = crate::cache::for_tests();
        writers.sync();
        let (listed, api_listed) = tokio::sync::watch::channel(false);
        let state = AdminState {
            metrics: Arc::new(Metrics::new()),
            caches,
            api_listed: Some(api_listed),
        };
        let (status, body) = get(&state, "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("labelled for the API"), "{body}");
        listed.send_replace(true);
        assert_eq!(get(&state, "/readyz").await.0, StatusCode::OK);
    }

    // R34: a replica cut off from the API server for longer than the bound
    // is not ready, and is again at the server's next answer.
    #[tokio::test]
    async fn readyz_is_503_while_cut_off_from_the_api_server() {
        let health = crate::connect::Health::default();
        let (caches, mut writers) = crate::cache::for_tests_with(crate::cache::Freshness {
            health: health.clone(),
            stale_after: Some(std::time::Duration::from_millis(20)),
            ..Default::default()
        });
        writers.sync();
        let state = AdminState {
            metrics: Arc::new(Metrics::new()),
            caches,
            api_listed: None,
        };
        health.failed();
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        let (status, body) = get(&state, "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("has not answered"), "{body}");
        health.answered();
        assert_eq!(get(&state, "/readyz").await.0, StatusCode::OK);
    }

    // R34: a replica whose watch went silent is not ready until it has listed
    // again.
    #[tokio::test]
    async fn readyz_is_503_while_a_watch_is_stale() {
        let (caches, mut writers) = crate::cache::for_tests();
        writers.sync();
        let state = AdminState {
            metrics: Arc::new(Metrics::new()),
            caches,
            api_listed: None,
        };
        writers.went_silent(crate::cache::Cache::Secrets);
        let (status, body) = get(&state, "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            body.contains("watch of Mutations' Secrets went silent"),
            "{body}"
        );
        writers.sync();
        assert_eq!(get(&state, "/readyz").await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn metrics_negotiates_its_format_and_refuses_other_methods() {
        let (caches, _writers) = crate::cache::for_tests();
        let state = AdminState {
            metrics: Arc::new(Metrics::new()),
            caches,
            api_listed: None,
        };
        let open = handle(
            &state,
            &Method::GET,
            "/metrics",
            Some("application/openmetrics-text;version=1.0.0"),
        );
        assert_eq!(open.headers()["content-type"], crate::metrics::CONTENT_TYPE);
        // R25: no Accept header is the classic text format, as for the Go client.
        let text = handle(&state, &Method::GET, "/metrics", None);
        assert_eq!(
            text.headers()["content-type"],
            crate::metrics::TEXT_CONTENT_TYPE
        );
        assert_eq!(
            handle(&state, &Method::POST, "/metrics", None).status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(
            get(&state, "/api/v1/namespaces/x/mutations").await.0,
            StatusCode::NOT_FOUND
        );
    }
}
