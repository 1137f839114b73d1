//! The responses of both listeners: JSON, `{"error": ..}` bodies, 404, 405 with `Allow`, 204 and
//! text, each with its whole body in one buffer (so hyper sends a `Content-Length`).

use http_body_util::Full;
use hyper::{
    Method, Response, StatusCode,
    body::Bytes,
    header::{self, HeaderValue},
};
use serde::Serialize;

/// The response body type of every handler: the whole body in one buffer.
pub type Body = Full<Bytes>;

/// The JSON error body: `{"error": "..."}`.
#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'a str,
}

/// What [`json`] answers when the value cannot be serialised.
const SERIALIZE_FAILED: &str =
    r#"{"error":"internal error: the response could not be serialised"}"#;

fn with_body(
    status: StatusCode,
    content_type: Option<&'static str>,
    body: Bytes,
) -> Response<Body> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    if let Some(content_type) = content_type {
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    }
    response
}

/// A JSON response (`Content-Type: application/json`). If `value` cannot be serialised the
/// answer is a 500 with a fixed JSON error body instead.
pub fn json<T: Serialize + ?Sized>(status: StatusCode, value: &T) -> Response<Body> {
    // Room for a variant's or a poll's answer at once, rather than growing from 128 bytes.
    let mut body = Vec::with_capacity(1024);
    match serde_json::to_writer(&mut body, value) {
        Ok(()) => with_body(status, Some("application/json"), Bytes::from(body)),
        Err(err) => {
            tracing::error!(error = %err, "could not serialise a response");
            with_body(
                StatusCode::INTERNAL_SERVER_ERROR,
                Some("application/json"),
                Bytes::from_static(SERIALIZE_FAILED.as_bytes()),
            )
        }
    }
}

/// An error response with the body `{"error": "<message>"}`.
pub fn error(status: StatusCode, message: impl Into<String>) -> Response<Body> {
    let message = message.into();
    json(status, &ErrorBody { error: &message })
}

/// 405 Method Not Allowed with an `Allow` header listing `allow` (comma-separated) and a JSON
/// error body.
pub fn method_not_allowed(allow: &[Method]) -> Response<Body> {
    let allowed = allow
        .iter()
        .map(Method::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    let mut response = error(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("method not allowed; allowed: {allowed}"),
    );
    // Method names are HTTP tokens, always a valid header value.
    if let Ok(value) = HeaderValue::from_str(&allowed) {
        response.headers_mut().insert(header::ALLOW, value);
    }
    response
}

/// 404 Not Found with a JSON error body.
pub fn not_found() -> Response<Body> {
    error(StatusCode::NOT_FOUND, "not found")
}

/// 204 No Content with an empty body.
pub fn no_content() -> Response<Body> {
    with_body(StatusCode::NO_CONTENT, None, Bytes::new())
}

/// A text response with the given `Content-Type` (for example the OpenMetrics exposition).
pub fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<Body> {
    with_body(status, Some(content_type), Bytes::from(body))
}
