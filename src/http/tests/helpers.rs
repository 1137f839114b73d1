//! The response helpers, body errors and the default limits.

use super::*;
use crate::http::{body::BodyError, limits::human_size};

#[tokio::test]
async fn response_helpers() {
    let response = method_not_allowed(&[Method::GET, Method::PUT]);
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(response.headers()[header::ALLOW], "GET, PUT");
    assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
    assert_eq!(
        body_string(response).await,
        r#"{"error":"method not allowed; allowed: GET, PUT"}"#
    );

    let response = error(StatusCode::BAD_REQUEST, "bad \"label\"");
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(body_string(response).await, r#"{"error":"bad \"label\""}"#);

    let response = no_content();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert!(response.headers().get(header::CONTENT_TYPE).is_none());
    assert_eq!(body_string(response).await, "");

    let response = text(
        StatusCode::OK,
        "text/plain; version=0.0.4",
        "# EOF\n".into(),
    );
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "text/plain; version=0.0.4"
    );
    assert_eq!(body_string(response).await, "# EOF\n");
}

#[tokio::test]
async fn json_serialisation_failure_is_500() {
    struct Unserialisable;
    impl Serialize for Unserialisable {
        fn serialize<S: Serializer>(&self, _: S) -> std::result::Result<S::Ok, S::Error> {
            Err(serde::ser::Error::custom("no"))
        }
    }
    let response = json(StatusCode::OK, &Unserialisable);
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body = body_string(response).await;
    let parsed: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(parsed["error"].is_string(), "{body}");
}

#[tokio::test]
async fn body_errors_say_the_real_limit() {
    let limit = ServerConfig::default().body_limit;
    let response = BodyError::TooLarge { limit }.response();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        body_string(response).await,
        r#"{"error":"request body is larger than 1 MiB"}"#
    );
    assert_eq!(
        BodyError::Timeout.response().status(),
        StatusCode::REQUEST_TIMEOUT
    );
    assert_eq!(
        BodyError::Read("x".into()).response().status(),
        StatusCode::BAD_REQUEST
    );

    assert_eq!(human_size(16 * 1024), "16 KiB");
    assert_eq!(human_size(1000), "1000 bytes");
    assert_eq!(human_size(3 * 1024 * 1024), "3 MiB");
    assert_eq!(human_size(1536 * 1024), "1536 KiB");
}

#[test]
fn default_config() {
    let config = ServerConfig::default();
    assert_eq!(config.header_read_timeout, Duration::from_secs(5));
    assert_eq!(config.max_header_bytes, 16 * 1024);
    assert_eq!(config.body_limit, 1024 * 1024);
    assert_eq!(config.body_timeout, Duration::from_secs(10));
    assert_eq!(config.drain_timeout, Duration::from_secs(10));
    assert!(config.keep_alive);
}
